from __future__ import annotations

import re

import pytest

from vixio.config import ConfigError, parse_config
from vixio.config.languages import LANGUAGES
from vixio.config.pipeline import SpeechConfig

pytestmark = pytest.mark.unit

CLOUD_AGENT = {"provider": "litellm", "model": "deepseek/deepseek-chat"}
_LATIN_WORD = re.compile(r"[A-Za-z]{3,}")


def test_zh_fills_every_spoken_text_and_voice_default() -> None:
    config = parse_config(
        {
            "language": "zh",
            "asr": {"provider": "faster-whisper"},
            "agent": CLOUD_AGENT,
            "tts": {"provider": "espeak"},
            "xiaozhi": {"idle_goodbye": True},
        },
        environ={},
    )
    assert (config.asr.model, config.asr.language) == ("base", "zh")
    assert config.tts.voice == "cmn"
    spoken = [
        config.xiaozhi.greeting,
        config.xiaozhi.idle_goodbye,
        config.agent.system_prompt,
        config.speech.apology,
        config.xiaozhi.activation.message,
    ]
    for text in spoken:
        assert text and re.search(r"[\u4e00-\u9fff]", text), text
        assert not _LATIN_WORD.search(text.replace("markdown", "").replace("{code}", "")), text
    assert "{code}" in config.xiaozhi.activation.message
    assert config.tools.policy().confirms("好的，去做吧")
    assert config.tools.policy().confirms("確定")  # Whisper may write traditional characters
    assert not config.tools.policy().confirms("不用了")


def test_explicit_keys_win_over_the_language() -> None:
    config = parse_config(
        {
            "language": "zh",
            "xiaozhi": {"greeting": "嗨!", "idle_goodbye": "拜拜"},
            "speech": {"apology": ""},
            "agent": {**CLOUD_AGENT, "system_prompt": "只说一句话。"},
            "tts": {"provider": "edge", "voice": "zh-CN-YunxiNeural"},
            "asr": {"provider": "openai", "api_base": "http://x/v1", "language": None},
            "tools": {"confirm_words": {"yes": ["中"], "no": ["不中"]}},
        },
        environ={},
    )
    assert config.xiaozhi.greeting == "嗨!" and config.xiaozhi.idle_goodbye == "拜拜"
    assert config.speech.apology == "" and config.agent.system_prompt == "只说一句话。"
    assert config.tts.voice == "zh-CN-YunxiNeural" and config.asr.language is None
    assert config.tools.policy().confirms("中") and not config.tools.policy().confirms("不中")


def test_english_stays_the_default() -> None:
    config = parse_config(
        {"asr": {"provider": "faster-whisper"}, "tts": {"provider": "edge"}, "xiaozhi": {"idle_goodbye": False}},
        environ={},
    )
    assert config.language == "en" and config.xiaozhi.greeting == "Hi, how can I help?"
    assert (config.asr.model, config.asr.language) == ("tiny.en", "en")
    assert config.tts.voice == "en-US-AriaNeural" and config.xiaozhi.idle_goodbye is None
    assert config.tools.policy().confirms("yes, go ahead") and not config.tools.policy().confirms("no")


def test_every_spoken_speech_text_has_each_language() -> None:
    """A spoken `speech.*` text on by default must exist in every language, or zh would speak English."""
    spoken = [
        name
        for name, field in SpeechConfig.model_fields.items()
        if isinstance(field.default, str) and field.default and name != "default_emotion"
    ]
    assert "apology" in spoken
    for code, pack in LANGUAGES.items():
        missing = [name for name in spoken if name not in pack.speech]
        assert not missing, f"language {code} has no text for speech.{', speech.'.join(missing)}"
    zh = parse_config({"language": "zh"}, environ={})
    for name in spoken:
        assert getattr(zh.speech, name) == LANGUAGES["zh"].speech[name]


def test_texts_that_are_off_by_default_stay_off() -> None:
    zh = parse_config({"language": "zh"}, environ={})
    for name, field in SpeechConfig.model_fields.items():
        if field.default in ("", None):
            assert getattr(zh.speech, name) == field.default, name
    assert zh.xiaozhi.idle_goodbye is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"asr": {"provider": "faster-whisper", "model": "tiny.en"}}, "asr.model 'tiny.en' hears English only"),
        ({"tts": {"provider": "piper"}}, "piper has only an English voice"),
        ({"agent": {"provider": "local-llama"}}, "SmolLM2 answers in English only"),
    ],
)
def test_zh_refuses_english_only_parts(section: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"language": "zh", **section}, environ={})
    (error,) = info.value.errors
    assert error.startswith("<root>: language zh:") and message in error


def test_unknown_language_lists_the_choices() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"language": "fr"}, environ={})
    assert "language:" in info.value.errors[0] and "'zh'" in info.value.errors[0]


def test_an_espeak_fallback_speaks_the_language_unless_its_voice_is_set() -> None:
    api = {"provider": "openai", "api_base": "http://x/v1"}
    english = parse_config({"tts": {**api, "fallback": {"provider": "espeak"}}}, environ={})
    assert english.tts.fallback.voice == "en-us"
    chosen = parse_config({"tts": {**api, "fallback": {"provider": "espeak", "voice": "en-gb"}}}, environ={})
    assert chosen.tts.fallback.voice == "en-gb"
