"""JSON from untrusted peers: nesting depth bounded before anything recursive touches it.

`json.loads` itself survives deep input (it raises RecursionError), but everything after it —
schema validation, argument coercion, logging an excerpt — recurses per level. So text from a
device, a registerTools client or an OTA caller is measured first: the scan strips string
literals with one regex and sums the remaining brackets with numpy, all at C speed, so a
256 KiB frame costs about a millisecond however it is shaped.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

DEFAULT_MAX_DEPTH = 64
"""Nesting a peer's JSON may have; a device's deepest message (a tools/list page) has about 8."""

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STEP = np.zeros(256, dtype=np.int32)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class JsonTooDeep(ValueError):
    """JSON nested deeper than allowed; `str()` names the limit."""

    def __init__(self, depth: int, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels (found at least {depth})")
        self.depth = depth
        self.limit = limit


def nesting_depth(text: str | bytes) -> int:
    """How deep the brackets of JSON `text` nest, ignoring brackets inside string literals.

    For text that is not valid JSON the answer is an estimate (an unterminated string counts
    its brackets); callers parse afterwards and report invalid JSON then.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") == 0:
        return 0
    outside_strings = _STRING.sub("", text).encode("utf-8", errors="replace")
    if not outside_strings:
        return 0
    steps = _STEP[np.frombuffer(outside_strings, dtype=np.uint8)]
    return int(np.cumsum(steps).max(initial=0))


def check_depth(text: str | bytes, limit: int = DEFAULT_MAX_DEPTH) -> None:
    """Raise JsonTooDeep when `text` nests deeper than `limit`."""
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") <= limit:
        return  # cannot nest deeper than it has brackets: the common case costs two counts
    depth = nesting_depth(text)
    if depth > limit:
        raise JsonTooDeep(depth, limit)


def loads_bounded(text: str | bytes, limit: int = DEFAULT_MAX_DEPTH) -> Any:
    """`json.loads(text)` after `check_depth`; raises JsonTooDeep or ValueError (json's)."""
    check_depth(text, limit)
    return json.loads(text)


def value_depth(value: Any, limit: int) -> int:
    """Depth of a decoded JSON value, counted without recursion; stops counting past `limit`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return deepest
