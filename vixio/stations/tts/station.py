"""TTSStation: speaks each assistant sentence.

For every sentence: the sentence itself (the transport shows it as `tts sentence_start`), then
its audio as it is synthesised, resampled to `output_sample_rate` (24 kHz for Xiaozhi). An
ErrorChunk from upstream (ASR or agent failure) ends the turn with a short spoken apology, so a
failing provider never leaves the device waiting in silence.

Which voice speaks is the `TTSCircuit`'s call: when the TTS fails on a sentence before any of
its audio went out (or sends none within the circuit's `first_audio_timeout`), the offline
`fallback` speaks that sentence instead, and the following ones too until a background probe
hears the TTS again. Without a fallback the sentences are still shown (`sentence_start`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator

from vixio.config.extras import missing_extra
from vixio.core.audio import Resampler
from vixio.core.chunk import AudioChunk, Chunk, ErrorChunk, StreamCompleteChunk, TextChunk
from vixio.core.station import Station
from vixio.metrics import count_provider_error
from vixio.providers.tts.base import TTSError, TTSProvider
from vixio.stations.tts.circuit import TTSCircuit

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
        circuit: TTSCircuit | None = None,
        name: str | None = None,
    ) -> None:
        """`circuit` is shared by the sessions of a process (the voice stack's); without one the
        station makes its own from `provider` and `fallback`, which opens only with a fallback."""
        super().__init__(name)
        self.circuit = circuit or TTSCircuit(provider, fallback, breaks=fallback is not None)
        self.provider = self.circuit.provider
        self.fallback = self.circuit.fallback
        """Speaks a sentence the provider failed on (None: the sentence is only shown)."""
        self.output_sample_rate = output_sample_rate
        self.apology = apology

    async def start(self) -> None:
        await self.provider.initialize()
        if self.fallback is not None:
            await self.fallback.initialize()
        # Resampling needs soxr (the `xiaozhi` extra): missing, it is an error now, not a reply
        # that is silently never heard.
        for provider in (self.provider, self.fallback):
            if provider is not None and self.output_sample_rate not in (None, provider.sample_rate):
                try:
                    Resampler(provider.sample_rate, self.output_sample_rate)
                except ImportError as exc:
                    raise missing_extra(exc) from None

    async def on_interrupt(self) -> None:
        self.session_state.audio_until = 0.0  # what was not played yet was dropped

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
            yield StreamCompleteChunk(source=self.name)
        else:
            yield chunk

    async def _speak(self, text: str, turn_id: int) -> AsyncIterator[AudioChunk]:
        circuit = self.circuit
        if circuit.primary_for(text):
            started, spoken = circuit.attempt(), False
            try:
                async for audio in self._synthesize(self.provider, circuit.primary_audio(text), turn_id):
                    spoken = True
                    yield audio
            except TTSError as exc:
                count_provider_error("tts", exc)
                # One unspeakable sentence must not end the reply: skip it (or let the fallback
                # speak it, when none of its audio went out yet) and keep going.
                circuit.failed(started, f"{exc} (a sentence was cut off)" if spoken else str(exc))
                if spoken:
                    return
            else:
                circuit.succeeded(started)
                return
        if self.fallback is None:
            return
        try:
            async for audio in self._synthesize(self.fallback, self.fallback.synthesize(text), turn_id):
                yield audio
        except TTSError as exc:
            count_provider_error("tts", exc)
            circuit.fallback_failed(str(exc))
        else:
            circuit.fallback_spoke()

    async def _synthesize(
        self, provider: TTSProvider, chunks: AsyncGenerator[bytes, None], turn_id: int
    ) -> AsyncIterator[AudioChunk]:
        rate = provider.sample_rate
        out_rate = self.output_sample_rate or rate
        resampler = Resampler(rate, out_rate) if out_rate != rate else None
        state = self.session_state
        metrics = state.metrics(turn_id)
        step = 2 * (out_rate * MAX_CHUNK_MS // 1000)
        async with contextlib.aclosing(chunks):
            async for pcm in chunks:
                if resampler is not None:
                    pcm = resampler.process(pcm)
                if pcm:
                    metrics.mark("tts_first_audio")
                    # Until when the device has something to play, were it played from now on (the
                    # agent bounds the silence of a reply with it).
                    state.audio_until = max(state.audio_until, time.monotonic()) + len(pcm) / 2 / out_rate
                # Short chunks: the pipeline's queues hold chunks, so their length bounds how far
                # audio runs ahead of playback (an engine may return a whole sentence at once).
                for start in range(0, len(pcm), step):
                    yield AudioChunk(pcm=pcm[start : start + step], sample_rate=out_rate, role="assistant")
        if resampler is not None:
            tail = resampler.process(b"", last=True)
            if tail:
                yield AudioChunk(pcm=tail, sample_rate=out_rate, role="assistant")
