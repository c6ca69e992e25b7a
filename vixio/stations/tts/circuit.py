"""TTSCircuit: which voice speaks the next sentence while a TTS fails, and when it may try again.

A failing API must cost the user at most one wait, not one per sentence: the first failure
(an error, noise, or no audio within `first_audio_timeout`) opens the circuit, and from then on
every sentence of every session sharing it goes straight to the offline `fallback` (or is only
shown, without one). After `retry_after` seconds the next sentence is also sent to the API in a
background probe whose audio is thrown away — the fallback still speaks that sentence, so
nobody waits for the probe — and the API's first audio in time closes the circuit again. Each
failed probe doubles the pause, up to `max_retry_after`. An outage is logged twice: when it
starts (with the cause) and when it ends (with how long it lasted).

One circuit per process and primary provider (the voice stack's), so the replies of the next
seconds in other sessions skip the wait as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable

from loguru import logger

from vixio.providers.tts.base import TTSError, TTSProvider


class TTSCircuit:
    """A primary TTS, its optional offline fallback and whether the primary is down."""

    def __init__(
        self,
        provider: TTSProvider,
        fallback: TTSProvider | None = None,
        *,
        first_audio_timeout: float | None = None,
        retry_after: float = 5.0,
        max_retry_after: float = 60.0,
        breaks: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self._clock = clock  # tests pass a virtual loop's time: outages of seconds in no time
        self.fallback = fallback
        self.breaks = breaks
        """A failure opens the circuit. False for an offline engine without a fallback: its failures
        are the text's, not an outage, so every sentence still goes to it (outages are still logged once)."""
        self.first_audio_timeout = first_audio_timeout
        """Seconds the primary may take to its first audio, and between two pieces of it, before it
        counts as failed (None: only its own errors count)."""
        self.retry_after = retry_after
        """Seconds after an outage starts before the first probe."""
        self.max_retry_after = max_retry_after
        self._down_since: float | None = None
        self._up_since = 0.0
        self._pause = retry_after
        self._retry_at = 0.0
        self._probe: asyncio.Task[None] | None = None
        self._fallback_sentences = 0
        self._fallback_down = False
        self.probes = 0
        """Probes started (for tests and metrics)."""

    @property
    def down(self) -> bool:
        """The primary failed and no probe has heard it since."""
        return self._down_since is not None

    def primary_for(self, text: str) -> bool:
        """True when the primary should speak `text`; when it is down, False, and `text` may be
        sent to it in a background probe (at most one at a time, after the pause)."""
        if self._down_since is None or not self.breaks:
            return True
        self._fallback_sentences += 1
        if self._probe is None and self._clock() >= self._retry_at:
            self.probes += 1
            self._probe = asyncio.create_task(self._run_probe(text), name="vixio-tts-probe")
        return False

    def attempt(self) -> float:
        """Mark the start of a request to the primary; pass the result to `failed`/`succeeded`."""
        return self._clock()

    def succeeded(self, started: float) -> None:
        """The primary spoke a sentence asked for at `started`."""
        if self._down_since is None or started < self._down_since:
            return  # a request older than the outage says nothing about now
        down_for = self._clock() - self._down_since
        shown = "spoken by " + self.fallback.name if self.fallback is not None else "shown only"
        logger.info(
            "TTS ({}) is speaking again after {:.0f} s down ({} sentences {})",
            self.provider.name,
            down_for,
            self._fallback_sentences,
            shown,
        )
        self._down_since = None
        self._up_since = self._clock()

    def failed(self, started: float, cause: str) -> None:
        """The primary failed on a sentence asked for at `started` (`cause` says how)."""
        now = self._clock()
        if self._down_since is not None:
            logger.debug("TTS ({}) still down: {}", self.provider.name, cause)
            return
        if started < self._up_since:
            logger.debug("TTS ({}) failed on a request from before it recovered: {}", self.provider.name, cause)
            return
        self._down_since = now
        self._pause = self.retry_after
        self._retry_at = now + self._pause
        self._fallback_sentences = 0
        if self.fallback is not None:
            logger.warning(
                "TTS is down: {}; the fallback ({}) speaks until it answers again (tried every {:g}-{:g} s)",
                cause,
                self.fallback.name,
                self.retry_after,
                self.max_retry_after,
            )
        else:
            logger.error("TTS is down: {}; replies are shown but not spoken until it answers again", cause)

    def fallback_failed(self, cause: str) -> None:
        """The fallback failed on a sentence too: one ERROR line until it speaks again."""
        if self._fallback_down:
            logger.debug("the fallback TTS still fails: {}", cause)
            return
        self._fallback_down = True
        logger.error(
            "the fallback TTS ({}) failed too, sentences are shown but not spoken: {}",
            self.fallback.name if self.fallback is not None else "",
            cause,
        )

    def fallback_spoke(self) -> None:
        self._fallback_down = False

    async def primary_audio(self, text: str) -> AsyncGenerator[bytes, None]:
        """The primary's audio for `text`, raising TTSError when a piece is later than
        `first_audio_timeout` (the primary's own failures are TTSErrors already)."""
        chunks = self.provider.synthesize(text)
        async with contextlib.aclosing(chunks):
            while True:
                limiter = asyncio.timeout(self.first_audio_timeout)
                try:
                    async with limiter:
                        pcm = await anext(chunks)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    if limiter.expired():
                        raise TTSError(
                            f"{self.provider.name}: no audio for {self.first_audio_timeout:g} s (tts.fallback_after)"
                        ) from None
                    raise
                yield pcm

    async def _run_probe(self, text: str) -> None:
        started = self.attempt()
        try:
            async with contextlib.aclosing(self.primary_audio(text)) as audio:
                async for _ in audio:
                    break  # its first audio in time is all a probe needs
                else:
                    raise TTSError(f"{self.provider.name}: no audio for {text!r}")
        except TTSError as exc:
            self._pause = min(self.max_retry_after, self._pause * 2)
            self._retry_at = self._clock() + self._pause
            logger.debug("TTS ({}) probe failed, next in {:g} s: {}", self.provider.name, self._pause, exc)
        except Exception as exc:  # noqa: BLE001 - a probe must never take the process down
            self._retry_at = self._clock() + self._pause
            logger.opt(exception=exc).warning("TTS ({}) probe raised {}", self.provider.name, type(exc).__name__)
        else:
            self.succeeded(started)
        finally:
            self._probe = None

    async def close(self) -> None:
        """Cancel a probe still running (the server is stopping)."""
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
