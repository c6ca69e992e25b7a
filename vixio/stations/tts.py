"""TTSStation: speaks each assistant sentence.

For every sentence: the sentence itself (the transport shows it as `tts sentence_start`), then
its audio as it is synthesised, resampled to `output_sample_rate` (24 kHz for Xiaozhi). An
ErrorChunk from upstream (ASR or agent failure) ends the turn with a short spoken apology, so a
failing provider never leaves the device waiting in silence.

When the TTS itself fails on a sentence before any of its audio went out, the `fallback` provider
(an offline engine) speaks that sentence instead. Without one the sentence is still shown
(`sentence_start`), and one ERROR line says TTS is down — once, until it speaks again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from vixio.core.audio import Resampler
from vixio.core.chunk import AudioChunk, Chunk, ErrorChunk, StreamCompleteChunk, TextChunk
from vixio.core.station import Station
from vixio.providers.tts.base import TTSError, TTSProvider


MAX_CHUNK_MS = 120
"""Longest AudioChunk the station yields (a sentence's audio is sliced)."""


class TTSStation(Station):
    handles = (TextChunk, StreamCompleteChunk, ErrorChunk)

    def __init__(
        self,
        provider: TTSProvider,
        *,
        output_sample_rate: int | None = 24000,
        apology: str = "Sorry, something went wrong. Please try again.",
        fallback: TTSProvider | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.provider = provider
        self.fallback = fallback
        """Speaks a sentence the provider failed on (None: the sentence is only shown)."""
        self.output_sample_rate = output_sample_rate
        self.apology = apology
        self._down = False
        """The provider failed and has not spoken since (its outage was logged once)."""
        self._primary_failed_this_reply = False
        """The rest of this reply goes straight to the fallback (a failing API may be slow to fail)."""

    async def start(self) -> None:
        await self.provider.initialize()
        if self.fallback is not None:
            await self.fallback.initialize()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, TextChunk):
            yield chunk
            if chunk.role == "assistant" and chunk.text.strip():
                async for audio in self._speak(chunk.text, chunk.turn_id):
                    yield audio
        elif isinstance(chunk, ErrorChunk):
            yield chunk
            self.logger.debug("turn failed in {}: {}; apologising", chunk.source, chunk.message)
            if self.apology:
                yield TextChunk(text=self.apology, role="assistant")
                async for audio in self._speak(self.apology, chunk.turn_id):
                    yield audio
            self._primary_failed_this_reply = False
            yield StreamCompleteChunk(source=self.name)
        else:
            self._primary_failed_this_reply = False  # the reply is complete: the next one tries the provider again
            yield chunk

    async def _speak(self, text: str, turn_id: int) -> AsyncIterator[AudioChunk]:
        spoken = False
        if not (self._primary_failed_this_reply and self.fallback is not None):
            try:
                async for audio in self._synthesize(self.provider, text, turn_id):
                    spoken = True
                    yield audio
            except TTSError as exc:
                # One unspeakable sentence must not end the reply: skip it (or let the fallback
                # speak it, when none of its audio went out yet) and keep going.
                self._primary_failed_this_reply = True
                if spoken or self.fallback is None:
                    self._report_down(str(exc), partly=spoken)
                    return
                self._report_down(str(exc), fallback=True)
            else:
                if self._down:
                    self._down = False
                    self.logger.info("TTS ({}) is speaking again", self.provider.name)
                return
        assert self.fallback is not None
        try:
            async for audio in self._synthesize(self.fallback, text, turn_id):
                yield audio
        except TTSError as exc:
            self._report_down(f"the fallback TTS ({self.fallback.name}) failed too: {exc}")

    def _report_down(self, reason: str, *, fallback: bool = False, partly: bool = False) -> None:
        """One log line per outage, not one per sentence."""
        if partly:
            self.logger.warning("a sentence was cut off: {}", reason)
        elif self._down:
            self.logger.debug("TTS still down: {}", reason)
        elif fallback:
            self._down = True
            self.logger.warning("TTS failed, the fallback ({}) speaks instead: {}", self.fallback.name if self.fallback else "", reason)
        else:
            self._down = True
            self.logger.error("TTS is down, replies are shown but not spoken: {}", reason)

    async def _synthesize(self, provider: TTSProvider, text: str, turn_id: int) -> AsyncIterator[AudioChunk]:
        rate = provider.sample_rate
        out_rate = self.output_sample_rate or rate
        resampler = Resampler(rate, out_rate) if out_rate != rate else None
        metrics = self.session_state.metrics(turn_id)
        step = 2 * (out_rate * MAX_CHUNK_MS // 1000)
        async for pcm in provider.synthesize(text):
            if resampler is not None:
                pcm = resampler.process(pcm)
            if pcm:
                metrics.mark("tts_first_audio")
            # Short chunks: the pipeline's queues hold chunks, so their length bounds how far
            # audio runs ahead of playback (an engine may return a whole sentence at once).
            for start in range(0, len(pcm), step):
                yield AudioChunk(pcm=pcm[start : start + step], sample_rate=out_rate, role="assistant")
        if resampler is not None:
            tail = resampler.process(b"", last=True)
            if tail:
                yield AudioChunk(pcm=tail, sample_rate=out_rate, role="assistant")
