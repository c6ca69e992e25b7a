"""TTS over the OpenAI `POST /audio/speech` API, for any server that speaks it.

Works with OpenAI (`https://api.openai.com/v1`, model "tts-1" or "gpt-4o-mini-tts", which
answer `response_format="pcm"` with int16 mono at 24 kHz) and self-hosted servers (speaches,
openedai-speech, Kokoro-FastAPI, LocalAI). The response body is streamed: audio is yielded
as it arrives, not after the whole reply. Needs aiohttp, which comes with `vixio[xiaozhi]`.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from types import ModuleType
from typing import Any, Literal

import numpy as np
from loguru import logger

from vixio.config.extras import install_hint
from vixio.core.failure import describe_failure
from vixio.patches import aiohttp as http_eager
from vixio.providers.prewarm import Warmth, head
from vixio.providers.tts.base import TTSError, TTSProvider

_EXTRA_HINT = install_hint("")  # aiohttp is a core dependency
_BODY_EXCERPT = 300  # characters of an error body worth putting in a message
_READ_SIZE = 23040
"""Most bytes per read from the response body (a read returns whatever has arrived, so a
streaming server's first audio waits for no more): 480 ms of 24 kHz or 720 ms of 16 kHz audio,
a whole number of the TTS station's 120 ms chunks, so a body that arrives at once (a fast or
local server) becomes as few pipeline chunks as the station allows (13 per 1.5 s instead of 18)."""
_WAVE_FORMAT_PCM = 1
_WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# Streaming servers cannot know the length up front and write 0 or ~4 GiB as the data size.
_STREAMING_SIZE_LIMIT = 0x7FFF0000
_MAX_HEADER = 64 * 1024  # a WAV header beyond this is not a header: the body is not WAV


def _aiohttp() -> ModuleType:
    try:
        import aiohttp
    except ImportError as exc:
        raise ImportError(f"OpenAICompatibleTTS needs aiohttp ({exc}); {_EXTRA_HINT}") from exc
    return aiohttp


class _PcmReframer:
    """Turns arbitrary byte slices of int16 PCM into whole mono samples, downmixing if needed."""

    def __init__(self, channels: int) -> None:
        self.channels = channels
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        data = self._carry + data
        frame = 2 * self.channels
        whole = len(data) - len(data) % frame
        self._carry = data[whole:]
        if self.channels == 1:
            return data[:whole]
        samples = np.frombuffer(data[:whole], dtype="<i2").reshape(-1, self.channels)
        mono: bytes = samples.mean(axis=1).astype("<i2").tobytes()  # numpy's mean reaches mypy as Any
        return mono


class _WavStreamParser:
    """Reads a RIFF/WAVE header off the front of a stream, then passes its PCM through."""

    def __init__(self, name: str, expected_rate: int) -> None:
        self._name = name
        self._expected_rate = expected_rate
        self._header = b""
        self._pcm: _PcmReframer | None = None
        self._remaining: int | None = None  # bytes of data left, None when unknown

    def feed(self, data: bytes) -> bytes:
        if self._pcm is None:
            self._header += data
            data = self._parse_header()
            if self._pcm is None:
                return b""
        if self._remaining is not None:
            data = data[: self._remaining]
            self._remaining -= len(data)
        return self._pcm.feed(data)

    def _parse_header(self) -> bytes:
        buf = self._header
        if len(buf) < 12:
            return b""
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise TTSError(f"{self._name}: response_format 'wav' but the body starts with {buf[:12]!r}")
        pos, fmt = 12, None
        while len(buf) >= pos + 8:
            chunk_id, size = buf[pos : pos + 4], struct.unpack_from("<I", buf, pos + 4)[0]
            body = pos + 8
            if chunk_id == b"data":
                if fmt is None:
                    raise TTSError(f"{self._name}: WAV data chunk before its fmt chunk")
                self._pcm = _PcmReframer(fmt)
                self._remaining = size if 0 < size < _STREAMING_SIZE_LIMIT else None
                self._header = b""
                return buf[body:]
            if len(buf) < body + size:
                break
            if chunk_id == b"fmt ":
                fmt = self._check_format(buf[body : body + size])
            pos = body + size + (size & 1)  # RIFF chunks are padded to even sizes
        if len(buf) > _MAX_HEADER:
            raise TTSError(f"{self._name}: no WAV data chunk in the first {_MAX_HEADER} bytes")
        return b""

    def _check_format(self, fmt: bytes) -> int:
        if len(fmt) < 16:
            raise TTSError(f"{self._name}: WAV fmt chunk is {len(fmt)} bytes, expected at least 16")
        tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", fmt)
        if tag not in (_WAVE_FORMAT_PCM, _WAVE_FORMAT_EXTENSIBLE) or bits != 16 or channels < 1:
            raise TTSError(
                f"{self._name}: WAV is format {tag}, {bits}-bit, {channels} channel(s); expected 16-bit integer PCM"
            )
        if rate != self._expected_rate:
            raise TTSError(
                f"{self._name}: WAV is {rate} Hz but sample_rate is {self._expected_rate}; set sample_rate={rate}"
            )
        return int(channels)


# Magic numbers long enough never to be the first samples of real PCM.
_CONTAINERS = {b"RIFF": "WAV", b"ID3": "MP3", b"OggS": "Ogg", b"fLaC": "FLAC", b"<!DOCTYPE": "HTML", b"<html": "HTML"}
_PROBE_BYTES = 960  # the first 20 ms at 24 kHz decide whether the body is audio at all (480 samples)


def check_pcm_start(name: str, pcm: bytes) -> None:
    """Raise TTSError when the start of a "raw PCM" body is evidently not speech.

    Catches a body in another format (a container or an error page) and random bytes, which
    as int16 are full-scale white noise: loud (RMS above ~1/3 of full scale) *and* crossing
    zero at almost every other sample. Speech is never both.
    """
    for magic, kind in _CONTAINERS.items():
        if pcm.startswith(magic):
            raise TTSError(f"{name}: expected raw int16 PCM but the body looks like {kind}: {pcm[:24]!r}")
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2").astype(np.float64)
    if samples.size < 64:
        return
    rms = float(np.sqrt(np.mean(samples**2)))
    crossings = float(np.mean(np.signbit(samples[1:]) != np.signbit(samples[:-1])))
    if rms > 10000 and crossings > 0.35:
        raise TTSError(
            f"{name}: the audio is noise, not speech (RMS {rms:.0f}, zero-crossing rate "
            f"{crossings:.2f}); the server sent garbage or a format other than int16 PCM"
        )


class _PcmProbe:
    """Holds back the first `_PROBE_BYTES` of PCM until `check_pcm_start` has judged them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._held: bytes | None = b""

    def feed(self, pcm: bytes, *, last: bool = False) -> bytes:
        if self._held is None:
            return pcm
        self._held += pcm
        if len(self._held) < _PROBE_BYTES and not last:
            return b""
        held, self._held = self._held, None
        # The probe's bytes judge (a body that arrives whole is 100+ KB: judging all of it cost
        # ~0.3 ms of loop time a reply for no better verdict).
        check_pcm_start(self._name, held[:_PROBE_BYTES])
        return held


class OpenAICompatibleTTS(TTSProvider):
    """Speaks through a remote `/audio/speech` endpoint; one connection pool per provider."""

    name = "openai-compatible"

    def __init__(
        self,
        api_base: str,
        api_key: str | None = None,
        model: str = "tts-1",
        voice: str = "alloy",
        response_format: Literal["pcm", "wav"] = "pcm",
        sample_rate: int = 24000,
        timeout: float = 15.0,
        extra_body: Mapping[str, Any] | None = None,
        missing_key: str | None = None,
    ) -> None:
        """`api_base` ends before `/audio/speech`, e.g. "https://api.openai.com/v1".

        With `response_format="pcm"` the body must be int16 mono at `sample_rate` (OpenAI: 24000).
        With "wav" the header is checked against `sample_rate` and stereo is downmixed.
        `timeout` bounds connecting, waiting for the response and every stall between two
        body reads, in seconds; a long reply that keeps streaming is never cut.
        `extra_body` adds request fields some servers need (SiliconFlow: `sample_rate`, `stream`).
        `missing_key` names the key that is not set ("tts.api_key is empty"), for failure messages.
        """
        if not api_base.startswith(("http://", "https://")):
            raise ValueError(f"OpenAICompatibleTTS api_base must be an http(s) URL, got {api_base!r}")
        if response_format not in ("pcm", "wav"):
            raise ValueError(f"OpenAICompatibleTTS response_format must be 'pcm' or 'wav', got {response_format!r}")
        if sample_rate <= 0:
            raise ValueError(f"OpenAICompatibleTTS sample_rate must be positive, got {sample_rate}")
        if timeout <= 0:
            raise ValueError(f"OpenAICompatibleTTS timeout must be positive, got {timeout}")
        self.url = api_base.rstrip("/") + "/audio/speech"
        self.model = model
        self.voice = voice
        self.response_format = response_format
        self.sample_rate = sample_rate
        self.timeout = timeout
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        self._missing_key = missing_key
        self._session: Any | None = None
        self._lock = asyncio.Lock()
        self.warmth = Warmth(self.url)

    async def initialize(self) -> None:
        """Open the HTTP connection pool; idempotent."""
        async with self._lock:
            if self._session is None or self._session.closed:
                aiohttp = _aiohttp()
                http_eager.install()  # the request body leaves without waiting a loop iteration
                headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
                timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout)
                self._session = aiohttp.ClientSession(headers=headers, timeout=timeout)

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        """POST the text and yield the audio as the body arrives."""
        text = text.strip()
        if not text:
            return
        if self._session is None or self._session.closed:
            await self.initialize()
        assert self._session is not None
        aiohttp = _aiohttp()
        payload = {
            **self.extra_body,
            "model": self.model,
            "input": text,
            "voice": self.voice,
            "response_format": self.response_format,
        }
        decoder: _WavStreamParser | _PcmReframer = (
            _WavStreamParser(self.name, self.sample_rate) if self.response_format == "wav" else _PcmReframer(1)
        )
        started = time.perf_counter()
        first_audio: float | None = None
        total = 0
        try:
            async with self._session.post(self.url, json=payload) as response:
                if response.status >= 400:
                    excerpt = (await response.content.read(_BODY_EXCERPT * 4)).decode("utf-8", "replace")
                    cause = describe_failure(
                        self.url,
                        status=response.status,
                        detail=repr(excerpt[:_BODY_EXCERPT]),
                        missing_key=self._missing_key,
                    )
                    raise TTSError(
                        f"{self.name}: POST {self.url} (model {self.model!r}, voice {self.voice!r}) returned {cause}"
                    )
                content_type = response.content_type
                if content_type.startswith(("text/", "application/json")):
                    excerpt = (await response.content.read(_BODY_EXCERPT * 4)).decode("utf-8", "replace")
                    raise TTSError(
                        f"{self.name}: POST {self.url} returned {content_type}, not audio: {excerpt[:_BODY_EXCERPT]!r}"
                    )
                probe = _PcmProbe(self.name)
                async for data in _with_end(response.content.iter_chunked(_READ_SIZE)):
                    pcm = probe.feed(decoder.feed(data), last=not data)
                    if pcm:
                        if first_audio is None:
                            first_audio = time.perf_counter() - started
                        total += len(pcm)
                        yield pcm
        except TimeoutError as exc:
            raise TTSError(f"{self.name}: POST {self.url} stalled for more than {self.timeout:g} s") from exc
        except aiohttp.ClientError as exc:
            cause = describe_failure(self.url, exc=exc, missing_key=self._missing_key)
            raise TTSError(f"{self.name}: POST {self.url} failed: {cause}") from exc
        finally:
            self.warmth.used()
        if first_audio is None:
            raise TTSError(f"{self.name}: POST {self.url} returned no audio for {len(text)} characters")
        logger.debug(
            "{}: {:.2f} s of audio, first after {:.0f} ms",
            self.name,
            total / 2 / self.sample_rate,
            first_audio * 1000,
        )

    async def warm(self) -> None:
        """A HEAD to the speech URL when the pool went cold (see providers/prewarm.py)."""
        if self.warmth.cold:
            if self._session is None or self._session.closed:
                await self.initialize()
            await self.warmth.warm(lambda: head(self._session, self.url))

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


async def _with_end(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`chunks`, then one empty chunk marking the end."""
    async for chunk in chunks:
        yield chunk
    yield b""
