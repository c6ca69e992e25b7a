"""What a device id may be: one rule for every place an id enters vixio.

A device id keys everything vixio keeps about a device (memory, history, pairing, held results)
and is written on every log line of its sessions, so it comes in through the WebSocket handshake,
OTA, the console's URLs and the CLI under the same rule:

- 1 to `MAX_DEVICE_ID_CHARS` characters after surrounding spaces are stripped and letters
  lowercased (the firmware sends its MAC, `aa:bb:cc:dd:ee:ff`);
- only ASCII letters, digits and `: . _ ~ @ + -`: no space, no control character (a newline in
  `?device-id=` would forge log lines), no `/`, `?`, `#` or `%` (the console puts the id in a URL
  path). `~` is in the set because an id vixio derives for an unproven claim reads
  `<claim>~<10 hex digits>`.

A caller refuses an id that breaks the rule with `DeviceIdError`'s message; it never cuts or
rewrites one, so two different ids never become the same device.
"""

from __future__ import annotations

import re

MAX_DEVICE_ID_CHARS = 64
"""Longest device id (a MAC is 17 characters, a UUID 36)."""
DEVICE_ID_CHARACTERS = "ASCII letters, digits and : . _ ~ @ + -"
"""The rule's characters, in words for error messages."""

_DEVICE_ID = re.compile(rf"[0-9a-z:._~@+-]{{1,{MAX_DEVICE_ID_CHARS}}}")
_LOG_EXCERPT_CHARS = 80


class DeviceIdError(ValueError):
    """A device id that breaks the rule; `str()` says which part and what is allowed."""


def device_id_problem(device_id: str) -> str | None:
    """What is wrong with `device_id` as given (already stripped and lowercased), or None."""
    if not device_id:
        return "it is empty"
    if len(device_id) > MAX_DEVICE_ID_CHARS:
        return f"it is {len(device_id)} characters long (at most {MAX_DEVICE_ID_CHARS})"
    if _DEVICE_ID.fullmatch(device_id) is None:
        bad = next(ch for ch in device_id if _DEVICE_ID.fullmatch(ch) is None)
        return f"it contains {bad!r} (allowed: {DEVICE_ID_CHARACTERS})"
    return None


def normalize_device_id(raw: object, what: str = "device id") -> str:
    """`raw` stripped and lowercased when it keeps the rule; DeviceIdError naming `what` otherwise."""
    if not isinstance(raw, str):
        raise DeviceIdError(
            f"{what} must be a string of 1 to {MAX_DEVICE_ID_CHARS} characters "
            f"({DEVICE_ID_CHARACTERS}), e.g. aa:bb:cc:dd:ee:ff"
        )
    device_id = raw.strip().lower()
    problem = device_id_problem(device_id)
    if problem is not None:
        raise DeviceIdError(
            f"{what} refused: {problem}; a device id is 1 to {MAX_DEVICE_ID_CHARS} "
            f"characters ({DEVICE_ID_CHARACTERS}), e.g. aa:bb:cc:dd:ee:ff"
        )
    return device_id


def is_device_id(raw: object) -> bool:
    """Whether `raw` keeps the rule (as `normalize_device_id` would accept it)."""
    return isinstance(raw, str) and device_id_problem(raw.strip().lower()) is None


def loggable(raw: object) -> str:
    """An untrusted id as one safe log token: "-" when empty, as is when it keeps the rule, else
    its `repr` (control characters escaped) cut to a few dozen characters."""
    text = raw if isinstance(raw, str) else str(raw)
    if not text.strip():
        return "-"
    if is_device_id(text):
        return text.strip().lower()
    shown = repr(text[:_LOG_EXCERPT_CHARS])
    return shown + ("..." if len(text) > _LOG_EXCERPT_CHARS else "")


def device_id_argument(raw: str) -> str:
    """`normalize_device_id` as an argparse `type=`: a bad id is a usage error that names the rule."""
    import argparse  # only the command line needs it

    try:
        return normalize_device_id(raw)
    except DeviceIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
