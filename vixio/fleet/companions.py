"""Companion pairing across workers (`vixio serve --workers N`): the `CompanionRelay` of a worker.

The supervisor hands each connection to a worker unread (dispatch.py), before the
`mcp/registerTools` that names the companion's device, so it cannot place a companion next to its
device. Instead the workers relay: each serves `POST /internal/companions` on its private Unix
socket (the one the supervisor's `Peers` use; the run directory is mode 0700) and reaches its
siblings' sockets the same way:

    companion's worker (C)                          device's worker (D)
    pair {mac, tools}        ── every sibling ─►    the one holding the device attaches
                             ◄── 200 / 404 ────     a RemoteCompanion to its host (404: not here)
                             ◄── execute ───────    the device's model calls a companion tool
                             ◄── message ───────    the device's mcp/ai/message, in order
    unpair {link}            ─────────────────►     the companion left or registered again
                             ◄── device ────────    a device connected: C's waiting companions pair
                                                    (only workers the directory lists companions of
                                                    that MAC on are told; every worker when the
                                                    store cannot say)
                             ◄── device_gone ───    the device left: C's companions wait again

Whether a companion may pair (token, approval, trust_mac) is decided by its own worker
(pairing_policy.py); the device's worker takes its tools as presented there (companion_tools.py).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from loguru import logger

from vixio.core.tools.types import ToolCallResult, ToolDefinition
from vixio.fleet.peers import PeerReply, Peers
from vixio.transports.xiaozhi.companions.relay import CompanionLink, RemoteCompanion, RemoteHost

if TYPE_CHECKING:
    from vixio.fleet.directory import SessionDirectory
    from vixio.transports.xiaozhi.companions.store import CompanionKey
    from vixio.transports.xiaozhi.mcp.register_tools import RegisterToolsClient
    from vixio.transports.xiaozhi.websocket.transport import XiaozhiTransport

PATH = "/internal/companions"
REPLY_MARGIN = 2.0
"""Seconds a relayed tool call may take beyond the companion's own call timeout."""

log = logger.bind(component="vixio.companions")


class WorkerCompanionRelay:
    """Pairs this worker's companions with devices on its siblings, and the reverse."""

    def __init__(
        self, transport: XiaozhiTransport, holder: str, siblings: Peers, directory: SessionDirectory | None = None
    ) -> None:
        self.transport = transport
        self.registry = transport.companions
        self.holder = holder
        """This worker's name ("w0"; "host-2/w0" in a fleet)."""
        self.peers = siblings
        """The other workers (closed by the worker)."""
        self.directory = directory
        """Who holds a device and where its companions wait (None: ask every worker)."""
        self._listed: dict[str, tuple[str, asyncio.Task[None]]] = {}
        """This worker's let-in companions by session id: (their device's MAC, the listing's write)."""
        self._links = itertools.count(1)
        self._linked: dict[RegisterToolsClient, tuple[str, int]] = {}
        """Companions here paired with a device elsewhere: (its worker, the link id)."""
        self._proxies: dict[tuple[str, str], tuple[int, RemoteCompanion]] = {}
        """Companions elsewhere paired with a device here, by (worker, session id): (link id, proxy)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, proxy in self._proxies.values():
            proxy.close()

    # --- the companion's side (CompanionRelay) ---------------------------------------------------

    def companion_let_in(self, companion: RegisterToolsClient, mac: str) -> None:
        listed = self._listed.get(companion.session_id)
        if self.directory is None or (listed is not None and listed[0] == mac):
            return
        if listed is not None:
            self.directory.unlist_companion(companion.session_id)
        self._listed[companion.session_id] = (mac, self.directory.list_companion(mac, companion.session_id))

    async def pair(
        self, companion: RegisterToolsClient, key: CompanionKey, only: str | None = None
    ) -> RemoteHost | None:
        listed = self._listed.get(companion.session_id)
        if listed is not None:
            # Listed before the device is looked up: a device connecting meanwhile either is found
            # here or finds this listing (see device_connected).
            await asyncio.wait({listed[1]})
        link = next(self._links)
        body = _call(
            "pair",
            mac=key.mac,
            worker=self.holder,
            session_id=companion.session_id,
            link=link,
            device_id=companion.device_id,
            tools=[_tool_json(tool) for tool in companion.presented_tools],
        )
        reply = (
            await self._to_holder(key.mac, body)
            if only is None
            else await self.peers.request(only, "POST", PATH, json=body)
        )
        if reply.status == 502:
            log.warning("companion {} for {}: {}", key.companion, key.mac, reply.body.get("error"))
        if not reply.ok:
            return None
        device_session = str(reply.body["result"]["device_session"])
        if device_session:
            self._linked[companion] = (reply.worker, link)
        return RemoteHost(reply.worker, device_session)

    async def _to_holder(self, mac: str, body: dict[str, Any]) -> PeerReply:
        """The answer of the worker the directory names for `mac`; every worker's when it names none
        (the device's entry may still be on its way: it connected a moment ago) or cannot say."""
        found = None if self.directory is None else await self.directory.holders_of(mac)
        holders = [h for h in found or () if h != self.holder]
        for holder in holders:
            reply = await self.peers.request(holder, "POST", PATH, json=body)
            if reply.ok:
                return reply
        return await self.peers.forward_first("POST", PATH, json=body)

    def companion_left(self, companion: RegisterToolsClient) -> None:
        if self._listed.pop(companion.session_id, None) is not None and self.directory is not None:
            self.directory.unlist_companion(companion.session_id)
        linked = self._linked.pop(companion, None)
        if linked is not None:
            worker, link = linked
            self._spawn(
                self.peers.request(
                    worker,
                    "POST",
                    PATH,
                    json=_call("unpair", worker=self.holder, session_id=companion.session_id, link=link),
                )
            )

    def device_connected(self, mac: str) -> None:
        self._spawn(self._announce(mac))

    async def _announce(self, mac: str) -> None:
        """Tell the workers where companions of `mac` wait (every worker when the store cannot say)."""
        body = _call("device", mac=mac, worker=self.holder)
        holders = None if self.directory is None else await self.directory.companion_holders(mac)
        if holders is None:
            await self.peers.gather("POST", PATH, json=body)
            return
        await asyncio.gather(
            *(self.peers.request(holder, "POST", PATH, json=body) for holder in holders if holder != self.holder)
        )

    def device_disconnected(self, host: RegisterToolsClient) -> None:
        gone: dict[str, list[str]] = {}
        for companion in list(host.companions):
            if isinstance(companion, RemoteCompanion):
                self._forget(companion)
                host.detach_companion(companion)
                gone.setdefault(companion.link.worker, []).append(companion.session_id)
        for worker, sessions in gone.items():
            self._spawn(
                self.peers.request(
                    worker, "POST", PATH, json=_call("device_gone", sessions=sessions, device_session=host.session_id)
                )
            )

    # --- requests from the siblings ----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /internal/companions` `{"call": ..., "args": {...}}` (a worker's session route)."""
        try:
            body = await request.json()
            call, args = body["call"], body["args"]
            handler = getattr(self, f"_on_{call}") if call in _CALLS else None
        except (ValueError, KeyError, TypeError):
            handler = None
        if handler is None:
            return web.json_response({"error": f'expected {{"call": one of {_CALLS}, "args": {{...}}}}'}, status=400)
        try:
            response: web.Response = await handler(**args)
            return response
        except (TypeError, ValueError, KeyError) as exc:
            return web.json_response({"error": f"bad arguments for {call}: {exc}"}, status=400)

    async def _on_pair(
        self, mac: str, worker: str, session_id: str, link: int, device_id: str, tools: list[dict[str, Any]]
    ) -> web.Response:
        if self.registry.host(mac) is None:
            return _not_here(f"no device {mac} here")
        proxy = RemoteCompanion(
            self._link(worker, session_id),
            device_id,
            [_tool_from_json(t) for t in tools],
            call_timeout=self.transport.config.mcp.tool_call_timeout,
            on_gone=self._gone,
        )
        previous = self._proxies.pop((worker, session_id), None)
        if previous is not None:
            self.registry.detach_remote(previous[1])
        host = self.registry.attach_remote(mac, proxy)
        if host is None:
            proxy.close()
            return web.json_response({"result": {"device_session": ""}})
        self._proxies[(worker, session_id)] = (link, proxy)
        log.bind(session=host.session_id).info(
            "companion {} on worker {} paired with device {} here ({} tools)", device_id, worker, mac, len(tools)
        )
        return web.json_response({"result": {"device_session": host.session_id}})

    async def _on_unpair(self, worker: str, session_id: str, link: int) -> web.Response:
        entry = self._proxies.get((worker, session_id))
        if entry is not None and entry[0] == link:  # not a newer registration of the same companion
            self._forget(entry[1])
            self.registry.detach_remote(entry[1])
        return web.json_response({"result": True})

    async def _on_device(self, mac: str, worker: str) -> web.Response:
        for companion in self.registry.let_in_for(mac):
            # Linked elsewhere too: that device's worker may have died without saying device_gone.
            if companion.paired_with and self._linked.pop(companion, None) is None:
                continue  # paired with a device of that MAC here
            companion.paired_with = ""
            self._spawn(self.registry.pair_elsewhere(companion, only=worker))
        return web.json_response({"result": True})

    async def _on_device_gone(self, sessions: list[str], device_session: str) -> web.Response:
        for session_id in sessions:
            companion = self.transport.register_clients.get(session_id)
            # Only if still paired with that session: the device may be back already (messages race).
            if companion is not None and companion.paired_with == device_session:
                self._linked.pop(companion, None)
                companion.paired_with = ""
        return web.json_response({"result": True})

    async def _on_execute(self, session_id: str, tool: str, arguments: dict[str, Any]) -> web.Response:
        companion = self._paired_here(session_id)
        if companion is None:
            return _not_here(f"no paired companion session {session_id} here")
        result = await companion.call_tool(tool, arguments)
        return web.json_response(
            {"result": {"success": result.success, "result": result.result, "error": result.error}}
        )

    async def _on_message(self, session_id: str, message: dict[str, Any]) -> web.Response:
        companion = self._paired_here(session_id)
        if companion is None:
            return _not_here(f"no paired companion session {session_id} here")
        await companion.send_notification(message)
        return web.json_response({"result": True})

    # --- helpers ---------------------------------------------------------------------------------

    def _paired_here(self, session_id: str) -> RegisterToolsClient | None:
        # Not only the linked ones: the device's side may relay before this side has the pair's answer.
        companion = self.transport.register_clients.get(session_id)
        return companion if companion is not None and companion.is_companion else None

    def _link(self, worker: str, session_id: str) -> CompanionLink:
        async def call(name: str, arguments: dict[str, Any], timeout: float) -> ToolCallResult | None:
            reply = await self.peers.request(
                worker,
                "POST",
                PATH,
                timeout=timeout + REPLY_MARGIN,
                json=_call("execute", session_id=session_id, tool=name, arguments=arguments),
            )
            if reply.status == 404:
                return None
            if not reply.ok:
                return ToolCallResult.fail(
                    f"{name}: the companion on worker {worker} cannot be reached ({_error(reply)})"
                )
            result = reply.body["result"]
            if result["success"]:
                return ToolCallResult.ok(str(result["result"] or ""))
            return ToolCallResult.fail(str(result["error"] or f"{name} failed"))

        async def send(message: dict[str, Any]) -> bool:
            reply = await self.peers.request(
                worker, "POST", PATH, json=_call("message", session_id=session_id, message=message)
            )
            if reply.status == 502:
                raise ConnectionError(_error(reply))
            return reply.status != 404

        return CompanionLink(worker, session_id, call, send)

    def _gone(self, proxy: RemoteCompanion) -> None:
        """A relayed message found the companion gone on its worker."""
        self._forget(proxy)
        self.registry.detach_remote(proxy)

    def _forget(self, proxy: RemoteCompanion) -> None:
        key = (proxy.link.worker, proxy.session_id)
        entry = self._proxies.get(key)
        if entry is not None and entry[1] is proxy:
            del self._proxies[key]
        proxy.close()

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:  # noqa: BLE001 - one sibling's trouble must not stop this worker
                log.exception("relaying to a sibling worker failed")

        task = asyncio.get_running_loop().create_task(run(), name="vixio-companion-relay")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


_CALLS = ("pair", "unpair", "device", "device_gone", "execute", "message")


def _call(call: str, **args: Any) -> dict[str, Any]:
    return {"call": call, "args": args}


def _not_here(why: str) -> web.Response:
    return web.json_response({"error": why}, status=404)


def _error(reply: PeerReply) -> str:
    return str(reply.body.get("error") if isinstance(reply.body, dict) else reply.status)


def _tool_json(tool: ToolDefinition) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "sub_type": tool.sub_type,
        "origin": tool.origin,
    }


def _tool_from_json(entry: dict[str, Any]) -> ToolDefinition:
    return ToolDefinition(
        name=str(entry["name"]),
        description=str(entry["description"]),
        parameters=dict(entry["parameters"]),
        source="register",
        sub_type=entry.get("sub_type"),
        origin=str(entry.get("origin") or ""),
    )
