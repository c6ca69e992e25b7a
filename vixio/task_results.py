"""Background results for a device whose session ended before they were ready.

A device drops its connection after every idle period, and with `vixio serve --workers N` comes
back on whichever worker has the fewest connections. A background (async) tool it started keeps
running when its session ends (`SessionTaskRunner.release`, each bounded by its timeout); when it
finishes, its result goes to the device's live session — in this process, or on a sibling worker
over the workers' private sockets (`POST /internal/task-results`, as vixio/serve/companions.py)
— and the agent there tells the user. A device that is not connected then has the result kept
here for `memory.resume_minutes` (the window in which it continues its conversation): its next
session, on any worker, gets it when it starts (its worker asks the siblings for theirs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from loguru import logger

from vixio.core.tools.context import AsyncTaskRecord
from vixio.core.tools.tasks import SessionTaskRunner

if TYPE_CHECKING:
    from vixio.server import VixioServer
    from vixio.serve.peers import Peers

PATH = "/internal/task-results"
MAX_HELD_PER_DEVICE = 16
MAX_HELD = 1024
"""Results kept for devices that are away (the oldest go first past these)."""

log = logger.bind(component="vixio.tasks")


class TaskResults:
    """Where a finished background task goes when the session that started it has ended."""

    def __init__(self, server: VixioServer, hold_seconds: float) -> None:
        self.server = server
        self.hold_seconds = hold_seconds
        self.siblings: Peers | None = None
        """The other workers (set by vixio/serve/worker.py); None in one process."""
        self.worker = -1
        self._held: dict[str, list[tuple[float, AsyncTaskRecord]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def finished(self, device_id: str, record: AsyncTaskRecord) -> None:
        """`record` finished after its session ended: to the device's live session, else held."""
        if self.deliver_here(device_id, record):
            return
        if self.siblings is not None:
            reply = await self.siblings.forward_first("POST", PATH, json=_call("deliver", device_id=device_id,
                                                                               record=_record_json(record)))
            if reply.ok:
                log.info("task {} ({}) of {}: result sent to its session on worker w{}", record.task_id,
                         record.tool_name, device_id, reply.worker)
                return
        self._hold(device_id, record)

    def device_session(self, device_id: str, session_id: str) -> None:
        """A device's session started here (the transport's `on_device_session`): its held results."""
        for record in self._take(device_id):
            self.deliver_here(device_id, record)
        if self.siblings is not None:
            self._spawn(self.siblings.gather("POST", PATH, json=_call("device", device_id=device_id,
                                                                      worker=self.worker)))

    def deliver_here(self, device_id: str, record: AsyncTaskRecord) -> bool:
        """Report `record` in the device's live session in this process; False when there is none."""
        for session_id, connection in list(self.server.transport.connections.items()):
            tools = self.server.tools.get(session_id)
            runner = tools.executor.async_runner if tools is not None else None
            if (connection.device_id != device_id or not isinstance(runner, SessionTaskRunner) or runner.closed
                    or runner.on_complete is None):
                continue
            if runner.context.task(record.task_id) is None:  # get_task_status finds it there too
                runner.context.record_task(record)
            self._spawn(runner.on_complete(record))
            log.bind(session=session_id).info("task {} ({}) finished after an earlier session of {}: reported "
                                              "here", record.task_id, record.tool_name, device_id)
            return True
        return False

    async def handle(self, request: web.Request) -> web.Response:
        """`POST /internal/task-results` from a sibling: `deliver` a result, or a `device` is on `worker`."""
        try:
            body = await request.json()
            call, args = body["call"], body["args"]
            device_id = str(args["device_id"])
            if call == "deliver":
                delivered = self.deliver_here(device_id, _record_from_json(args["record"]))
                return web.json_response({"result": True} if delivered else {"error": "not here"},
                                         status=200 if delivered else 404)
            if call == "device":
                for record in self._take(device_id):
                    self._spawn(self._send_to(int(args["worker"]), device_id, record))
                return web.json_response({"result": True})
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"bad request: {exc}"}, status=400)
        return web.json_response({"error": "call must be deliver or device"}, status=400)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _send_to(self, worker: int, device_id: str, record: AsyncTaskRecord) -> None:
        assert self.siblings is not None
        reply = await self.siblings.request(worker, "POST", PATH, json=_call("deliver", device_id=device_id,
                                                                             record=_record_json(record)))
        if not reply.ok:  # it left again meanwhile
            self._hold(device_id, record)

    def _hold(self, device_id: str, record: AsyncTaskRecord) -> None:
        self._expire()
        if self.hold_seconds <= 0:  # memory.enabled: false, or resume_minutes: 0
            log.info("task {} ({}) of {} finished while the device is away: result dropped", record.task_id,
                     record.tool_name, device_id)
            return
        held = self._held.setdefault(device_id, [])
        held.append((time.monotonic() + self.hold_seconds, record))
        del held[:-MAX_HELD_PER_DEVICE]
        while sum(len(entries) for entries in self._held.values()) > MAX_HELD:
            oldest = min(self._held, key=lambda device: self._held[device][0][0])
            self._held[oldest].pop(0)
            if not self._held[oldest]:
                del self._held[oldest]
        log.info("task {} ({}) of {} finished while the device is away: kept {:g} min for its next session",
                 record.task_id, record.tool_name, device_id, self.hold_seconds / 60)

    def _take(self, device_id: str) -> list[AsyncTaskRecord]:
        self._expire()
        return [record for _, record in self._held.pop(device_id, [])]

    def _expire(self) -> None:
        now = time.monotonic()
        for device_id in list(self._held):
            kept = [(deadline, record) for deadline, record in self._held[device_id] if deadline > now]
            for _, record in self._held[device_id][:len(self._held[device_id]) - len(kept)]:
                log.info("task {} ({}) of {}: the device did not come back in time; result dropped",
                         record.task_id, record.tool_name, device_id)
            if kept:
                self._held[device_id] = kept
            else:
                del self._held[device_id]

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
