"""The operator console: a page at `/console/` and a JSON API at `/api/` on the OTA port.

Sessions (live devices, what they heard and said, tool calls, latency marks), Discovery (every
tool the agent could call), an Executor (run a tool by hand through the agent's executor), a
Parser check (VCP/XML and the speech filter), a Say box, and the companions asking to pair
with a device (approve, unpair: console/pairing.py), each device's profile (assign, clear:
console/profiles.py), what the store keeps of each device (memory, history: console/memory.py), and
the re-binds of devices asked for by another Client-Id (console/identity.py).
See docs/console.md.

    console = Console(server)      # registers its routes on server.ota; before server.start()
    console.attach(session_id, tools)   # for each new session's tools
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vixio.console.api import ConsoleApi
from vixio.console.backend import ConsoleBackend, ConsoleError, LocalBackend
from vixio.console.fan_out import FanOutBackend
from vixio.console.identity import IdentityApi
from vixio.console.memory import MemoryApi
from vixio.console.pairing import LocalPairing, PairingApi
from vixio.console.profiles import ProfileApi
from vixio.console.reminders import ReminderApi
from vixio.console.speakers import SpeakersApi

if TYPE_CHECKING:
    from vixio.console.host import ConsoleHost
    from vixio.voice.session_tools import SessionTools

__all__ = ["Console", "ConsoleApi", "ConsoleBackend", "ConsoleError", "FanOutBackend", "LocalBackend"]


class Console:
    """The console of one server (a `ConsoleHost`): a `LocalBackend` and its routes on the OTA server."""

    def __init__(self, server: ConsoleHost, backend: ConsoleBackend | None = None) -> None:
        self.local = LocalBackend(server)
        agent = server.config.agent
        self.api = ConsoleApi(
            backend or self.local,
            server.ota.admin,  # one guard: one wrong-token throttle
            vcp_fuzzy=bool(agent is not None and agent.vcp_fuzzy_markers),
        )
        self.api.register(server.ota.add_route)
        registry = server.transport.companions
        self.pairing_local = LocalPairing(registry)
        """This process's companions (a worker serves them to the supervisor's console)."""
        self.pairing: PairingApi | None = None
        if registry.policy is not None:  # the server's transport always has one
            self.pairing = PairingApi(registry.policy.store, self.pairing_local)
            self.pairing.register(server.ota.add_route, self.api._protect)
        self.profiles = ProfileApi(server.store, server.book, lambda: self.api.backend)
        self.profiles.register(server.ota.add_route, self.api._protect)
        self.memory = MemoryApi(server.store, server.config.memory, lambda: self.api.backend)
        self.memory.register(server.ota.add_route, self.api._protect)
        self.speakers = SpeakersApi(server.store, server.config.speakers)
        self.speakers.register(server.ota.add_route, self.api._protect)
        self.identities = IdentityApi(server.store)
        self.identities.register(server.ota.add_route, self.api._protect)
        agent = server.config.agent
        self.reminders = ReminderApi(
            server.store, server.config.reminders, agent.timezone or "" if agent is not None else ""
        )
        self.reminders.register(server.ota.add_route, self.api._protect)
        self.api.say_to_device = self.reminders.say

    def use_backend(self, backend: ConsoleBackend) -> None:
        """Serve another backend's sessions (e.g. a `FanOutBackend` over every worker)."""
        self.api.backend = backend

    def attach(self, session_id: str, tools: SessionTools) -> None:
        self.local.attach(session_id, tools)

    def stop_streams(self) -> None:
        """End the page's open event streams; before the HTTP server stops, which waits for them."""
        self.api.close()

    async def close(self) -> None:
        self.api.close()
        await self.local.close()
