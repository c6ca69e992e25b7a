"""`vixio device`: run one exchange with a simulated Xiaozhi device against a server.

    vixio device --ws ws://127.0.0.1:8000/xiaozhi/v1/ --text "what time is it?"
    vixio device --ota http://127.0.0.1:8003/xiaozhi/ota/ --wav question.wav --record out/
    vixio device --ws ws://... --mode manual --wav question.wav      # push-to-talk
    vixio device --ota http://127.0.0.1:8003/xiaozhi/ota/ --mqtt --text "hi"   # MQTT + UDP (mqtt.enabled)

Every JSON message received is printed on one line with its arrival time; a summary of
the downlink audio follows. The exit status is 0 when each input got a `tts stop` in
time and the server did nothing that would crash a real device, 1 otherwise.

This module imports the device lazily so `vixio --help` works without the `xiaozhi` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import sys
import time
import wave
from typing import TYPE_CHECKING, Any

from loguru import logger

if TYPE_CHECKING:
    from vixio.testing.device import ReceivedMessage, SimulatedDevice

_SILENCE_CHUNK_S = 0.6
"""Trailing silence is streamed in chunks like this after a WAV, so the server VAD can end the turn."""
_WAKE_GREETING_GRACE_S = 1.5
"""After a wake word, how long to wait for a greeting to start before moving on."""
_ACTIVITY_POLL_S = 0.5
"""How often a reply that is still streaming is looked at again (its `--timeout` restarts then)."""


def add_device_parser(subparsers: Any) -> None:
    """Register the `device` subcommand on an argparse `add_subparsers()` object."""
    parser = subparsers.add_parser(
        "device",
        help="run one exchange with a simulated Xiaozhi device",
        description="Connect a firmware-faithful simulated Xiaozhi device, send typed text and/or a WAV, "
        "print what the server sends, and exit non-zero on failure.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--ota", metavar="URL", help="OTA URL to bootstrap from, like a real device at boot")
    target.add_argument("--ws", metavar="URL", help="WebSocket URL to connect to directly (skips OTA)")
    parser.add_argument(
        "--mqtt",
        action="store_true",
        help="speak MQTT + UDP as the firmware does when OTA hands out `mqtt` (needs --ota)",
    )
    parser.add_argument("--token", default="", help="bearer token for --ws (OTA hands one out otherwise)")
    parser.add_argument("--device-id", metavar="MAC", help="lowercase MAC such as aa:bb:cc:dd:ee:ff (default: random)")
    parser.add_argument(
        "--protocol-version",
        type=int,
        choices=(1, 2, 3),
        default=1,
        help="binary protocol version (default 1; an OTA websocket.version overrides it)",
    )
    parser.add_argument(
        "--aec",
        action="store_true",
        help="firmware built with CONFIG_USE_SERVER_AEC: announce features.aec and, over protocol v2, "
        "stamp each microphone frame with the timestamp of a downlink frame it played",
    )
    parser.add_argument(
        "--mode",
        choices=("auto", "manual", "realtime"),
        default="auto",
        help="listening mode (default auto; manual = push-to-talk)",
    )
    parser.add_argument("--text", metavar="TEXT", help="typed utterance, sent as `listen detect`")
    parser.add_argument("--wav", metavar="FILE", help="spoken utterance: a WAV file (any rate, mono or stereo)")
    parser.add_argument(
        "--wake-word",
        nargs="?",
        const="你好小智",
        metavar="TEXT",
        help="start with a wake word (default text 你好小智)",
    )
    parser.add_argument("--record", metavar="DIR", help="save messages.json and received.wav here")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds without any message or audio from the server before giving up on a "
        "reply (default 30; a long answer that keeps speaking is waited for)",
    )
    parser.set_defaults(func=run_device)


def run_device(args: argparse.Namespace) -> int:
    """Run the exchange described by `args`; returns the process exit status."""
    if args.mqtt and not args.ota:
        print("error: --mqtt needs --ota (the MQTT credentials come from OTA)", file=sys.stderr)
        return 2
    if args.wav is not None:
        from pathlib import Path

        from vixio.testing.device.audio import read_wav_16k_mono

        if not Path(args.wav).is_file():
            print(f"error: --wav {args.wav}: no such file", file=sys.stderr)
            return 2
        try:
            read_wav_16k_mono(args.wav)
        except (wave.Error, EOFError, ValueError) as exc:
            print(f"error: --wav {args.wav} is not a PCM WAV file: {exc}", file=sys.stderr)
            return 2
    try:
        return asyncio.run(_exchange(args))
    except KeyboardInterrupt:
        return 130


def describe_failure(exc: BaseException, url: str | None) -> str:
    """One line saying why the exchange failed (no traceback)."""
    from websockets.exceptions import InvalidStatus

    cause = exc.__cause__
    if isinstance(cause, InvalidStatus | OSError):  # the device (and its OTA fetch) wraps what went wrong
        exc = cause
    if isinstance(exc, InvalidStatus):
        response = exc.response
        body = response.body.decode("utf-8", "replace").strip() if response.body else ""
        reason = f" ({body})" if body else ""
        return f"the server refused the connection with HTTP {response.status_code}{reason}"
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return f"connection refused{f' by {url}' if url else ''}: is `vixio serve` running on that port?"
    if isinstance(exc, TimeoutError) and not str(exc):
        return "no answer in time (see --timeout)"
    if isinstance(exc, OSError) and exc.strerror:  # aiohttp's connector errors carry the socket's
        return f"cannot reach {url or 'the server'}: {exc.strerror}"
    return str(exc) or type(exc).__name__


async def _exchange(args: argparse.Namespace) -> int:
    from vixio.testing.device import DeviceError, SimulatedDevice

    device = SimulatedDevice(
        ota_url=args.ota,
        ws_url=args.ws,
        token=args.token,
        device_id=args.device_id,
        protocol_version=args.protocol_version,
        listening_mode=args.mode,
        mqtt=args.mqtt,
        aec=args.aec,
    )
    started = time.monotonic()

    def show(message: ReceivedMessage) -> None:
        line = json.dumps(message.data, ensure_ascii=False, separators=(",", ":"))
        print(f"[{message.time - started:7.3f}s] {line}", flush=True)

    device.on_message = show
    ok = True
    try:
        await asyncio.wait_for(device.connect(), args.timeout)
        if args.wake_word:
            mark = device.mark()
            await device.wake_word(args.wake_word)
            await _maybe_reply(device, mark, args.timeout)
        if args.text:
            if args.mqtt:  # the server learns the UDP address from the microphone, as with a button press
                from vixio.testing.device.audio import silence

                await device.start_listening()
                await device.stream_audio(silence(0.3))
            mark = device.mark()
            await device.send_text(args.text)
            await _reply(device, mark, args.timeout)
        if args.wav:
            mark = device.mark()
            await _speak(device, args.wav, mark, args.timeout)
            await _reply(device, mark, args.timeout)
        if not (args.wake_word or args.text or args.wav):
            await asyncio.sleep(1.0)  # nothing to say: show the handshake and MCP traffic only
    except Exception as exc:  # noqa: BLE001 - every failure is one line for the user
        expected = isinstance(exc, DeviceError | TimeoutError | OSError) or type(exc).__module__.startswith(
            "websockets"
        )
        print(f"error: {describe_failure(exc, args.ws or args.ota)}", file=sys.stderr)
        if not expected:
            logger.opt(exception=exc).debug("device exchange failed")
        ok = False
    finally:
        await device.close()
        await device.shutdown()  # an MQTT device leaves its broker
        if args.record:
            device.save_recording(args.record)
    if device.received or device.audio_frames or device.faults:  # nothing came back: the error line says why
        _summary(device, args.record)
    return 0 if ok and not device.faults else 1


async def _speak(device: SimulatedDevice, wav: str, mark: int, timeout: float) -> None:
    """Say the WAV like a person would in the device's mode."""
    from vixio.testing.device.audio import silence

    if device.default_listening_mode == "manual":
        await device.push_to_talk(wav)
        return
    if device.state != "listening":
        await device.start_listening()
    await device.stream_wav(wav)
    # The mic keeps streaming (silence) until the server's VAD ends the turn and speaks.
    deadline = asyncio.get_running_loop().time() + timeout
    while device.recording.find("tts", "start", mark) is None and asyncio.get_running_loop().time() < deadline:
        if device.state != "listening":
            break
        await device.stream_audio(silence(_SILENCE_CHUNK_S))


async def _reply(device: SimulatedDevice, mark: int, timeout: float) -> None:
    """Wait for the reply's `tts stop` and for playback to finish. `timeout` bounds the wait for
    something to arrive, not the whole reply: a long answer keeps streaming audio for longer than
    any fixed limit (30 s cut off a long story halfway)."""
    loop = asyncio.get_running_loop()
    recording = device.recording
    seen, since = -1, loop.time()
    while True:
        arrived = len(recording.received) + len(recording.audio_frames)
        if arrived != seen:
            seen, since = arrived, loop.time()
        left = since + timeout - loop.time()
        if left <= 0:
            raise TimeoutError(
                f"message 'tts stop' did not happen within {timeout:g} s of the last message or "
                f"audio (received {recording.types_since(mark)})"
            )
        try:
            await device.wait_for("tts", state="stop", timeout=min(left, _ACTIVITY_POLL_S), after=mark)
            break
        except TimeoutError:
            continue
    await device.wait_until_idle(timeout=timeout)


async def _maybe_reply(device: SimulatedDevice, mark: int, timeout: float) -> None:
    """A greeting after a wake word is optional: wait for it only if it starts."""
    try:
        await device.wait_for("tts", state="start", timeout=_WAKE_GREETING_GRACE_S, after=mark)
    except TimeoutError:
        return
    await _reply(device, mark, timeout)


def _summary(device: SimulatedDevice, record: str | None) -> None:
    played = [frame for frame in device.audio_frames if frame.played]
    seconds = sum(frame.duration for frame in played)
    dropped = device.drop_counts()
    drops = ", ".join(f"{reason}: {count}" for reason, count in sorted(dropped.items())) or "none"
    print(
        f"audio: {len(device.audio_frames)} frames received, {len(played)} played ({seconds:.2f} s), dropped: {drops}",
        file=sys.stderr,
    )
    for warning in device.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for fault in device.faults:
        print(f"FAULT (a real device would crash or hang): {fault}", file=sys.stderr)
    if record:
        print(f"recording saved to {record}", file=sys.stderr)
