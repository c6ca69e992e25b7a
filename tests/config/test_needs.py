from __future__ import annotations

from pathlib import Path

import pytest

from vixio.cli import main
from vixio.config import load_config, parse_config
from vixio.config.needs import missing_keys, required_extras

ROOT = Path(__file__).resolve().parents[2]


def test_extras_of_the_shipped_configs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "extras", "--config", str(ROOT / "config.yaml")]) == 0
    assert capsys.readouterr().out.strip() == "xiaozhi,silero-onnx,whisper,local-llm,piper"
    assert main(["config", "extras", "--config", str(ROOT / "config.zh.yaml")]) == 0
    assert capsys.readouterr().out.strip() == "xiaozhi,silero-onnx,whisper-multilingual,espeak"


def test_every_extra_named_exists_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    configs = [
        {"tts": {"provider": "edge"}, "asr": {"provider": "openai", "api_base": "http://x/v1"}},
        {"vad": {"provider": "silero-lite"}, "asr": {"provider": "faster-whisper", "model": "base"}},
        {"vad": {"provider": "silero-torch"}, "asr": {"provider": "faster-whisper"}, "agent": {"provider": "local-llama"},
         "tts": {"provider": "piper"}},
        {"tts": {"provider": "espeak"}},
    ]
    for data in configs:
        for extra in required_extras(parse_config(data, environ={})):
            assert extra in declared, extra
    assert "edge" in required_extras(parse_config(configs[0], environ={}))


def test_extras_of_a_broken_config_print_the_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("language: klingon\n")
    assert main(["config", "extras", "--config", str(bad)]) == 1
    assert "language" in capsys.readouterr().err


def test_missing_llm_key_is_named_with_its_variable() -> None:
    config = load_config(ROOT / "config.zh.yaml", environ={})
    (problem,) = missing_keys(config, environ={})
    assert "DEEPSEEK_API_KEY is not set" in problem
    assert missing_keys(config, environ={"DEEPSEEK_API_KEY": "sk-1"}) == []
    keyed = load_config(ROOT / "config.zh.yaml", environ={"DEEPSEEK_API_KEY": "sk-1"})
    assert keyed.agent.api_key == "sk-1" and missing_keys(keyed, environ={}) == []
    ollama = parse_config({"agent": {"provider": "litellm", "model": "ollama_chat/qwen2.5:3b"}}, environ={})
    assert missing_keys(ollama, environ={}) == []
    qwen = parse_config({"agent": {"provider": "litellm", "model": "dashscope/qwen-plus"}}, environ={})
    assert "DASHSCOPE_API_KEY" in missing_keys(qwen, environ={})[0]
    cloud_tts = parse_config({"tts": {"provider": "openai", "api_base": "https://api.siliconflow.cn/v1"}}, environ={})
    assert missing_keys(cloud_tts, environ={})[0].startswith("tts.api_key is empty")


async def test_startup_warns_when_the_llm_key_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    from loguru import logger

    from vixio.voice import VoiceStack

    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    config = parse_config({"language": "zh", "agent": {"provider": "litellm", "model": "deepseek/deepseek-chat",
                                                       "api_key": "${DEEPSEEK_API_KEY:-}"}}, environ={})
    warnings: list[str] = []
    sink = logger.add(lambda message: warnings.append(message.record["message"]), level="WARNING")
    stack = VoiceStack(config)
    try:
        await stack.load()
    finally:
        logger.remove(sink)
        await stack.close()
    assert any("DEEPSEEK_API_KEY is not set" in warning for warning in warnings), warnings
