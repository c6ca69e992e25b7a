"""Background runs of async tools (docs/tool-systems.md §6): one queue per process, one runner per session.

A call to an async tool is answered at once with a task handle
(`{"type":"async_task","task_id":…,"status":"pending",…}`), so the turn goes on while the tool
runs in the process's `AsyncTaskQueue`: at most `max_concurrent` at a time (the rest wait as
pending), each bounded by a timeout. The session's `SessionTaskRunner` records every task in the
session's `ToolCallContext` and hands each finished record (completed or failed) to
`on_complete`, where the app layer reports it to the conversation against the original call id.
When the session ends, `cancel_all` cancels its tasks; or, when its device may come back (the
app layer decides), `release` lets them finish (each still bounded by its timeout) and hands each
result to another reporter, which gives it to the device's next session. A task still running
when the server stops is reported as failed ("stopped because the server restarted"), so a user
told it was pending hears that it stopped at their next session instead of nothing. The model
may also ask with `get_task_status`.

    queue = AsyncTaskQueue(max_concurrent=4)                     # once, at server start
    runner = SessionTaskRunner(queue, context, session_id=sid, on_complete=report)
    executor = ToolExecutor(toolset, context, async_runner=runner, session_id=sid)
    toolset.set_tools("tasks", [task_status_tool(runner)])
    ...
    await runner.cancel_all()                                    # session end (or runner.release(reporter))
    await queue.shutdown()                                       # server stop
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from loguru import logger

from vixio.core.tools.context import AsyncTaskRecord, TaskStatus, ToolCallContext
from vixio.core.tools.types import ToolCallRequest, ToolCallResult, ToolDefinition, output_text

if TYPE_CHECKING:
    from loguru import Logger

DEFAULT_MAX_CONCURRENT = 4
"""Background tool runs at once, across all sessions."""
DEFAULT_TASK_TIMEOUT = 300.0
"""Seconds one background run may take (waiting for a slot not counted) before it fails."""
TASK_STATUS_TOOL = "get_task_status"
STOPPED_BY_RESTART = (
    "{tool} was stopped before it finished because the server restarted; it did not complete. "
    "Ask for it again if it is still wanted."
)
"""The error a task still running when the server stops is reported with (`AsyncTaskQueue.shutdown`)."""
REPORT_AT_SHUTDOWN = 5.0
"""Seconds each such report may take (it is held in the state store for an away device)."""

TaskCallback = Callable[[AsyncTaskRecord], Awaitable[None]]
"""Gets a finished task's record (completed or failed)."""


class AsyncTaskQueue:
    """The process's background tool runs: a concurrency limit, a timeout each, by task id."""

    def __init__(self, max_concurrent: int = DEFAULT_MAX_CONCURRENT, *, timeout: float = DEFAULT_TASK_TIMEOUT) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.max_concurrent = max_concurrent
        self.timeout = timeout
        self._slots = asyncio.Semaphore(max_concurrent)
        self._entries: dict[str, tuple[AsyncTaskRecord, asyncio.Task[None]]] = {}
        self._numbers = itertools.count(1)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def new_task_id(self) -> str:
        return f"task_{next(self._numbers)}"

    def get(self, task_id: str) -> AsyncTaskRecord | None:
        """A task still in the queue (pending, running, or being reported)."""
        entry = self._entries.get(task_id)
        return entry[0] if entry else None

    def count(self, status: TaskStatus) -> int:
        return sum(1 for record, _ in self._entries.values() if record.status == status)

    def __len__(self) -> int:
        return len(self._entries)

    def submit(
        self,
        record: AsyncTaskRecord,
        tool: ToolDefinition,
        *,
        timeout: float | None = None,
        on_done: TaskCallback | None = None,
    ) -> asyncio.Task[None]:
        """Queue `tool.invoke(record.arguments)`; the record's status follows the run, and
        `on_done` gets it once it completed or failed (not when it was cancelled)."""
        if self._closed:
            raise RuntimeError("the task queue is shut down")
        if record.task_id in self._entries:
            raise ValueError(f"task id {record.task_id!r} is already in the queue")
        task = asyncio.create_task(
            self._run(record, tool, self.timeout if timeout is None else timeout, on_done),
            name=f"vixio-task-{record.task_id}",
        )
        self._entries[record.task_id] = (record, task)
        task.add_done_callback(lambda done: self._forget(record, done))
        return task

    def cancel(self, task_id: str) -> bool:
        entry = self._entries.get(task_id)
        return entry is not None and entry[1].cancel()

    async def shutdown(self) -> None:
        """Refuse new tasks and cancel every task of every session; each that was running or
        waiting is reported to its `on_done` as failed with `STOPPED_BY_RESTART` (bounded), so
        the user who was told it is pending hears that it stopped."""
        self._closed = True
        tasks = [task for _, task in self._entries.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            logger.bind(component="tasks").info("task queue shut down, {} task(s) cancelled", len(tasks))

    async def _run(
        self, record: AsyncTaskRecord, tool: ToolDefinition, timeout: float, on_done: TaskCallback | None
    ) -> None:
        log = logger.bind(session=record.session_id or "-", component="tasks")
        try:
            async with self._slots:
                waited = time.time() - record.created_at
                record.start()
                log.info(
                    "task {} started: {} (call {}, waited {:.1f} s)",
                    record.task_id,
                    record.tool_name,
                    record.call_id,
                    waited,
                )
                status, text = await _invoke(tool, record.arguments, timeout, log)
        except asyncio.CancelledError:
            if self._closed and on_done is not None and not record.finished:
                # The server stops (a restart): the user was told the task is under way, so its
                # reporter says it stopped (held for the device's next session when it is away)
                # rather than it vanishing.
                record.finish("failed", error=STOPPED_BY_RESTART.format(tool=record.tool_name))
                log.info(
                    "task {} stopped by the server stopping: {} (call {}); reported",
                    record.task_id,
                    record.tool_name,
                    record.call_id,
                )
                with contextlib.suppress(Exception, asyncio.TimeoutError):
                    await asyncio.wait_for(on_done(record), REPORT_AT_SHUTDOWN)
                raise
            if not record.finished:
                record.finish("cancelled")
            log.info("task {} cancelled: {} (call {})", record.task_id, record.tool_name, record.call_id)
            raise
        if status == "completed":
            record.finish("completed", result=text)
            log.info(
                "task {} completed: {} in {:.1f} s: {}", record.task_id, record.tool_name, record.duration, _short(text)
            )
        else:
            record.finish("failed", error=text)
            log.warning("task {} failed: {} in {:.1f} s: {}", record.task_id, record.tool_name, record.duration, text)
        if on_done is None:
            return
        try:
            await on_done(record)
        except Exception as exc:  # the reporter's bug must not vanish with the background task
            log.opt(exception=exc).error(
                "task {} ({}): reporting its result raised {}: {}",
                record.task_id,
                record.tool_name,
                type(exc).__name__,
                exc,
            )

    def _forget(self, record: AsyncTaskRecord, task: asyncio.Task[None]) -> None:
        self._entries.pop(record.task_id, None)
        if record.finished:
            return
        # A task cancelled before its first step never enters `_run`, so its record ends here.
        if task.cancelled():
            record.finish("cancelled")
        else:
            record.finish("failed", error=f"{record.tool_name} stopped unexpectedly: {task.exception()!r}")
            logger.bind(session=record.session_id or "-", component="tasks").opt(exception=task.exception()).error(
                "task {} crashed", record.task_id
            )


async def _invoke(
    tool: ToolDefinition, arguments: dict[str, Any], timeout: float, log: Logger
) -> tuple[TaskStatus, str]:
    """Run the tool once: ("completed", its output) or ("failed", why)."""
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            outcome = await tool.invoke(arguments)
    except TimeoutError as exc:
        if deadline.expired():
            return "failed", f"{tool.name} did not finish within {timeout:g} s"
        log.opt(exception=exc).warning("tool {} raised", tool.name)
        return "failed", f"{tool.name} failed: {type(exc).__name__}: {exc}"
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a tool's bug is the model's information
        log.opt(exception=exc).warning("tool {} raised", tool.name)
        return "failed", f"{tool.name} failed: {type(exc).__name__}: {exc}"
    if outcome.success:
        return "completed", outcome.result or ""
    return "failed", outcome.error or f"{tool.name} failed"


class SessionTaskRunner:
    """One session's async tools (the executor's `AsyncToolRunner`): queued in the process
    queue, recorded in the session's context, reported through `on_complete`."""

    def __init__(
        self,
        queue: AsyncTaskQueue,
        context: ToolCallContext,
        *,
        session_id: str = "",
        on_complete: TaskCallback | None = None,
        timeout: float | None = None,
    ) -> None:
        self.queue = queue
        self.context = context
        self.session_id = session_id
        self.on_complete = on_complete
        """Gets each finished task (completed or failed) while the session is open; the app
        layer sets it to report the result in the conversation. Its exceptions are logged."""
        self.timeout = timeout
        """Seconds per run; None uses the queue's."""
        self.tool_timeout: Callable[[ToolDefinition], float | None] | None = None
        """A tool's own timeout when one is configured for it (e.g. a `tools.local` entry's)."""
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = False
        self._released_to: TaskCallback | None = None
        self._logger = logger.bind(session=session_id or "-", component="tasks")

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, tool: ToolDefinition, request: ToolCallRequest) -> ToolCallResult:
        """Start `tool` in the background; answers at once with the task handle."""
        if self._closed or self.queue.closed:
            return ToolCallResult.fail(f"{tool.name} was not started: the session is ending", call_id=request.call_id)
        record = AsyncTaskRecord(
            task_id=self.queue.new_task_id(),
            call_id=request.call_id,
            tool_name=tool.name,
            arguments=dict(request.arguments),
            session_id=self.session_id,
        )
        self.context.record_task(record)
        own = self.tool_timeout(tool) if self.tool_timeout is not None else None
        task = self.queue.submit(record, tool, timeout=own or self.timeout, on_done=self._report)
        self._tasks[record.task_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(record.task_id, None))
        self._logger.info("task {} queued: {} (call {})", record.task_id, tool.name, request.call_id)
        return ToolCallResult(call_id=request.call_id, success=True, status="pending", result=task_handle(record))

    def tasks(self) -> list[AsyncTaskRecord]:
        """This session's tasks, oldest first."""
        return list(self.context.tasks.values())

    def get(self, task_id: str) -> AsyncTaskRecord | None:
        """A task of this session by task id, or by the id of the call that started it."""
        return self.context.task(task_id) or self.context.task_for_call(task_id)

    async def cancel_all(self) -> None:
        """The session is ending: cancel its tasks and report nothing more."""
        self._closed = True
        current = asyncio.current_task()
        tasks = [task for task in self._tasks.values() if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for record in self.context.unfinished_tasks:
            record.finish("cancelled")
        if tasks:
            self._logger.info("cancelled {} background task(s) at session end", len(tasks))

    async def release(self, reporter: TaskCallback) -> None:
        """The session is ending but its device may come back: its tasks go on, and each one that
        completes or fails goes to `reporter` instead of this session."""
        self._closed = True
        self._released_to = reporter
        if self._tasks:
            self._logger.info(
                "{} background task(s) go on after the session; their results go to the device's next session",
                len(self._tasks),
            )

    async def _report(self, record: AsyncTaskRecord) -> None:
        self.context.record_result(record.to_result())
        if self._released_to is not None:
            await self._released_to(record)
            return
        if self._closed:
            self._logger.info("task {} finished after the session ended; not reported", record.task_id)
            return
        if self.on_complete is None:
            self._logger.warning("task {} finished but nothing reports it (no on_complete)", record.task_id)
            return
        await self.on_complete(record)


def task_handle(record: AsyncTaskRecord) -> str:
    """The immediate answer to an async call (aio-hub's `async_task` result, with our ids)."""
    return output_text(
        {
            "type": "async_task",
            "task_id": record.task_id,
            "status": record.status,
            "message": f"{record.tool_name} is running in the background; its result will be reported when it finishes",
        }
    )


def task_status_tool(runner: SessionTaskRunner) -> ToolDefinition:
    """`get_task_status`: the model looks up one of the session's background tasks, or lists them."""

    async def get_task_status(arguments: dict[str, Any]) -> dict[str, Any]:
        task_id = str(arguments.get("task_id") or "").strip()
        if not task_id:
            return {"tasks": [record.to_dict() for record in runner.tasks()]}
        record = runner.get(task_id)
        if record is None:
            known = ", ".join(record.task_id for record in runner.tasks()) or "none"
            return {"error": f"there is no task {task_id} in this conversation; its tasks are: {known}"}
        return record.to_dict()

    return ToolDefinition(
        name=TASK_STATUS_TOOL,
        description=(
            "Check on tools running in the background: their status (pending, running, completed, "
            "failed, cancelled) and their result or error. Give task_id for one task; leave it out "
            "to list all of this conversation's tasks."
        ),
        parameters={
            "type": "object",
            "properties": {
                "task_id": {
                    "type": "string",
                    "description": "The task_id a background tool answered with (leave out to list all tasks).",
                }
            },
        },
        source="local",
        executor=get_task_status,
        sub_type="query",
    )


def _short(text: str, limit: int = 120) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
