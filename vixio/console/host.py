"""What the console needs of the process it serves: a small protocol instead of the server class.

The console sits below the application layer (docs/architecture.md, "Layers"): it knows the
parts a server is made of — the transport, the HTTP port, the store, the voice stack — but not
the class that wires them (`vixio.app.server.VixioServer`, which satisfies this protocol).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vixio.config.models import VixioConfig
    from vixio.memory.conversation import ConversationMemory
    from vixio.profiles.book import ProfileBook
    from vixio.state.store import Store
    from vixio.transports.xiaozhi.http.ota import OtaServer
    from vixio.transports.xiaozhi.websocket.transport import XiaozhiTransport
    from vixio.voice.session_tools import SessionTools
    from vixio.voice.stack import VoiceStack


class LiveProfileLookup(Protocol):
    """A live session's profile (its `choice` and a `pending` switch), by session id."""

    def get(self, session_id: str) -> Any: ...


class ConsoleHost(Protocol):
    """One process's server, as the console reads and drives it."""

    config: VixioConfig
    store: Store
    book: ProfileBook
    transport: XiaozhiTransport
    ota: OtaServer
    voice: VoiceStack
    tools: dict[str, SessionTools]

    @property
    def profiles(self) -> LiveProfileLookup:
        """Read-only here (a property: the server's own type may be richer)."""
        ...

    def memories(self) -> list[ConversationMemory]:
        """The conversation memories in use (one per profile)."""
        ...

    def reassign(self, device_id: str, profile: str | None) -> list[dict[str, Any]]:
        """Switch a device's live sessions to `profile` (None: what the config says)."""
        ...
