"""TTSStation: speaks each assistant sentence.

For every sentence: the sentence itself (the transport shows it as `tts sentence_start`), then
its audio as it is synthesised, resampled to `output_sample_rate` (24 kHz for Xiaozhi). An
ErrorChunk from upstream (ASR or agent failure) ends the turn with a short spoken apology, so a
failing provider never leaves the device waiting in silence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from vixio.core.audio import Resampler
from vixio.core.chunk import AudioChunk, Chunk, ErrorChunk, StreamCompleteChunk, TextChunk
from vixio.core.station import Station
from vixio.providers.tts.base import TTSError, TTSProvider


class TTSStation(Station):
    handles = (TextChunk, StreamCompleteChunk, ErrorChunk)

    def __init__(
        self,
        provider: TTSProvider,
        *,
        output_sample_rate: int | None = 24000,
        apology: str = "Sorry, something went wrong. Please try again.",
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.provider = provider
        self.output_sample_rate = output_sample_rate
        self.apology = apology

    async def start(self) -> None:
        await self.provider.initialize()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, TextChunk):
            yield chunk
            if chunk.role == "assistant" and chunk.text.strip():
                async for audio in self._speak(chunk.text, chunk.turn_id):
                    yield audio
        elif isinstance(chunk, ErrorChunk):
            yield chunk
            self.logger.warning("turn failed in {}: {}; apologising", chunk.source, chunk.message)
            if self.apology:
                yield TextChunk(text=self.apology, role="assistant")
                async for audio in self._speak(self.apology, chunk.turn_id):
                    yield audio
            yield StreamCompleteChunk(source=self.name)
        else:
            yield chunk

    async def _speak(self, text: str, turn_id: int) -> AsyncIterator[AudioChunk]:
        rate = self.provider.sample_rate
        out_rate = self.output_sample_rate or rate
        resampler = Resampler(rate, out_rate) if out_rate != rate else None
        metrics = self.session_state.metrics(turn_id)
        try:
            async for pcm in self.provider.synthesize(text):
                if resampler is not None:
                    pcm = resampler.process(pcm)
                if pcm:
                    metrics.mark("tts_first_audio")
                    yield AudioChunk(pcm=pcm, sample_rate=out_rate, role="assistant")
            if resampler is not None:
                tail = resampler.process(b"", last=True)
                if tail:
                    yield AudioChunk(pcm=tail, sample_rate=out_rate, role="assistant")
        except TTSError as exc:
            # One unspeakable sentence must not end the reply: skip it, keep going.
            self.logger.warning("could not speak {!r}: {}", text[:60], exc)
