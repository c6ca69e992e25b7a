"""`profiles:` and `devices:`: what a profile changes, how it survives the trip to a worker, and
one clear line per mistake."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vixio.config.loader import ConfigError, parse_config
from vixio.config.models import VixioConfig
from vixio.config.profiles import profile_for
from vixio.profiles import ProfileBook

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {
    "agent": {"provider": "litellm", "model": "openai/house", "api_key": "k"},
    "tts": {"provider": "espeak"},
}


def errors(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, **data})
    return caught.value.errors


def test_a_config_without_profiles_is_its_own_default_profile() -> None:
    config = parse_config(BASE)
    book = ProfileBook(config)
    assert book.names == ["default"] and book.effective("default") is config
    assert book.choose("aa:bb:cc:dd:ee:ff", None).to_json() == {"profile": "default", "profile_source": "default"}


def test_a_profile_changes_only_what_it_names() -> None:
    config = parse_config(
        {
            **BASE,
            "tools": {"toggles": {"self.reboot": False}},
            "profiles": {
                "kids": {
                    "instructions": "Small words.",
                    "voice": "en-us+f3",
                    "tools": {"toggles": {"get_time": False}, "require_confirmation": True},
                    "memory": {"enabled": False},
                }
            },
        }
    )
    kids = ProfileBook(config).effective("kids")
    assert kids.agent is not None and kids.agent.system_prompt == "Small words." and kids.agent.model == "openai/house"
    assert kids.tts.voice == "en-us+f3" and config.tts.voice == "en-us"
    assert kids.tools.toggles == {"self.reboot": False, "get_time": False} and kids.tools.require_confirmation is True
    assert kids.memory.enabled is False and config.memory.enabled is True
    assert kids.speech == config.speech and kids.xiaozhi.greeting == config.xiaozhi.greeting


def test_a_language_brings_its_texts_and_keeps_them_on_the_way_to_a_worker() -> None:
    config = parse_config({**BASE, "profiles": {"zh": {"language": "zh", "greeting": "你好呀"}}})
    worker = VixioConfig.model_validate_json(json.dumps(config.model_dump(mode="json", by_alias=True)))
    for each in (config, worker):  # a worker's config has every key set: the profile must say it all
        zh = ProfileBook(each).effective("zh")
        assert zh.language == "zh" and zh.xiaozhi.greeting == "你好呀" and zh.tts.voice == "cmn"
        assert zh.agent is not None and "简体中文" in zh.agent.system_prompt
        assert "好的" in zh.tools.confirm_words.yes and zh.speech.apology.startswith("抱歉")
        assert each.language == "en" and each.speech.apology.startswith("Sorry")
    assert worker.profiles == config.profiles


def test_another_provider_replaces_the_section() -> None:
    config = parse_config({**BASE, "profiles": {"cloud": {"tts": {"provider": "edge", "voice": "en-GB-SoniaNeural"}}}})
    cloud = ProfileBook(config).effective("cloud")
    assert cloud.tts is not None and cloud.tts.provider == "edge" and cloud.tts.voice == "en-GB-SoniaNeural"


def test_devices_map_ids_and_patterns_the_most_specific_winning() -> None:
    devices = {"aa:bb:cc:dd:ee:01": "kids", "aa:bb:cc:*": "kitchen", "aa:*": "house", "*": "guest"}
    assert profile_for(devices, "AA:BB:CC:DD:EE:01") == "kids"
    assert profile_for(devices, "aa:bb:cc:dd:ee:02") == "kitchen"
    assert profile_for(devices, "aa:00:00:00:00:00") == "house"
    assert profile_for(devices, "bb:00:00:00:00:00") == "guest"
    assert profile_for({}, "bb:00:00:00:00:00") == ""
    config = parse_config({**BASE, "profiles": {"kids": {}}, "devices": {"AA:BB:CC:DD:EE:01": "kids", "*": "default"}})
    book = ProfileBook(config)
    assert book.choose("aa:bb:cc:dd:ee:01", None).to_json() == {"profile": "kids", "profile_source": "config"}
    assert book.choose("aa:bb:cc:dd:ee:01", "default").to_json() == {"profile": "default", "profile_source": "assigned"}
    assert book.choose("aa:bb:cc:dd:ee:01", "gone").name == "kids"  # an assignment the config no longer has


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"devices": {"aa:bb:cc:dd:ee:01": "kidz"}, "profiles": {"kids": {}}},
            "devices.aa:bb:cc:dd:ee:01: no profile 'kidz' (profiles: default, kids)",
        ),
        ({"profiles": {"kids": {"persona": "x"}}}, "profiles.kids.persona: unknown key"),
        ({"profiles": {"kids": {"agent": {"temprature": 0.2}}}}, "profiles.kids.agent.litellm.temprature: unknown key"),
        (
            {"profiles": {"kids": {"tools": {"local": ["x.py:f"]}}}},
            "profiles.kids.tools.local: belongs to the whole server",
        ),
        ({"profiles": {"kids": {"voice": "a", "tts": {"voice": "b"}}}}, "profiles.kids.voice: given twice"),
        (
            {"profiles": {"kids": {"asr": {"model": "base"}}}},
            "profiles.kids.asr: the top-level config has no asr section",
        ),
        (
            {"profiles": {"kids": {"memory": {"max_turns": 0}}}},
            "profiles.kids.memory.max_turns: Input should be greater",
        ),
        ({"profiles": {"default": {}}}, "profiles.default: the name is the top-level config's"),
        ({"profiles": {"kids room": {}}}, "profiles.kids room.[key]: a profile name is letters"),
    ],
)
def test_a_bad_profile_is_one_line_naming_its_key(data: dict[str, Any], expected: str) -> None:
    found = errors(data)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_the_docs_example_is_valid_config() -> None:
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("profiles:"))
    config = parse_config({**BASE, "agent": {**BASE["agent"], "timezone": None}, **yaml.safe_load(block)})
    book = ProfileBook(config)
    assert book.choose("aa:bb:cc:dd:ee:07", None).name == "kitchen"
    assert book.choose("11:22:33:44:55:66", None).to_json() == {"profile": "default", "profile_source": "config"}
    kids, kitchen = book.effective("kids"), book.effective("kitchen")
    assert kids.memory.long_term == "off" and kids.tools.require_confirmation == ["self.audio_speaker.*"]
    assert kitchen.language == "zh" and kitchen.tts.voice == "zh-CN-YunxiNeural"
