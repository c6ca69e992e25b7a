"""VADStation: finds speech in the microphone stream and passes on only the speech.

Output per utterance: VADStartChunk, the speech audio (with a short pre-roll so soft onsets
survive), VADEndChunk; with `early_silence_ms`, a VADPauseChunk where the user went quiet for
that long (and a VADResumeChunk if they go on). An EndpointChunk pushed at the pipeline's input
ends the utterance at its pause now, or makes its end wait longer. Silence is consumed here, so later stations never see it. When speech
starts while the assistant is speaking (realtime mode), it first raises an interrupt: barge-in;
with an `InterruptionArbiter` it pauses the reply instead and holds the speech until the arbiter
decides (stations/interruption.py): then the interrupt and the held speech, or the reply resumes.
With a `transcribe` callable (the voice stack hands it the session's ASR provider, which runs off
the loop), held speech is transcribed as it grows, every `partial_ms` of it, one transcription at
a time, and the arbiter judges its words (a command interrupts before `confirm_ms`, the reply's
echo or a backchannel resumes): each transcript is applied with the first frame after it is in.
With `quiet_below_dbfs`, quiet audio while nobody speaks is silence without a scoring round trip
(`QuietGate`; `vixio_vad_quiet_windows_total` counts it).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import numpy as np

from vixio.core.chunk import (
    AudioChunk,
    Chunk,
    EndpointChunk,
    InterruptChunk,
    VADEndChunk,
    VADPauseChunk,
    VADResumeChunk,
    VADStartChunk,
)
from vixio.core.station import Station
from vixio.metrics import INTERRUPTIONS, VAD_QUIET_WINDOWS
from vixio.providers.vad.base import VADProvider
from vixio.providers.vad.detector import VADEvent, VoiceActivityDetector
from vixio.stations.interruption import InterruptionArbiter
from vixio.stations.vad_frames import QueuedFrames, merge_frames

GAP_SECONDS = 0.3
"""While a paused reply waits on the verdict of held speech that has ended, a microphone silent
this long (wall time; five times as long while the speech goes on) is taken as that much silence
(`_fill_gap`): the verdict then comes without the device's frames."""


class VADStation(Station):
    """Silero (or any VADProvider) per session: the model is shared, the stream state is not."""

    handles = (AudioChunk, EndpointChunk)
    merges = True

    def __init__(
        self,
        provider: VADProvider,
        *,
        threshold: float = 0.5,
        min_speech_ms: int = 250,
        min_silence_ms: int = 500,
        speech_pad_ms: int = 100,
        early_silence_ms: int = 0,
        barge_in: bool = True,
        arbiter: InterruptionArbiter | None = None,
        quiet_below_dbfs: float | None = None,
        transcribe: Callable[[bytes, int], Awaitable[str]] | None = None,
        partial_ms: int = 240,
        gap_seconds: float | None = GAP_SECONDS,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.provider = provider
        self.barge_in = barge_in
        self.arbiter = arbiter
        """None: speech over the reply interrupts at once; else it pauses the reply until the
        arbiter's verdict (a barge-in, or a false interruption: the reply resumes)."""
        if arbiter is not None and arbiter.words is not None and transcribe is None:
            raise ValueError(f"{self.name}: an arbiter that judges words needs `transcribe` (the session's ASR)")
        self.transcribe = transcribe
        """Speech to text for held speech (16-bit PCM, sample rate); None: judged by length."""
        self.partial_ms = partial_ms
        self.gap_seconds = gap_seconds
        """None: never fill a silent microphone (a test that holds the audio's clock itself)."""
        self._held: list[np.ndarray] | None = None
        self._confirmed = False
        self._ignoring = False  # the rest of a VAD segment after its echo resumed the reply
        self._in_speech = False  # the VAD's segment goes on after the frame being routed
        self._asr: asyncio.Task[str] | None = None
        self._asr_final = False  # the transcription in flight covers the held speech to its end
        self._asr_upto = 0  # held samples already sent to be transcribed
        self._gap: asyncio.TimerHandle | None = None  # fills a silent microphone while a verdict waits
        self._settings: dict[str, Any] = dict(
            threshold=threshold,
            min_speech_ms=min_speech_ms,
            min_silence_ms=min_silence_ms,
            speech_pad_ms=speech_pad_ms,
            early_silence_ms=early_silence_ms,
            quiet_below_dbfs=quiet_below_dbfs,
        )
        # Audio kept while silent: enough to reach back to a padded start event.
        self._keep_samples = provider.sample_rate * (min_speech_ms + speech_pad_ms + 200) // 1000
        self._detector: VoiceActivityDetector | None = None
        self._recent: deque[tuple[int, np.ndarray]] = deque()
        self._position = 0

    async def start(self) -> None:
        self._detector = VoiceActivityDetector(self.provider.create_stream(), **self._settings)

    async def stop(self) -> None:
        self._forget_transcript()
        if self._gap is not None:
            self._gap.cancel()
        if self._detector is not None:
            self._detector.stream.close()  # gives a pooled model instance back
            self._detector = None

    async def on_interrupt(self) -> None:
        # Another station cancelled the turn; the user's speech state is not the assistant's
        # to cancel, so the detector keeps listening (a barge-in must not lose its onset).
        pass

    def merge(self, chunk: Chunk, following: Chunk) -> Chunk | None:
        """Microphone frames queued behind `chunk` join it (up to `MAX_MERGED_SECONDS`). A station
        awaiting one scoring round trip per 60 ms frame falls behind real time for good once a
        round trip takes longer (a loaded server) and the device's end of speech is heard late;
        merged, a backlog is scored in one round trip, and each frame is then handled as before."""
        return merge_frames(chunk, following)

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, EndpointChunk):
            for out in self._endpoint(chunk):
                yield out
            return
        assert isinstance(chunk, AudioChunk)
        if chunk.role != "user":
            yield chunk
            return
        if chunk.sample_rate != self.provider.sample_rate or chunk.channels != 1:
            raise ValueError(
                f"{self.name} needs mono {self.provider.sample_rate} Hz audio, got "
                f"{chunk.channels} channel(s) at {chunk.sample_rate} Hz"
            )
        assert self._detector is not None, "start() was not called"
        if isinstance(chunk, QueuedFrames):
            parts, arrivals = chunk.parts, chunk.arrivals
        else:
            parts, arrivals = [chunk.pcm], [chunk.created_at]
        speaking = self._detector.speaking
        gate = self._detector.gate
        skipped = gate.skipped if gate is not None else 0
        # Scored off the loop, batched with every other session's audio (where the backend can),
        # unless it is quiet audio while nobody speaks (`quiet_below_dbfs`).
        found = await self._detector.feed_parts_async(parts)
        if gate is not None and gate.skipped != skipped:
            VAD_QUIET_WINDOWS.inc(gate.skipped - skipped)
        for pcm, arrived, events in zip(parts, arrivals, found):
            for event in events:
                if event.type in ("start", "end"):
                    speaking = event.type == "start"
            for out in self._route(np.frombuffer(pcm, dtype="<i2"), events, speaking, chunk, arrived):
                yield out
        for out in self._listen(chunk):
            yield out
        self._watch_gap()

    def _watch_gap(self) -> None:
        """Verdicts run on the microphone's clock, frame by frame: a device that stops sending
        (its stream paused, the network stalled) would leave a paused reply waiting for good.
        While one waits, `gap_seconds` without a frame count as that much silence."""
        if self._gap is not None:
            self._gap.cancel()
            self._gap = None
        if self._held is not None and self._pipeline is not None and self.arbiter is not None and self.gap_seconds:
            wait = self.gap_seconds * (1 if self.arbiter.ended else 5)  # mid-speech: a stall, not an end
            self._gap = asyncio.get_running_loop().call_later(wait, self._fill_gap, self.gap_seconds)

    def _fill_gap(self, gap: float) -> None:
        self._gap = None
        if self._held is None or self._pipeline is None:
            return
        silence = bytes(2 * int(self.provider.sample_rate * gap))
        if self._pipeline.push_nowait(AudioChunk(pcm=silence, sample_rate=self.provider.sample_rate)):
            self.logger.debug("no microphone audio for {:g} s while a paused reply waits: taken as silence", gap)
        else:  # the input is full, so frames are coming: they decide
            self._watch_gap()

    async def transcribed(self) -> None:
        """Wait for the transcription of held speech in flight (tests and the benchmark: its
        result is applied with the next frame, as in service)."""
        if self._asr is not None:
            await asyncio.wait([self._asr])

    def _route(
        self, samples: np.ndarray, events: list[VADEvent], speaking: bool, like: AudioChunk, arrived: float
    ) -> Iterator[Chunk]:
        """What one frame (`samples`, the VAD events it completed, whether speech goes on after
        it) sends downstream: speech and the events around it. A generator, so that `bot_speaking`
        and the turn are read as each event is handled (after an interrupt raised by an earlier one).
        A pause or an end is stamped with the frame's arrival (`arrived`), not the moment it is
        sent on: the latency marks then include the frame's wait for the VAD and its scoring.
        Speech over a reply that the arbiter paused is held here until its verdict (`_held`)."""
        begin = self._position
        self._position += samples.shape[0]
        self._in_speech = speaking
        now = self._position / self.provider.sample_rate
        cursor = begin  # samples before `cursor` of this frame were already handled
        for event in events:
            if event.type == "start":
                pieces = self._since(event.sample, samples, begin)
                self._recent.clear()
                cursor = self._position
                self._ignoring = False
                if self._held is not None and self.arbiter is not None and self.arbiter.paused:
                    self.arbiter.speech_continued()  # more speech while its words were judged
                    self._held += pieces
                    self._asr_final = False  # a final transcript in flight is now a partial one
                    continue
                if self.barge_in and self.session_state.bot_speaking:
                    if self.arbiter is not None and self._pause(now, event.sample):
                        self._held = pieces
                        continue
                    self._count("real")
                    yield InterruptChunk(reason="barge_in")  # starts the new turn
                else:
                    self.begin_turn()
                yield VADStartChunk(turn_id=self.current_turn_id)
                for pcm in pieces:
                    yield self._audio(pcm, like)
            elif event.type == "end":
                if self._ignoring:
                    self._ignoring = False
                    cursor = max(cursor, event.sample)
                    continue
                if cursor < event.sample:
                    yield from self._speech(samples[cursor - begin : event.sample - begin], like)
                cursor = max(cursor, event.sample)
                if self._held is not None:
                    assert self.arbiter is not None
                    yield from self._verdict(
                        self.arbiter.speech_ended(now, event.sample / self.provider.sample_rate), like
                    )
                    if self._held is None and self._confirmed:
                        yield VADEndChunk(turn_id=self.current_turn_id, created_at=arrived)
                    continue
                yield VADEndChunk(turn_id=self.current_turn_id, created_at=arrived)
            elif self._held is None:  # pause or resume: after the audio that decided it
                upto = min(max(event.detected_at, cursor), self._position)
                if cursor < upto:
                    yield self._audio(samples[cursor - begin : upto - begin], like)
                    cursor = upto
                yield (
                    VADPauseChunk(silence_start=event.sample, turn_id=self.current_turn_id, created_at=arrived)
                    if event.type == "pause"
                    else VADResumeChunk(turn_id=self.current_turn_id)
                )
        if speaking:
            if cursor < self._position:
                yield from self._speech(samples[cursor - begin :], like)
        else:
            self._remember(begin, samples)
        if self._held is not None and self.arbiter is not None:
            if not self.session_state.bot_speaking:  # the reply ended meanwhile: an ordinary turn
                yield from self._release_as_turn(like, interrupt=False)
            else:
                assert self._detector is not None
                voiced = speaking and self._detector.silence_start is None
                ended = self.arbiter.ended
                yield from self._verdict(self.arbiter.tick(now, voiced), like)
                if self._held is None and self._confirmed and ended:  # decided after the speech's end
                    yield VADEndChunk(turn_id=self.current_turn_id, created_at=arrived)

    def _pause(self, now: float, onset: int) -> bool:
        """Speech over the reply: pause it (True) if the arbiter says so."""
        assert self.arbiter is not None
        if self.arbiter.speech_started(now, onset / self.provider.sample_rate, True) != "pause":
            return False
        self._confirmed = False
        if self.session_state.reply_control is not None:
            self.session_state.reply_control("pause")
        return True

    def _verdict(self, action: str | None, like: AudioChunk) -> Iterator[Chunk]:
        if action == "interrupt":
            self._count("real")
            yield from self._release_as_turn(like, interrupt=True)
        elif action == "resume":
            self._count("false")
            self._held = None
            self._forget_transcript()
            # resumed while the speech goes on (its words were the reply's echo): the rest of it is not a turn
            self._ignoring = self._in_speech
            if self.session_state.reply_control is not None:
                self.session_state.reply_control("resume")

    def _release_as_turn(self, like: AudioChunk, *, interrupt: bool) -> Iterator[Chunk]:
        """The held speech becomes the user's turn (after cancelling the reply, on a barge-in)."""
        held, self._held = self._held or [], None
        self._forget_transcript()
        self._confirmed = True
        if interrupt:
            yield InterruptChunk(reason="barge_in")
        else:
            self.begin_turn()
        yield VADStartChunk(turn_id=self.current_turn_id)
        if held:
            yield self._audio(np.concatenate(held), like)

    def _speech(self, pcm: np.ndarray, like: AudioChunk) -> Iterator[Chunk]:
        """Speech audio: held while its verdict is pending (bounded: the verdict comes by
        `confirm_ms` of speech, with words by `max_hold_ms`), sent on otherwise."""
        if self._held is not None:
            self._held.append(pcm)
        elif self._ignoring:
            return
        else:
            yield self._audio(pcm, like)

    def _listen(self, like: AudioChunk) -> Iterator[Chunk]:
        """Held speech's words: apply a transcript that came in, ask for the next one."""
        arbiter = self.arbiter
        if self._held is None or arbiter is None or not arbiter.listening or self.transcribe is None:
            return
        task = self._asr
        if task is not None and task.done():
            self._asr = None
            text: str | None = None
            if not task.cancelled() and task.exception() is None:
                text = task.result()
            elif not task.cancelled():
                self.logger.warning("held speech not transcribed, judged by its length: {!r}", task.exception())
            ended = arbiter.ended
            playing = " ".join(self.session_state.heard[-2:])
            yield from self._verdict(arbiter.heard(text, playing, final=self._asr_final), like)
            if self._held is None:
                if self._confirmed and ended:
                    yield VADEndChunk(turn_id=self.current_turn_id)
                return
        if self._asr is None:
            size = sum(p.shape[0] for p in self._held)
            if arbiter.ended or size - self._asr_upto >= self.provider.sample_rate * self.partial_ms // 1000:
                self._asr_upto, self._asr_final = size, arbiter.ended
                pcm = np.concatenate(self._held).astype("<i2", copy=False).tobytes()
                self._asr = asyncio.ensure_future(self.transcribe(pcm, self.provider.sample_rate))

    def _forget_transcript(self) -> None:
        if self._asr is not None:
            self._asr.cancel()  # a thread already transcribing finishes; its text is not wanted
            self._asr = None
        self._asr_upto, self._asr_final = 0, False

    def _count(self, verdict: str) -> None:
        self.session_state.interruptions[verdict] = self.session_state.interruptions.get(verdict, 0) + 1
        INTERRUPTIONS.labels(verdict).inc()

    def _endpoint(self, chunk: EndpointChunk) -> Iterator[Chunk]:
        """The transcript's verdict on a pause; ignored when the user spoke again since."""
        assert self._detector is not None, "start() was not called"
        if chunk.action == "end":
            if self._detector.end_now(chunk.silence_start) is not None:
                self.logger.debug("utterance ended early at its pause: {}", chunk.reason)
                yield VADEndChunk(turn_id=self.current_turn_id)
        elif self._detector.extend_silence(chunk.silence_start, chunk.silence_ms):
            self.logger.debug("utterance end waits for {} ms of silence: {}", chunk.silence_ms, chunk.reason)

    def _since(self, start: int, samples: np.ndarray, begin: int) -> list[np.ndarray]:
        """Audio from sample `start` up to the end of the current chunk."""
        pieces = [(offset, pcm) for offset, pcm in self._recent] + [(begin, samples)]
        out = []
        for offset, pcm in pieces:
            end = offset + pcm.shape[0]
            if end > start:
                out.append(pcm[max(0, start - offset) :])
        return out

    def _remember(self, begin: int, samples: np.ndarray) -> None:
        self._recent.append((begin, samples))
        while self._recent and self._position - self._recent[0][0] - self._recent[0][1].shape[0] > self._keep_samples:
            self._recent.popleft()

    def _audio(self, pcm: np.ndarray, like: AudioChunk) -> AudioChunk:
        return AudioChunk(
            pcm=pcm.astype("<i2", copy=False).tobytes(), sample_rate=like.sample_rate, turn_id=self.current_turn_id
        )
