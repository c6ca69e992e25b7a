"""A firmware-faithful simulated Xiaozhi device, for people without hardware and for tests.

It behaves like firmware 2.4.2 (docs/xiaozhi-protocol.md §1-§5), quirks included, and records
everything so a test can assert what a server did:

    device = SimulatedDevice(ws_url="ws://127.0.0.1:8000/xiaozhi/v1/")
    await device.connect()
    await device.send_text("what time is it?")
    await device.wait_for("tts", state="stop")
    await device.wait_until_idle()
    assert device.drop_counts() == {} and device.faults == []
    await device.close()

`core.DeviceCore` holds how the device reacts to the server; this module adds
what a user does to it (buttons, microphone, wake word) and what a test reads from it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from vixio.testing.device.audio import WAKE_WORD_AUDIO_SECONDS, ReceivedFrame, encode_uplink, read_wav_16k_mono
from vixio.testing.device.core import DeviceCore, DeviceState, ListeningMode
from vixio.testing.device.errors import DeviceDisconnected, DeviceError, HelloError, OtaError
from vixio.testing.device.mcp import McpStats
from vixio.testing.device.mqtt_protocol import DeviceMqttProtocol
from vixio.testing.device.ota import random_device_id
from vixio.testing.device.recording import ReceivedMessage, SentMessage
from vixio.testing.device.tools import DeviceTool, McpToolResult, hang_forever
from vixio.transports.xiaozhi.protocol.codec import UPLINK_SAMPLE_RATE, OpusEncoder

DEFAULT_WAKE_WORD = "你好小智"

__all__ = [
    "DeviceDisconnected",
    "DeviceError",
    "DeviceState",
    "DeviceTool",
    "HelloError",
    "ListeningMode",
    "McpToolResult",
    "OtaError",
    "ReceivedFrame",
    "ReceivedMessage",
    "SentMessage",
    "SimulatedDevice",
    "hang_forever",
    "random_device_id",
]


class SimulatedDevice(DeviceCore):
    """One ESP32 Xiaozhi device driven by a test: see the module docstring.

    Construct with the keyword arguments of `DeviceCore` (`ota_url` or `ws_url`,
    `device_id`, `protocol_version`, `aec`, `mcp`, `listening_mode`, `tools`, ...).
    """

    async def __aenter__(self) -> SimulatedDevice:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
        await self.shutdown()

    async def shutdown(self) -> None:
        """Power off: an MQTT device also leaves its broker (a WebSocket one has nothing more to close)."""
        if isinstance(self.protocol, DeviceMqttProtocol):
            await self.protocol.shutdown()

    async def send_json(self, obj: Any) -> None:
        """Send any JSON object as is (no session_id added); for malformed-input tests."""
        await self.protocol.send_json(obj)

    async def send_raw(self, data: str | bytes) -> None:
        """Send a raw text or binary message, unframed; for malformed-input tests."""
        await self.protocol.send_raw(data)

    async def start_listening(self, mode: ListeningMode | None = None) -> None:
        """Enter `listening` and send `listen start {mode}` (default: the constructor's mode).

        Opens the channel if needed; when speaking it aborts first, like push-to-talk.
        """
        await self._ensure_channel()
        self._cancel_relisten()
        if self.state == "speaking":
            await self.abort()
        self.listening_mode = mode or self.default_listening_mode
        self._set_state("listening")
        await self._send_listen_start(self.listening_mode)

    async def stop_listening(self) -> None:
        """Send `listen stop` and go idle with the channel open (push-to-talk release)."""
        if self.state != "listening":
            self._log.warning("stop_listening() ignored in state {}, as on the device", self.state)
            return
        await self.protocol.send_json(self.protocol.message("listen", state="stop"))
        self._set_state("idle")

    async def send_text(self, text: str) -> None:
        """Type an utterance: `listen detect {text}`, as test clients and the XS web page do."""
        await self._ensure_channel()
        await self.protocol.send_json(self.protocol.message("listen", state="detect", text=text))

    async def wake_word(self, text: str = DEFAULT_WAKE_WORD, audio: bytes | None = None) -> None:
        """Wake word heard: [the last 2 s of `audio`, 16 kHz PCM, as Opus], `listen detect`, `listen start`.

        While speaking or listening it sends `abort {reason: wake_word_detected}` and listens again.
        """
        if self.connected and self.state in ("speaking", "listening"):
            await self.abort("wake_word_detected")
            self._cancel_relisten()
            self._set_state("listening")
            await self._send_listen_start(self.listening_mode)
            return
        self._set_state("connecting")
        if self.protocol.timed_out():
            await self.protocol.close()
        if not self.connected:
            await self._open_channel()
        if audio:
            # The firmware sends its cached wake-word packets back to back, unpaced.
            keep = int(WAKE_WORD_AUDIO_SECONDS * UPLINK_SAMPLE_RATE) * 2
            for packet in encode_uplink(audio[-keep:], self.uplink_frame_ms):
                await self._send_packet(packet)
        await self.protocol.send_json(self.protocol.message("listen", state="detect", text=text))
        self.listening_mode = self.default_listening_mode
        self._set_state("listening")
        await self._send_listen_start(self.listening_mode)

    async def abort(self, reason: str | None = None) -> None:
        """Send `abort` (button while speaking); the device stays speaking until `tts stop`."""
        fields = {"reason": reason} if reason else {}
        await self.protocol.send_json(self.protocol.message("abort", **fields))

    async def press_button(self) -> None:
        """The boot button (`ToggleChatState`): idle -> listen, speaking -> abort, listening -> close."""
        if self.state == "speaking":
            await self.abort()
        elif self.state == "listening":
            await self.close()
        else:
            await self.start_listening()

    def _mic_open(self) -> bool:
        # auto/manual turn the mic off while speaking; realtime keeps it on (needs AEC).
        return self.connected and (
            self.state == "listening" or (self.state == "speaking" and self.listening_mode == "realtime")
        )

    async def stream_audio(self, pcm16k: bytes, *, realtime: bool = True) -> int:
        """Send 16 kHz mono int16 PCM as Opus packets, one per message, paced at real time.

        Only while the mic is open (listening, or speaking in realtime mode); streaming stops
        when it closes mid-way. Returns the number of packets sent. With `aec` over v2 each
        packet carries the stamp of a downlink frame already played, by the firmware's rule
        (`stamps.py`; `uplink_stamps` lists them).
        """
        if not self._mic_open():
            raise DeviceError(
                f"the mic streams only while listening (or speaking in realtime mode); "
                f"state is {self.state}, mode {self.listening_mode}"
            )
        if self._mic_encoder is None:
            self._mic_encoder = OpusEncoder(UPLINK_SAMPLE_RATE, 1, self.uplink_frame_ms)
        packets = encode_uplink(pcm16k, self.uplink_frame_ms, self._mic_encoder)
        loop = asyncio.get_running_loop()
        start, step = loop.time(), self.uplink_frame_ms / 1000
        for index, packet in enumerate(packets):
            if realtime and (delay := start + index * step - loop.time()) > 0:
                await asyncio.sleep(delay)
            if not self._mic_open():
                self._log.info("mic closed ({}) after {} of {} packets", self.state, index, len(packets))
                return index
            # A microphone frame takes its stamp as it is captured (FW `PushTaskToEncodeQueue`).
            await self._send_packet(packet, self._speaker.mic_frame_stamp(self._clock()))
        return len(packets)

    async def stream_wav(self, path: str | Path, *, realtime: bool = True) -> int:
        """Stream a WAV file (any rate, mono or stereo) as the mic would; returns packets sent."""
        return await self.stream_audio(read_wav_16k_mono(path), realtime=realtime)

    async def push_to_talk(self, pcm16k_or_path: bytes | str | Path, *, realtime: bool = True) -> int:
        """Hold the talk button: `listen start manual`, stream, `listen stop`; returns packets sent."""
        pcm = read_wav_16k_mono(pcm16k_or_path) if isinstance(pcm16k_or_path, str | Path) else pcm16k_or_path
        await self.start_listening("manual")
        sent = await self.stream_audio(pcm, realtime=realtime)
        await self.stop_listening()
        return sent

    # ---------------------------------------------------------------- waiting and results

    def mark(self) -> int:
        """Index of the next received message; pass it as `after=` to `wait_for`."""
        return len(self.received)

    async def wait_for(
        self, type: str, *, state: str | None = None, timeout: float = 10.0, after: int = 0
    ) -> dict[str, Any]:
        """The first received JSON message at index >= `after` with this `type` (and `state`).

        Raises TimeoutError, or DeviceDisconnected as soon as the channel closes without it (an MQTT
        device idle on its broker connection still receives pushes).
        """
        label = type + (f" {state}" if state else "")
        return await self.recording.wait(
            lambda: self.recording.find(type, state, after),
            timeout,
            give_up=lambda: None if self._reachable() else f"the channel closed (code {self.close_code})",
            describe=lambda: f"message {label!r} (received {self.recording.types_since(after)})",
        )

    def _reachable(self) -> bool:
        """Messages can still arrive: the channel is open, or (MQTT) the broker connection is."""
        return self.connected or isinstance(self.protocol, DeviceMqttProtocol) and self.protocol.mqtt_connected

    async def wait_for_state(self, state: DeviceState, *, timeout: float = 10.0) -> None:
        """Wait until the device is in `state`."""
        await self.recording.wait(
            lambda: True if self.state == state else None,
            timeout,
            give_up=lambda: None,
            describe=lambda: f"state {state!r} (now {self.state!r})",
        )

    async def wait_until_idle(self, *, timeout: float = 10.0) -> None:
        """Wait until the device is not speaking, playback has drained (and the auto-mode
        `listen start` is out) and no tool call is running."""

        def settled() -> bool | None:
            busy = (
                self.state == "speaking"
                or self._speaker.queue.is_playing(self._clock())
                or (self._relisten is not None and not self._relisten.done())
                or (self._mcp is not None and self._mcp.pending_calls > 0)
            )
            return None if busy else True

        await self.recording.wait(
            settled, timeout, give_up=lambda: None, describe=lambda: f"idle (state {self.state!r})"
        )

    async def wait_closed(self, *, timeout: float = 10.0) -> None:
        """Wait until the channel is closed (by either side)."""
        await self.recording.wait(
            lambda: True if not self.connected else None,
            timeout,
            give_up=lambda: None,
            describe=lambda: "channel close",
        )

    def decoded_audio(self) -> bytes:
        """int16 PCM of the played frames at the server hello's `sample_rate`."""
        return self.recording.decoded_audio(self.server_sample_rate)

    @property
    def uplink_stamps(self) -> list[int]:
        """The v2 timestamp each uplink packet carried, in send order: with `aec` the stamps of
        the downlink frames played (`audio.Speaker.mic_frame_stamp`), else 0."""
        return self.recording.uplink_stamps

    def drop_counts(self) -> dict[str, int]:
        """Dropped downlink frames per reason, e.g. `{"not_speaking": 2, "queue_full": 9}`."""
        return self.recording.drop_counts()

    @property
    def mcp_stats(self) -> McpStats:
        """MCP requests received and dropped, and the `vision` capability from `initialize`."""
        return self._mcp.stats if self._mcp is not None else McpStats()

    @property
    def mcp_requests(self) -> list[dict[str, Any]]:
        """Every MCP payload received, in order (dropped ones included)."""
        return self.mcp_stats.requests

    @property
    def mcp_tools(self) -> list[DeviceTool]:
        """Tools this device serves, in listing order (built-ins first)."""
        return self._mcp.tools if self._mcp is not None else []

    async def notify_mcp_tools_changed(self) -> None:
        """Send `notifications/tools/list_changed` after changing `mcp_tools` (add or remove entries)."""
        if self._mcp is None:
            raise DeviceError("this device announced no MCP support")
        await self._mcp.notify_tools_changed()

    def save_recording(self, directory: str | Path) -> None:
        """Write `messages.json` (timed messages in both directions) and `received.wav`."""
        summary = {
            "device_id": self.device_id,
            "client_id": self.client_id,
            "ws_url": self.ws_url,
            "protocol_version": self.protocol_version,
            "session_id": self.session_id,
            "server_hello": self.server_hello,
            "uplink_packets": self.uplink_packets,
            "mcp_dropped": self.mcp_stats.dropped,
            "warnings": self.warnings,
            "faults": self.faults,
        }
        self.recording.save(directory, summary, self.server_sample_rate)
