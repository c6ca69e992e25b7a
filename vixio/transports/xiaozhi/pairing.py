"""Pairing seed 002 companions with the Xiaozhi device of their `mac_addr`.

A companion is a client that speaks only seed 002 — a robot app, a virtual-human display: it
connects, sends `mcp/registerTools` with `params.mac_addr`, and never sends a Xiaozhi hello or
audio. When a Xiaozhi device whose Device-Id is that MAC is connected (now, or later), the
companion is *paired* with the device's session: its tools join that session's tools (the
device's model can call them; the calls go to the companion's socket) and that session's
`mcp/ai/message` stream (chunk / thought / final) is sent to it too. Until then, and after the
device leaves, it is *unpaired*: served in a session of its own (typed text, no audio) and told
so in the registration result. MACs compare without case or separators (`AA-BB-CC-DD-EE-FF`
pairs with `aa:bb:cc:dd:ee:ff`).

The registry lives in the transport (one per process); it only links `RegisterToolsClient`s:
every session has one, and a device session's client (the *host*) carries its companions.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from loguru import logger

if TYPE_CHECKING:
    from vixio.transports.xiaozhi.register_tools import RegisterToolsClient

_HEX = re.compile(r"[^0-9a-f]")
MAX_COMPANIONS_PER_DEVICE = 8
"""Companions one device carries at once; more are served unpaired (a bound on what a client can add)."""


def normalize_mac(value: str) -> str:
    """`aa:bb:cc:dd:ee:ff` for any spelling of a 48-bit MAC address, else ""."""
    digits = _HEX.sub("", value.lower()) if isinstance(value, str) else ""
    if len(digits) != 12 or len(value) > 20:
        return ""
    return ":".join(digits[i:i + 2] for i in range(0, 12, 2))


class CompanionRegistry:
    """Live devices by MAC, and the companions that asked for each MAC."""

    def __init__(self) -> None:
        self._hosts: dict[str, RegisterToolsClient] = {}
        """The register client of the live device session of each MAC."""
        self._companions: dict[str, list[RegisterToolsClient]] = {}
        """Companions waiting for or paired with each MAC, oldest first."""

    # --- devices --------------------------------------------------------------------------------

    def device_connected(self, device_id: str, host: RegisterToolsClient) -> None:
        """A Xiaozhi device said hello: companions waiting for its MAC pair with it now."""
        mac = normalize_mac(device_id)
        if not mac:
            return
        self._hosts[mac] = host
        for companion in self._companions.get(mac, []):
            self._attach(mac, host, companion)

    def device_disconnected(self, device_id: str, host: RegisterToolsClient) -> None:
        """The device left: its companions wait for it again."""
        mac = normalize_mac(device_id)
        if mac and self._hosts.get(mac) is host:
            del self._hosts[mac]
            for companion in self._companions.get(mac, []):
                companion.paired_with = ""

    def host(self, mac_addr: str) -> RegisterToolsClient | None:
        return self._hosts.get(normalize_mac(mac_addr))

    # --- companions -----------------------------------------------------------------------------

    def companion_registered(self, companion: RegisterToolsClient) -> bool:
        """`companion` registered (again): pair it if its device is here. True when paired."""
        mac = normalize_mac(companion.mac_addr)
        self.companion_left(companion)  # a new registration may name another MAC
        if not mac:
            return False
        host = self._hosts.get(mac)
        if host is companion:  # a device registering its own tools on its own connection
            return False
        waiting = self._companions.setdefault(mac, [])
        waiting.append(companion)
        if host is None:
            return False
        return self._attach(mac, host, companion)

    def companion_left(self, companion: RegisterToolsClient) -> None:
        """The companion disconnected or re-registered: unlink it everywhere."""
        for mac, companions in list(self._companions.items()):
            if companion in companions:
                companions.remove(companion)
                host = self._hosts.get(mac)
                if host is not None:
                    host.detach_companion(companion)
            if not companions:
                del self._companions[mac]
        companion.paired_with = ""

    def _attach(self, mac: str, host: RegisterToolsClient, companion: RegisterToolsClient) -> bool:
        if len(host.companions) >= MAX_COMPANIONS_PER_DEVICE and companion not in host.companions:
            logger.bind(session=companion.session_id).warning(
                "companion for {} not paired: the device has {} companions already", mac, len(host.companions))
            return False
        host.attach_companion(companion)
        companion.paired_with = host.session_id
        logger.bind(session=companion.session_id).info("companion paired with device {} (session {})",
                                                       mac, host.session_id)
        return True
