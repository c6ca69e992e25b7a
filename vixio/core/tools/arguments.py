"""Tool arguments: parsed, coerced to the tool's JSON Schema, then validated.

Models write `"50"` for an integer and `"true"` for a boolean; the device firmware rejects both
(docs/xiaozhi-protocol.md §5). So arguments are coerced where the schema says what they should be, then
validated with `jsonschema`; a failure goes back to the model as a tool error and the call
never reaches the device.

Coercion is schema-driven and conservative: a value changes type only when the schema asks for
another type and the string converts exactly (`"50"` → 50, `"5.0"` → 5, `"yes"` → true,
`'{"a": 1}'` → {"a": 1}); anything else is left for validation to report.

Schemas come from devices and registerTools clients, so validation is made safe for hostile ones:

- `$ref` is resolved only inside the schema (and the JSON Schema meta-schemas): the validator's
  registry refuses to retrieve anything, so a remote or file reference is never fetched; a
  reference that does not resolve makes the call fail with a message saying so. At registration
  such a schema is refused (`schema_problem`).
- `pattern` and `patternProperties` run on RE2 (linear time), never on Python's backtracking
  `re`. A pattern RE2 cannot compile (lookaround, backreference) is refused at registration;
  in a schema from a trusted source (local tools, configured MCP servers) it is ignored at
  validation — the tool itself still checks its input.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import re2
import referencing
import referencing.exceptions
from jsonschema import exceptions as jsonschema_errors
from jsonschema import validators
from jsonschema.exceptions import ValidationError

from vixio.core.json_limits import DEFAULT_MAX_DEPTH, JsonTooDeep, check_depth

_TRUE = {"true", "1", "yes", "on", "y"}
_FALSE = {"false", "0", "no", "off", "n"}
_NULL = {"null", "none", "nil"}
_BFCL_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "any": None,
    "list": "array",
    "int": "integer",
    "bool": "boolean",
    "str": "string",
    "double": "number",
    "long": "integer",
}


class ArgumentError(ValueError):
    """Arguments the tool cannot take; `str()` is a message for the model."""


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """The arguments object from the model's raw JSON text (empty text is `{}`)."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    text = raw.strip()
    if not text:
        return {}
    try:
        check_depth(text, DEFAULT_MAX_DEPTH)
        value = json.loads(text)
    except JsonTooDeep as exc:
        raise ArgumentError(f"the arguments are refused: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ArgumentError(
            f"the arguments are not valid JSON ({exc.msg} at position {exc.pos}): {text[:200]}"
        ) from exc
    if not isinstance(value, dict):
        raise ArgumentError(f"the arguments must be a JSON object, not {type(value).__name__}")
    return value


def schema_types(schema: dict[str, Any]) -> list[str]:
    """The JSON types a (sub)schema allows, in coercion priority order."""
    found: list[str] = []
    declared = schema.get("type")
    for name in declared if isinstance(declared, list) else [declared] if declared else []:
        name = _BFCL_TYPES.get(name, name) if isinstance(name, str) else None
        if name and name not in found:
            found.append(name)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            if isinstance(sub, dict):
                found += [t for t in schema_types(sub) if t not in found]
    if not found and "enum" in schema:
        for value in schema["enum"]:
            kind = _json_type(value)
            if kind not in found:
                found.append(kind)
    order = ["integer", "number", "boolean", "object", "array", "null", "string"]
    return sorted(found, key=lambda t: order.index(t) if t in order else len(order))


def coerce_value(value: Any, schema: dict[str, Any]) -> Any:
    """`value` converted to a type `schema` allows, when it converts exactly; else unchanged."""
    if not isinstance(schema, dict):
        return value
    types = schema_types(schema)
    if isinstance(value, dict) and "object" in types:
        return coerce_object(value, schema)
    if isinstance(value, list) and "array" in types:
        items = schema.get("items")
        return [coerce_value(v, items) for v in value] if isinstance(items, dict) else value
    if not types or _json_type(value) in types or ("number" in types and _json_type(value) == "integer"):
        return value
    if isinstance(value, float) and "integer" in types and value.is_integer():
        return int(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and "string" in types:
        return str(value)
    if isinstance(value, bool) and "string" in types:
        return "true" if value else "false"
    if not isinstance(value, str):
        return value
    for kind in types:
        converted = _from_string(value.strip(), kind, schema)
        if converted is not _NO:
            return converted
    return value


def coerce_object(arguments: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
    return {key: coerce_value(value, properties.get(key, {})) for key, value in arguments.items()}


def prepare_arguments(arguments: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Coerce then validate; raises ArgumentError with every problem found."""
    schema = normalize_schema(schema)
    coerced = coerce_object(arguments, schema)
    problems = validation_errors(coerced, schema)
    if problems:
        raise ArgumentError("invalid arguments: " + "; ".join(problems))
    return coerced


def validation_errors(arguments: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    try:
        validator = _safe_validator_class(validators.validator_for(schema))(schema, registry=_NO_RETRIEVAL)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except (jsonschema_errors.SchemaError, jsonschema_errors.UnknownType, TypeError) as exc:
        # A broken schema from a device must not block the call: the device validates too.
        return [] if isinstance(exc, jsonschema_errors.SchemaError | jsonschema_errors.UnknownType) else [str(exc)]
    except referencing.exceptions.Unresolvable as exc:
        return [f"the tool's schema refers to {_ref_of(exc)}, which this server does not fetch"]
    except RecursionError:
        return ["the tool's schema nests too deeply to check"]
    messages = []
    for error in errors[:5]:
        where = ".".join(str(p) for p in error.absolute_path)
        messages.append(f"{where}: {error.message}" if where else error.message)
    return messages


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why a peer's schema is refused at registration, or None: a `$ref` that leaves the schema
    (remote or file; never fetched), or a `pattern`/`patternProperties` RE2 cannot run."""
    stack: list[Any] = [schema]
    has_pattern_properties = has_unevaluated = False
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key in ("$ref", "$dynamicRef", "$recursiveRef"):
            ref = node.get(key)
            if isinstance(ref, str) and not ref.startswith("#"):
                return f'{key} {ref[:120]!r} points outside the schema; only local references ("#/...") are allowed'
        pattern = node.get("pattern")
        if isinstance(pattern, str) and _re2(pattern) is None:
            return f"pattern {pattern[:120]!r} uses syntax RE2 cannot run (lookaround or backreference)"
        properties = node.get("patternProperties")
        if isinstance(properties, dict):
            has_pattern_properties = True
            for key in properties:
                if _re2(key) is None:
                    return f"patternProperties key {key[:120]!r} uses syntax RE2 cannot run"
        has_unevaluated = has_unevaluated or "unevaluatedProperties" in node
        stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
    if has_pattern_properties and has_unevaluated:
        return "unevaluatedProperties together with patternProperties is not supported"
    return None


# --- validation that never fetches and never backtracks ----------------------------------------


def _refuse_retrieval(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs field, unseen by mypy


_NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
"""Resolves only what the schema itself holds (plus the meta-schemas jsonschema adds)."""


@functools.lru_cache(maxsize=512)
def _re2(pattern: str) -> Any:
    """The RE2 compilation of `pattern`, or None when RE2 cannot run it."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 8 << 20
    try:
        return re2.compile(pattern, options)
    except (re2.error, TypeError, ValueError):
        return None


def _re2_search(pattern: str, text: str) -> bool:
    compiled = _re2(pattern)
    return True if compiled is None else compiled.search(text) is not None


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and isinstance(pattern, str) and not _re2_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _re2_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Any:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        key for key in instance if key not in properties and not any(_re2_search(pattern, key) for pattern in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras, key=str))
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


def _skip(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
    return iter(())


@functools.cache
def _safe_validator_class(base: Any) -> Any:
    keywords = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    if "unevaluatedProperties" in base.VALIDATORS:
        # Its implementation matches patternProperties with `re`; schema_problem refuses the pair,
        # so here it can only come from a trusted source, and is skipped rather than backtracked.
        keywords["unevaluatedProperties"] = _skip
    return validators.extend(base, keywords)


def _ref_of(exc: BaseException) -> str:
    ref = getattr(exc, "ref", None)
    return repr(ref) if ref else "a reference"


def normalize_schema(schema: dict[str, Any] | None) -> dict[str, Any]:
    """An object schema with BFCL/Python type names ("dict", "float") mapped to JSON Schema."""
    if not isinstance(schema, dict) or not schema:
        return {"type": "object", "properties": {}}
    normalized: dict[str, Any] = _normalize(schema)
    return normalized


def _normalize(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_normalize(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            out[key] = _map_type(value)
            if out[key] is None:
                continue
        elif key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {k: _normalize(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = _normalize(value)
        else:
            out[key] = value
    if out.get("type") is None:
        out.pop("type", None)
    return out


def _map_type(value: Any) -> Any:
    if isinstance(value, list):
        mapped = [_BFCL_TYPES.get(v, v) for v in value if isinstance(v, str)]
        return [m for m in mapped if m] or None
    if isinstance(value, str):
        return _BFCL_TYPES.get(value, value)
    return value


class _Missing:
    pass


_NO: Any = _Missing()


def _from_string(text: str, kind: str, schema: dict[str, Any]) -> Any:
    lowered = text.lower()
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                return _NO
            return int(number) if number.is_integer() else _NO
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return _NO
        return int(number) if number.is_integer() and "." not in text and "e" not in lowered else number
    if kind == "boolean":
        return True if lowered in _TRUE else False if lowered in _FALSE else _NO
    if kind == "null":
        return None if lowered in _NULL or not text else _NO
    if kind in ("object", "array"):
        try:
            check_depth(text, DEFAULT_MAX_DEPTH)
            value = json.loads(text)
        except ValueError:  # JsonTooDeep included: left as a string for validation to report
            return _NO
        if isinstance(value, dict) and kind == "object":
            return coerce_object(value, schema)
        if isinstance(value, list) and kind == "array":
            return coerce_value(value, schema)
        return _NO
    return _NO


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"
