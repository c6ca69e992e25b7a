"""ToolCallContext: one session's record of tool calls and results, by call id (seed 004).

Every call the model makes (natively or through a text protocol) and every result lands here,
so a later turn, a status query or a log can find them. It also holds the confirmations the
model asked the user for: a tool that needs confirmation runs only after the user's next turn
said yes. Async tools' background runs (`vixio.core.tools.tasks`) are kept here too, as
`AsyncTaskRecord`s by task id, each pointing back at the call that started it.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

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


@dataclass(slots=True)
class AsyncTaskRecord:
    """One background run of an async tool (seed 004), found by task id or by its call's id."""

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
        data: dict[str, Any] = {"task_id": self.task_id, "call_id": self.call_id, "tool": self.tool_name,
                                "status": self.status}
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

    # --- calls and results --------------------------------------------------------------------

    def record_call(self, request: ToolCallRequest) -> None:
        self.records[request.call_id] = ToolCallRecord(request)
        while len(self.records) > MAX_RECORDS:
            self.records.popitem(last=False)

    def record_result(self, result: ToolCallResult) -> None:
        record = self.records.get(result.call_id)
        if record is not None:
            record.result = result

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
