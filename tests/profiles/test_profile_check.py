"""`vixio config check` validates profiles like the rest: one line per problem, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from vixio.cli import main
from vixio.config import preflight
from vixio.config.loader import parse_config

pytestmark = pytest.mark.unit

BASE = """
agent: {provider: litellm, model: openai/house, api_key: k}
tts: {provider: espeak, voice: en-us}
"""


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, list[str]]:
    path = tmp_path / "config.yaml"
    path.write_text(BASE + text, encoding="utf-8")
    code = main(["config", "check", "--config", str(path)])
    captured = capsys.readouterr()
    return code, [line for line in (captured.err + captured.out).splitlines() if line.strip()]


def test_bad_profiles_are_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(tmp_path, capsys, "profiles:\n  kids: {instructions: Small words., persona: friendly}\n")
    assert code == 1 and lines[1:] == [
        "  - profiles.kids.persona: unknown key; allowed keys here: description, language, greeting, instructions, "
        "model, voice, agent, asr, tts, tools, memory, speech"
    ]
    code, lines = check(
        tmp_path,
        capsys,
        """
profiles:
  kids: {instructions: Small words., memory: {max_turns: 0}}
  night: {tools: {mcp_servers: {}}}
devices:
  "aa:bb:cc:dd:ee:01": kidz
""",
    )
    assert code == 1
    assert lines[1:] == [
        "  - devices.aa:bb:cc:dd:ee:01: no profile 'kidz' (profiles: default, kids, night)",
        "  - profiles.kids.memory.max_turns: Input should be greater than or equal to 1 (got 0)",
        "  - profiles.night.tools.mcp_servers: belongs to the whole server, a profile cannot change it (use "
        "tools.toggles to turn a tool off for this profile)",
    ]


def test_unknown_voices_and_models_of_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check(
        tmp_path,
        capsys,
        """
profiles:
  kids: {voice: en-us+f3}
  robot: {voice: klingon, model: gpt-4o}
  cloud: {tts: {provider: edge, voice: nova}}
  piper: {tts: {provider: piper, voice: /nowhere/voice.onnx}}
""",
    )
    assert code == 1 and lines[1:] == [
        "  - profiles.robot.agent.model 'gpt-4o' has no provider prefix: litellm needs e.g. 'openai/gpt-4o' "
        "(an OpenAI-compatible server) or 'ollama/gpt-4o'",
        "  - profiles.robot.tts.voice 'klingon': not an espeak-ng voice (e.g. en-us, en-gb, cmn, de, fr; a variant "
        "as en-us+f3)",
        "  - profiles.cloud.tts.voice 'nova': not an Edge voice name (e.g. en-US-AriaNeural, zh-CN-XiaoxiaoNeural; "
        "`edge-tts --list-voices`)",
        "  - profiles.piper.tts.voice '/nowhere/voice.onnx': no such Piper voice file (a .onnx path; null uses the "
        "bundled English voice)",
    ]
    code, lines = check(tmp_path, capsys, "profiles:\n  kids: {voice: en-us+f3, language: zh}\n")
    assert (code, lines) == (0, [f"OK: {tmp_path / 'config.yaml'}"])


def test_a_profiles_provider_needs_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = preflight._missing
    monkeypatch.setattr(preflight, "_missing", lambda module: module == "edge_tts" or real(module))
    config = parse_config(
        {
            "agent": {"provider": "litellm", "model": "openai/house", "api_key": "k"},
            "tts": {"provider": "espeak"},
            "profiles": {"cloud": {"tts": {"provider": "edge", "voice": "en-GB-SoniaNeural"}}},
        }
    )
    (problem,) = preflight.extra_problems(config)
    assert problem.startswith(
        "profiles.cloud.tts.provider 'edge' needs the 'edge' extra, which is not installed (edge_tts missing): "
    )
