"""ASR over the OpenAI `POST /audio/transcriptions` API, for any server that speaks it.

Works with OpenAI (`https://api.openai.com/v1`, model "whisper-1" or "gpt-4o-transcribe"),
Groq (`https://api.groq.com/openai/v1`, "whisper-large-v3-turbo"), SiliconFlow
(`https://api.siliconflow.cn/v1`, "FunAudioLLM/SenseVoiceSmall") and self-hosted servers
(faster-whisper-server, speaches, vLLM, LocalAI).

The utterance is uploaded as a 16-bit mono WAV built in memory at its own sample rate; every
one of those servers resamples. Needs aiohttp, which comes with `vixio[xiaozhi]`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import struct
import time
from types import ModuleType
from typing import Any

from loguru import logger

from vixio.config.extras import install_hint
from vixio.core.failure import describe_failure
from vixio.patches import aiohttp as http_eager
from vixio.providers.asr.base import ASRError, ASRProvider, check_pcm
from vixio.providers.prewarm import Warmth, head

_EXTRA_HINT = install_hint("")  # aiohttp is a core dependency
_BODY_EXCERPT = 300  # characters of an error body worth putting in a log line


def _aiohttp() -> ModuleType:
    try:
        import aiohttp
    except ImportError as exc:
        raise ImportError(f"OpenAICompatibleASR needs aiohttp ({exc}); {_EXTRA_HINT}") from exc
    return aiohttp


def wav_header(pcm_bytes: int, sample_rate: int) -> bytes:
    """The 44-byte RIFF header of an int16 mono WAV holding `pcm_bytes` of samples."""
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + pcm_bytes,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        sample_rate,
        sample_rate * 2,
        2,
        16,
        b"data",
        pcm_bytes,
    )


def pcm_to_wav(pcm: bytes, sample_rate: int) -> bytes:
    """Wrap int16 mono PCM in a WAV (RIFF) container, in memory."""
    return wav_header(len(pcm), sample_rate) + pcm


def upload_form(pcm: bytes, sample_rate: int, fields: dict[str, str]) -> tuple[bytes, str]:
    """The multipart/form-data body (the utterance as `file`, a WAV, then `fields`) and its
    Content-Type. Built in one piece: aiohttp's FormData writes each part separately, a dozen
    socket writes per utterance where this is one."""
    boundary = secrets.token_hex(16)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="utterance.wav"\r\n'
        f"Content-Type: audio/wav\r\n\r\n"
    ).encode()
    tail = (
        "".join(
            f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}'
            for name, value in fields.items()
        )
        + f"\r\n--{boundary}--\r\n"
    )
    body = b"".join((head, wav_header(len(pcm), sample_rate), pcm, tail.encode()))
    return body, f"multipart/form-data; boundary={boundary}"


class OpenAICompatibleASR(ASRProvider):
    """Transcribes each utterance with one HTTP request; one connection pool per provider."""

    name = "openai-compatible"

    def __init__(
        self,
        api_base: str,
        api_key: str | None = None,
        model: str = "whisper-1",
        language: str | None = None,
        timeout: float = 15.0,
        missing_key: str | None = None,
    ) -> None:
        """`api_base` ends before `/audio/transcriptions`, e.g. "https://api.openai.com/v1".

        `api_key` goes in `Authorization: Bearer`; None for servers that need none.
        `timeout` bounds the whole request (upload, processing, response), in seconds.
        `missing_key` names the key that is not set ("asr.api_key is empty"), for failure messages.
        """
        if not api_base.startswith(("http://", "https://")):
            raise ValueError(f"OpenAICompatibleASR api_base must be an http(s) URL, got {api_base!r}")
        if timeout <= 0:
            raise ValueError(f"OpenAICompatibleASR timeout must be positive, got {timeout}")
        self.url = api_base.rstrip("/") + "/audio/transcriptions"
        self.model = model
        self.language = language
        self.timeout = timeout
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
                self._session = aiohttp.ClientSession(
                    headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
                )

    async def transcribe(self, pcm: bytes, sample_rate: int, *, language: str | None = None) -> str:
        """Upload the utterance and return the `text` of the JSON response."""
        check_pcm(self.name, pcm, sample_rate)
        if not pcm:
            return ""
        if self._session is None or self._session.closed:
            await self.initialize()
        assert self._session is not None
        aiohttp = _aiohttp()
        fields = {"model": self.model, "response_format": "json"}
        language = language or self.language
        if language:
            fields["language"] = language
        upload, content_type = upload_form(pcm, sample_rate, fields)
        started = time.perf_counter()
        seconds = len(pcm) / 2 / sample_rate
        try:
            async with self._session.post(self.url, data=upload, headers={"Content-Type": content_type}) as response:
                # Bytes, decoded leniently: a proxy's binary error page must still make a message.
                body = (await response.read()).decode("utf-8", "replace")
                if response.status >= 400:
                    cause = describe_failure(
                        self.url,
                        status=response.status,
                        detail=repr(body[:_BODY_EXCERPT]),
                        missing_key=self._missing_key,
                    )
                    raise ASRError(f"{self.name}: POST {self.url} (model {self.model!r}) returned {cause}")
                try:
                    payload = json.loads(body)
                except ValueError as exc:
                    raise ASRError(
                        f"{self.name}: POST {self.url} (model {self.model!r}) returned HTTP {response.status} "
                        f"with a body that is not JSON ({response.content_type}): {body[:_BODY_EXCERPT]!r}"
                    ) from exc
        except TimeoutError as exc:
            raise ASRError(
                f"{self.name}: POST {self.url} timed out after {self.timeout:g} s ({seconds:.1f} s of audio)"
            ) from exc
        except aiohttp.ClientError as exc:
            cause = describe_failure(self.url, exc=exc, missing_key=self._missing_key)
            raise ASRError(f"{self.name}: POST {self.url} failed: {cause}") from exc
        finally:
            self.warmth.used()
        text = payload.get("text") if isinstance(payload, dict) else None
        if not isinstance(text, str):
            raise ASRError(
                f"{self.name}: response from {self.url} has no string 'text': {str(payload)[:_BODY_EXCERPT]!r}"
            )
        logger.debug(
            "{}: {:.2f} s of audio transcribed in {:.0f} ms",
            self.name,
            seconds,
            (time.perf_counter() - started) * 1000,
        )
        return text.strip()

    async def warm(self) -> None:
        """A HEAD to the transcription URL when the pool went cold (see providers/prewarm.py)."""
        if self.warmth.cold:
            if self._session is None or self._session.closed:
                await self.initialize()
            await self.warmth.warm(lambda: head(self._session, self.url))

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
