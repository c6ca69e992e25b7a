"""Whether a configured TTS voice exists, checked without loading anything (`vixio config check`).

Piper: the `.onnx` file and its `.onnx.json` are on disk. espeak-ng: the name (and `+variant`) is
in the installed espeak-ng-data (read as a folder listing; the library is not loaded). Edge: the
name has the service's shape (`en-US-AriaNeural`); the list itself is online, so a well-shaped
name that does not exist is only found when it is spoken. OpenAI-compatible APIs take any name.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path

from vixio.config.models import VixioConfig
from vixio.config.pipeline import EdgeTTSConfig, EspeakTTSConfig, PiperTTSConfig

_EDGE_VOICE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})+-[A-Za-z]+(Multilingual)?Neural")


def voice_problems(config: VixioConfig) -> list[str]:
    """One line per voice of `config.tts` (and its fallback) that cannot be spoken."""
    problems = []
    tts = config.tts
    for key, section in (("tts", tts), ("tts.fallback", getattr(tts, "fallback", None))):
        problem = _voice_problem(section)
        if problem:
            problems.append(f"{key}.voice {getattr(section, 'voice', None)!r}: {problem}")
    return problems


def _voice_problem(section: object) -> str:
    if isinstance(section, PiperTTSConfig) and section.voice is not None:
        model = Path(section.voice)
        if not model.is_file():
            return "no such Piper voice file (a .onnx path; null uses the bundled English voice)"
        if not Path(f"{model}.json").is_file():
            return f"the voice's config {model.name}.json is missing next to it"
    if isinstance(section, EspeakTTSConfig):
        voices = espeak_voices()
        name, _, variant = section.voice.lower().partition("+")
        if voices is not None and (name not in voices[0] or (variant and variant not in voices[1])):
            return "not an espeak-ng voice (e.g. en-us, en-gb, cmn, de, fr; a variant as en-us+f3)"
    if isinstance(section, EdgeTTSConfig) and not _EDGE_VOICE.fullmatch(section.voice):
        return "not an Edge voice name (e.g. en-US-AriaNeural, zh-CN-XiaoxiaoNeural; `edge-tts --list-voices`)"
    return ""


@cache
def espeak_voices() -> tuple[frozenset[str], frozenset[str]] | None:
    """(voice names, variants) of the installed espeak-ng-data, lowercase; None when not installed."""
    try:
        spec = importlib.util.find_spec("espeakng_loader")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    data = Path(spec.origin).parent / "espeak-ng-data"
    if not data.is_dir():
        return None
    names = {
        path.name.lower()
        for folder in ("lang", "voices")
        for path in (data / folder).rglob("*")
        if path.is_file() and "!v" not in path.parts
    }
    variants = {path.name.lower() for path in (data / "voices" / "!v").glob("*") if path.is_file()}
    return frozenset(names), frozenset(variants)
