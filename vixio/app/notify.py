"""`notify` for an idle device: the text spoken by the device's TTS into one Ogg/Opus file, served
at a short-lived unguessable URL on the HTTP (OTA) port, and the message that points to it.

    message = await notify.render("Reminder: take your medicine.")
    # {"type": "notify", "audio_url": "http://192.168.1.10:8003/notify/<token>.ogg",
    #  "subtitles": [{"start_ms": 0, "text": "Reminder: take your medicine."}]}

The file is mono Opus at 16 kHz in 60 ms packets, what the firmware's own sounds are and what
its demuxer assumes (vixio/core/ogg_opus.py). It is kept in the state store (`put_clip`), so any
process that serves the HTTP port answers the URL: the supervisor with `--workers N`, any
instance of a fleet behind one address. The token is 32 random bytes (`secrets.token_urlsafe`);
a file lives `reminders.notify.ttl_seconds`, at most `max_clips` are kept, and at most
`max_seconds` of audio is rendered per message. Synthesis streams from the TTS provider; the
Opus encoding runs on a worker thread, never on the loop: 7.2 ms of CPU per second of audio,
measured on a loaded AMD EPYC core (20 s clips, median of 5; the pure-Python page CRC is 0.3 ms of it).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from loguru import logger

from vixio.config.reminders import NotifyConfig
from vixio.core.audio import resample
from vixio.core.ogg_opus import ogg_opus
from vixio.providers.tts.base import TTSProvider
from vixio.state.store import Store

PATH = "/notify/{token}.ogg"
SAMPLE_RATE = 16000
FRAME_MS = 60
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
_SENTENCE = re.compile(r"[^.!?。！？；;]+[.!?。！？；;]*")


def sentences(text: str) -> list[str]:
    """`text` cut after each sentence's end mark (English and Chinese), blank pieces dropped."""
    return [piece.strip() for piece in _SENTENCE.findall(text) if piece.strip()]


def lan_address() -> str:
    """This machine's address on the network with the default route (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: picks the outgoing interface, sends nothing
        return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


def url_base(config: NotifyConfig, public_url: str | None, http_port: int, http_host: str = "") -> str:
    """Where devices fetch notify files (see `NotifyConfig.url_base`): the configured base, the
    public URL's host, the one address the HTTP port is bound to, else this machine's LAN address."""
    if config.url_base:
        return config.url_base.rstrip("/")
    if public_url:
        parts = urlsplit(public_url)
        return f"{'https' if parts.scheme in ('wss', 'https') else 'http'}://{parts.netloc}"
    if http_host not in ("", "0.0.0.0", "::"):  # bound to one address: the only one that answers
        host = f"[{http_host}]" if ":" in http_host else http_host
        return f"http://{host}:{http_port}"
    return f"http://{lan_address()}:{http_port}"


class NotifyAudio:
    """Renders notify files into the store and serves them (`handle` at `PATH`)."""

    def __init__(
        self, store: Store, config: NotifyConfig, tts: Callable[[], TTSProvider | None], base: Callable[[], str]
    ) -> None:
        self.store = store
        self.config = config
        self.tts = tts
        """The TTS of the moment (the voice stack's, loaded in `start()`)."""
        self.base = base

    async def render(self, text: str) -> dict[str, Any] | None:
        """The notify message for `text`, its file stored; None without a TTS or any audio."""
        tts = self.tts()
        if tts is None:
            return None
        pcm, subtitles = bytearray(), []
        limit = int(self.config.max_seconds * SAMPLE_RATE) * 2
        for sentence in sentences(text) or [text.strip()]:
            if len(pcm) >= limit:
                break
            subtitles.append({"start_ms": len(pcm) * 1000 // (2 * SAMPLE_RATE), "text": sentence})
            spoken = bytearray()
            async for chunk in tts.synthesize(sentence):
                spoken += chunk
            pcm += (await asyncio.to_thread(resample, bytes(spoken), tts.sample_rate, SAMPLE_RATE))[: limit - len(pcm)]
        if not pcm:
            return None
        data = await asyncio.to_thread(encode_ogg_opus, bytes(pcm))
        token = secrets.token_urlsafe(32)
        await self.store.put_clip(token, data, time.time() + self.config.ttl_seconds, self.config.max_clips)
        logger.bind(component="vixio.notify").info(
            "notify file of {:.1f} s ({} bytes) for {:g} s", len(pcm) / 32000, len(data), self.config.ttl_seconds
        )
        return {"type": "notify", "audio_url": f"{self.base()}/notify/{token}.ogg", "subtitles": subtitles}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """`GET /notify/<token>.ogg`: the file, or 404 once it expired (or never was)."""
        token = request.match_info.get("token", "")
        data = await self.store.clip(token) if _TOKEN.fullmatch(token) else None
        if data is None:
            return web.Response(status=404, text="no such notify file (they expire)\n")
        return web.Response(body=data, content_type="audio/ogg", headers={"Cache-Control": "no-store"})


def encode_ogg_opus(pcm: bytes) -> bytes:
    """16 kHz mono int16 PCM as an Ogg/Opus file of 60 ms packets (a worker thread's job)."""
    from vixio.transports.xiaozhi.protocol.codec import OpusEncoder

    encoder = OpusEncoder(SAMPLE_RATE, 1, FRAME_MS)
    size = encoder.frame_bytes
    packets = [encoder.encode(pcm[start : start + size]) for start in range(0, len(pcm), size)]
    return ogg_opus(packets, SAMPLE_RATE, FRAME_MS)
