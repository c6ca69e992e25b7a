"""Every config.yaml example in the tool and MQTT docs is valid config, and `tools.local` examples load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vixio.config.loader import parse_config
from vixio.config.models import VixioConfig

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["docs/tools.md", "docs/tool-protocols.md", "docs/mqtt.md"]
_BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)


def yaml_examples() -> list[tuple[str, str]]:
    examples = []
    for doc in DOCS:
        for index, block in enumerate(_BLOCK.findall((ROOT / doc).read_text(encoding="utf-8"))):
            examples.append((f"{doc}#{index}", block))
    return examples


@pytest.mark.parametrize(("where", "block"), yaml_examples(), ids=[w for w, _ in yaml_examples()])
def test_doc_yaml_example_is_valid_config(where: str, block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    data = yaml.safe_load(block)
    assert isinstance(data, dict), where
    top = set(VixioConfig.model_fields)
    assert set(data) <= top, f"{where}: unknown top-level keys {set(data) - top}"
    environ = {name: "x" * 32 for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", block)}
    config = parse_config(data, source=where, environ=environ)
    if config.tools.local:  # the entries must import from the repository root
        from vixio.voice.stack import VoiceStack

        monkeypatch.chdir(ROOT)
        voice = VoiceStack(config.model_copy(update={"agent": None}))
        assert {entry.function.rpartition(":")[2] for entry in config.tools.local_entries()} <= {
            tool.name for tool in voice.local_tools
        }


def test_the_docs_have_examples() -> None:
    assert len(yaml_examples()) >= 4
