"""ToolCallContext: one session's record of tool calls and results, by call id (seed 004).

Every call the model makes (natively or through a text protocol) and every result lands here,
so a later turn, a status query or a log can find them. It also holds the confirmations the
model asked the user for: a tool that needs confirmation runs only after the user's next turn
said yes.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from vixio.core.tools.types import ToolCallRequest, ToolCallResult

MAX_RECORDS = 200
"""Calls remembered per session; the oldest are forgotten first."""

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


def confirmation_key(tool_name: str, arguments: dict[str, Any]) -> str:
    return tool_name + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


class ToolCallContext:
    def __init__(self) -> None:
        self.records: OrderedDict[str, ToolCallRecord] = OrderedDict()
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

    # --- confirmations ------------------------------------------------------------------------

    def ask_confirmation(self, key: str) -> None:
        self._asked.add(key)

    def take_approval(self, key: str) -> bool:
        """True once for a call the user approved in their last turn."""
        if key in self._approved:
            self._approved.discard(key)
            return True
        return False

    def on_user_text(self, text: str) -> None:
        """The user spoke: a yes approves the calls asked about, anything else drops them."""
        self._approved = set(self._asked) if self._asked and is_affirmative(text) else set()
        self._asked.clear()
