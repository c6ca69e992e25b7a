"""The reminder tools the model calls: set_reminder, list_reminders, cancel_reminder.

The model turns "remind me at 7 tomorrow to take my medicine", "every weekday at 6:30", "in 10
minutes" or "每天早上七点叫我起床" into structured arguments (a local ISO time, a delay in seconds,
or a repeat and a time of day); these tools check them and answer in words the model can repeat.
Times are the device's zone (`agent.timezone`, else the server's). What a device controls is
bounded here: the text's length, how far ahead, how many per device (`reminders.*`), and a
reminder can only be listed or cancelled by the device that set it (the id comes from the
session, never from the model).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from vixio.config.reminders import RemindersConfig
from vixio.core.tools.context import ToolContext
from vixio.core.tools.local import func_to_tool_definition
from vixio.core.tools.types import ToolDefinition
from vixio.state.reminders import Reminder, next_occurrence, repeat_days, zone_of
from vixio.state.store import Store, StoreError

MAX_ID_CHARS = 32


def describe_time(when: float, zone: str, now: float | None = None) -> str:
    """ "today 07:00", "tomorrow 06:30" or "Mon 2026-12-01 07:00", in `zone`."""
    tz = zone_of(zone)
    moment = datetime.fromtimestamp(when, tz)
    days = (moment.date() - datetime.fromtimestamp(time.time() if now is None else now, tz).date()).days
    day = {0: "today", 1: "tomorrow", -1: "yesterday"}.get(days, moment.strftime("%a %Y-%m-%d"))
    return f"{day} {moment:%H:%M}"


def describe(reminder: Reminder, now: float | None = None) -> str:
    """One line for the model, the console and the CLI."""
    repeat = f", repeats {reminder.repeat} at {reminder.at}" if reminder.repeat else ""
    return f"[{reminder.id}] {reminder.kind} {describe_time(reminder.due, reminder.zone, now)}{repeat}: {reminder.text}"


def build_reminder(
    device_id: str,
    text: str,
    config: RemindersConfig,
    zone: str,
    *,
    kind: str = "reminder",
    at: str | None = None,
    in_seconds: float | None = None,
    repeat: str | None = None,
    time_of_day: str | None = None,
    now: float | None = None,
) -> Reminder:
    """A checked reminder from the tool's (or the console's) arguments; ValueError says what is wrong."""
    now = time.time() if now is None else now
    text = " ".join(text.split())
    if not text:
        raise ValueError("the reminder needs a text (what to say when it fires)")
    if len(text) > config.max_text_chars:
        raise ValueError(f"the reminder text is longer than {config.max_text_chars} characters; say it shorter")
    if kind not in ("reminder", "alarm", "timer", "message"):
        raise ValueError("kind must be reminder, alarm or timer")
    given = [name for name, value in (("at", at), ("in_seconds", in_seconds), ("repeat", repeat)) if value]
    if len(given) != 1:
        raise ValueError(
            "give exactly one of: at (a local date and time), in_seconds (a delay), or repeat with time_of_day"
        )
    horizon = now + config.horizon_days * 86400
    reminder = Reminder(Reminder.new_id(), device_id, text, 0.0, kind, zone=zone, created=now)  # type: ignore[arg-type]
    if in_seconds:
        if not 1 <= in_seconds <= config.horizon_days * 86400:
            raise ValueError(f"in_seconds must be from 1 to {int(config.horizon_days * 86400)}")
        return replace(reminder, due=now + float(in_seconds))
    if repeat:
        days = repeat_days(repeat)
        clock = _clock(time_of_day or "")
        return replace(reminder, due=next_occurrence(days, clock, zone, now), repeat=repeat.strip().lower(), at=clock)
    assert at is not None
    try:
        moment = datetime.fromisoformat(at.strip())
    except ValueError:
        raise ValueError(f"at {at!r} is not an ISO local date and time such as 2026-12-01T07:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone_of(zone)) if zone else moment.astimezone()
    due = moment.timestamp()
    if due <= now:
        raise ValueError(f"{describe_time(due, zone, now)} has passed (now it is {describe_time(now, zone, now)})")
    if due > horizon:
        raise ValueError(f"a reminder can be set at most {config.horizon_days:g} days ahead")
    return replace(reminder, due=due)


def _clock(value: str) -> str:
    try:
        hour, minute = (int(part) for part in value.strip().split(":")[:2])
    except ValueError:
        raise ValueError("time_of_day must be HH:MM (24-hour), e.g. 06:30") from None
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise ValueError("time_of_day must be HH:MM (24-hour), e.g. 06:30")
    return f"{hour:02d}:{minute:02d}"


def reminder_tools(
    store: Store, config: RemindersConfig, zone: str, changed: Callable[[], None]
) -> list[ToolDefinition]:
    """The three tools, on `store`, in `zone` (an IANA name, "" the server's); `changed` is
    called after a reminder is set or cancelled (wakes the scheduler)."""

    async def set_reminder(
        text: Annotated[
            str,
            Field(description="What to say when it fires, in the user's language, e.g. 'take your medicine' / '吃药'."),
        ],
        kind: Annotated[
            Literal["reminder", "alarm", "timer"],
            Field(description="alarm: wake me / 闹钟; timer: 'in 10 minutes' countdowns / 计时器; else reminder."),
        ] = "reminder",
        at: Annotated[
            str | None,
            Field(
                description="Local date and time in ISO form, e.g. 2026-12-01T07:00 (use the "
                "current date and time you were given)."
            ),
        ] = None,
        in_seconds: Annotated[
            int | None, Field(description="Delay from now in seconds ('in 10 minutes' = 600).")
        ] = None,
        repeat: Annotated[
            str | None,
            Field(
                description="For a repeating one: daily, weekdays, weekends, or days "
                "such as mon,wed,fri; with time_of_day."
            ),
        ] = None,
        time_of_day: Annotated[str | None, Field(description="HH:MM (24-hour) of a repeating one.")] = None,
        *,
        context: ToolContext,
    ) -> str:
        """Set a reminder, alarm or timer for the user of this device: give exactly one of `at`, `in_seconds`, or `repeat` with `time_of_day`. It is spoken when due, even if the conversation has ended."""
        device_id = context.device_id
        if not device_id:
            return "Reminders need a device: this conversation has none."
        try:
            reminder = build_reminder(
                device_id,
                text,
                config,
                zone,
                kind=kind,
                at=at,
                in_seconds=in_seconds,
                repeat=repeat,
                time_of_day=time_of_day,
            )
        except ValueError as exc:
            return f"Not set: {exc}."
        try:
            if not await store.put_reminder(reminder, config.max_per_device):
                return (
                    f"Not set: this device already has {config.max_per_device} reminders; cancel one first "
                    "(list_reminders shows them)."
                )
        except StoreError:
            return "Not set: reminders cannot be saved right now."
        changed()
        return f"Set: {describe(reminder)}. Tell the user briefly when it will fire."

    async def list_reminders(context: ToolContext) -> str:
        """List this device's reminders, alarms and timers (id, when, text), the soonest first."""
        device_id = context.device_id
        try:
            found = await store.reminders(device_id, limit=config.max_per_device) if device_id else []
        except StoreError:
            return "Reminders cannot be read right now."
        if not found:
            return "No reminders are set."
        return "\n".join(describe(reminder) for reminder in found)

    async def cancel_reminder(
        reminder_id: Annotated[str | None, Field(description="The id from list_reminders, e.g. Ab3dE6fG.")] = None,
        text_contains: Annotated[
            str | None, Field(description="Or a word of its text, e.g. 'medicine' / '吃药'.")
        ] = None,
        *,
        context: ToolContext,
    ) -> str:
        """Cancel one of this device's reminders, by its id or by a word of its text."""
        device_id = context.device_id
        if not device_id:
            return "Reminders need a device: this conversation has none."
        try:
            found = await store.reminders(device_id, limit=config.max_per_device)
            if reminder_id:
                matches = [r for r in found if r.id == reminder_id.strip()[:MAX_ID_CHARS]]
            elif text_contains and text_contains.strip():
                word = text_contains.strip().lower()[: config.max_text_chars]
                matches = [r for r in found if word in r.text.lower()]
            else:
                return "Name the reminder to cancel: its id or a word of its text."
            if len(matches) != 1:
                listing = "\n".join(describe(r) for r in (matches or found)) or "none"
                what = "Several reminders match" if matches else "No reminder matches"
                return f"{what}; nothing cancelled. This device's reminders:\n{listing}"
            cancelled = await store.cancel_reminder(device_id, matches[0].id)
        except StoreError:
            return "Reminders cannot be changed right now."
        if cancelled:
            changed()
        return f"Cancelled: {describe(matches[0])}." if cancelled else "It was already gone."

    tools = [
        func_to_tool_definition(set_reminder),
        func_to_tool_definition(list_reminders),
        func_to_tool_definition(cancel_reminder),
    ]
    # Setting and cancelling change the world: never during a preemptive turn the user may still cancel.
    return [replace(tool, read_only=tool.name == "list_reminders") for tool in tools]
