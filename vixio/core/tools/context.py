"""ToolCallContext: one session's record of tool calls and results, by call id (docs/tool-systems.md §6).

Every call the model makes (natively or through a text protocol) and every result lands here,
so a later turn, a status query or a log can find them. It also holds the confirmations the
model asked the user for: a tool that needs confirmation runs only after the user's next turn
said yes. Async tools' background runs (`vixio.core.tools.tasks`) are kept here too, as
`AsyncTaskRecord`s by task id, each pointing back at the call that started it.

Result observers (the `onToolCall` hooks of docs/tool-systems.md §6.3) hear every result as it is recorded: a query's
answer, a control call's "success", an async tool's task handle and, later, its final outcome.

`ToolContext` is what a local tool that asks for it (a parameter annotated `ToolContext`)
receives: who called (session, device, call id), the session's `ToolCallContext`, and `say()`
to speak to the user while it works. The executor sets it for the duration of a call.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from loguru import logger

from vixio.core.tools.types import ToolCallRequest, ToolCallResult, output_text

MAX_RECORDS = 200
"""Calls (and background tasks) remembered per session; the oldest are forgotten first."""

TaskStatus = Literal["pending", "running", "completed", "failed", "cancelled"]
"""pending: waiting for a slot in the process queue; running; then one of the three ends."""

_YES = re.compile(
    r"^(yes|yeah|yep|yup|sure|ok|okay|confirm(ed)?|correct|right|go ahead|do it|please do|of course|absolutely"
    r"|是|是的|好|好的|好啊|可以|行|确定|确认|对|对的|嗯|没问题|当然)\b",
)
_NO = re.compile(r"\b(no|nope|not|don't|do not|cancel|stop|never)\b|不|别|取消|算了")


def is_affirmative(text: str) -> bool:
    """Whether a user's reply is a yes (and not a no), in English or Chinese."""
    cleaned = re.sub(r"[\s,.!?;:，。！？；：、~]+", " ", text.lower()).strip()
    return bool(cleaned) and bool(_YES.match(cleaned)) and not _NO.search(cleaned)


@dataclass(slots=True)
class ToolCallRecord:
    request: ToolCallRequest
    result: ToolCallResult | None = None
    duration_ms: float | None = None
    """How long the call took until its result was recorded (docs/tool-systems.md §4.2)."""
    started: float = field(default_factory=time.perf_counter)


ResultObserver = Callable[[ToolCallRecord], Awaitable[None] | None]
"""Hears each recorded result (sync or async function); its exceptions are logged, never raised."""


@dataclass(slots=True)
class AsyncTaskRecord:
    """One background run of an async tool (docs/tool-systems.md §6), found by task id or by its call's id."""

    task_id: str
    call_id: str
    """The model's call that started it; a finished task is reported against this id."""
    tool_name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""
    status: TaskStatus = "pending"
    result: str | None = None
    """The tool's output text, once completed."""
    error: str | None = None
    """Why it failed (the tool's error, or the timeout), once failed."""
    created_at: float = field(default_factory=time.time)
    """Epoch seconds, as are `started_at` and `finished_at`."""
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    @property
    def duration(self) -> float | None:
        """Seconds it has run (until it finished), or None if it never started."""
        if self.started_at is None:
            return None
        return (self.finished_at or time.time()) - self.started_at

    def start(self) -> None:
        self.status, self.started_at = "running", time.time()

    def finish(self, status: TaskStatus, *, result: str | None = None, error: str | None = None) -> None:
        self.status, self.result, self.error, self.finished_at = status, result, error, time.time()

    def to_dict(self) -> dict[str, Any]:
        """What the model is shown about the task: empty fields are left out."""
        data: dict[str, Any] = {
            "task_id": self.task_id,
            "call_id": self.call_id,
            "tool": self.tool_name,
            "status": self.status,
        }
        if self.result is not None:
            data["result"] = self.result
        if self.error:
            data["error"] = self.error
        if (duration := self.duration) is not None:
            data["seconds"] = round(duration, 1)
        return data

    def to_result(self) -> ToolCallResult:
        """The call's outcome: the tool's result, its error, or still pending."""
        if self.status == "completed":
            return ToolCallResult.ok(self.result or "", call_id=self.call_id)
        if self.status == "failed":
            return ToolCallResult.fail(self.error or f"{self.tool_name} failed", call_id=self.call_id)
        if self.status == "cancelled":
            return ToolCallResult.fail(f"{self.tool_name} was cancelled", call_id=self.call_id)
        return ToolCallResult(call_id=self.call_id, success=True, status="pending", result=output_text(self.to_dict()))


def confirmation_key(tool_name: str, arguments: dict[str, Any]) -> str:
    return tool_name + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


class ToolCallContext:
    def __init__(self) -> None:
        self.records: OrderedDict[str, ToolCallRecord] = OrderedDict()
        self.tasks: OrderedDict[str, AsyncTaskRecord] = OrderedDict()
        """Background tasks by task id, oldest first."""
        self._asked: set[str] = set()
        self._approved: set[str] = set()
        self._observers: list[ResultObserver] = []
        self._observing: set[asyncio.Task[None]] = set()
        self._listed: set[str] = set()
        """Finished tasks already shown to the model in a turn's task list."""

    # --- observers ----------------------------------------------------------------------------

    def add_observer(self, observer: ResultObserver) -> None:
        """Call `observer` with the call's record each time a result is recorded (every source,
        sync or async; an async tool's record is seen with its handle, then with its outcome)."""
        self._observers.append(observer)

    def remove_observer(self, observer: ResultObserver) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def _notify(self, record: ToolCallRecord) -> None:
        for observer in list(self._observers):
            try:
                outcome = observer(record)
            except Exception as exc:  # an application's hook must not break the call
                logger.opt(exception=exc).warning("tool result observer raised: {}", exc)
                continue
            if inspect.isawaitable(outcome):
                task = asyncio.ensure_future(_observe(outcome))
                self._observing.add(task)
                task.add_done_callback(self._observing.discard)

    # --- calls and results --------------------------------------------------------------------

    def record_call(self, request: ToolCallRequest) -> None:
        self.records[request.call_id] = ToolCallRecord(request)
        while len(self.records) > MAX_RECORDS:
            self.records.popitem(last=False)

    def record_result(self, result: ToolCallResult) -> None:
        record = self.records.get(result.call_id)
        if record is None:
            return
        record.result = result
        if result.duration_ms is not None:
            record.duration_ms = result.duration_ms
        elif result.status != "pending":
            record.duration_ms = (time.perf_counter() - record.started) * 1000
        self._notify(record)

    def get(self, call_id: str) -> ToolCallRecord | None:
        return self.records.get(call_id)

    @property
    def calls(self) -> list[ToolCallRequest]:
        return [record.request for record in self.records.values()]

    # --- background tasks ----------------------------------------------------------------------

    def record_task(self, task: AsyncTaskRecord) -> None:
        self.tasks[task.task_id] = task
        while len(self.tasks) > MAX_RECORDS:
            oldest = next((key for key, old in self.tasks.items() if old.finished), next(iter(self.tasks)))
            del self.tasks[oldest]

    def task(self, task_id: str) -> AsyncTaskRecord | None:
        return self.tasks.get(task_id)

    def task_for_call(self, call_id: str) -> AsyncTaskRecord | None:
        """The task a call started (its result is reported against the call id)."""
        return next((task for task in self.tasks.values() if task.call_id == call_id), None)

    @property
    def unfinished_tasks(self) -> list[AsyncTaskRecord]:
        return [task for task in self.tasks.values() if not task.finished]

    def mark_reported(self, task_id: str) -> None:
        """A finished task's result was put to the model already: leave it out of the next overview."""
        self._listed.add(task_id)

    def task_overview(self) -> str:
        """The background tasks the model should know of at the start of a turn (docs/tool-systems.md §6): every
        pending or running one, and each finished one once. Empty when there is nothing to list."""
        lines = []
        for task in self.tasks.values():
            if task.finished and task.task_id in self._listed:
                continue
            if task.finished:
                self._listed.add(task.task_id)
            lines.append(output_text(task.to_dict()))
        if not lines:
            return ""
        return "[Background tasks of this conversation (status as of now):\n" + "\n".join(lines) + "]"

    # --- confirmations ------------------------------------------------------------------------

    def ask_confirmation(self, key: str) -> None:
        self._asked.add(key)

    def take_approval(self, key: str) -> bool:
        """True once for a call the user approved in their last turn."""
        if key in self._approved:
            self._approved.discard(key)
            return True
        return False

    def on_user_text(self, text: str, approved: bool | None = None) -> None:
        """The user spoke: a yes approves the calls asked about, anything else drops them.

        `approved` is the caller's verdict on `text` (the policy's confirmation words); None
        uses the built-in English and Chinese words."""
        yes = is_affirmative(text) if approved is None else approved
        self._approved = set(self._asked) if self._asked and yes else set()
        self._asked.clear()


async def _observe(outcome: Awaitable[None]) -> None:
    try:
        await outcome
    except Exception as exc:
        logger.opt(exception=exc).warning("tool result observer raised: {}", exc)


Say = Callable[[str], Awaitable[None]]


@dataclass(slots=True)
class ToolContext:
    """Who called a local tool, for a tool that declares a parameter of this type (docs/tool-systems.md
    §6.4). The parameter is not shown to the model."""

    session_id: str = ""
    device_id: str = ""
    """The calling device's id (its MAC for Xiaozhi devices); empty outside a device session."""
    call_id: str = ""
    tool_name: str = ""
    calls: ToolCallContext = field(default_factory=ToolCallContext)
    """The session's record of calls, results and background tasks."""
    speaker: Say | None = None
    person: str = ""
    """Who is speaking: the enrolled name their voice matched, "" for an unknown voice (docs/speakers.md)."""

    async def say(self, text: str) -> None:
        """Speak `text` to the user now (e.g. "one moment, looking that up"); no-op without a voice."""
        if self.speaker is not None and text.strip():
            await self.speaker(text)


current_tool_context: ContextVar[ToolContext | None] = ContextVar("vixio_tool_context", default=None)
"""Set by the executor while a call runs; background runs started by the call inherit it."""
