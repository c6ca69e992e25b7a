"""eSpeak NG through ctypes: robotic but instant, and it speaks about a hundred languages.

The library and its data come from the pip package `espeakng-loader` (libespeak-ng 1.52),
so nothing is needed from the system; `cmn` speaks Mandarin from Chinese characters.
libespeak-ng keeps one global state (voice, parameters, callback) and is not thread-safe:
it is initialised once per process and every call into it holds one process-wide lock.
Text is synthesised sentence by sentence, releasing the lock in between, so a long reply
streams and other sessions get their turn.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from collections.abc import AsyncGenerator, Iterator
from types import ModuleType
from typing import Any

from loguru import logger

from vixio.config.extras import install_hint
from vixio.providers.tts._runtime import (
    load_shared,
    split_sentences,
    stream_blocking,
    tts_executor,
)
from vixio.providers.tts.base import TTSError, TTSProvider

_EXTRA_HINT = install_hint("espeak")
ESPEAK_SAMPLE_RATE = 22050
"""What libespeak-ng produces; `espeak_Initialize` confirms it."""

# Values from espeak-ng's speak_lib.h.
_AUDIO_OUTPUT_SYNCHRONOUS = 2  # espeak_Synth returns when done, audio goes to the callback
_INITIALIZE_DONT_EXIT = 0x8000  # report missing data instead of calling exit()
_CALLBACK_MS = 100  # audio per callback; only the join of a sentence leaves this module
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000  # a short pause after each sentence, as between spoken sentences
_EE_OK = 0
_PARAM_RATE = 1
_PARAM_PITCH = 3
_ABORT, _CONTINUE = 1, 0

_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


class _Engine:
    """The process's one libespeak-ng; every method must be called with `lock` held."""

    lock = threading.Lock()

    def __init__(self, library: ctypes.CDLL, sample_rate: int) -> None:
        self._lib = library
        self.sample_rate = sample_rate
        self._voice: str | None = None
        self._sink: list[bytes] | None = None
        self._cancel: threading.Event | None = None
        # ctypes must keep the callback object alive as long as the library may call it.
        self._callback = _SynthCallback(self._on_audio)
        library.espeak_SetSynthCallback(self._callback)

    def _on_audio(self, wav: Any, samples: int, _events: int | None) -> int:
        if self._cancel is not None and self._cancel.is_set():
            return _ABORT
        if wav and samples > 0 and self._sink is not None:
            self._sink.append(ctypes.string_at(wav, samples * 2))
        return _CONTINUE

    def set_voice(self, voice: str) -> None:
        if voice != self._voice:
            status = self._lib.espeak_SetVoiceByName(voice.encode())
            if status != _EE_OK:
                self._voice = None
                raise TTSError(f"espeak: no voice {voice!r} in espeak-ng-data (status {status}); try 'en-us' or 'cmn'")
            self._voice = voice

    def speak(self, voice: str, rate_wpm: int, pitch: int, text: str, cancel: threading.Event) -> bytes:
        self.set_voice(voice)
        self._lib.espeak_SetParameter(_PARAM_RATE, rate_wpm, 0)
        self._lib.espeak_SetParameter(_PARAM_PITCH, pitch, 0)
        data = text.encode("utf-8") + b"\0"
        sink: list[bytes] = []
        self._sink, self._cancel = sink, cancel
        try:
            status = self._lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE, None, None)
        finally:
            self._sink, self._cancel = None, None
        if status != _EE_OK and not cancel.is_set():
            raise TTSError(f"espeak: espeak_Synth failed with status {status} for {text[:60]!r}")
        return b"".join(sink)


def _espeakng_loader() -> ModuleType:
    try:
        import espeakng_loader
    except ImportError as exc:
        raise ImportError(f"EspeakTTS needs espeakng-loader ({exc}); {_EXTRA_HINT}") from exc
    module: ModuleType = espeakng_loader
    return module


def _load_engine() -> _Engine:
    loader = _espeakng_loader()
    library_path, data_path = loader.get_library_path(), loader.get_data_path()
    try:
        library = ctypes.CDLL(library_path)
    except OSError as exc:
        raise TTSError(f"espeak: cannot load {library_path}: {exc}") from exc
    library.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    library.espeak_Initialize.restype = ctypes.c_int
    library.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    library.espeak_SetSynthCallback.restype = None
    library.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    library.espeak_SetVoiceByName.restype = ctypes.c_int
    library.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    library.espeak_SetParameter.restype = ctypes.c_int
    library.espeak_Synth.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
        ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
    ]  # fmt: skip
    library.espeak_Synth.restype = ctypes.c_int
    with _Engine.lock:
        rate = library.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, _CALLBACK_MS, data_path.encode(), _INITIALIZE_DONT_EXIT
        )
        if rate <= 0:
            raise TTSError(f"espeak: espeak_Initialize failed ({rate}) with data at {data_path}")
        engine = _Engine(library, rate)
    logger.info("espeak-ng loaded from {} ({} Hz)", library_path, rate)
    return engine


class EspeakTTS(TTSProvider):
    """Speaks with eSpeak NG; one library per process, shared by every instance."""

    name = "espeak"

    def __init__(self, voice: str = "en-us", rate_wpm: int = 175, pitch: int = 50) -> None:
        """`voice` is an espeak-ng voice name ("en-us", "cmn", "de", "fr", ...).

        `rate_wpm` is the speaking rate in words per minute (80-450, espeak's default 175);
        `pitch` is the base pitch (0-100, default 50).
        """
        if not 80 <= rate_wpm <= 450:
            raise ValueError(f"EspeakTTS rate_wpm must be within 80-450 words per minute, got {rate_wpm}")
        if not 0 <= pitch <= 100:
            raise ValueError(f"EspeakTTS pitch must be within 0-100, got {pitch}")
        if not voice.strip():
            raise ValueError("EspeakTTS voice must be a voice name such as 'en-us' or 'cmn', got ''")
        self.voice = voice
        self.rate_wpm = rate_wpm
        self.pitch = pitch
        self.sample_rate = ESPEAK_SAMPLE_RATE
        self._engine: _Engine | None = None

    async def initialize(self) -> None:
        """Load libespeak-ng once per process and check that the voice exists; idempotent."""
        if self._engine is not None:
            return
        engine = await load_shared(("espeak-ng",), _load_engine)
        # Loading a voice reads its dictionary and may wait for another session's sentence.
        await asyncio.get_running_loop().run_in_executor(tts_executor(), self._check_voice, engine)
        self.sample_rate = engine.sample_rate
        self._engine = engine

    def _check_voice(self, engine: _Engine) -> None:
        with _Engine.lock:
            engine.set_voice(self.voice)

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        """Yield one chunk of PCM per sentence of `text`."""
        sentences = split_sentences(text)
        if not sentences:
            return
        await self.initialize()
        cancel = threading.Event()
        started = time.perf_counter()
        total = 0
        async for pcm in stream_blocking(self._speak_sentences(sentences, cancel), cancel):
            total += len(pcm)
            yield pcm
        logger.debug(
            "espeak {}: {:.2f} s of audio in {:.0f} ms", self.voice, total / 2 / self.sample_rate,
            (time.perf_counter() - started) * 1000,
        )  # fmt: skip

    def _speak_sentences(self, sentences: list[str], cancel: threading.Event) -> Iterator[bytes]:
        engine = self._engine
        assert engine is not None
        for sentence in sentences:
            # The lock is taken per sentence so other sessions interleave on a long reply.
            with _Engine.lock:
                pcm = engine.speak(self.voice, self.rate_wpm, self.pitch, sentence, cancel)
            if cancel.is_set():
                return
            if pcm:
                yield pcm

    async def close(self) -> None:
        """Forget the engine; libespeak-ng stays loaded for the other instances."""
        self._engine = None
