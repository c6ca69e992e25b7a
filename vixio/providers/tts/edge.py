"""Edge TTS: Microsoft Edge's online read-aloud voices through the `edge-tts` package.

Free, no key, natural voices in many languages (zh-CN-XiaoxiaoNeural, zh-CN-YunxiNeural...).
The service answers one WebSocket request per sentence with MP3 in small binary messages;
each message is decoded as it arrives (`Mp3StreamDecoder`), so the downlink starts with the
first ~100 ms of audio instead of after the whole sentence. Needs `vixio[edge]` (edge-tts, av)
and the internet; the service is not reachable offline (tests use a local server speaking
its protocol, `vixio.testing.edge_server`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from types import ModuleType

from loguru import logger

from vixio.core.failure import describe_failure
from vixio.providers.tts.base import TTSError, TTSProvider
from vixio.providers.tts.mp3 import Mp3StreamDecoder

_EXTRA_HINT = "vixio[edge] extra: pip install -e '.[edge]' in the vixio checkout"
EDGE_SAMPLE_RATE = 24000
"""edge-tts asks the service for audio-24khz-48kbitrate-mono-mp3."""


def _edge_tts() -> ModuleType:
    try:
        import edge_tts
        import edge_tts.communicate
    except ImportError as exc:
        raise ImportError(f"EdgeTTS needs edge-tts ({exc}); {_EXTRA_HINT}") from exc
    module: ModuleType = edge_tts
    return module


def use_service_url(url: str) -> None:
    """Point edge-tts at another endpoint (a relay, or a local test server). Process-wide:
    edge-tts builds its request URL from a module constant."""
    if not url.startswith(("ws://", "wss://")):
        raise ValueError(f"EdgeTTS service_url must be a ws:// or wss:// URL, got {url!r}")
    edge_tts = _edge_tts()
    # edge-tts appends "&ConnectionId=..." to the URL: it must already carry a query.
    edge_tts.communicate.WSS_URL = url if "?" in url else url + "?"


class EdgeTTS(TTSProvider):
    """Speaks with an Edge read-aloud voice; one WebSocket request per `synthesize` call."""

    name = "edge"
    sample_rate = EDGE_SAMPLE_RATE

    def __init__(
        self,
        voice: str = "zh-CN-XiaoxiaoNeural",
        *,
        rate: str = "+0%",
        pitch: str = "+0Hz",
        volume: str = "+0%",
        timeout: float = 15.0,
        service_url: str | None = None,
    ) -> None:
        """`rate` and `volume` are signed percentages ("+10%"), `pitch` signed hertz ("-5Hz").

        `timeout` bounds connecting and every wait between two messages, in seconds (whole
        seconds, as edge-tts takes them; at least 1). `service_url` replaces the service's
        address for the whole process (see `use_service_url`).
        """
        if timeout <= 0:
            raise ValueError(f"EdgeTTS timeout must be positive, got {timeout}")
        self.voice = voice
        self.rate = rate
        self.pitch = pitch
        self.volume = volume
        self.timeout = max(1, round(timeout))
        self.service_url = service_url
        self._checked = False

    async def initialize(self) -> None:
        """Import edge-tts and PyAV and check the voice settings (no network); idempotent."""
        if self._checked:
            return
        edge_tts = _edge_tts()
        Mp3StreamDecoder(self.sample_rate)  # a missing PyAV fails the load, not every sentence
        try:
            edge_tts.Communicate("-", self.voice, rate=self.rate, pitch=self.pitch, volume=self.volume)
        except ValueError as exc:
            raise ValueError(f"EdgeTTS: {exc}") from exc
        if self.service_url:
            use_service_url(self.service_url)
        self._checked = True

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        """Yield PCM for `text` as the service's MP3 arrives."""
        text = text.strip()
        if not text:
            return
        await self.initialize()
        edge_tts = _edge_tts()
        import aiohttp

        communicate = edge_tts.Communicate(
            text,
            self.voice,
            rate=self.rate,
            pitch=self.pitch,
            volume=self.volume,
            connect_timeout=self.timeout,
            receive_timeout=self.timeout,
        )
        decoder = Mp3StreamDecoder(self.sample_rate)
        started = time.perf_counter()
        first: float | None = None
        total = 0
        stream = communicate.stream()
        try:
            async for message in stream:
                if message["type"] != "audio":
                    continue
                pcm = decoder.feed(message["data"])
                if pcm:
                    if first is None:
                        first = time.perf_counter() - started
                    total += len(pcm)
                    yield pcm
            tail = decoder.flush()
            if tail:
                total += len(tail)
                yield tail
        except (edge_tts.exceptions.EdgeTTSException, aiohttp.ClientError, ValueError) as exc:
            url = self.service_url or edge_tts.communicate.WSS_URL
            cause = describe_failure(url, exc=exc, status=getattr(exc, "status", None))
            raise TTSError(f"edge: voice {self.voice!r} failed for {text[:60]!r}: {cause}") from exc
        except TimeoutError as exc:
            raise TTSError(f"edge: the service stalled for more than {self.timeout} s") from exc
        finally:
            await stream.aclose()
        logger.debug(
            "edge: {:.2f} s of audio, first after {:.0f} ms", total / 2 / self.sample_rate, (first or 0.0) * 1000
        )
