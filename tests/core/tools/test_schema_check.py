"""The fast tool-schema check: agrees with jsonschema's metaschema on real tool schemas, names the
key path of what is wrong, bounds depth and size, and is cheap enough for hundreds of tools."""

from __future__ import annotations

import time

import pytest
from jsonschema import Draft202012Validator, SchemaError

from vixio.core.tools.arguments import normalize_schema
from vixio.core.tools.schema_check import SchemaProblem, check_tool_schema
from vixio.testing import bfcl

pytestmark = pytest.mark.unit

CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple")


def bfcl_schemas() -> list[dict]:
    schemas = []
    for category in CATEGORIES:
        for case in bfcl.load(category):
            schemas.extend(normalize_schema(f.get("parameters")) for f in case.functions)
    return schemas


@pytest.mark.skipif(bfcl.data_dir() is None, reason="BFCL corpus not found (set VIXIO_BFCL_DIR)")
def test_every_bfcl_tool_schema_that_jsonschema_accepts_is_accepted() -> None:
    schemas = bfcl_schemas()
    assert len(schemas) > 2000
    accepted = 0
    for schema in schemas[::4]:  # a quarter: jsonschema's own check is the slow part of this test
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError:
            continue
        check_tool_schema(schema)
        accepted += 1
    assert accepted > 500


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": {"x": {"type": "float"}}}, "parameters.properties.x.type"),
        ({"type": "object", "properties": []}, "parameters.properties"),
        ({"type": "object", "properties": {"x": {"type": "string", "enum": "abc"}}}, "parameters.properties.x.enum"),
        ({"type": "object", "required": "x"}, "parameters.required"),
        (
            {"type": "object", "properties": {"x": {"type": "integer", "minimum": "0"}}},
            "parameters.properties.x.minimum",
        ),
        ({"type": "object", "properties": {"x": {"type": "array", "items": 5}}}, "parameters.properties.x.items"),
        ({"type": "object", "anyOf": []}, "parameters.anyOf"),
        ({"type": "object", "properties": {"x": {"maxLength": -1}}}, "parameters.properties.x.maxLength"),
        ({"type": "object", "properties": {"x": {"pattern": 3}}}, "parameters.properties.x.pattern"),
        ({"type": "object", "properties": {"x": {"multipleOf": 0}}}, "parameters.properties.x.multipleOf"),
    ],
)
def test_unusable_schemas_are_refused_with_their_key_path(schema: dict, path: str) -> None:
    with pytest.raises(SchemaProblem) as caught:
        check_tool_schema(schema)
    assert str(caught.value).startswith(path + ":")
    with pytest.raises(SchemaError):  # jsonschema agrees that each is invalid
        Draft202012Validator.check_schema(schema)


def test_depth_and_size_are_bounded() -> None:
    deep: dict = {"type": "object"}
    for _ in range(100):
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(SchemaProblem, match="deeper than 32"):
        check_tool_schema(deep)
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    with pytest.raises(SchemaProblem, match="number of subschemas"):
        check_tool_schema(wide)


def test_six_hundred_tools_take_milliseconds_not_seconds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "x": {"type": "number"},
            "y": {"type": "integer", "minimum": 0},
            "mode": {"type": "string", "enum": ["a", "b"]},
        },
        "required": ["x"],
    }
    started = time.perf_counter()
    for _ in range(600):
        check_tool_schema(schema)
    # ~10 ms on a quiet 2-core machine; jsonschema's metaschema check took ~4 s for the same 600.
    assert time.perf_counter() - started < 0.5
