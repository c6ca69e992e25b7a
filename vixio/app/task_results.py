"""Background results for a device whose session ended before they were ready.

A device drops its connection after every idle period, and with `vixio serve --workers N` comes
back on whichever worker has the fewest connections. A background (async) tool it started keeps
running when its session ends (`SessionTaskRunner.release`, each bounded by its timeout); when it
finishes, its result goes to the device's live session — in this process, or on a sibling worker
over the workers' private sockets or, in a fleet, on another instance (`POST /internal/task-results`,
as vixio/fleet/companions.py; the live-session directory names the holder)
— and the agent there tells the user. A device that is not connected then has the result held in
the state store for `memory.resume_minutes` (the window in which it continues its conversation;
at most `MAX_HELD_PER_DEVICE`): its next session, on any worker and after a restart too, takes it
when it starts. A result held while the device was connecting is handed on by a nudge to the
worker that holds its session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from loguru import logger

from vixio.core.tools.context import AsyncTaskRecord
from vixio.core.tools.tasks import SessionTaskRunner
from vixio.fleet.peers import PeerReply
from vixio.state.store import StoreError

if TYPE_CHECKING:
    from vixio.app.server import VixioServer
    from vixio.fleet.peers import Peers

PATH = "/internal/task-results"
MAX_HELD_PER_DEVICE = 16
"""Results held per device that is away (the oldest go first past this)."""

log = logger.bind(component="vixio.tasks")


class TaskResults:
    """Where a finished background task goes when the session that started it has ended."""

    def __init__(self, server: VixioServer, hold_seconds: float) -> None:
        self.server = server
        self.hold_seconds = hold_seconds
        self.siblings: Peers | None = None
        """The other workers (set by vixio/serve/worker.py); None in one process."""
        self.worker = ""
        """This worker's holder name ("w0"; "host-2/w0" in a fleet)."""
        self.locate: Callable[[str], Awaitable[list[str] | None]] | None = None
        """Device id -> its holders, newest first, from the live-session directory (None: ask every worker)."""
        self._tasks: set[asyncio.Task[Any]] = set()

    async def finished(self, device_id: str, record: AsyncTaskRecord, *, nudge: bool = True) -> None:
        """`record` finished after its session ended: to the device's live session, else held."""
        if self.deliver_here(device_id, record):
            return
        if self.siblings is not None:
            body = _call("deliver", device_id=device_id, record=_record_json(record))
            # The holder the directory names first; every worker when it names none or cannot say.
            holders = [] if self.locate is None else await self.locate(device_id) or []
            reply = await self._first_ok(holders, body)
            if not reply.ok:
                reply = await self.siblings.forward_first("POST", PATH, json=body)
            if reply.ok:
                log.info(
                    "task {} ({}) of {}: result sent to its session on worker {}",
                    record.task_id,
                    record.tool_name,
                    device_id,
                    reply.worker,
                )
                return
        if await self._hold(device_id, record) and nudge:
            await self._nudge(device_id)  # the device may have come back while the result was held

    def device_session(self, device_id: str, session_id: str) -> None:
        """A device's session started here (the transport's `on_device_session`): its held results."""
        if self.hold_seconds > 0:
            self._spawn(self._deliver_held(device_id))

    def deliver_here(self, device_id: str, record: AsyncTaskRecord) -> bool:
        """Report `record` in the device's live session in this process; False when there is none."""
        found = self._runner(device_id)
        if found is None:
            return False
        session_id, runner = found
        assert runner.on_complete is not None
        if runner.context.task(record.task_id) is None:  # get_task_status finds it there too
            runner.context.record_task(record)
        self._spawn(runner.on_complete(record))
        log.bind(session=session_id).info(
            "task {} ({}) finished after an earlier session of {}: reported here",
            record.task_id,
            record.tool_name,
            device_id,
        )
        return True

    def _runner(self, device_id: str) -> tuple[str, SessionTaskRunner] | None:
        """The device's live session here that can report a result, and its task runner."""
        for session_id, connection in list(self.server.transport.connections.items()):
            tools = self.server.tools.get(session_id)
            runner = tools.executor.async_runner if tools is not None else None
            if (
                connection.device_id == device_id
                and isinstance(runner, SessionTaskRunner)
                and not runner.closed
                and runner.on_complete is not None
            ):
                return session_id, runner
        return None

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /internal/task-results` from a sibling: `deliver` a result, or a device's results
        were just held (`held`: take them if its session is here)."""
        try:
            body = await request.json()
            call, args = body["call"], body["args"]
            device_id = str(args["device_id"])
            if call == "deliver":
                delivered = self.deliver_here(device_id, _record_from_json(args["record"]))
                return web.json_response(
                    {"result": True} if delivered else {"error": "not here"}, status=200 if delivered else 404
                )
            if call == "held":
                if self._runner(device_id) is not None:
                    self._spawn(self._deliver_held(device_id))
                return web.json_response({"result": True})
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"bad request: {exc}"}, status=400)
        return web.json_response({"error": "call must be deliver or held"}, status=400)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _first_ok(self, holders: list[str], body: dict[str, Any]) -> PeerReply:
        assert self.siblings is not None
        reply = PeerReply("", 404, {"error": "not connected"})
        for holder in holders:
            if holder != self.worker:
                reply = await self.siblings.request(holder, "POST", PATH, json=body)
                if reply.ok:
                    break
        return reply

    async def _hold(self, device_id: str, record: AsyncTaskRecord) -> bool:
        """Keep `record` in the store for the device's next session; False when it is dropped."""
        if self.hold_seconds <= 0:  # memory.enabled: false, or resume_minutes: 0
            log.info(
                "task {} ({}) of {} finished while the device is away: result dropped",
                record.task_id,
                record.tool_name,
                device_id,
            )
            return False
        payload = json.dumps(_record_json(record), ensure_ascii=False)
        try:
            await self.server.store.hold_result(
                device_id, payload, time.time() + self.hold_seconds, MAX_HELD_PER_DEVICE
            )
        except StoreError as exc:
            log.warning(
                "task {} ({}) of {} finished while the device is away; result not kept: {}",
                record.task_id,
                record.tool_name,
                device_id,
                exc,
            )
            return False
        log.info(
            "task {} ({}) of {} finished while the device is away: kept {:g} min for its next session",
            record.task_id,
            record.tool_name,
            device_id,
            self.hold_seconds / 60,
        )
        return True

    async def _deliver_held(self, device_id: str) -> None:
        """Take the device's held results from the store and report them here (held again when
        its session ended meanwhile)."""
        try:
            payloads = await self.server.store.take_results(device_id)
        except StoreError as exc:
            log.warning("results held for {} not read: {}", device_id, exc)
            return
        for payload in payloads:
            try:
                record = _record_from_json(json.loads(payload))
            except (ValueError, TypeError) as exc:
                log.warning("a result held for {} is unreadable and dropped: {}", device_id, exc)
                continue
            if not self.deliver_here(device_id, record):  # its session ended meanwhile
                await self.finished(device_id, record, nudge=False)

    async def _nudge(self, device_id: str) -> None:
        if self._runner(device_id) is not None:
            await self._deliver_held(device_id)
        elif self.siblings is not None:
            await self.siblings.gather("POST", PATH, json=_call("held", device_id=device_id))

    def _spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:  # noqa: BLE001 - a result that cannot be reported must not stop the others
                log.exception("reporting a background result failed")

        task = asyncio.get_running_loop().create_task(run(), name="vixio-task-result")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _call(call: str, **args: Any) -> dict[str, Any]:
    return {"call": call, "args": args}


def _record_json(record: AsyncTaskRecord) -> dict[str, Any]:
    return dataclasses.asdict(record)


def _record_from_json(data: dict[str, Any]) -> AsyncTaskRecord:
    fields = {field.name for field in dataclasses.fields(AsyncTaskRecord)}
    return AsyncTaskRecord(**{key: value for key, value in data.items() if key in fields})
