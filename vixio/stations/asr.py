"""ASRStation: collects a turn's speech and transcribes it when the turn ends.

Input: TurnStartChunk, the turn's audio, TurnEndChunk. Output: the user's text (the transport
shows it as `stt`) followed by the TurnEndChunk. The audio is consumed here.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from vixio.core.chunk import AudioChunk, Chunk, InterruptChunk, MetricsChunk, TextChunk, TurnEndChunk, TurnStartChunk
from vixio.core.station import Station
from vixio.metrics import count_provider_error
from vixio.providers.asr.base import ASRError, ASRProvider


class ASRStation(Station):
    handles = (TurnStartChunk, AudioChunk, TurnEndChunk)

    def __init__(self, provider: ASRProvider, *, language: str | None = None, max_seconds: float = 30.0,
                 name: str | None = None) -> None:
        super().__init__(name)
        self.provider = provider
        self.language = language
        self.max_seconds = max_seconds
        self._pcm: list[bytes] = []
        self._bytes = 0
        self._rate = 16000

    async def start(self) -> None:
        await self.provider.initialize()

    async def on_interrupt(self) -> None:
        self._reset()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, AudioChunk):
            if chunk.role != "user":
                yield chunk
            elif self._bytes < self.max_seconds * chunk.sample_rate * 2:
                # Past max_seconds the rest is dropped: a stuck VAD must not grow memory.
                self._pcm.append(chunk.pcm)
                self._bytes += len(chunk.pcm)
                self._rate = chunk.sample_rate
            return
        if isinstance(chunk, TurnStartChunk):
            self._reset()
            yield chunk
            return
        assert isinstance(chunk, TurnEndChunk)
        pcm, rate = b"".join(self._pcm), self._rate
        self._reset()
        metrics = self.session_state.metrics(chunk.turn_id)
        metrics.mark("speech_end", chunk.created_at)
        if pcm:
            started = time.monotonic()
            try:
                text = (await self.provider.transcribe(pcm, rate, language=self.language)).strip()
            except ASRError as exc:
                count_provider_error("asr", exc)
                raise
            # Before anything of this turn is yielded: is an earlier turn's reply still running?
            busy = self._pipeline is not None and not self._pipeline.quiet_after(
                self, output=False, before_turn=chunk.turn_id)
            metrics.mark("asr_final")
            seconds = len(pcm) / (2 * rate)
            self.logger.info("heard {:.1f} s in {:.0f} ms: {!r}", seconds, (time.monotonic() - started) * 1000, text)
            yield MetricsChunk(values={"asr_ms": (time.monotonic() - started) * 1000, "speech_seconds": seconds},
                               source=self.name)
            if text and busy:
                # A new spoken turn while the last one still runs (e.g. waits for a device tool
                # that never answers): cancel it, and this text starts the new turn.
                self.logger.info("new spoken turn while the last one is still running: cancelling it")
                yield InterruptChunk(reason="spoken_turn")
                yield TextChunk(text=text, role="user", turn_id=self.current_turn_id)
            elif text:
                yield TextChunk(text=text, role="user")
        yield chunk

    def _reset(self) -> None:
        self._pcm.clear()
        self._bytes = 0
