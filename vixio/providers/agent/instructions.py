"""The system prompt of each model call: the configured prompt, the current date and time in
the server's time zone, and — for a model offered no tools — what it cannot do.

A `TurnInstructions` is a callable: providers call it at every model call, so the clock is
read then, not when the session started. Any model can then answer "what time is it?" or
"what day is it?" without a tool call.

    instructions = TurnInstructions("You are a voice assistant.", clock_note=CLOCK_EN, weekdays=WEEKDAYS_EN)
    instructions()   # "You are a voice assistant.\n\nIt is 2:05 PM on Wednesday, 25 November 2026 (Europe/Berlin time)."
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path

from vixio.config.pipeline import resolve_timezone  # noqa: F401 (importable from here too)

MONTHS_EN = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

SystemPrompt = str | Callable[[], str]
"""What providers take as instructions: a fixed text, or a callable rendered at each model call."""


def render_prompt(prompt: SystemPrompt) -> str:
    """The text of a `SystemPrompt` now."""
    return prompt() if callable(prompt) else prompt


def _template_pattern(template: str) -> str:
    """A regex for `template` filled in: each {field} matches a short run without a newline."""
    pieces = re.split(r"(\{\w+\})", template)
    return "".join(r"[^\n]{1,40}?" if re.fullmatch(r"\{\w+\}", piece) else re.escape(piece) for piece in pieces)


def split_clock(system: str, templates: Sequence[str]) -> tuple[str, str]:
    """`system` without its date-and-time sentence (rendered from one of `templates`), and that
    sentence ("" when it has none). The rest stays the same from minute to minute, so a local
    model can keep it, and the conversation after it, in its prompt cache."""
    for template in templates:
        found = re.search(_template_pattern(template), system)
        if found:
            rest = (system[: found.start()].rstrip() + "\n\n" + system[found.end() :].lstrip()).strip()
            return rest, found.group(0)
    return system, ""


def local_zone_name() -> str:
    """The IANA name of the server's local zone when it can be told (TZ, /etc/localtime), else
    its abbreviation (e.g. UTC, CET)."""
    return _iana_zone_name(os.environ.get("TZ", "")) or datetime.now().astimezone().tzname() or "local"


@functools.lru_cache(maxsize=4)
def _iana_zone_name(tz: str) -> str | None:
    """Per value of TZ, looked up once (as Python's `time` module reads the zone once, until
    `tzset`): every turn's prompt names the zone, and resolving /etc/localtime each time cost
    ~0.1 ms of loop time a turn. The abbreviation fallback is not cached: it changes with DST."""
    configured = tz.lstrip(":")
    if configured and "/" in configured and not configured.startswith("/"):
        return configured
    try:
        target = Path("/etc/localtime").resolve()
    except OSError:
        return None
    if "zoneinfo" in target.parts:
        parts = target.parts
        return "/".join(parts[parts.index("zoneinfo") + 1 :])
    return None


@dataclass(frozen=True, slots=True)
class TurnInstructions:
    """The instructions of one model call, rendered when called."""

    base: str
    """The configured `agent.system_prompt`."""
    clock_note: str
    """Template of the date-and-time sentence: {weekday} {day} {month} {month_name} {year}
    {time24} {time12} {zone} (the language's, from vixio.config.languages)."""
    weekdays: Sequence[str]
    """Monday first, in the prompt's language."""
    timezone: tzinfo | None = None
    """None: the server's local zone."""
    zone_name: str = ""
    """How the zone is named in the prompt; empty: the zone's key or the local zone's name."""
    limits: str = ""
    """Appended for a model offered no tools: it cannot act or look up, and must say so."""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now().astimezone())
    """The current time (aware); tests pass a fixed one."""

    def now(self) -> datetime:
        current = self.clock()
        return current.astimezone(self.timezone) if self.timezone is not None else current.astimezone()

    def format_clock(self, template: str, now: datetime | None = None) -> str:
        """`template` with the clock fields filled in (see `clock_note`)."""
        now = now or self.now()
        zone = self.zone_name or str(getattr(self.timezone, "key", "") or "") or local_zone_name()
        hour12 = now.hour % 12 or 12
        return template.format(
            weekday=self.weekdays[now.weekday()],
            day=now.day,
            month=now.month,
            month_name=MONTHS_EN[now.month - 1],
            year=now.year,
            time24=f"{now.hour:02d}:{now.minute:02d}",
            time12=f"{hour12}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}",
            zone=zone,
        )

    def __call__(self) -> str:
        return "\n\n".join(
            part for part in (self.base.strip(), self.format_clock(self.clock_note), self.limits) if part
        )
