"""One device connection after its hello: device messages in, pipeline output out.

In: uplink Opus is decoded and pushed as 16 kHz audio while the device is listening (no faster
than real time plus `audio_burst_seconds`: a flood is dropped before decoding); `listen`
start/stop frame push-to-talk turns; `listen detect` is a wake word (greeting) or a typed
utterance; `abort` cancels the turn and answers `tts stop` at once.

Out: the session's output goes to the device through its `Downlink` (downlink.py): messages,
paced Opus audio, `tts stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import string
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from loguru import logger

from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.chunk import UNSET_TURN, AudioChunk, Chunk, StreamCompleteChunk, TextChunk, TurnEndChunk, TurnStartChunk
from vixio.core.log_throttle import LogThrottle
from vixio.core.protocol import Message
from vixio.core.realtime_budget import RealTimeBudget
from vixio.core.session import Session
from vixio.metrics import ECHO_ERLE, ECHO_FRAMES
from vixio.transports.xiaozhi.protocol import messages as xp
from vixio.transports.xiaozhi.protocol.codec import UPLINK_SAMPLE_RATE, CodecError, OpusDecoder, packet_duration
from vixio.transports.xiaozhi.session.downlink import SAY_SOURCE, Downlink
from vixio.transports.xiaozhi.session.early_audio import EarlyAudio

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.aec.canceller import SessionEchoCanceller

Write = Callable[[list[Message]], Awaitable[None]]
"""Sends messages to the device in order, together (one socket write) when it can."""

_PUNCTUATION = str.maketrans("", "", string.punctuation + "，。！？、～ ")


class XiaozhiConnection:
    """Protocol state of one session: listening mode, speaking, codec, pacing, idle timer."""

    def __init__(
        self,
        session_id: str,
        device_id: str,
        config: XiaozhiConfig,
        protocol: xp.XiaozhiProtocol,
        write: Write,
        *,
        encode_on_thread: bool = True,
    ) -> None:
        self.session_id = session_id
        self.protocol = protocol
        self.device_id = device_id
        self.config = config
        self.greeting: Callable[[], str] | None = None
        """What the wake word is answered with (the session's profile); None: `config.greeting`."""
        self.logger = logger.bind(session=session_id, device=device_id, component="xiaozhi")
        self.session: Session | None = None
        self.mode = "auto"
        self.listening = False
        self.stopping = False
        """The server is stopping: nothing more is said (a reply's next sentence must not start one)."""
        self.last_activity = time.monotonic()
        self.write = write
        """Sends messages to the device in order, in one socket write when it can."""
        self._decoder: OpusDecoder | None = None
        """libopus' uplink state (~22 KB), made at the first audio packet (most devices are silent)."""
        self.downlink = Downlink(self, encode_on_thread=encode_on_thread)
        self.on_output = self.downlink.on_output
        """The session's output handler (see downlink.py)."""
        self._wake_words = {_normalise(w) for w in config.wake_words}
        self._bad_packets = 0
        self._ignored = LogThrottle(first=5, every=10.0)
        """Messages the session ignores: a client sending thousands must not write thousands of lines."""
        self.audio_frames_in = 0
        self._handling = 0
        """`handle` calls in progress: `handle_now` leaves audio to them meanwhile (order)."""
        self.echo: SessionEchoCanceller | None = None
        """Server-side echo cancellation (`enable_echo_cancellation`): the uplink goes through it."""
        self._uplink_budget = RealTimeBudget(config.audio_burst_seconds)
        self._flooding = LogThrottle(first=1, every=10.0)
        self.early_audio: EarlyAudio | None = None
        """Set for channels whose audio can overtake its `listen start` (early_audio.py)."""

    @property
    def speaking(self) -> bool:
        """A reply is being sent (from its first message to `tts stop`)."""
        return self.downlink.speaking

    def enable_echo_cancellation(self, version: int, *, double_talk: bool = False) -> bool:
        """The device streams its microphone uncancelled (hello `features.aec`): with protocol v2
        and vixio[aec], the downlink keeps what it sends and the uplink is cleaned before the VAD
        hears it; `double_talk`: with the per-band double-talk detector after AEC3 (doubletalk.py).
        False (with a warning) when it cannot be."""
        from vixio.transports.xiaozhi.aec.canceller import SessionEchoCanceller, available

        if version != 2:
            self.logger.warning(
                "features.aec over binary protocol v{}: no timestamps to align the echo with; not "
                "cancelled (the OTA answer's websocket.version 2 selects v2)",
                version,
            )
            return False
        if not available():
            self.logger.warning("features.aec: the aec extra is missing (pip install 'vixio[aec]'); echo not cancelled")
            return False
        self.echo = SessionEchoCanceller(doubletalk=double_talk)
        self.downlink.echo = self.echo
        self.logger.info("server-side echo cancellation on (features.aec, protocol v2)")
        return True

    def attach(self, session: Session) -> None:
        self.session = session
        self.downlink.pacer.start()

    async def close(self) -> None:
        try:
            await self.downlink.pacer.stop()
        finally:  # whatever the pacer's last step raised, a `say_delivered` waits no longer
            self.downlink.abandon_said()
        if self.echo is not None and self.echo.stats.erle_db is not None:
            ECHO_ERLE.observe(self.echo.stats.erle_db)

    async def shutdown(self) -> bool:
        """The server is stopping: a reply in progress ends with `tts stop` (bounded, best
        effort). True when one was queued. The pipeline still runs until the connection closes:
        what it says from now on is dropped."""
        self.stopping = True
        if not (self.speaking or self.downlink.pacer.pending):
            return False
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.downlink.stop(), 1.0)
            self.logger.info("server stopping: reply cut off, tts stop sent")
            return True
        return False

    # --- device → server ----------------------------------------------------------------------

    async def handle(self, message: Message) -> None:
        self._handling += 1
        try:
            await self._dispatch(message)
        finally:
            self._handling -= 1

    async def _dispatch(self, message: Message) -> None:
        kind = message["type"]
        if kind == xp.AUDIO:
            await self._on_audio(message["data"], message.get("timestamp_ms", 0))
        elif kind == "listen":
            await self._on_listen(message)
        elif kind == "abort":
            await self.abort(str(message.get("reason") or "abort"))
        elif kind == "hello":
            # A repeated hello is answered again: the firmware re-parses every server hello.
            await self.write([xp.server_hello(self.session_id, message.get("version", 1))])
        else:
            self._log_ignored("ignored message of unknown type {!r}", kind[:40])

    def _log_ignored(self, message: str, *args: object) -> None:
        verdict = self._ignored.hit()
        if verdict == 0:
            self.logger.info(message, *args)
        elif verdict:
            self.logger.info(
                "ignored {} more messages ({} in all); last: " + message, verdict, self._ignored.total, *args
            )

    def handle_now(self, message: Message) -> bool:
        """Uplink audio handled at once, without suspending (the transport's inline handler: an
        audio frame skips the read queue and the reader task). False, with nothing done, for
        anything else, while `handle` is still busy with an earlier message (order), or while
        the pipeline is full (the reader waits for room instead)."""
        if message["type"] != xp.AUDIO or self._handling or self.echo is not None:
            return False  # echo cancelling is awaited (a worker thread): `handle` does it
        if not self.listening or self.session is None:
            self._not_listening(message["data"])
            return True
        if not self.session.pipeline.can_push_nowait():
            return False
        chunk = self._uplink_chunk(message["data"])
        if chunk is not None:
            self.session.push_nowait(chunk)
        return True

    async def _on_audio(self, packet: bytes, timestamp_ms: int = 0) -> None:
        if not self.listening or self.session is None:
            self._not_listening(packet, timestamp_ms)
            return
        chunk = self._uplink_chunk(packet)
        if chunk is not None and self.echo is not None:
            chunk = await self._cancel_echo(chunk, timestamp_ms)
        if chunk is not None:
            await self.session.push(chunk)

    async def _cancel_echo(self, chunk: AudioChunk, timestamp_ms: int) -> AudioChunk | None:
        assert self.echo is not None and self.session is not None
        from vixio.transports.xiaozhi.aec.canceller import aec_worker

        frames = self.echo.stats.frames
        try:
            pcm = await aec_worker(self.echo).submit((self.echo, chunk.pcm, timestamp_ms))
        except Exception as exc:  # a canceller fault must not silence the device: pass it on uncancelled
            self.logger.warning("echo cancelling failed, frame passed on as heard: {}", exc)
            return chunk
        if self.echo.stats.frames != frames:
            ECHO_FRAMES.inc()
            self.session.state.echo_erle_db = self.echo.stats.erle_db
        return AudioChunk(pcm=pcm, sample_rate=chunk.sample_rate)

    def _not_listening(self, packet: bytes, timestamp_ms: int = 0) -> None:
        """Wake-word audio before `listen detect`, audio after push-to-talk release: dropped;
        over a channel whose audio can overtake `listen start`, held for it (early_audio.py)."""
        if self.early_audio is not None and self.session is not None:
            self.early_audio.hold(packet, timestamp_ms)

    def _uplink_chunk(self, packet: bytes) -> AudioChunk | None:
        """The packet's audio, or None when it is dropped (flooding, undecodable, DTX)."""
        if not self._uplink_budget.take(packet_duration(packet)):
            verdict = self._flooding.hit()
            if verdict is not None:
                self.logger.warning(
                    "dropped {} audio packet(s): the device sends faster than real time, more than "
                    "{:g} s ahead (xiaozhi.audio_burst_seconds)",
                    verdict or 1,
                    self._uplink_budget.burst,
                )
            return None
        try:
            pcm = self.decoder.decode(packet)  # ~45 us: cheaper here than a trip to the codec thread
        except CodecError as exc:
            self._bad_packets += 1
            if self._bad_packets == 1 or self._bad_packets % 100 == 0:
                self.logger.warning(
                    "dropped undecodable Opus packet #{} ({} bytes): {}", self._bad_packets, len(packet), exc
                )
            return None
        if not pcm:  # DTX: empty packets carry no audio
            return None
        self.audio_frames_in += 1
        return AudioChunk(pcm=pcm, sample_rate=UPLINK_SAMPLE_RATE)

    async def _on_listen(self, message: Message) -> None:
        state = message.get("state")
        if state == "start":
            mode = message.get("mode", "auto")
            self.mode = mode if mode in xp.LISTEN_MODES else "auto"
            self.listening = True
            if self.mode == "manual":
                await self._new_user_turn("push_to_talk")
                await self._push(TurnStartChunk(source="push_to_talk"))
            if self.early_audio is not None:
                for packet, timestamp_ms in self.early_audio.take():
                    await self._on_audio(packet, timestamp_ms)
        elif state == "stop":
            self.listening = False
            if self.early_audio is not None:
                self.early_audio.discard()
            await self._push(TurnEndChunk(source="push_to_talk"))
        elif state == "detect":
            if self.early_audio is not None:
                self.early_audio.discard()  # the wake word's audio
            await self._on_detect(message)
        else:
            self._log_ignored(
                "ignored listen message with state {!r}", state if not isinstance(state, str) else state[:40]
            )

    async def _on_detect(self, message: Message) -> None:
        too_long = message.get("too_long")
        if isinstance(too_long, int):  # protocol/messages.py kept only its length
            self.logger.warning(
                "listen text of {} characters; at most {} are taken: the device is told", too_long, xp.MAX_TYPED_TEXT
            )
            self.touch()
            await self._new_user_turn("typed_text")
            await self.say(xp.TEXT_TOO_LONG.get(str(message.get("language")), xp.TEXT_TOO_LONG["en"]))
            return
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            self._log_ignored("ignored listen detect without text")
            return
        self.touch()
        wake_word = self.is_wake_word(text)
        if wake_word and self.speaking:
            await self.abort("wake_word")
        elif not wake_word:
            await self._new_user_turn("typed_text")
        if wake_word:
            self.logger.info("wake word {!r}", text)
            greeting = self.greeting() if self.greeting is not None else self.config.greeting
            if greeting:
                await self.say(greeting)
            return
        # Unstamped turn: the pipeline stamps the turn that is current when it arrives.
        chunk = self.protocol.message_to_chunk(message, self.session_id, UNSET_TURN)
        if chunk is not None:
            await self._push(chunk)

    async def _new_user_turn(self, reason: str) -> None:
        """The user starts a turn: whatever the last one still does (speaking, waiting for a
        device tool that may never answer) is cancelled, and the new turn gets its own id."""
        if self.speaking:
            await self.abort(reason)
        elif self.session is not None and self.session.pipeline.turn_in_progress:
            self.logger.info("new user turn ({}) while the last one is still running: cancelling it", reason)
            await self.session.interrupt(reason)
        elif self.session is not None:
            self.session.pipeline.begin_turn()

    def is_wake_word(self, text: str) -> bool:
        return _normalise(text) in self._wake_words

    async def abort(self, reason: str) -> None:
        """Cancel the turn: drop unsent audio, `tts stop` at once, interrupt the pipeline."""
        was_speaking = self.speaking
        # Always answer: the device stays in `speaking` until it gets `tts stop`.
        dropped = await self.downlink.stop()
        self.logger.info(
            "abort ({}): {} unsent frames dropped{}", reason, dropped, "" if was_speaking else ", was not speaking"
        )
        if self.session is not None:
            # Stations still see `bot_speaking` in their interrupt hooks (what was heard matters).
            await self.session.interrupt(reason)
            self.session.state.bot_speaking = False

    async def say(self, text: str) -> None:
        """Speak `text` as the assistant (through the pipeline's TTS, if it has one)."""
        await self._push(TextChunk(text=text, role="assistant"))
        await self._push(StreamCompleteChunk(source="say"))

    async def say_delivered(self, text: str, timeout: float) -> bool:
        """`say` `text` and wait until it was delivered: the reply that says it was sent to the
        device to its end (or the user spoke over it after one of its sentences went out). False
        when the session ends first, the server is stopping, or `timeout` passes."""
        if self.session is None or self.stopping:
            return False
        token = secrets.token_hex(6)
        outcome = self.downlink.expect_said(token)
        try:
            await self._push(TextChunk(text=text, role="assistant"))
            await self._push(StreamCompleteChunk(source=SAY_SOURCE + token))
            return await asyncio.wait_for(outcome, timeout)
        except (TimeoutError, RuntimeError):  # RuntimeError: the session's pipeline stopped (it is closing)
            return False
        finally:
            self.downlink.settle_said(token, False)  # no-op once settled

    async def _push(self, chunk: Chunk) -> None:
        if self.session is not None:
            await self.session.push(chunk)

    # --- codec -------------------------------------------------------------------------------

    @property
    def decoder(self) -> OpusDecoder:
        """The uplink decoder, made at the device's first audio packet."""
        if self._decoder is None:
            self._decoder = OpusDecoder(UPLINK_SAMPLE_RATE)
        return self._decoder

    # --- idle ---------------------------------------------------------------------------------

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    async def wait_idle(self) -> None:
        """Return once nobody spoke (and nothing was said) for `idle_timeout` seconds."""
        timeout = self.config.idle_timeout
        while True:
            remaining = self.last_activity + timeout - time.monotonic()
            if remaining <= 0 and not self.speaking:
                return
            await asyncio.sleep(max(remaining, 1.0))

    async def say_goodbye(self, limit: float = 10.0) -> None:
        """Speak the configured goodbye and wait (bounded) until it has been played."""
        if not self.config.idle_goodbye:
            return
        await self.say(self.config.idle_goodbye)
        deadline = time.monotonic() + limit
        await asyncio.sleep(0.05)
        while (self.speaking or self.downlink.pacer.pending) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


def _normalise(text: str) -> str:
    return text.casefold().translate(_PUNCTUATION)
