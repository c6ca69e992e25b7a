"""Generate the configuration reference (docs/config.md) from the models, so it cannot drift."""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from vixio.config.loader import _model_in
from vixio.config.models import VixioConfig

BEGIN = "<!-- BEGIN GENERATED: vixio config reference -->"
END = "<!-- END GENERATED -->"


def render_reference(model: type[BaseModel] = VixioConfig) -> str:
    """Markdown: one section per model, one table row per key."""
    sections: list[str] = []
    _render(model, "", sections)
    return "\n".join([BEGIN, "", *sections, END, ""])


def _render(model: type[BaseModel], path: str, sections: list[str]) -> None:
    title = f"`{path}`" if path else "Top level"
    lines = [f"### {title}", ""]
    if model.__doc__:
        lines += [" ".join(model.__doc__.split()), ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    nested: list[tuple[type[BaseModel], str]] = []
    for name, field in model.model_fields.items():
        sub = _model_in(field.annotation)
        key_path = f"{path}.{name}" if path else name
        variants = _models_in(field.annotation)
        if typing.get_origin(field.annotation) is dict and variants:
            # A mapping of named entries (e.g. tools.mcp_servers): document each entry's shapes.
            for variant in variants:
                nested.append((variant, f"{key_path}.<name> ({variant.__name__})"))
            shapes = ", ".join(f"`{v.__name__}`" for v in variants)
            lines.append(f"| `{name}` | mapping | {_default(field)} | {_description(field)} Entries: {shapes} |")
            continue
        if len(variants) > 1:
            tags = [getattr(v.model_fields["provider"].annotation, "__args__", ("?",))[0] for v in variants]
            for variant, tag in zip(variants, tags):
                nested.append((variant, f"{key_path} (provider: {tag})"))
            choices = ", ".join(f"`{tag}`" for tag in tags)
            lines.append(
                f"| `{name}` | section | {_default(field)} | {_description(field)} One of, by `provider`: {choices} |"
            )
            continue
        if sub is not None and typing.get_origin(field.annotation) is None:
            nested.append((sub, key_path))
            lines.append(f"| `{name}` | section | | see [`{key_path}`](#{key_path.replace('.', '')}) |")
            continue
        lines.append(f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {_description(field)} |")
    sections.append("\n".join(lines) + "\n")
    for sub, key_path in nested:
        _render(sub, key_path, sections)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model in a (possibly annotated, optional) union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += [m for m in _models_in(arg) if m not in found]
    return found


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not typing.get_args(annotation) else None
    text = text or str(annotation).replace("typing.", "")
    return f"`{text}`".replace("|", "\\|")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return f"`{json.dumps(value, ensure_ascii=False)}`".replace("|", "\\|")


def _description(field: FieldInfo) -> str:
    text = " ".join((field.description or "").split())
    constraints = [_constraint(m) for m in field.metadata]
    if constraints:
        text += f" ({', '.join(constraints)})"
    return text.replace("|", "\\|")


_SYMBOLS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "min length", "max_length": "max length"}


def _constraint(meta: Any) -> str:
    for attr, symbol in _SYMBOLS.items():
        if getattr(meta, attr, None) is not None:
            return f"{symbol} {getattr(meta, attr)}"
    return str(meta)
