from __future__ import annotations

from pathlib import Path

import pytest

from vixio.cli import main
from vixio.config import load_config, parse_config
from vixio.config.needs import missing_keys, required_extras

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]


def test_extras_of_the_shipped_configs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "extras", "--config", str(ROOT / "config.yaml")]) == 0
    assert capsys.readouterr().out.strip() == "xiaozhi,silero,whisper,local-onnx,piper"
    assert main(["config", "extras", "--config", str(ROOT / "config.zh.yaml")]) == 0
    assert capsys.readouterr().out.strip() == "xiaozhi,silero,whisper-multilingual,espeak"


def test_every_extra_named_exists_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    configs = [
        {"tts": {"provider": "edge"}, "asr": {"provider": "openai", "api_base": "http://x/v1"}},
        {"vad": {"provider": "silero-lite"}, "asr": {"provider": "faster-whisper", "model": "base"}},
        {
            "vad": {"provider": "silero-torch"},
            "asr": {"provider": "faster-whisper"},
            "agent": {"provider": "local-llama"},
            "tts": {"provider": "piper"},
        },
        {"tts": {"provider": "espeak"}},
    ]
    for data in configs:
        for extra in required_extras(parse_config(data, environ={})):
            assert extra in declared, extra
    assert "edge" in required_extras(parse_config(configs[0], environ={}))


def test_the_mistralrs_runtime_needs_its_extra_and_not_llama_cpp() -> None:
    extras = required_extras(parse_config({"agent": {"provider": "local-llama", "runtime": "mistralrs"}}, environ={}))
    assert "local-mistralrs" in extras and "local-llm" not in extras
    assert "local-llm" in required_extras(
        parse_config({"agent": {"provider": "local-llama", "runtime": "llama-cpp"}}, environ={})
    )


def test_the_default_runtime_is_onnx_runtime_which_needs_no_compiler() -> None:
    extras = required_extras(parse_config({"agent": {"provider": "local-llama"}}, environ={}))
    assert "local-onnx" in extras and "local-llm" not in extras
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any("llama-cpp-python" in requirement for requirement in declared["local-onnx"])


def test_extras_of_a_broken_config_print_the_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("language: klingon\n")
    assert main(["config", "extras", "--config", str(bad)]) == 1
    assert "language" in capsys.readouterr().err


def test_missing_llm_key_is_named_with_its_variable() -> None:
    config = load_config(ROOT / "config.zh.yaml", environ={})
    (problem,) = missing_keys(config, environ={})
    assert "DEEPSEEK_API_KEY 未设置" in problem  # config.zh.yaml: said in Mandarin
    assert missing_keys(config, environ={"DEEPSEEK_API_KEY": "sk-1"}) == []
    keyed = load_config(ROOT / "config.zh.yaml", environ={"DEEPSEEK_API_KEY": "sk-1"})
    assert keyed.agent.api_key == "sk-1" and missing_keys(keyed, environ={}) == []
    ollama = parse_config({"agent": {"provider": "litellm", "model": "ollama_chat/qwen2.5:3b"}}, environ={})
    assert missing_keys(ollama, environ={}) == []
    qwen = parse_config({"agent": {"provider": "litellm", "model": "dashscope/qwen-plus"}}, environ={})
    assert "DASHSCOPE_API_KEY" in missing_keys(qwen, environ={})[0]
    cloud_tts = parse_config({"tts": {"provider": "openai", "api_base": "https://api.siliconflow.cn/v1"}}, environ={})
    assert missing_keys(cloud_tts, environ={})[0].startswith("tts.api_key is empty")


def test_startup_warns_once_last_in_the_banner_in_the_configs_language(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: the warning came twice, 17 lines above the banner, in English, with an English
    test command; it is the banner's last line now, in Mandarin for a Mandarin config."""
    from loguru import logger

    from vixio.app.startup import log_http_urls

    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    config = load_config(ROOT / "config.zh.yaml", environ={})
    lines: list[tuple[str, str]] = []
    sink = logger.add(
        lambda message: lines.append((message.record["level"].name, message.record["message"])), level="INFO"
    )
    try:
        log_http_urls("127.0.0.1", 8003, config)
    finally:
        logger.remove(sink)
    assert [level for level, _ in lines].count("WARNING") == 1
    level, last = lines[-1]
    assert level == "WARNING" and "DEEPSEEK_API_KEY" in last and "没有 API 密钥" in last
    assert any('--text "现在几点了"' in message for _, message in lines)


async def test_loading_the_voice_stack_says_nothing_of_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from loguru import logger

    from vixio.voice.stack import VoiceStack

    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    config = parse_config(
        {
            "language": "zh",
            "agent": {"provider": "litellm", "model": "deepseek/deepseek-chat", "api_key": "${DEEPSEEK_API_KEY:-}"},
            "asr": None,
            "tts": None,
        },
        environ={},
    )
    warnings: list[str] = []
    sink = logger.add(lambda message: warnings.append(message.record["message"]), level="WARNING")
    stack = VoiceStack(config)
    try:
        await stack.load()  # once per worker: two workers warned twice
    finally:
        logger.remove(sink)
        await stack.close()
    assert not any("DEEPSEEK_API_KEY" in warning for warning in warnings), warnings


def test_config_check_warns_of_a_missing_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    assert main(["config", "check", "--config", str(ROOT / "config.zh.yaml")]) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "DEEPSEEK_API_KEY" in out and "with the warnings above" in out
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-1")
    assert main(["config", "check", "--config", str(ROOT / "config.zh.yaml")]) == 0
    assert "warning" not in capsys.readouterr().out


def test_an_online_tts_brings_the_offline_voice_that_speaks_while_it_fails() -> None:
    api = {"provider": "openai", "api_base": "http://x/v1"}
    assert "piper" in required_extras(parse_config({"tts": api}, environ={}))
    assert "espeak" in required_extras(parse_config({"language": "zh", "tts": {"provider": "edge"}}, environ={}))
    explicit = required_extras(parse_config({"tts": {**api, "fallback": {"provider": "espeak"}}}, environ={}))
    assert "espeak" in explicit and "piper" not in explicit
    assert not {"piper", "espeak"} & set(required_extras(parse_config({"tts": {**api, "fallback": None}}, environ={})))


def test_the_automatic_fallback_is_the_offline_voice_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from vixio.config import needs

    installed = {*needs.PROVIDER_EXTRAS["tts:piper:joe"].modules, "espeakng_loader"}
    monkeypatch.setattr(needs, "_installed", lambda module: module in installed)
    assert needs.auto_fallback("en").provider == "piper"
    zh = needs.auto_fallback("zh")  # Piper's bundled voice is English
    assert zh.provider == "espeak" and zh.voice == "cmn"
    installed.discard("piper")
    en = needs.auto_fallback("en")
    assert en.provider == "espeak" and en.voice == "en-us"
    installed.clear()
    assert needs.auto_fallback("en") is None


async def test_without_an_offline_voice_the_server_says_so_once_at_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    from loguru import logger

    from vixio.config import needs
    from vixio.voice.providers import load_tts_fallback as _tts_fallback

    monkeypatch.setattr(needs, "_installed", lambda module: False)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    try:
        config = parse_config({"tts": {"provider": "openai", "api_base": "http://x/v1"}}, environ={})
        assert await _tts_fallback(config) is None
        assert (
            await _tts_fallback(
                parse_config({"tts": {"provider": "openai", "api_base": "http://x/v1", "fallback": None}}, environ={})
            )
            is None
        )
    finally:
        logger.remove(sink)
    assert len(lines) == 1 and "no offline voice is installed" in lines[0] and "piper" in lines[0]
