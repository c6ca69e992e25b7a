"""Public tool names: safe for OpenAI-style APIs, unique, stable, mapped both ways."""

from __future__ import annotations

import pytest

from vixio.core.tools.names import MAX_NAME_LENGTH, ToolNameMapper, is_safe_name

pytestmark = pytest.mark.unit


def test_dots_become_underscores_and_map_back() -> None:
    mapper = ToolNameMapper()
    names = mapper.assign([("device", "self.audio_speaker.set_volume"), ("local", "get_time")])
    assert names[("device", "self.audio_speaker.set_volume")] == "self_audio_speaker_set_volume"
    assert names[("local", "get_time")] == "get_time"
    assert mapper.original("self_audio_speaker_set_volume") == ("device", "self.audio_speaker.set_volume")


def test_collisions_get_distinct_hashed_names_and_the_first_keeps_the_plain_one() -> None:
    mapper = ToolNameMapper()
    tools = [("device", "a.b"), ("device", "a_b"), ("mcp:x", "a.b")]
    names = mapper.assign(tools)
    assert names[("device", "a.b")] == "a_b"
    assert len(set(names.values())) == 3
    assert all(is_safe_name(n) for n in names.values())
    assert names[("device", "a_b")].startswith("a_b_") and names[("mcp:x", "a.b")].startswith("a_b_")
    assert ToolNameMapper().assign(tools) == names  # deterministic across sessions


def test_overlong_and_non_ascii_names_are_safe() -> None:
    mapper = ToolNameMapper()
    long = "self." + "very_long_component." * 6 + "do"
    names = mapper.assign([("device", long), ("device", "播放音乐"), ("device", "音乐.play")])
    for name in names.values():
        assert is_safe_name(name) and len(name) <= MAX_NAME_LENGTH
        assert all(ord(ch) < 128 for ch in name)
    assert names[("device", "音乐.play")].startswith("__play") or names[("device", "音乐.play")] == "___play"


def test_names_given_out_stay_when_tools_are_added() -> None:
    mapper = ToolNameMapper()
    first = mapper.assign([("device", "x.y")])
    second = mapper.assign([("local", "x_y"), ("device", "x.y")])
    assert second[("device", "x.y")] == first[("device", "x.y")] == "x_y"
    assert second[("local", "x_y")] != "x_y"


def test_descriptions_are_rewritten_with_public_names() -> None:
    mapper = ToolNameMapper()
    mapper.assign([("device", "self.camera.take_photo"), ("device", "self.camera")])
    text = "Call self.camera.take_photo first, then self.camera. Not myself.camera.take_photo."
    assert mapper.rewrite(text) == "Call self_camera_take_photo first, then self_camera. Not myself.camera.take_photo."


def test_rewriting_agrees_with_the_plain_alternation_and_does_not_grow_with_the_tool_count() -> None:
    """Token lookup (dotted names) and the alternation (names with spaces or CJK) give what one
    big longest-first alternation gives, and 1,000 tools cost about what 10 do per description."""
    import re
    import time

    names = [f"robot.joint_{i}.move" for i in range(1000)] + ["my tool", "天气.查询", "self.audio", "x.y."]
    mapper = ToolNameMapper()
    mapper.assign([("device", name) for name in names])
    renames = {name: mapper.public(name, "device") for name in names}
    reference = re.compile(
        r"(?<![A-Za-z0-9_.-])("
        + "|".join(re.escape(n) for n in sorted(renames, key=len, reverse=True))
        + r")(?![A-Za-z0-9_-]|\.[A-Za-z0-9_])"
    )
    texts = [
        "Call robot.joint_3.move, then robot.joint_40.move.",
        "Use my tool or 天气.查询 first.",
        "Not self.audio_speaker nor self.audio.volume nor xself.audio; but self.audio...",
        "x.y. then done",
        "robot.joint_3.moved robot.joint_3.move-x -robot.joint_3.move (robot.joint_999.move)",
    ]
    for text in texts:
        assert mapper.rewrite(text) == reference.sub(lambda m: renames[m.group(1)], text), text
    small = ToolNameMapper()
    small.assign([("device", f"robot.joint_{i}.move") for i in range(10)])
    text = " ".join(texts) * 4
    started = time.perf_counter()
    for _ in range(200):
        small.rewrite(text)
    few = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(200):
        mapper.rewrite(text)
    many = time.perf_counter() - started
    assert many < few * 5 + 0.05, (few, many)
