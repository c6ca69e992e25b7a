"""The one device id rule (vixio/core/device_ids.py): what the firmware, the tests and derived ids
send fits; control characters, whitespace, URL-breaking characters and ids over 64 do not."""

from __future__ import annotations

import argparse

import pytest

from vixio.core.device_ids import (
    MAX_DEVICE_ID_CHARS,
    DeviceIdError,
    device_id_argument,
    is_device_id,
    loggable,
    normalize_device_id,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "raw",
    [
        "aa:bb:cc:dd:ee:ff",
        "AA:BB:CC:DD:EE:FF",
        " 02:00:00:00:a1:1c ",
        "dev-1",
        "robot-a",
        "anonymous-1f2e3d4c",
        "AA-BB-CC-DD-EE-FF",
        "aabbccddeeff",
        "user@example.com",
        "a+b.c_d",
        "x" * 52 + "~" + "0123456789",  # a derived id: <claimed[:52]>~<10 hex>
        "a" * MAX_DEVICE_ID_CHARS,
    ],
)
def test_ids_in_use_fit(raw: str) -> None:
    assert normalize_device_id(raw) == raw.strip().lower()
    assert is_device_id(raw)


@pytest.mark.parametrize(
    "raw, problem",
    [
        ("aa:bb\n2026-01-01 INFO forged", "'\\n'"),
        ("aa\rbb", "'\\r'"),
        ("aa\x1b[31mbb", "'\\x1b'"),
        ("aa bb", "' '"),
        ("aa/../bb", "'/'"),
        ("aa%0abb", "'%'"),
        ("aa?x=1", "'?'"),
        ("设备一", "'设'"),
        ("a" * (MAX_DEVICE_ID_CHARS + 1), "65 characters long"),
        ("   ", "empty"),
    ],
)
def test_ids_that_break_the_rule_are_refused_with_the_reason(raw: str, problem: str) -> None:
    with pytest.raises(DeviceIdError) as info:
        normalize_device_id(raw, "Device-Id")
    assert str(info.value).startswith("Device-Id refused") and problem in str(info.value)
    assert not is_device_id(raw)


def test_a_non_string_is_refused() -> None:
    with pytest.raises(DeviceIdError, match="must be a string"):
        normalize_device_id(12345, "device")


def test_loggable_never_lets_a_line_break_through() -> None:
    assert loggable("AA:BB:CC:DD:EE:FF") == "aa:bb:cc:dd:ee:ff"
    assert loggable("") == "-"
    shown = loggable("aa\n2026-01-01 00:00:00.000 | INFO | forged" + "x" * 200)
    assert "\n" not in shown and "\\n" in shown and len(shown) < 100 and shown.endswith("...")


def test_the_command_line_refuses_a_bad_id_as_a_usage_error() -> None:
    assert device_id_argument("AA:BB:CC:DD:EE:FF") == "aa:bb:cc:dd:ee:ff"
    with pytest.raises(argparse.ArgumentTypeError, match="refused"):
        device_id_argument("aa\nbb")
