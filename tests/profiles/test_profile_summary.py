"""What `vixio profile list` and the console say of a profile's tools (issue 46: "tools on" for a
profile offering one tool)."""

from __future__ import annotations

from typing import Any

import pytest

from vixio.config.loader import parse_config
from vixio.profiles import ProfileBook

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {
    "agent": {"provider": "litellm", "model": "openai/house", "api_key": "k"},
    "tts": {"provider": "espeak"},
}


def tools_of(tools: dict[str, Any]) -> str:
    config = parse_config({**BASE, "profiles": {"p": {"tools": tools}}})
    return ProfileBook(config).summary("p")["tools"]


def test_a_profile_offering_one_tool_says_which() -> None:
    assert tools_of({"default_enabled": False, "toggles": {"get_time": True}}) == "only get_time"


def test_the_other_shapes_of_a_tool_policy() -> None:
    assert tools_of({"default_enabled": False}) == "none"
    assert tools_of({"toggles": {"self.reboot": False}}) == "all but self.reboot"
    assert tools_of({"enabled": False}) == "off"
    assert ProfileBook(parse_config(BASE)).summary("default")["tools"] == "on"
