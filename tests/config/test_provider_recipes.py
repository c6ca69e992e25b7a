"""Every YAML recipe in docs/providers.md is a valid config, alone and on top of config.zh.yaml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from vixio.config import parse_config
from vixio.config.pipeline import EdgeTTSConfig, LitellmAgentConfig, OpenAIASRConfig, OpenAITTSConfig

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "providers.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC, re.S)
ENVIRON = {name: "test-key" for name in set(re.findall(r"\$\{([A-Z_]+)", DOC))}


def mandarin_recipes() -> list[str]:
    section = DOC[DOC.index("## Mandarin") :]
    return re.findall(r"```yaml\n(.*?)```", section[: section.index("\n## ", 4)], re.S)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_yaml_block_is_a_valid_config(block: str) -> None:
    parse_config(yaml.safe_load(block), environ=ENVIRON)


def test_the_mandarin_recipes_named_by_the_issue_are_there_and_fit_config_zh() -> None:
    base = yaml.safe_load((ROOT / "config.zh.yaml").read_text(encoding="utf-8"))
    built = []
    for block in mandarin_recipes():
        config = parse_config({**base, **yaml.safe_load(block)}, environ=ENVIRON)
        built.append(config)
    asr = {type(c.asr).__name__: c.asr for c in built}
    tts = [c.tts for c in built]
    agents = [c.agent.model for c in built if isinstance(c.agent, LitellmAgentConfig)]
    sensevoice = asr["OpenAIASRConfig"]
    assert isinstance(sensevoice, OpenAIASRConfig) and "SenseVoice" in sensevoice.model
    assert sensevoice.language == "zh"  # from language: zh
    cosy = next(t for t in tts if isinstance(t, OpenAITTSConfig))
    assert "CosyVoice" in cosy.model and cosy.response_format == "pcm"
    assert cosy.extra_body["sample_rate"] == cosy.sample_rate
    edge = next(t for t in tts if isinstance(t, EdgeTTSConfig))
    assert edge.voice.startswith("zh-CN")
    assert "deepseek/deepseek-chat" in agents and "openai/qwen-plus" in agents
    assert any(model.startswith("ollama") for model in agents)
