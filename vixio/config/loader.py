"""Load config.yaml: YAML → `${ENV_VAR}` substitution → pydantic validation, with errors for people.

Every error names the key path, the bad value and what is allowed, and all errors are reported
at once rather than the first one only.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vixio.config.models import VixioConfig

_ENV_PATTERN = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class ConfigError(Exception):
    """The configuration is invalid; `errors` holds one line per problem."""

    def __init__(self, source: str, errors: list[str]) -> None:
        self.source = source
        self.errors = errors
        lines = "\n".join(f"  - {error}" for error in errors)
        super().__init__(f"{source}: {len(errors)} error(s)\n{lines}")


def load_config(path: str | Path, environ: Mapping[str, str] | None = None) -> VixioConfig:
    """Read and validate a config file; raises ConfigError listing every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file: {exc.strerror or exc}"]) from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(str(path), [f"invalid YAML{where}: {getattr(exc, 'problem', exc)}"]) from exc
    return parse_config(data, source=str(path), environ=environ)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key]}; the later one would silently replace it)",
                    key_node.start_mark,
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_config(data: Any, *, source: str = "<config>", environ: Mapping[str, str] | None = None) -> VixioConfig:
    """Validate already-parsed YAML (a mapping, or None for an empty file)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"the top level must be a mapping of keys, got {type(data).__name__}"])
    errors: list[str] = []
    data = substitute_env(data, os.environ if environ is None else environ, errors)
    if errors:
        raise ConfigError(source, errors)
    try:
        return VixioConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [line for error in exc.errors() for line in _lines(error)]) from None


def substitute_env(value: Any, environ: Mapping[str, str], errors: list[str], path: str = "") -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string; `$$` is a literal `$`."""
    if isinstance(value, dict):
        return {key: substitute_env(item, environ, errors, _join(path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute_env(item, environ, errors, f"{path}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        errors.append(
            f"{path or '<root>'}: environment variable {name} is not set (used as ${{{name}}}); "
            f"set it or write ${{{name}:-default}}"
        )
        return ""

    result = _ENV_PATTERN.sub(replace, value)
    # A whole-value reference keeps YAML typing: port: ${PORT} with PORT=8000 is the int 8000.
    if result != value and _ENV_PATTERN.fullmatch(value):
        return yaml.safe_load(result) if result.strip() else result
    return result


def _lines(error: Mapping[str, Any]) -> list[str]:
    """One line per problem: profiles report each of theirs (vixio/config/profiles.py)."""
    from vixio.config.profiles import ProfileErrors

    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ProfileErrors):
        return list(cause.errors)
    return [describe_error(error)]


def describe_error(error: Mapping[str, Any]) -> str:
    """One pydantic error as a line naming the key path, the value and what is allowed."""
    loc = tuple(error["loc"])
    path = _loc_to_path(loc)
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(VixioConfig, loc[:-1])
        hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        return f"{path}: unknown key{hint}"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if error["type"] == "missing":
        return f"{path}: required key is missing"
    return f"{path or '<root>'}: {message} (got {error.get('input')!r})"


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else _join(path, str(part))
    return path


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: type[BaseModel] | None = model
    keyed = False
    """The last field was a mapping of models: the next part is a key of it (e.g. a profile's name)."""
    for part in loc:
        if current is None:
            return []
        if isinstance(part, int):
            continue
        if keyed:
            keyed = False
            continue
        field = current.model_fields.get(str(part))
        current = _model_in(field.annotation) if field else None
        keyed = field is not None and typing.get_origin(field.annotation) is dict
    return list(current.model_fields) if current else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `Foo`, `Foo | None` or `list[Foo]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found:
                return found
    return None
