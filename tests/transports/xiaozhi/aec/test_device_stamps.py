"""The simulated device stamps its uplink as CONFIG_USE_SERVER_AEC firmware does, over a real socket."""

from __future__ import annotations

import asyncio

import pytest

from vixio.testing.device import SimulatedDevice
from vixio.testing.device.audio import tone

from ..conftest import ws_url
from .conftest import ManualClock

pytestmark = pytest.mark.integration

pytest.importorskip("pywebrtc_audio", reason="needs vixio[aec]")

MIC_FRAME = tone(0.06, frequency=300.0)  # one 60 ms microphone frame


async def _reply_then_speak(device: SimulatedDevice, clock: ManualClock, frames: int, lead_s: float = 0.0) -> None:
    """A 20-frame reply arrives while the clock stands still (it plays from then on, on the device
    clock); then the microphone captures `frames` frames, one per 60 ms of device time."""
    await device.connect()
    await device.start_listening("realtime")
    mark = device.mark()
    await device.send_text("hi")
    await device.wait_for("tts", state="stop", after=mark, timeout=5)
    clock.now += lead_s
    for _ in range(frames):
        clock.now += 0.06
        assert await device.stream_audio(MIC_FRAME, realtime=False) == 1


def _played(device: SimulatedDevice) -> list[int]:
    return [frame.timestamp_ms for frame in device.audio_frames if frame.played]


async def test_v2_aec_uplink_carries_the_played_stamps_in_order(make_server) -> None:
    server = await make_server(reply_seconds=1.2)
    clock = ManualClock()
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=2, aec=True, clock=clock) as device:
        await _reply_then_speak(device, clock, 24)
        played = _played(device)
        assert len(played) == 20 and all(played)
        # Mic frame k is captured as played frame k has been written out; after the reply, 0.
        assert device.uplink_stamps == played + [0] * 4
        (connection,) = server.transport.connections.values()
        assert connection.echo is not None
        for _ in range(200):
            if connection.echo.stats.frames >= 20:
                break
            await asyncio.sleep(0.02)
        # The server found every stamp among the frames it sent and lined the uplink up with them.
        assert connection.echo.stats.frames >= 20
        assert connection.echo.clock.offset is not None


async def test_a_late_microphone_finds_the_queue_overfull_as_the_firmware_does(make_server) -> None:
    server = await make_server(reply_seconds=1.2)
    clock = ManualClock()
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=2, aec=True, clock=clock) as device:
        # The mic starts 0.3 s into the reply: 5 stamps wait, more than MAX_TIMESTAMPS_IN_QUEUE (3).
        await _reply_then_speak(device, clock, 24, lead_s=0.24)
        played = _played(device)
        # Every frame while 5 wait goes out as 0 and drops one; once the reply has been written
        # out the queue drains to 3 and its last three stamps go out.
        assert device.uplink_stamps == [0] * 17 + played[-3:] + [0] * 4


@pytest.mark.parametrize(("version", "aec"), [(1, True), (3, True), (2, False)])
async def test_without_v2_or_aec_the_uplink_is_unstamped(make_server, version: int, aec: bool) -> None:
    server = await make_server(reply_seconds=1.2)
    clock = ManualClock()
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=version, aec=aec, clock=clock) as device:
        await _reply_then_speak(device, clock, 24)
        assert len(_played(device)) == 20
        assert device.uplink_stamps == [0] * 24
