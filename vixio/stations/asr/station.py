"""ASRStation: collects a turn's speech and transcribes it when the turn ends.

Input: TurnStartChunk, the turn's audio, TurnEndChunk. Output: the user's text (the transport
shows it as `stt`) followed by the TurnEndChunk. The audio is consumed here.

At a pause (VADPauseChunk) what was said so far is transcribed at once: the text goes on as a
DraftTextChunk (the agent starts on it, holding its reply), and what it says about the turn
(`EndpointRules`) goes back to the VAD: end the utterance now, or wait longer. When the turn
then ends without more speech, that transcript is the turn's text (nothing is transcribed
twice); speech after the pause (VADResumeChunk) voids it, and the next pause transcribes
everything said. Each pause transcribes the whole turn so far, so a turn gets at most
`max_drafts` (a long monologue with many pauses must not cost a local Whisper its square).

With a `speaker` identifier, the speaker of the same audio is identified in a worker thread
while it is transcribed (vixio/stations/asr/speaker_id.py); `session_state.speaker` is set before the
turn's text goes on.

Whatever the cut, the recogniser hears `speech_span` of it (vixio.core.utterance): the same speech
gives the same samples, so the same words, whether it was transcribed at a pause or at the end, and
wherever the VAD's window grid fell.

The pause's transcription and the end's share one deadline, the provider's `timeout` from the
start of the first of them since the user last spoke: when a hanging service made the pause's
fail, the end tries again only with what is left, so the apology is heard `asr.timeout` after
the speech ended, not twice that.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from vixio.core.chunk import (
    AudioChunk,
    Chunk,
    DraftTextChunk,
    EndpointChunk,
    InterruptChunk,
    MetricsChunk,
    TextChunk,
    TurnEndChunk,
    TurnStartChunk,
    VADPauseChunk,
    VADResumeChunk,
)
from vixio.core.station import Station
from vixio.core.utterance import speech_span
from vixio.metrics import count_provider_error
from vixio.providers.asr.base import ASRError, ASRProvider
from vixio.stations.asr.endpointing import EndpointRules
from vixio.stations.asr.speaker_id import PendingIdentification, SpeakerIdentifier


@dataclass(slots=True)
class _Draft:
    """The transcript of the latest pause, valid until the user speaks again."""

    text: str
    seconds: float
    """How long transcribing it took (saved when the turn ends on it)."""
    speaker: PendingIdentification | None = None
    """The identification of the same audio, begun with the transcription."""


class ASRStation(Station):
    handles = (TurnStartChunk, AudioChunk, TurnEndChunk, VADPauseChunk, VADResumeChunk, TextChunk)

    def __init__(
        self,
        provider: ASRProvider,
        *,
        language: str | None = None,
        max_seconds: float = 30.0,
        endpointing: EndpointRules | None = None,
        min_silence_ms: int = 500,
        max_drafts: int = 4,
        on_speech: Callable[[], None] | None = None,
        speaker: SpeakerIdentifier | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.provider = provider
        self.speaker = speaker
        """Identifies who spoke each turn, in parallel with its transcription (None: not identified)."""
        self.on_speech = on_speech
        """Called as a user turn starts (the user began speaking): e.g. `VoiceStack.prewarm`, so
        the cloud APIs' connections are open by the time the turn needs them. Must not block."""
        self.language = language
        self.max_seconds = max_seconds
        self.endpointing = endpointing or EndpointRules()
        self.min_silence_ms = min_silence_ms
        """The VAD's silence: a hanging transcript's wait is only sent when longer."""
        self._pcm: list[bytes] = []
        self._bytes = 0
        self._rate = 16000
        self._draft: _Draft | None = None
        self.max_drafts = max_drafts
        self._drafts = 0
        """Pauses transcribed in this turn."""
        self._failed_since: float | None = None
        """When the pause's transcription that failed started (none since the user last spoke: None)."""
        self._failure = ""

    async def start(self) -> None:
        await self.provider.initialize()

    async def on_interrupt(self) -> None:
        self._reset()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, TextChunk):
            if chunk.role == "user" and self.speaker is not None:
                self.session_state.speaker = None  # typed text: no voice, so nobody is recognised
            yield chunk
            return
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
            if self.on_speech is not None:
                self.on_speech()
            yield chunk
            return
        if isinstance(chunk, VADResumeChunk):
            self._draft = None  # the next pause transcribes everything said
            self._failed_since = None  # and the user spoke again: a new deadline
            yield chunk
            return
        if isinstance(chunk, VADPauseChunk):
            async for out in self._on_pause(chunk):
                yield out
            return
        assert isinstance(chunk, TurnEndChunk)
        pcm, rate, draft = b"".join(self._pcm), self._rate, self._draft
        failed_since, failure = self._failed_since, self._failure
        self._reset()
        metrics = self.session_state.metrics(chunk.turn_id)
        metrics.mark("speech_end", chunk.created_at)
        if pcm:
            started = time.monotonic()
            identification = draft.speaker if draft is not None else self._identify(pcm, rate)
            if draft is not None:  # only silence since the pause: its transcript is the turn's
                text = draft.text
                metrics.notes["asr_saved_ms"] = round(draft.seconds * 1000, 1)
            else:
                try:
                    text = await self._transcribe_by(speech_span(pcm, rate), rate, failed_since, failure)
                except ASRError as exc:
                    count_provider_error("asr", exc)
                    raise
            metrics.mark("asr_final")
            if self.speaker is not None:
                state = self.session_state
                match = state.speaker = await self.speaker.settle(identification, state.speaker)
                metrics.mark("speaker_id")
                if match is not None:
                    self.logger.info("speaker: {} (similarity {:.2f})", match.person or "unknown voice", match.score)
            # Before anything of this turn is yielded: is an earlier turn's reply still running?
            busy = self._busy(chunk.turn_id)
            seconds = len(pcm) / (2 * rate)
            if draft is not None:
                self.logger.info(
                    "heard {:.1f} s, as transcribed at the pause {:.0f} ms earlier: {!r}",
                    seconds,
                    (started - chunk.created_at) * 1000 + draft.seconds * 1000,
                    text,
                )
            else:
                self.logger.info(
                    "heard {:.1f} s in {:.0f} ms: {!r}", seconds, (time.monotonic() - started) * 1000, text
                )
            yield MetricsChunk(
                values={"asr_ms": (time.monotonic() - started) * 1000, "speech_seconds": seconds}, source=self.name
            )
            if text and busy:
                # A new spoken turn while the last one still runs (e.g. waits for a device tool
                # that never answers): cancel it, and this text starts the new turn.
                self.logger.info("new spoken turn while the last one is still running: cancelling it")
                yield InterruptChunk(reason="spoken_turn")
                yield TextChunk(text=text, role="user", turn_id=self.current_turn_id)
            elif text:
                yield TextChunk(text=text, role="user")
        yield chunk

    async def _on_pause(self, chunk: VADPauseChunk) -> AsyncIterator[Chunk]:
        """Transcribe what was said so far; the draft goes to the agent, the verdict to the VAD
        (the pause itself is consumed here)."""
        self._draft = None
        if not self._pcm or self._busy(chunk.turn_id) or self._drafts >= self.max_drafts:
            return  # an earlier turn still runs, or enough drafts: this one waits for its end
        self._drafts += 1
        metrics = self.session_state.metrics(chunk.turn_id)
        metrics.remark("speech_pause", chunk.created_at)  # the latest pause: the one the turn may end at
        started = time.monotonic()
        pcm = b"".join(self._pcm)
        identification = self._identify(pcm, self._rate)
        try:
            text = (
                await self.provider.transcribe(speech_span(pcm, self._rate), self._rate, language=self.language)
            ).strip()
        except Exception as exc:  # the turn's end transcribes again (and apologises if that fails)
            if isinstance(exc, ASRError):
                count_provider_error("asr", exc)
            self.logger.warning("transcribing at the pause failed: {}: {}", type(exc).__name__, exc)
            self._failed_since, self._failure = started, f"{type(exc).__name__}: {exc}"
            return
        self._draft = _Draft(text, time.monotonic() - started, identification)
        if not text:
            return
        metrics.remark("asr_draft")
        yield DraftTextChunk(text=text)
        verdict = self.endpointing.judge(text)
        if verdict is None:
            return
        kind, reason = verdict
        if kind == "complete":
            endpoint = EndpointChunk(action="end", silence_start=chunk.silence_start, reason=reason)
        elif self.endpointing.hanging_silence_ms > self.min_silence_ms:
            endpoint = EndpointChunk(
                action="extend",
                silence_start=chunk.silence_start,
                silence_ms=self.endpointing.hanging_silence_ms,
                reason=reason,
            )
        else:
            return
        metrics.notes["endpoint"] = f"{endpoint.action}: {reason}"
        self.logger.debug("pause transcript {!r}: {} ({})", text, endpoint.action, reason)
        # To the VAD, at the pipeline's input; never waiting (the VAD may be waiting on us).
        if self._pipeline is not None and not self._pipeline.push_nowait(endpoint):
            self.logger.debug("the VAD's inbox is full; the turn ends after the usual silence")

    async def _transcribe_by(self, pcm: bytes, rate: int, failed_since: float | None, failure: str) -> str:
        """The turn's transcript at its end; after a failed pause, within what is left of the
        deadline the pause's transcription started (ASRError when nothing is left or it passes)."""
        timeout = self.provider.timeout
        if failed_since is None or timeout is None:
            return (await self.provider.transcribe(pcm, rate, language=self.language)).strip()
        left = timeout - (time.monotonic() - failed_since)
        given_up = (
            f"{self.provider.name}: no transcript within {timeout:g} s of the pause (asr.timeout); "
            f"at the pause: {failure}"
        )
        if left <= 0:
            raise ASRError(given_up)
        try:
            async with asyncio.timeout(left):
                return (await self.provider.transcribe(pcm, rate, language=self.language)).strip()
        except TimeoutError:
            raise ASRError(given_up) from None

    def _identify(self, pcm: bytes, rate: int) -> PendingIdentification | None:
        # The voice, as the words, from `speech_span`: where the VAD's window grid cut the utterance
        # must not move its voiceprint (the same sentence scored 0.75 and 0.8+ by where it was cut).
        return self.speaker.begin(speech_span(pcm, rate), rate) if self.speaker is not None else None

    def _busy(self, turn_id: int) -> bool:
        return self._pipeline is not None and not self._pipeline.quiet_after(self, output=False, before_turn=turn_id)

    def _reset(self) -> None:
        self._pcm.clear()
        self._bytes = 0
        self._draft = None
        self._drafts = 0
        self._failed_since = None
        self._failure = ""
