"""The simulated Xiaozhi device: `from vixio.testing.device import SimulatedDevice`.

    device.py     SimulatedDevice: what a user does to the device and what a test reads
    core.py       how the device reacts to the server (FW application.cc): states, playback
    protocol.py   the WebSocket layer: handshake headers, hello, framing, the silence rule
    ota.py        the OTA / activation exchange at every boot
    mcp.py        the device-side MCP server (JSON-RPC as firmware 2.4.2 answers it)
    tools.py      the tools it offers: the firmware's, argument checks, result text
    camera.py     the camera tool (`self.camera.take_photo`)
    audio.py      the playback queue model, uplink encoding, WAV I/O
    recording.py  what the device saw and sent, with times, and how to wait on it
    errors.py     the errors it raises, each a diagnosis
    cli.py        `vixio device`

Nothing is imported eagerly, so `vixio.testing.device.cli` (wired into the `vixio` CLI) loads
without the `xiaozhi` extra; the names below load device.py on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vixio.testing.device.device import (
        DeviceDisconnected,
        DeviceError,
        DeviceState,
        DeviceTool,
        HelloError,
        ListeningMode,
        McpToolResult,
        OtaError,
        ReceivedFrame,
        ReceivedMessage,
        SentMessage,
        SimulatedDevice,
        hang_forever,
        random_device_id,
    )

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


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vixio.testing.device import device

        return getattr(device, name)
    raise AttributeError(f"module 'vixio.testing.device' has no attribute {name!r}")
