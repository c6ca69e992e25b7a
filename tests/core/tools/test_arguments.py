"""Arguments are coerced to the tool's schema, then validated; problems read well."""

from __future__ import annotations

import pytest

from vixio.core.tools.arguments import ArgumentError, coerce_value, normalize_schema, parse_arguments, prepare_arguments

pytestmark = pytest.mark.unit

VOLUME = {
    "type": "object",
    "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["volume"],
}


def test_string_numbers_and_booleans_are_coerced() -> None:
    assert prepare_arguments({"volume": "50"}, VOLUME) == {"volume": 50}
    assert coerce_value("true", {"type": "boolean"}) is True
    assert coerce_value("no", {"type": "boolean"}) is False
    assert coerce_value("2.5", {"type": "number"}) == 2.5
    assert coerce_value("5.0", {"type": "integer"}) == 5
    assert coerce_value(7.0, {"type": "integer"}) == 7
    assert coerce_value(7, {"type": "string"}) == "7"
    assert coerce_value('{"a": "1"}', {"type": "object", "properties": {"a": {"type": "integer"}}}) == {"a": 1}
    assert coerce_value("[1, 2]", {"type": "array", "items": {"type": "number"}}) == [1, 2]
    assert coerce_value("null", {"type": ["integer", "null"]}) is None


def test_values_that_do_not_convert_exactly_are_left_for_validation() -> None:
    assert coerce_value("5.5", {"type": "integer"}) == "5.5"
    assert coerce_value("maybe", {"type": "boolean"}) == "maybe"
    with pytest.raises(ArgumentError, match="volume: '5.5' is not of type 'integer'"):
        prepare_arguments({"volume": "5.5"}, VOLUME)


def test_range_required_and_enum_are_validated() -> None:
    with pytest.raises(ArgumentError, match="150 is greater than the maximum of 100"):
        prepare_arguments({"volume": 150}, VOLUME)
    with pytest.raises(ArgumentError, match="'volume' is a required property"):
        prepare_arguments({}, VOLUME)
    theme = {"type": "object", "properties": {"theme": {"type": "string", "enum": ["light", "dark"]}}}
    with pytest.raises(ArgumentError, match="'blue' is not one of"):
        prepare_arguments({"theme": "blue"}, theme)


def test_raw_json_text_is_parsed_with_clear_errors() -> None:
    assert parse_arguments("") == {} and parse_arguments(None) == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    with pytest.raises(ArgumentError, match="not valid JSON"):
        parse_arguments('{"a": ')
    with pytest.raises(ArgumentError, match="must be a JSON object, not list"):
        parse_arguments("[1]")


def test_bfcl_python_type_names_become_json_schema() -> None:
    schema = normalize_schema(
        {"type": "dict", "properties": {"x": {"type": "float"}, "t": {"type": "tuple"}, "a": {"type": "any"}}}
    )
    assert schema["type"] == "object"
    assert schema["properties"]["x"] == {"type": "number"}
    assert schema["properties"]["t"] == {"type": "array"}
    assert schema["properties"]["a"] == {}
    assert prepare_arguments({"x": "1.5", "t": [1], "a": {"k": 1}}, schema) == {"x": 1.5, "t": [1], "a": {"k": 1}}
