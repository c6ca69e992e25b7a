"""Barge-in trials: a device that hears its own reply, and the server's uplink path deciding.

One trial is one reply (Piper's zh voice, 2–3 fixture sentences) played by a simulated board
(`echo_path.EchoPath`: small speaker, room, 40–250 ms wandering delay, noise), with or without
a user (Piper's en voice, a fixture question) speaking over it. The board stamps its uplink as
the firmware does (`device_stamps`) and encodes it as the firmware does (Opus 16 kHz, 60 ms,
complexity 0); the server side is vixio's own parts, run on the audio's clock (faster than real
time): `OpusDecoder`, then `SessionEchoCanceller` (with `aec`), then the Silero VAD with
VADStation's default rules, then either today's rule (VAD start while speaking = barge-in) or
`InterruptionArbiter` (pause, then confirm or resume). With an `asr` the held speech is
transcribed as the VAD station does it (`held_words.HeldWords`: a real ASR, a modelled latency on
the audio's clock) and its words decide first; without, by its length alone. With `trace` every
frame is recorded (`FrameTrace`), for `barge_in_misses` to say why a question was missed.

Besides the echo alone and a question, a trial can put a cough (`cough`: synthetic noise bursts),
a backchannel or a command (`barge_in_voices.BACKCHANNELS`, `COMMANDS`: spoken by the default Piper voice when
`Voices.from_fixtures(short=True)`) over the reply.

Unless `board_stops` (a real board stops at `tts stop`), the reply keeps playing through a pause:
a simplification that makes the echo-only figures, if anything, pessimistic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vixio.providers.asr.base import ASRProvider
from vixio.providers.vad.base import VADProvider
from vixio.providers.vad.detector import VoiceActivityDetector
from vixio.stations.barge_in_words import WordRules
from vixio.stations.interruption import InterruptionArbiter
from vixio.testing.barge_in_voices import Voices, cough, first_voiced
from vixio.testing.board_playback import FRAME, BoardPlayback, level_db
from vixio.testing.echo_path import RATE, EchoPath, device_stamps, erle_db
from vixio.transports.xiaozhi.protocol.codec import OpusDecoder, OpusEncoder

LEAD_S, TAIL_S = 0.6, 1.5
__all__ = ["FRAME", "KINDS", "BoardPlayback", "FrameTrace", "Harness", "Trial", "Voices", "level_db"]


@dataclass(slots=True)
class Trial:
    """What one reply produced."""

    false_events: int = 0
    """Pauses (or, today, interruptions) before any user spoke (echo, noise): each one is heard."""
    false_cancels: int = 0
    """Of those, the ones that cancelled the reply (today: all; with the arbiter: not resumed)."""
    barge_in: bool = False
    onset_s: float | None = None
    stopped_s: float | None = None
    """When the reply stopped for the user (`tts stop`: the pause, or today's interrupt)."""
    confirmed: bool = False
    cancelled_s: float | None = None
    """When the user's speech cancelled the reply (an interrupt after their onset), if it did."""
    erle_db: float | None = None
    kind: str = "echo"
    """What the user did: `echo` (nothing), `barge` (a question), `cough`, `backchannel`, `command`."""
    heard: list[tuple[str, str]] = field(default_factory=list)
    """With an ASR: each transcript of held speech and what the arbiter judged it, in order."""
    frames: list[FrameTrace] = field(default_factory=list)
    """With `Harness.trace`: every uplink frame, as the server handled it (`barge_in_misses`)."""


KINDS = ("echo", "barge", "cough", "backchannel", "command")


@dataclass(slots=True)
class FrameTrace:
    """One 60 ms uplink frame of a traced trial: levels in dBFS, what the server did with it."""

    stamp: int
    """Its v2 timestamp (0: the board's stamp queue was empty: it had stopped playing)."""
    mic_db: float
    """The microphone as decoded."""
    out_db: float
    """What the VAD heard (the canceller's output, or the microphone without one)."""
    vad: float
    """The VAD's probability for the frame's last window."""
    actions: list[str]
    """The server's actions on the reply at this frame (pause, resume, interrupt)."""
    user_db: float = -120.0
    """The user's speech alone at the microphone (filled in after the trial)."""
    echo_db: float = -120.0
    """The echo and noise alone at the microphone (filled in after the trial)."""


@dataclass(slots=True)
class Costs:
    frames: int = 0
    """Uplink frames (60 ms) the harness fed, reply playing or not."""
    aec_frames: int = 0
    """Of those, the frames the canceller worked on (a reply playing, or its 1 s tail)."""
    aec_s: float = 0.0
    decode_s: float = 0.0
    vad_s: float = 0.0
    asr_calls: int = 0
    asr_s: float = 0.0
    """Process CPU time of the held-speech transcriptions (all the ASR's threads)."""


@dataclass(slots=True)
class Harness:
    vad: VADProvider
    """A VADProvider (the model is shared, streams are per trial)."""
    voices: Voices
    aec: bool = False
    aec_doubletalk: bool = False
    """With `aec`: the canceller's per-band double-talk detector after AEC3 (`doubletalk.py`)."""
    arbiter: bool = False
    echo_gain_db: float = -12.0
    pause_min_speech_ms: int = 250
    """The VAD's `min_speech_ms` with the arbiter: a pause is cheap (it resumes), so it may start sooner."""
    confirm_ms: int = 600
    """`vad.barge_in_confirm_ms`: speech over the reply that lasts this long is a barge-in."""
    board_stops: bool = False
    """The board stops playing a few frames after `tts stop` (the frames already sent) and plays
    the rest after `tts start`, as a real one does; False keeps the reply playing through a pause
    (the published table's simplification: pessimistic for false and missed interruptions)."""
    replies_per_session: int = 5
    """Replies one board (one echo path, one canceller) plays: a session converges once."""
    asr: ASRProvider | None = None
    """Transcribe held speech with this and judge its words (`vad.barge_in_words`); None: by length."""
    asr_latency_ms: int = 800
    """The modelled time from asking for a transcript to having it, on the audio's clock."""
    partial_ms: int = 240
    """`vad.barge_in_partial_ms`."""
    trace: bool = False
    """Record every frame of every trial in `Trial.frames` (diagnosis: `barge_in_misses`)."""
    costs: Costs = field(default_factory=Costs)
    _cancellers: dict[int, Any] = field(default_factory=dict)
    _sentences: list[tuple[int, str]] = field(default_factory=list)

    def trial(self, seed: int, barge_in: bool = False, kind: str | None = None) -> Trial:
        """One reply; the user says nothing (`echo`), asks a question over it (`barge_in`, kind
        `barge`), or coughs, backchannels or says a command over it (`kind`)."""
        kind = kind or ("barge" if barge_in else "echo")
        if kind not in KINDS:
            raise ValueError(f"trial kind {kind!r}: expected one of {KINDS}")
        rng = np.random.default_rng(seed)
        chosen = rng.choice(len(self.voices.replies), 3, replace=False)
        parts = [self.voices.replies[i] for i in chosen]
        gap = np.zeros(int(0.15 * RATE), np.int16)
        reply = np.concatenate([np.concatenate([p, gap]) for p in parts])
        reply = reply[: len(reply) // FRAME * FRAME]
        p0 = int(LEAD_S * RATE) // FRAME * FRAME
        total = p0 + len(reply) + int(TAIL_S * RATE)
        played = np.zeros(total, np.int16)
        played[p0 : p0 + len(reply)] = reply
        user = None
        onset = None
        if kind != "echo":
            onset = p0 + int(rng.uniform(1.5, 4.0) * RATE)
            pool = {
                "barge": self.voices.users,
                "backchannel": self.voices.backchannels,
                "command": self.voices.commands,
            }.get(kind)
            speech = cough(seed) if pool is None else pool[int(rng.integers(len(pool)))]
            user = np.zeros(total, np.int16)
            take = min(len(speech), total - onset)
            user[onset : onset + take] = speech[:take]
            onset += first_voiced(speech)
        session = seed // self.replies_per_session
        board = np.random.default_rng(10_000 + session)
        path = EchoPath(seed=seed, delay_ms=float(board.uniform(40, 250)), echo_gain_db=self.echo_gain_db)
        starts = p0 + np.cumsum([0] + [len(p) + len(gap) for p in parts[:-1]])
        texts = [self.voices.reply_texts[i] for i in chosen] if self.voices.reply_texts else []
        self._sentences = list(zip(starts.tolist(), texts))
        trial = self._run(BoardPlayback(path, played, user, reply, p0, seed), onset, rng, session)
        trial.kind, trial.barge_in = kind, kind == "barge"
        return trial

    def _run(self, board: BoardPlayback, onset: int | None, rng: np.random.Generator, session: int) -> Trial:
        from vixio.transports.xiaozhi.aec.canceller import SessionEchoCanceller

        reply, p0, played_at = board.reply, board.p0, board.played_at
        frames = len(board.mic) // FRAME
        phase = int(rng.integers(0, FRAME))
        stamps = device_stamps(played_at, frames, FRAME, phase=phase)
        encoder = OpusEncoder(RATE, frame_duration_ms=60, complexity=0)
        decoder = OpusDecoder(RATE)
        canceller = None
        if self.aec:
            canceller = self._cancellers.get(session)  # a SessionEchoCanceller (imported only with `aec`)
            if canceller is None:
                canceller = self._cancellers[session] = SessionEchoCanceller(doubletalk=self.aec_doubletalk)
        detector = VoiceActivityDetector(
            self.vad.create_stream(),
            threshold=0.5,
            min_speech_ms=self.pause_min_speech_ms if self.arbiter else 250,
            min_silence_ms=500,
            speech_pad_ms=100,
        )
        arbiter = InterruptionArbiter(confirm_ms=self.confirm_ms, words=WordRules() if self.asr else None)
        words = None
        if self.asr is not None:
            from vixio.testing.held_words import HeldWords

            words = HeldWords(self.asr, latency_ms=self.asr_latency_ms, partial_ms=self.partial_ms)
        trial = Trial(barge_in=onset is not None, onset_s=None if onset is None else onset / RATE)
        uplink: list[np.ndarray] = []  # what the VAD heard, for the held speech's transcripts
        reply_end = p0 + len(reply)
        sent = 0
        heard, cleaned = [], []
        for k in range(frames):
            now = (k + 1) * FRAME / RATE
            frame = board.mic[k * FRAME : (k + 1) * FRAME]
            # the server sent each reply frame ~5 frames before the board played it (pre-buffer)
            while sent < len(played_at) and played_at[sent][0] <= (k + 6) * FRAME:
                if canceller is not None:
                    canceller.sent(played_at[sent][1], reply[sent * FRAME : (sent + 1) * FRAME])
                sent += 1
            t0 = time.thread_time()
            pcm = decoder.decode(encoder.encode(frame.tobytes()))
            t1 = time.thread_time()
            decoded = pcm
            if canceller is not None:
                out = canceller.process(pcm, stamps[k])
                self.costs.aec_frames += out is not pcm
                pcm = out
            t2 = time.thread_time()
            events = detector.feed(pcm)
            t3 = time.thread_time()
            if words is not None:
                uplink.append(np.frombuffer(pcm, dtype="<i2"))
            self.costs.frames += 1
            self.costs.decode_s += t1 - t0
            self.costs.aec_s += t2 - t1
            self.costs.vad_s += t3 - t2
            if p0 + 2 * RATE <= k * FRAME < reply_end and (onset is None):
                heard.append(np.frombuffer(decoded, dtype="<i2"))
                cleaned.append(np.frombuffer(pcm, dtype="<i2"))
            speaking_bot = board.held or (not board.cancelled and p0 <= k * FRAME < reply_end + 2 * FRAME)
            voiced = detector.speaking and detector.silence_start is None
            actions = self._decide(trial, arbiter, events, now, speaking_bot, voiced, onset)
            if words is not None and arbiter.listening:
                self._listen(trial, arbiter, words, events, now, uplink, onset, actions)
            if self.trace:
                out_pcm = np.frombuffer(pcm, dtype="<i2")
                mic = np.frombuffer(decoded, dtype="<i2")
                trace = FrameTrace(stamps[k], level_db(mic), level_db(out_pcm), detector.last_probability, actions)
                trial.frames.append(trace)
            if self.board_stops and actions and board.act(actions, sent, k):
                stamps = device_stamps(played_at, frames, FRAME, phase=phase)  # the past is unchanged
                reply_end = played_at[-1][0] - 80 + FRAME if played_at else p0
        if self.trace:
            board.levels(trial.frames)
        if heard:
            trial.erle_db = erle_db(np.concatenate(heard), np.concatenate(cleaned))
        if words is not None:
            trial.heard = words.heard
            self.costs.asr_calls += words.calls
            self.costs.asr_s += words.cpu_s
        return trial

    def _listen(
        self,
        trial: Trial,
        arbiter: InterruptionArbiter,
        words: Any,
        events: list[Any],
        now: float,
        uplink: list[np.ndarray],
        onset: int | None,
        actions: list[str],
    ) -> None:
        """Held speech's words (`HeldWords`), as VADStation transcribes them; adds the verdict to `actions`."""
        for event in events:
            if event.type == "start":
                if "pause" in actions:
                    words.paused(event.sample)
                else:
                    arbiter.speech_continued()
                    words.ended(None)
            elif event.type == "end":
                words.ended(event.sample)
        if not arbiter.listening:
            return
        verdict = words.listen(arbiter, now, np.concatenate(uplink), self._playing)
        if verdict is not None:
            actions.append(verdict)
            if verdict == "interrupt":
                if onset is not None and now * RATE >= onset:
                    trial.confirmed = True
                    trial.cancelled_s = now if trial.cancelled_s is None else trial.cancelled_s
                else:
                    trial.false_cancels += 1

    def _playing(self, now: float) -> str:
        """The reply's sentences the server had sent by `now` (the last two): `SessionState.heard`."""
        begun = [text for start, text in self._sentences if start <= now * RATE]
        return " ".join(begun[-2:])

    def _decide(
        self,
        trial: Trial,
        arbiter: InterruptionArbiter,
        events: list[Any],
        now: float,
        bot: bool,
        speaking: bool,
        onset: int | None,
    ) -> list[str]:
        """Counts what the server did with this frame's VAD events; returns its actions on the reply."""
        user_on = onset is not None and now * RATE >= onset
        verdicts: list[str | None] = []
        for event in events:
            if event.type == "start":
                if not self.arbiter:
                    if bot:
                        self._stopped(trial, now, user_on, confirmed=True)
                        trial.false_cancels += not user_on
                        verdicts.append("interrupt")
                    continue
                if arbiter.speech_started(now, event.sample / RATE, bot) == "pause":
                    self._stopped(trial, now, user_on, confirmed=False)
                    verdicts.append("pause")
            elif event.type == "end" and self.arbiter:
                verdicts.append(arbiter.speech_ended(now, event.sample / RATE))
        if self.arbiter:
            verdicts.append(arbiter.tick(now, speaking))
        for verdict in verdicts:
            if verdict == "interrupt" and self.arbiter:
                if user_on:
                    trial.confirmed = True
                    trial.cancelled_s = now if trial.cancelled_s is None else trial.cancelled_s
                else:
                    trial.false_cancels += 1
        return [v for v in verdicts if v is not None]

    @staticmethod
    def _stopped(trial: Trial, now: float, user_on: bool, confirmed: bool) -> None:
        if not user_on:
            trial.false_events += 1
        elif trial.stopped_s is None:
            trial.stopped_s = now
            trial.confirmed = trial.confirmed or confirmed
