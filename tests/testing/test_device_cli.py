"""`vixio device`: one exchange against a loopback server, as a user would run it."""

from __future__ import annotations

import argparse
import asyncio
import json
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.testing.conftest import SESSION, DeviceConnection, LoopbackServer, downlink_packets
from vixio.testing.device.cli import add_device_parser

pytestmark = pytest.mark.integration


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vixio")
    add_device_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["device", *argv])


async def run_in_thread(args: argparse.Namespace) -> int:
    # run_device owns its event loop (asyncio.run), like the real CLI.
    return await asyncio.to_thread(args.func, args)


async def answer(connection: DeviceConnection, frames: int = 4) -> None:
    await connection.send_json({"session_id": SESSION, "type": "stt", "text": "you said something"})
    await connection.tts("start")
    await connection.send_frames(downlink_packets(frames), prebuffer=5)
    await connection.tts("stop")


async def test_text_exchange_prints_one_line_per_message_and_records(
    server: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(
        "--ws",
        server.ws_url,
        "--text",
        "what time is it",
        "--record",
        str(tmp_path / "rec"),
        "--timeout",
        "5",
        "--device-id",
        "aa:bb:cc:dd:ee:01",
    )
    running = asyncio.create_task(run_in_thread(args))
    connection = await server.accept()
    await connection.handshake()
    detect = await connection.next_json("listen")
    assert detect["state"] == "detect" and detect["text"] == "what time is it"
    assert connection.headers["Device-Id"] == "aa:bb:cc:dd:ee:01"
    await answer(connection)
    assert await running == 0

    lines = capsys.readouterr().out.splitlines()
    messages = [json.loads(line.split("] ", 1)[1]) for line in lines]
    assert [(m["type"], m.get("state")) for m in messages] == [
        ("hello", None),
        ("stt", None),
        ("tts", "start"),
        ("tts", "stop"),
    ]
    assert all(line.startswith("[") for line in lines)
    recorded = json.loads((tmp_path / "rec" / "messages.json").read_text(encoding="utf-8"))
    assert recorded["audio"]["played"] == 4 and recorded["faults"] == []


async def test_push_to_talk_wav_is_resampled_and_streamed(
    server: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "question.wav"
    t = np.arange(int(0.3 * 44100)) / 44100
    mono = (np.sin(2 * np.pi * 440 * t) * 9000).astype("<i2")
    with wave.open(str(path), "wb") as wav:  # stereo 44.1 kHz: the device must mix down and resample
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(44100)
        wav.writeframes(np.repeat(mono, 2).tobytes())
    args = parse("--ws", server.ws_url, "--mode", "manual", "--wav", str(path), "--timeout", "5")
    running = asyncio.create_task(run_in_thread(args))
    connection = await server.accept()
    await connection.handshake()
    assert (await connection.next_json("listen"))["mode"] == "manual"
    assert (await connection.next_json("listen"))["state"] == "stop"
    assert len(connection.binaries) == 5  # 0.3 s at 16 kHz in 60 ms packets
    await answer(connection, frames=2)
    assert await running == 0
    assert "2 played" in capsys.readouterr().err


async def test_no_reply_within_timeout_exits_non_zero(
    server: LoopbackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse("--ws", server.ws_url, "--text", "hello?", "--timeout", "0.5")
    running = asyncio.create_task(run_in_thread(args))
    connection = await server.accept()
    await connection.handshake()
    await connection.next_json("listen")
    assert await running == 1
    assert "did not happen within 0.5 s" in capsys.readouterr().err


async def test_aec_flag_announces_server_aec(server: LoopbackServer) -> None:
    args = parse("--ws", server.ws_url, "--text", "hello?", "--timeout", "5", "--aec")
    running = asyncio.create_task(run_in_thread(args))
    connection = await server.accept()
    hello = await connection.handshake()
    assert hello["features"]["aec"] is True
    await connection.next_json("listen")
    await answer(connection)
    assert await running == 0


async def test_missing_transport_in_hello_exits_non_zero(
    server: LoopbackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse("--ws", server.ws_url, "--text", "hello?", "--timeout", "2")
    running = asyncio.create_task(run_in_thread(args))
    connection = await server.accept()
    await connection.handshake(transport=None)
    assert await running == 1
    assert "FAULT" in capsys.readouterr().err


def test_a_file_that_is_not_wav_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_wav = tmp_path / "notes.wav"
    not_wav.write_text("these are notes, not audio")
    args = parse("--ws", "ws://127.0.0.1:9/", "--wav", str(not_wav))
    assert args.func(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --wav {not_wav} is not a PCM WAV file")


async def test_a_refused_connection_is_one_line(unused_tcp_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"ws://127.0.0.1:{unused_tcp_port}/xiaozhi/v1/"
    assert await run_in_thread(parse("--ws", url, "--text", "hi", "--timeout", "5")) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: connection refused by {url}: is `vixio serve` running on that port?"]


async def test_an_ota_url_on_a_closed_port_is_one_line(
    unused_tcp_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}/xiaozhi/ota/"
    assert await run_in_thread(parse("--ota", url, "--text", "hi", "--timeout", "5")) == 1
    output = capsys.readouterr()
    assert output.err.splitlines() == [f"error: connection refused by {url}: is `vixio serve` running on that port?"]
    assert output.out == ""


async def test_an_ota_host_that_does_not_resolve_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://vixio-no-such-host.invalid:8003/xiaozhi/ota/"
    assert await run_in_thread(parse("--ota", url, "--text", "hi", "--timeout", "5")) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot reach {url}: "), errors
    assert "ClientConnectorError" not in errors[0] and "ConnectionKey" not in errors[0]


async def test_a_401_is_one_line_with_the_reason(capsys: pytest.CaptureFixture[str]) -> None:
    from vixio.app.server import VixioServer
    from vixio.config.models import VixioConfig

    config = VixioConfig.model_validate(
        {
            "xiaozhi": {
                "host": "127.0.0.1",
                "port": 0,
                "http": {"host": "127.0.0.1", "port": 0},
                "auth": {"enabled": True, "secret": "s3cret"},
            },
        }
    )
    from loguru import logger

    server = VixioServer(config)
    await server.start()
    records: list[dict] = []
    sink = logger.add(lambda message: records.append(message.record), level="INFO")
    try:
        url = f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"
        args = parse(
            "--ws", url, "--token", "forged", "--device-id", "aa:bb:cc:00:11:22", "--text", "hi", "--timeout", "5"
        )
        assert await run_in_thread(args) == 1
    finally:
        logger.remove(sink)
        await server.stop()
    refused = [r for r in records if "handshake refused" in r["message"]]
    assert len(refused) == 1 and refused[0]["level"].name == "INFO"
    assert "device aa:bb:cc:00:11:22" in refused[0]["message"] and refused[0]["extra"]["device"] == "aa:bb:cc:00:11:22"
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: the server refused the connection with HTTP 401 (unauthorized"
    )


async def test_a_reply_longer_than_the_timeout_is_waited_for_while_it_streams(
    server: LoopbackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 46: `vixio device` gave up after 30 s, in the middle of a long answer. `--timeout`
    bounds the silence, not the reply: 3 s of audio paced at real time against a 1 s timeout."""
    args = parse("--ws", server.ws_url, "--text", "tell me a long story", "--timeout", "1")
    running = asyncio.create_task(run_in_thread(args))
    connection = await server.accept()
    await connection.handshake()
    await connection.next_json("listen")
    await answer(connection, frames=55)  # 5 at once, then one per 60 ms: ~3 s
    assert await running == 0, capsys.readouterr().err
