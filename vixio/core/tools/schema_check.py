"""A fast structural check of a tool's JSON Schema, for schemas that arrive from devices.

jsonschema's own `check_schema` validates against the 2020-12 metaschema: ~6 ms per small tool
schema (its `$dynamicRef` resolution dominates), so a client registering 600 tools held the
event loop for seconds. Tool schemas only need to be usable by the argument validator, so this
walks the schema once and checks the keywords that the validator would otherwise choke on
(types, subschema positions, numeric bounds, `required`), in microseconds, with a bound on
nesting depth and on the number of subschemas.

    check_tool_schema(schema)        # raises SchemaProblem("properties.mode.enum: must be an array")
"""

from __future__ import annotations

from typing import Any

JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SCHEMA_KEYWORDS = (
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_COUNTS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
_STRINGS = (
    "$ref",
    "$dynamicRef",
    "$id",
    "$schema",
    "$anchor",
    "pattern",
    "format",
    "title",
    "description",
    "contentEncoding",
    "contentMediaType",
)

DEFAULT_MAX_DEPTH = 32
"""Nesting of subschemas a tool schema may have; real tool schemas use 2-5."""
DEFAULT_MAX_NODES = 2000
"""Subschemas one tool schema may have in all."""


class SchemaProblem(ValueError):
    """A tool schema the argument validator could not use; the message starts with the key path."""


def check_tool_schema(schema: Any, *, max_depth: int = DEFAULT_MAX_DEPTH, max_nodes: int = DEFAULT_MAX_NODES) -> None:
    """Raise SchemaProblem when `schema` is not a usable JSON Schema (see the module doc)."""
    budget = [max_nodes]
    _check(schema, "parameters", 0, max_depth, budget)


def _check(schema: Any, path: str, depth: int, max_depth: int, budget: list[int]) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaProblem(f"{path}: a schema must be an object or a boolean, not {type(schema).__name__}")
    if depth > max_depth:
        raise SchemaProblem(f"{path}: nested deeper than {max_depth} levels")
    budget[0] -= 1
    if budget[0] < 0:
        raise SchemaProblem(f"{path}: more than the allowed number of subschemas")
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not kinds or not all(isinstance(k, str) and k in JSON_TYPES for k in kinds):
            raise SchemaProblem(f"{path}.type: must be one of {sorted(JSON_TYPES)} or a list of them, not {kind!r}")
    for key in _STRINGS:
        if key in schema and not isinstance(schema[key], str):
            raise SchemaProblem(f"{path}.{key}: must be a string")
    for key in _NUMBERS:
        value = schema.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise SchemaProblem(f"{path}.{key}: must be a number")
    if "multipleOf" in schema:
        value = schema["multipleOf"]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise SchemaProblem(f"{path}.multipleOf: must be a number > 0")
    for key in _COUNTS:
        value = schema.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise SchemaProblem(f"{path}.{key}: must be a non-negative integer")
    required = schema.get("required")
    if required is not None and (not isinstance(required, list) or not all(isinstance(r, str) for r in required)):
        raise SchemaProblem(f"{path}.required: must be an array of strings")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise SchemaProblem(f"{path}.enum: must be an array")
    for key in ("uniqueItems",):
        if key in schema and not isinstance(schema[key], bool):
            raise SchemaProblem(f"{path}.{key}: must be a boolean")
    for key in _SCHEMA_KEYWORDS:
        if key in schema:
            _check(schema[key], f"{path}.{key}", depth + 1, max_depth, budget)
    for key in _SCHEMA_MAPS:
        if key in schema:
            members = schema[key]
            if not isinstance(members, dict):
                raise SchemaProblem(f"{path}.{key}: must be an object of schemas")
            for name, member in members.items():
                _check(member, f"{path}.{key}.{name}", depth + 1, max_depth, budget)
    for key in _SCHEMA_LISTS:
        if key in schema:
            members = schema[key]
            if not isinstance(members, list) or (key != "prefixItems" and not members):
                raise SchemaProblem(f"{path}.{key}: must be a non-empty array of schemas")
            for index, member in enumerate(members):
                _check(member, f"{path}.{key}[{index}]", depth + 1, max_depth, budget)
    if "items" in schema:
        items = schema["items"]
        if isinstance(items, list):  # draft 4-7 tuple form
            for index, member in enumerate(items):
                _check(member, f"{path}.items[{index}]", depth + 1, max_depth, budget)
        else:
            _check(items, f"{path}.items", depth + 1, max_depth, budget)
    dependent = schema.get("dependentRequired")
    if dependent is not None and not (
        isinstance(dependent, dict)
        and all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in dependent.values())
    ):
        raise SchemaProblem(f"{path}.dependentRequired: must map names to arrays of strings")
