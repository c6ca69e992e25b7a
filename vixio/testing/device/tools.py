"""The tools the simulated device offers over MCP, and how it checks and answers a call to one.

`default_tools` are the firmware's common tools (first, for prompt caching) and its user-only
tools, acting on a `DeviceStatus`; a test adds its own `DeviceTool`s. `validate_arguments` checks
arguments as `McpServer::DoToolCall` does (a property without a default is required; a value of
the wrong JSON type counts as missing; integers are truncated and range-checked), and
`result_text` is how a handler's return value becomes `content[0].text`. The JSON-RPC server that
lists and calls them is mcp.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

ToolHandler = Callable[[dict[str, Any]], Any | Awaitable[Any]]


@dataclass
class DeviceTool:
    """A tool the device offers over MCP.

    `input_schema` is `{"type":"object","properties":{...},"required":[...]}`. The firmware
    uses property types boolean, integer (with `minimum`/`maximum`/`default`) and string;
    number, array and object are accepted here as a convenience. A property without a
    `default` is required whether or not it is listed in `required`, as on the device.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: ToolHandler
    """Gets the validated arguments (defaults filled in); may be async and slow."""
    user_only: bool = False
    """Listed only with `withUserTools: true`, with `annotations.audience == ["user"]`."""

    def to_json(self) -> dict[str, Any]:
        """The tool as it appears in `tools/list`."""
        schema = self.input_schema or {"type": "object", "properties": {}}
        entry: dict[str, Any] = {"name": self.name, "description": self.description, "inputSchema": schema}
        if self.user_only:
            entry["annotations"] = {"audience": ["user"]}
        return entry


@dataclass
class McpToolResult:
    """Return it from a tool handler to send a `tools/call` result exactly as given — several
    content blocks, `isError: true`, `structuredContent` — which firmware 2.4.2 never does but
    other MCP servers on the same channel (xiaozhi-sdk, newer boards) may."""

    content: list[dict[str, Any]]
    is_error: bool = False
    structured: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = {"content": self.content, "isError": self.is_error}
        if self.structured is not None:
            result["structuredContent"] = self.structured
        return result


async def hang_forever(arguments: dict[str, Any]) -> Any:
    """A tool handler that never returns, for server-side tool-call timeout tests."""
    await asyncio.Event().wait()


@dataclass
class DeviceStatus:
    """Simulated hardware state, reported by `self.get_device_status` and changed by tools."""

    volume: int = 70
    brightness: int = 80
    theme: str = "light"
    battery_level: int = 85
    charging: bool = False
    ssid: str = "vixio-sim"
    signal: str = "strong"
    chip_temperature: float = 45.1

    def to_json(self) -> dict[str, Any]:
        """Shape of `Board::GetDeviceStatusJson()`."""
        return {
            "audio_speaker": {"volume": self.volume},
            "screen": {"brightness": self.brightness, "theme": self.theme},
            "battery": {"level": self.battery_level, "charging": self.charging},
            "network": {"type": "wifi", "ssid": self.ssid, "signal": self.signal},
            "chip": {"temperature": self.chip_temperature},
        }


class ToolArgumentError(Exception):
    """An argument failed the schema check; the message is the device's error text."""


def compact_json(value: Any) -> str:
    # cJSON_PrintUnformatted: no spaces, UTF-8 as is.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _int_schema(minimum: int = 0, maximum: int = 100) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def default_tools(
    status: DeviceStatus, system_info: Callable[[], dict[str, Any]], reboot: Callable[[], None]
) -> list[DeviceTool]:
    """The firmware's common tools (first, for prompt caching) and its user-only tools."""

    def set_volume(args: dict[str, Any]) -> bool:
        status.volume = args["volume"]
        return True

    def set_brightness(args: dict[str, Any]) -> bool:
        status.brightness = args["brightness"]
        return True

    def set_theme(args: dict[str, Any]) -> bool:
        status.theme = args["theme"]
        return True

    def do_reboot(args: dict[str, Any]) -> bool:
        reboot()
        return True

    def obj(properties: dict[str, Any]) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        required = [name for name, prop in properties.items() if "default" not in prop]
        if required:
            schema["required"] = required
        return schema

    return [
        DeviceTool(
            "self.get_device_status",
            "Report the device's live state: speaker volume, screen brightness and theme, battery, "
            "network and chip temperature. Call it to answer questions about the device and before "
            "changing a setting relative to its current value.",
            obj({}),
            lambda args: status.to_json(),
        ),
        DeviceTool(
            "self.audio_speaker.set_volume",
            "Set the speaker volume (0-100). If the current volume is unknown, read it with "
            "self.get_device_status first.",
            obj({"volume": _int_schema()}),
            set_volume,
        ),
        DeviceTool(
            "self.screen.set_brightness",
            "Set the screen backlight brightness (0-100).",
            obj({"brightness": _int_schema()}),
            set_brightness,
        ),
        DeviceTool(
            "self.screen.set_theme",
            "Set the screen theme: `light` or `dark`.",
            obj({"theme": {"type": "string"}}),
            set_theme,
        ),
        DeviceTool(
            "self.get_system_info",
            "Return the device's system information (the OTA report).",
            obj({}),
            lambda args: system_info(),
            user_only=True,
        ),
        DeviceTool("self.reboot", "Reboot the device.", obj({}), do_reboot, user_only=True),
    ]


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def validate_arguments(tool: DeviceTool, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """Check `arguments` like `McpServer::DoToolCall`; returns them with defaults filled in."""
    properties: dict[str, Any] = (tool.input_schema or {}).get("properties", {})
    values: dict[str, Any] = {}
    for name, prop in properties.items():
        kind = prop.get("type", "string")
        value: Any = (arguments or {}).get(name)
        matches = _JSON_TYPES.get(kind, lambda v: v is not None)
        if name in (arguments or {}) and matches(value):
            if kind == "integer":
                value = int(value)  # cJSON valueint truncates a fractional number
                if "minimum" in prop and value < prop["minimum"]:
                    raise ToolArgumentError(f"Value is below minimum allowed: {prop['minimum']}")
                if "maximum" in prop and value > prop["maximum"]:
                    raise ToolArgumentError(f"Value exceeds maximum allowed: {prop['maximum']}")
            values[name] = value
        elif "default" in prop:
            values[name] = prop["default"]
        else:
            raise ToolArgumentError(f"Missing valid argument: {name}")
    return values


def result_text(value: Any) -> str:
    """How a tool's return value becomes `content[0].text` on the device."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return value
    return compact_json(value)
