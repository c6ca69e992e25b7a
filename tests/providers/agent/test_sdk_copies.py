"""openai-agents' input copies on the direct path: the same copies the SDK makes, cheaper."""

from __future__ import annotations

import copy
import sys
from collections import OrderedDict
from typing import Any

import pytest

from vixio.patches import openai_agents as sdk_copies

json_module = pytest.importorskip("agents.util._json")
state_module = pytest.importorskip("agents.run_state")
from agents.items import ItemHelpers  # noqa: E402
from pydantic import BaseModel  # noqa: E402

pytestmark = pytest.mark.unit


def history(turns: int = 10) -> list[dict[str, Any]]:
    """A conversation as vixio keeps it: user, tool call, tool output and answer items."""
    items: list[dict[str, Any]] = []
    for i in range(turns):
        items.append({"role": "user", "content": f"Question {i}: what is the weather like?"})
        items.append(
            {"type": "function_call", "call_id": f"call_{i}", "name": "get_weather", "arguments": '{"city": "Paris"}'}
        )
        items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": "sunny"})
        items.append(
            {
                "role": "assistant",
                "type": "message",
                "status": "completed",
                "id": f"msg_{i}",
                "content": [{"type": "output_text", "text": "It is sunny.", "annotations": [], "logprobs": None}],
            }
        )
    return items


class Part(BaseModel):
    text: str
    weight: float = 1.0


def test_installed_on_the_checked_version() -> None:
    assert sdk_copies.install()
    assert sdk_copies.install()  # once only: the originals stay reachable
    dump = json_module._to_dump_compatible_internal
    clone = state_module._clone_original_input
    assert dump.vixio_fast_path and clone.vixio_fast_path
    assert not getattr(dump.original, "vixio_fast_path", False)
    assert not getattr(clone.original, "vixio_fast_path", False)


def test_plain_history_never_reaches_the_sdks_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk_copies.install()
    dump = json_module._to_dump_compatible_internal
    calls: list[Any] = []
    original = dump.original
    monkeypatch.setattr(
        json_module,
        "_to_dump_compatible_internal",
        sdk_copies._dump_compatible(lambda obj: calls.append(obj) or original(obj)),
    )
    items = history()
    assert ItemHelpers.input_to_new_input_list(items) == items  # through the SDK's public entry
    assert calls == []


@pytest.mark.parametrize(
    "value",
    [
        history(3),
        {"messages": tuple(history(1)), "n": 1, "ok": True, "none": None},
        [Part(text="a"), {"nested": [Part(text="b", weight=2.0)]}],
        OrderedDict(a=[1, 2], b={"c": (3, 4)}),
        [b"bytes", bytearray(b"x"), frozenset({3})],
        "a string",
        [],
    ],
)
def test_dump_compatible_equals_the_sdks(value: Any) -> None:
    sdk_copies.install()
    dump = json_module._to_dump_compatible_internal
    fast, slow = dump(value), dump.original(value)
    assert fast == slow
    assert _shape(fast) == _shape(slow)


def test_dump_compatible_materialises_generators_as_the_sdk_does() -> None:
    sdk_copies.install()
    dump = json_module._to_dump_compatible_internal
    assert (
        dump({"parts": (x for x in range(3))})
        == dump.original({"parts": (x for x in range(3))})
        == {"parts": [0, 1, 2]}
    )


def test_the_input_clone_is_deep_and_equals_deepcopy() -> None:
    sdk_copies.install()
    clone = state_module._clone_original_input
    items = history(2)
    copied = clone(items)
    assert copied == copy.deepcopy(items)
    copied[3]["content"][0]["text"] = "changed"
    copied.append({"role": "user", "content": "more"})
    assert items[3]["content"][0]["text"] == "It is sunny." and len(items) == 8
    assert clone("just text") == "just text"


def test_anything_not_plain_is_cloned_by_deepcopy() -> None:
    sdk_copies.install()
    clone = state_module._clone_original_input
    odd = [{"role": "user", "content": ("a", "tuple")}, Part(text="model")]
    copied = clone(odd)
    assert copied == odd and copied is not odd
    assert isinstance(copied[0]["content"], tuple)  # deepcopy keeps a tuple a tuple
    assert copied[1] is not odd[1]


def test_the_direct_copies_are_much_cheaper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted in calls, not timed: a timing on a shared host flakes (a run read 1.85x where ~3.5x
    is usual), while the calls each copy makes are its work and do not move."""
    sdk_copies.install()
    dump = json_module._to_dump_compatible
    clone = state_module._clone_original_input
    items = history(10)  # 40 items, max_history_messages' default

    def calls(function: Any) -> int:
        count = 0

        def profile(frame: Any, event: str, arg: Any) -> None:
            nonlocal count
            if event in ("call", "c_call"):
                count += 1

        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            function(items)
        finally:
            sys.setprofile(previous)
        return count

    fast_dump, fast_clone = calls(dump), calls(clone)
    # The SDK's walk recurses through the module global: restore it for the comparison.
    monkeypatch.setattr(json_module, "_to_dump_compatible_internal", json_module._to_dump_compatible_internal.original)
    assert fast_dump * 4 < calls(dump)  # 354 against 2,300 calls (~3.6x less CPU)
    assert fast_clone * 4 < calls(clone.original)  # 354 against 2,442 (~3.4x less CPU)


def _shape(value: Any) -> Any:
    """The container types of a tree, to compare more than equality (a tuple equals no list)."""
    if isinstance(value, dict):
        return (type(value).__name__, {key: _shape(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(item) for item in value])
    return type(value).__name__
