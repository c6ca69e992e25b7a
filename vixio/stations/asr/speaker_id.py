"""Who spoke an utterance: its embedding, made in a worker thread while ASR transcribes it, matched
against the device's voiceprints.

    identifier = SpeakerIdentifier(encoder, voiceprints=book.prints, threshold=0.85)
    pending = identifier.begin(pcm, 16000)        # at once: the thread starts on it
    text = await asr.transcribe(pcm, 16000)       # ASR in parallel
    state.speaker = await identifier.settle(pending, wait=0.3)

The ASR station begins identification where it begins transcribing (at a pause for the draft, at
the turn's end otherwise) and settles it after the transcript, so a turn waits for the
identification only when it takes longer than ASR: measured 0 ms at p90 with Whisper tiny.en on
2 cores (bench/bench_speaker.py; the embedding costs 7 ms of CPU per second of speech, ASR far
more). One thread per process embeds (`EMBED_THREADS`): the encoder is single-threaded and a
burst of turns queues there rather than taking the cores ASR needs; a turn whose identification
is still queued `wait` seconds after its transcript goes on as an unknown voice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from loguru import logger

from vixio.core.session_state import SpeakerMatch
from vixio.providers.speaker.encoder import SAMPLE_RATE, SpeakerEncoder

EMBED_THREADS = 1
MIN_SECONDS = 0.5
"""Shorter utterances ("yes") are not identified: too little voice to tell people apart."""

_pool: ThreadPoolExecutor | None = None


def _embed_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(EMBED_THREADS, thread_name_prefix="vixio-speaker")
    return _pool


@dataclass(slots=True)
class PendingIdentification:
    """An utterance being embedded, and the device's voiceprints being read, both under way."""

    embedding: asyncio.Future[np.ndarray]
    prints: asyncio.Future[Mapping[str, np.ndarray]]


def best_match(embedding: np.ndarray, prints: Mapping[str, np.ndarray], threshold: float) -> SpeakerMatch:
    """The closest voiceprint if at or above `threshold`, else an unknown voice."""
    best, score = "", 0.0
    for person, vector in prints.items():
        similarity = float(np.dot(embedding, vector))
        if similarity > score:
            best, score = person, similarity
    return SpeakerMatch(best if score >= threshold else "", round(score, 4), embedding)


class SpeakerIdentifier:
    """Identification for one session (cheap: the encoder is shared by the process)."""

    def __init__(
        self,
        encoder: SpeakerEncoder,
        *,
        voiceprints: Callable[[], Awaitable[Mapping[str, np.ndarray]]],
        threshold: float,
        wait: float = 0.3,
    ) -> None:
        self.encoder = encoder
        self.voiceprints = voiceprints
        """The device's voiceprints by person (read from the store once, then kept by the caller)."""
        self.threshold = threshold
        self.wait = wait

    def begin(self, pcm: bytes, rate: int) -> PendingIdentification | None:
        """Start embedding `pcm` (16-bit mono) in the worker thread; None when it cannot be identified."""
        if rate != SAMPLE_RATE or len(pcm) < MIN_SECONDS * rate * 2:
            return None
        samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2")
        loop = asyncio.get_running_loop()
        return PendingIdentification(
            loop.run_in_executor(_embed_pool(), self.encoder.embed, samples), asyncio.ensure_future(self.voiceprints())
        )

    async def settle(
        self, pending: PendingIdentification | None, previous: SpeakerMatch | None = None
    ) -> SpeakerMatch | None:
        """Who spoke, waiting at most `wait` seconds more. When it cannot be told (too short, too
        late), the `previous` turn's person carries over at similarity 0: a "yes" keeps the
        profile and memory of the conversation, but runs no `require_speaker` tool."""
        match = await self._settle(pending)
        if match is None and previous is not None and previous.person:
            return SpeakerMatch(previous.person, 0.0)
        return match

    async def _settle(self, pending: PendingIdentification | None) -> SpeakerMatch | None:
        if pending is None:
            return None
        try:
            async with asyncio.timeout(self.wait):
                embedding = await asyncio.shield(pending.embedding)
                prints = await asyncio.shield(pending.prints)
        except TimeoutError:
            logger.warning(
                "speaker identification not done {:.0f} ms after the transcript: an unknown voice "
                "this turn (the server is busy)",
                self.wait * 1000,
            )
            return None
        except Exception as exc:  # a broken model file or an unreadable store: the turn goes on
            logger.opt(exception=exc).error("speaker identification failed: {}", exc)
            return None
        return best_match(embedding, prints, self.threshold)
