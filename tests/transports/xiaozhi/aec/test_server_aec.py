"""Server-side AEC wiring over a real WebSocket: v2 downlink stamps, the reference, the uplink path."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from vixio.testing.device import SimulatedDevice
from vixio.testing.device.audio import tone

from ..conftest import ws_url
from .conftest import ManualClock

pytestmark = pytest.mark.integration

pytest.importorskip("pywebrtc_audio", reason="needs vixio[aec]")


async def _reply(device: SimulatedDevice) -> list[int]:
    await device.connect()
    await device.start_listening("realtime")
    mark = device.mark()
    await device.send_text("hi")
    await device.wait_for("tts", state="stop", after=mark, timeout=5)
    return [frame.timestamp_ms for frame in device.audio_frames]


async def test_v2_downlink_is_stamped_and_an_aec_device_is_cancelled_against_it(make_server) -> None:
    server = await make_server(reply_seconds=1.2)
    clock = ManualClock()  # the reply arrives at one instant and plays out as the test moves the clock
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=2, aec=True, clock=clock) as device:
        stamps = await _reply(device)
        assert len(stamps) == 20 and stamps[0] > 0
        assert all(b - a == 60 for a, b in itertools.pairwise(stamps)), stamps  # the downlink clock in ms
        (connection,) = server.transport.connections.values()
        assert connection.echo is not None
        assert connection.echo.reference.position == 20 * 960  # every frame sent, kept at 16 kHz
        # The device's microphone while the reply plays out, stamped by the device itself.
        before = connection.audio_frames_in
        for _ in range(10):
            clock.now += 0.06
            assert await device.stream_audio(tone(0.06), realtime=False) == 1
        assert device.uplink_stamps == stamps[:10]
        for _ in range(100):
            if connection.echo.stats.frames >= 10:
                break
            await asyncio.sleep(0.02)
        assert connection.echo.stats.frames == 10  # each went through the canceller (worker thread)
        assert connection.audio_frames_in - before == 10
        assert connection.session.state.echo_erle_db is not None


async def test_features_aec_over_v1_is_served_without_cancelling(make_server) -> None:
    server = await make_server(reply_seconds=0.3)
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=1, aec=True) as device:
        stamps = await _reply(device)
        assert stamps == [0] * 5  # v1 has no timestamp field
        (connection,) = server.transport.connections.values()
        assert connection.echo is None


async def test_server_aec_off_in_config(make_server) -> None:
    server = await make_server(reply_seconds=0.3, server_aec=False)
    async with SimulatedDevice(ws_url=ws_url(server), protocol_version=2, aec=True) as device:
        stamps = await _reply(device)
        assert all(stamps)  # stamped all the same: v2 frames always carry the clock
        (connection,) = server.transport.connections.values()
        assert connection.echo is None


async def test_the_double_talk_detector_runs_only_when_configured(make_server) -> None:
    """`xiaozhi.server_aec_double_talk` (off by default) puts `DoubleTalk` after AEC3; the frames
    of the reply's playout go through it."""
    for enabled in (False, True):
        server = await make_server(reply_seconds=1.2, server_aec_double_talk=enabled)
        clock = ManualClock()
        async with SimulatedDevice(ws_url=ws_url(server), protocol_version=2, aec=True, clock=clock) as device:
            await _reply(device)
            (connection,) = server.transport.connections.values()
            assert connection.echo is not None
            assert (connection.echo.doubletalk is not None) is enabled
            for _ in range(5):
                clock.now += 0.06
                await device.stream_audio(tone(0.06), realtime=False)
            for _ in range(100):
                if connection.echo.stats.frames >= 5:
                    break
                await asyncio.sleep(0.02)
            assert connection.echo.stats.frames == 5
            if enabled:
                assert connection.echo.doubletalk.hops == 5 * 6  # six 10 ms hops per 60 ms frame
