"""The load generator of bench/bench_capacity.py: firmware-like devices talking in real time.

Each device opens the WebSocket with the firmware's headers (Device-Id, Client-Id,
Protocol-Version 1), sends the firmware hello (features.mcp), answers the server's MCP
`initialize` and `tools/list` like firmware 2.4.2 (six tools), then for each turn sends
`listen start auto` and streams one pre-encoded clip in real time, a 60 ms Opus packet at a
time: 0.3 s of low noise, a 1.8 s spoken question (a Piper-made fixture, its speech ending at
the section's end), 1.5 s of low noise. It keeps streaming while the answer plays, waits for
`tts stop` and for its modelled playback to drain, then starts the next turn: at once (the
staggered shape) or at its next slot (the burst shape, `burst_slots`: every device ends its
sentence within the same window, turn after turn).

The packets are encoded once (libopus, 16 kHz) before any device starts, so a device only
sleeps and sends: one process keeps real time for a few hundred devices. Its send lateness
(actual send time − due time) is recorded so that claim is checked on every run.

Run as a child of the benchmark: `python bench/capacity/load.py '<json spec>'` writes every
turn's record and the lateness figures as JSON to the spec's `out` file.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import websockets
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from vixio.testing.device.mcp import DeviceMcpServer  # noqa: E402
from vixio.testing.device.tools import DeviceStatus, default_tools  # noqa: E402
from vixio.transports.xiaozhi.protocol.codec import OpusEncoder  # noqa: E402

SPEECH_DIR = ROOT / "tests" / "fixtures" / "speech"
RATE = 16000
FRAME_S = 0.060
FRAME_SAMPLES = int(RATE * FRAME_S)
LEAD_NOISE_S, SPEECH_S, TAIL_NOISE_S = 0.3, 1.8, 1.5
NOISE_RMS = 60.0
"""Low background noise (about -55 dBFS): never speech to Silero, but real audio for Opus, and
above the VAD's quiet level (vad.quiet_below_dbfs, -60), so every frame is scored. `--noise-dbfs`
sets another level (-70: a quiet room, whose silence the VAD skips)."""
SPEECH_TRIM_LEVEL = 300
"""|sample| below this at the ends of a fixture counts as the fixture's own silence."""
FAIL_AFTER_S = 15.0
"""A turn whose first answer audio has not arrived this long after its last speech frame failed."""
REPLY_LIMIT_S = 30.0
"""A turn whose `tts stop` has not arrived this long after its last speech frame, nor this long
after the reply's latest audio frame (a long spoken answer: the offline model telling a story),
failed."""


# --- the clips, encoded once ----------------------------------------------------------------------


@dataclass
class Clip:
    """One turn's uplink: Opus packets and the index of the packet carrying the speech's end."""

    name: str
    packets: list[bytes]
    last_speech: int


def _trimmed_speech(path: Path) -> np.ndarray:
    with wave.open(str(path)) as wav:
        if wav.getframerate() != RATE or wav.getnchannels() != 1 or wav.getsampwidth() != 2:
            raise ValueError(f"{path.name}: expected 16 kHz mono int16")
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.float64)
    loud = np.flatnonzero(np.abs(samples) >= SPEECH_TRIM_LEVEL)
    return samples[loud[0] : loud[-1] + 1] if loud.size else samples


def noise_rms(dbfs: float | None) -> float:
    """The background's RMS (int16 units) at `dbfs`, or NOISE_RMS when None."""
    return NOISE_RMS if dbfs is None else 32768.0 * 10 ** (dbfs / 20)


def build_clips(noise_dbfs: float | None = None) -> list[Clip]:
    """One clip per speech fixture that fits the 1.8 s section (seeded noise: deterministic), the
    background at `noise_dbfs` (None: NOISE_RMS, about -55 dBFS)."""
    clips = []
    rng = np.random.default_rng(10)
    section = int(SPEECH_S * RATE)
    for path in sorted(SPEECH_DIR.glob("*.wav")):
        speech = _trimmed_speech(path)
        if len(speech) > section:
            continue
        lead = int(LEAD_NOISE_S * RATE) + section - len(speech)  # speech ends where the section ends
        tail = int(TAIL_NOISE_S * RATE)
        total = lead + len(speech) + tail
        total += -total % FRAME_SAMPLES
        audio = rng.normal(0.0, noise_rms(noise_dbfs), total)
        audio[lead : lead + len(speech)] += speech
        pcm = np.clip(audio, -32768, 32767).astype("<i2").tobytes()
        encoder = OpusEncoder(RATE, 1, 60)
        step = FRAME_SAMPLES * 2
        packets = [encoder.encode(pcm[i : i + step]) for i in range(0, len(pcm), step)]
        clips.append(Clip(path.stem, packets, (lead + len(speech) - 1) // FRAME_SAMPLES))
    if not clips:
        raise RuntimeError(f"no speech fixture of at most {SPEECH_S} s in {SPEECH_DIR}")
    return clips


# --- one device -------------------------------------------------------------------------------------


@dataclass
class TurnRecord:
    """What one device saw in one turn (times are time.monotonic(), shared by all processes)."""

    device: int
    turn: int
    clip: str
    last_speech_sent: float = 0.0
    first_audio: float | None = None
    tts_stop: float | None = None
    frames: list[float] = field(default_factory=list)
    """Arrival time of every downlink audio frame between `tts start` and `tts stop`."""
    stt: str | None = None
    failed: str | None = None
    start_late: float = 0.0
    """Seconds this turn started after its slot in a burst schedule (the previous reply ran long)."""


class Device:
    """One simulated firmware device; see the module docstring."""

    def __init__(self, index: int, url: str, clip: Clip, turns: int, *, tools: int = 0) -> None:
        self.index = index
        self.url = url
        self.clip = clip
        self.turns = turns
        self.device_id = "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}".format(*index.to_bytes(5, "big"))
        self.client_id = str(uuid.UUID(int=index + 1))
        self.session_id = ""
        self.records: list[TurnRecord] = []
        self.lateness: list[float] = []
        self.stray_frames = 0
        self.connect_error: str | None = None
        self._ws: Any = None
        self._receiver: asyncio.Task[None] | None = None
        self._hello: asyncio.Future[dict[str, Any]] | None = None
        self._turn: TurnRecord | None = None
        self._speaking_since: float | None = None
        """When the current `tts start` arrived; None between `tts stop` and the next `tts start`."""
        self._reply_started = asyncio.Event()
        self._reply_done = asyncio.Event()
        status = DeviceStatus()
        device_tools = default_tools(status, lambda: {"board": "bench"}, lambda: None)
        if tools:
            device_tools = many_device_tools(tools)
        self.mcp = DeviceMcpServer(
            device_tools, board="bench-board", firmware_version="2.4.2", send=self._send_mcp, device_id=self.device_id
        )

    async def run(self, start_at: float, slots: list[float] | None = None) -> None:
        """Connect at `start_at`, then do the turns back to back, or each at its slot of `slots`
        (a burst schedule: time.monotonic() per turn; a turn whose slot has passed starts at once)."""
        await _sleep_until(start_at)
        try:
            await self.connect()
        except (OSError, TimeoutError, ConnectionClosed, websockets.InvalidHandshake) as exc:
            self.connect_error = f"connect: {exc!r}"
            self.records = [
                TurnRecord(self.index, t, self.clip.name, failed=self.connect_error) for t in range(self.turns)
            ]
            return
        try:
            for turn in range(self.turns):
                record = TurnRecord(self.index, turn, self.clip.name)
                self.records.append(record)
                if slots is not None:
                    await _sleep_until(slots[turn])
                    record.start_late = max(0.0, time.monotonic() - slots[turn])
                await self._one_turn(record)
        finally:
            await self.close()

    async def connect(self, timeout: float = 15.0) -> None:
        headers = {"Protocol-Version": "1", "Device-Id": self.device_id, "Client-Id": self.client_id}
        self._ws = await websockets.connect(
            self.url,
            additional_headers=headers,
            open_timeout=timeout,
            ping_interval=None,
            compression=None,
            max_size=4 * 2**20,
        )
        self._hello = asyncio.get_running_loop().create_future()
        self._receiver = asyncio.create_task(self._receive())
        await self._ws.send(
            json.dumps(
                {
                    "type": "hello",
                    "version": 1,
                    "features": {"mcp": True},
                    "transport": "websocket",
                    "audio_params": {"format": "opus", "sample_rate": RATE, "channels": 1, "frame_duration": 60},
                }
            )
        )
        hello = await asyncio.wait_for(self._hello, timeout)
        self.session_id = str(hello.get("session_id") or "")

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._receiver is not None:
            await asyncio.gather(self._receiver, return_exceptions=True)
        await self.mcp.close()

    async def send_json(self, message: dict[str, Any]) -> None:
        await self._ws.send(json.dumps({"session_id": self.session_id, **message}))

    async def _one_turn(self, record: TurnRecord) -> None:
        self._turn = record
        self._reply_started.clear()
        self._reply_done.clear()
        try:
            await self.send_json({"type": "listen", "state": "start", "mode": "auto"})
            start = time.monotonic()
            for k, packet in enumerate(self.clip.packets):
                due = start + k * FRAME_S
                await _sleep_until(due)
                self.lateness.append(time.monotonic() - due)
                await self._ws.send(packet)
                if k == self.clip.last_speech:
                    record.last_speech_sent = time.monotonic()
            await _wait_until(self._reply_started, record.last_speech_sent + FAIL_AFTER_S)
            if not self._reply_started.is_set():
                record.failed = f"no answer audio within {FAIL_AFTER_S:g} s"
                return
            while not self._reply_done.is_set():
                deadline = max(record.last_speech_sent, record.frames[-1] if record.frames else 0.0) + REPLY_LIMIT_S
                if time.monotonic() >= deadline:
                    break
                await _wait_until(self._reply_done, deadline)  # then again from the latest frame
            if not self._reply_done.is_set():
                record.failed = f"no tts stop within {REPLY_LIMIT_S:g} s of the last speech or answer frame"
                return
            await _sleep_until(playback_end(record.frames))  # the firmware listens again once drained
        except ConnectionClosed as exc:
            record.failed = f"connection closed: {exc!r}"
        finally:
            self._turn = None

    async def _send_mcp(self, payload: dict[str, Any]) -> None:
        try:
            await self.send_json({"type": "mcp", "payload": payload})
        except ConnectionClosed:
            pass

    async def _receive(self) -> None:
        try:
            async for frame in self._ws:
                now = time.monotonic()
                if isinstance(frame, bytes):
                    record = self._turn
                    if record is not None and self._answers(record):
                        if record.first_audio is None:
                            record.first_audio = now
                            self._reply_started.set()
                        record.frames.append(now)
                    else:
                        self.stray_frames += 1
                    continue
                self._on_json(json.loads(frame), now)
        except ConnectionClosed:
            pass
        finally:
            self._reply_started.set()  # wake a waiting turn; it sees the socket closed on its next send
            self._reply_done.set()
            if self._hello is not None and not self._hello.done():
                self._hello.set_exception(ConnectionError("closed before the server hello"))

    def _on_json(self, message: dict[str, Any], now: float) -> None:
        kind = message.get("type")
        if kind == "hello":
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(message)
        elif kind == "mcp":
            asyncio.create_task(self.mcp.handle(message.get("payload")))
        elif kind == "stt" and self._turn is not None:
            self._turn.stt = str(message.get("text"))
        elif kind == "tts":
            state = message.get("state")
            if state == "start":
                self._speaking_since = now
            elif state == "stop":
                if self._turn is not None and self._answers(self._turn):
                    self._turn.tts_stop = now
                    self._reply_done.set()
                self._speaking_since = None

    def _answers(self, record: TurnRecord) -> bool:
        """Whether the reply being spoken answers this turn: it started after the question's last
        speech frame (the VAD needs 500 ms of silence first). An older reply still playing (its
        turn already failed) is not counted for this one."""
        since = self._speaking_since
        return since is not None and record.last_speech_sent > 0 and since >= record.last_speech_sent


def many_device_tools(count: int) -> list[Any]:
    """`count` firmware-shaped tools with an integer and a string argument (for the isolation mode)."""
    from vixio.testing.device.tools import DeviceTool

    schema = {
        "type": "object",
        "properties": {"level": {"type": "integer", "minimum": 0, "maximum": 100}, "label": {"type": "string"}},
        "required": ["level", "label"],
    }
    return [
        DeviceTool(
            f"self.bench.tool_{i:05d}", f"Bench tool number {i}: sets a level with a label.", schema, lambda args: True
        )
        for i in range(count)
    ]


def playback_end(frames: list[float]) -> float:
    """When a device playing one 60 ms frame at a time, from the first arrival, finishes."""
    end = 0.0
    for arrival in frames:
        end = max(end, arrival) + FRAME_S
    return end


async def _sleep_until(when: float) -> None:
    delay = when - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def _wait_until(event: asyncio.Event, deadline: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        pass


# --- one generator process ------------------------------------------------------------------------


def burst_slots(index: int, total: int, turns: int, start_at: float, burst: dict[str, float]) -> list[float]:
    """When device `index` (of `total`) starts each turn in the burst shape: turn t of every device
    starts within `burst["window"]` seconds of `start_at + burst["lead"] + t × burst["period"]`, spread
    evenly, so (all clips ending their speech at the same packet) every device ends its sentence
    within the same window, turn after turn, as a class answering together would."""
    offset = burst["lead"] + burst["window"] * index / max(1, total)
    return [start_at + offset + turn * burst["period"] for turn in range(turns)]


async def generate(
    url: str,
    indices: list[int],
    total: int,
    turns: int,
    start_at: float,
    stagger: float,
    burst: dict[str, float] | None = None,
    noise_dbfs: float | None = None,
) -> dict[str, Any]:
    """Run devices `indices` (of `total`), device i connecting at start_at + i × stagger / total;
    its turns back to back (staggered shape), or at its `burst_slots` when `burst` is given; the
    room's background at `noise_dbfs` (None: NOISE_RMS)."""
    clips = build_clips(noise_dbfs)
    devices = [Device(i, url, clips[i % len(clips)], turns) for i in indices]
    cpu0 = time.process_time()
    await asyncio.gather(
        *(
            d.run(
                start_at + d.index * stagger / max(1, total),
                None if burst is None else burst_slots(d.index, total, turns, start_at, burst),
            )
            for d in devices
        )
    )
    lateness = [x for d in devices for x in d.lateness]
    return {
        "records": [asdict(r) for d in devices for r in d.records],
        "lateness": lateness,
        "stray_frames": sum(d.stray_frames for d in devices),
        "cpu_s": time.process_time() - cpu0,
        "frames_sent": len(lateness),
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = asyncio.run(
        generate(
            spec["url"],
            spec["indices"],
            spec["total"],
            spec["turns"],
            spec["start_at"],
            spec["stagger"],
            spec.get("burst"),
            spec.get("noise_dbfs"),
        )
    )
    Path(spec["out"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
