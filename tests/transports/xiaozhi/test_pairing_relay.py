"""RemoteCompanion: a companion held by another worker, as the device's host carries it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vixio.core.tools.types import ToolCallResult, ToolDefinition
from vixio.transports.xiaozhi.companions.relay import (
    MAX_QUEUED_MESSAGES,
    CompanionLink,
    RemoteCompanion,
)

pytestmark = pytest.mark.unit


class FakeLink:
    """Records what the proxy relays; `gate` holds sends, `gone` answers as a worker without the companion."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any], float]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.gone = False

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> ToolCallResult | None:
        self.calls.append((name, arguments, timeout))
        return None if self.gone else ToolCallResult.ok(f"{name} ran")

    async def send(self, message: dict[str, Any]) -> bool:
        await self.gate.wait()
        if self.gone:
            return False
        self.sent.append(message)
        return True

    def link(self) -> CompanionLink:
        return CompanionLink("w1", "companion-session", self.call, self.send)


def proxy(fake: FakeLink, lost: list[RemoteCompanion]) -> RemoteCompanion:
    tool = ToolDefinition("read_thermometer", "[From companion robot-a] Reads a room.", source="register")
    return RemoteCompanion(fake.link(), "robot-a", [tool], call_timeout=7.0, on_gone=lost.append)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_messages_go_in_order_and_a_stalled_worker_keeps_only_the_newest() -> None:
    fake, lost = FakeLink(), []
    remote = proxy(fake, lost)
    fake.gate.clear()
    await remote.send_notification({"n": 0})
    await settle()  # the sender holds message 0 while the companion's worker stalls
    for n in range(1, 301):
        await remote.send_notification({"n": n})
    fake.gate.set()
    await settle()
    dropped = 300 - MAX_QUEUED_MESSAGES
    assert [m["n"] for m in fake.sent] == [0, *range(dropped + 1, 301)]
    assert lost == [] and not remote.closed
    remote.close()


async def test_a_companion_gone_on_its_worker_is_dropped_once() -> None:
    fake, lost = FakeLink(), []
    remote = proxy(fake, lost)
    await remote.send_notification({"n": 1})
    await settle()
    fake.gone = True
    await remote.send_notification({"n": 2})
    await remote.send_notification({"n": 3})
    await settle()
    assert [m["n"] for m in fake.sent] == [1] and lost == [remote] and remote.closed
    result = await remote.call_tool("read_thermometer", {})
    assert not result.success and "disconnected" in (result.error or "") and lost == [remote]


async def test_its_tools_run_on_the_companion_through_the_link() -> None:
    fake, lost = FakeLink(), []
    remote = proxy(fake, lost)
    [tool] = remote.presented_tools
    assert tool.client is remote and tool.description.startswith("[From companion robot-a]")
    result = await tool.invoke({"room": "attic"})
    assert result.success and result.result == "read_thermometer ran"
    assert fake.calls == [("read_thermometer", {"room": "attic"}, 7.0)]
    fake.gone = True  # the companion left its worker: the call says so, and the proxy goes
    result = await tool.invoke({})
    assert not result.success and lost == [remote]
