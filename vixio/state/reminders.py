"""Reminders, alarms and timers in the state store: the records, their recurrence, and the part
of the `Store` interface that keeps them (vixio/state/sqlite_reminders.py, redis_reminders.py).

    reminder = Reminder.once("aa:bb:cc:dd:ee:ff", "take your medicine", due=time.time() + 600)
    await store.put_reminder(reminder, per_device=20)
    for due in await store.due_reminders(time.time(), limit=50):
        if await store.fire_reminder(due, due.following(time.time()), keep=16):
            ...                                   # this caller (one in the whole fleet) delivers it
    for fired in await store.claim_fired(device_id, now, until=now + 300, limit=4):
        delivered = ...                           # what fired while the device was away, said
        await store.settle_fired(device_id, [fired.occurrence], delivered=delivered)

Exactly once in a fleet: every process runs a scheduler, and `fire_reminder` is the claim. It
moves the reminder on to its next time (or removes a one-off) only if it is still due at the
time the caller read, and in the same atomic step puts the occurrence in the device's fired
list, so a process that dies after the claim loses nothing: the occurrence waits there until a
delivery claims it (`claim_fired`, which one caller wins) and is removed only once its words
went out (`settle_fired`); one that did not go out (the session ended first) is put back, and
a claimer that dies leaves it for the next delivery once its claim lapses. A repeating reminder's next time is
computed from its wall-clock time in its own zone, so it follows daylight saving.
"""

from __future__ import annotations

import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from datetime import time as clock_time
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ReminderKind = Literal["reminder", "alarm", "timer", "message"]
KINDS: tuple[str, ...] = ("reminder", "alarm", "timer", "message")
DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
REPEATS = {"daily": tuple(range(7)), "weekdays": tuple(range(5)), "weekends": (5, 6)}
"""Named repeats; otherwise a comma list of DAY_NAMES ("mon,wed,fri")."""


def repeat_days(repeat: str) -> tuple[int, ...]:
    """The weekdays (0 = Monday) `repeat` names; ValueError naming what is accepted."""
    text = repeat.strip().lower()
    if text in REPEATS:
        return REPEATS[text]
    days = [part.strip()[:3] for part in text.split(",") if part.strip()]
    if not days or any(day not in DAY_NAMES for day in days):
        raise ValueError(f"repeat {repeat!r}: expected daily, weekdays, weekends or days such as mon,wed,fri")
    return tuple(sorted({DAY_NAMES.index(day) for day in days}))


def zone_of(name: str) -> ZoneInfo | None:
    """The IANA zone `name` ("" or unknown: None, the server's local zone)."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def next_occurrence(days: tuple[int, ...], at: str, zone: str, after: float) -> float:
    """The first time after unix time `after` that is `at` ("HH:MM") local time in `zone` on
    one of `days`."""
    hour, minute = (int(part) for part in at.split(":"))
    tz = zone_of(zone)
    start = datetime.fromtimestamp(after, tz).date()
    for offset in range(8):
        day: date = start + timedelta(days=offset)
        if day.weekday() not in days:
            continue
        moment = datetime.combine(day, clock_time(hour, minute), tz)
        stamp = moment.timestamp()
        if stamp > after:
            return stamp
    raise AssertionError("a weekday recurs within 8 days")


@dataclass(frozen=True, slots=True)
class Reminder:
    """One reminder, alarm or timer of a device (or an operator's message waiting to be said)."""

    id: str
    """Short random id (what `cancel` names)."""
    device_id: str
    text: str
    """What is said when it fires ("take your medicine")."""
    due: float
    """Unix time it fires next."""
    kind: ReminderKind = "reminder"
    repeat: str = ""
    """"" fires once; else daily, weekdays, weekends or days ("mon,wed,fri") at `at`."""
    at: str = ""
    """"HH:MM", the local time of a repeating one (in `zone`)."""
    zone: str = ""
    """IANA zone it was set in ("" the server's); says the time when it is spoken."""
    created: float = 0.0

    @staticmethod
    def new_id() -> str:
        return secrets.token_urlsafe(6).replace("-", "x").replace("_", "y")

    @classmethod
    def once(cls, device_id: str, text: str, due: float, kind: ReminderKind = "reminder", zone: str = "") -> Reminder:
        return cls(cls.new_id(), device_id, text, due, kind, zone=zone, created=time.time())

    def following(self, after: float) -> float | None:
        """When it fires next after firing at `due` (None: a one-off, gone once fired). A
        repeating one skips the times already past `after` (a server down for days says it
        missed one, not each)."""
        if not self.repeat:
            return None
        return next_occurrence(repeat_days(self.repeat), self.at, self.zone, max(after, self.due))

    def fired(self) -> FiredReminder:
        """Its occurrence at `due`."""
        return FiredReminder(
            f"{self.id}@{int(self.due)}", self.device_id, self.id, self.text, self.kind, self.due, self.zone
        )

    def moved_to(self, due: float) -> Reminder:
        return replace(self, due=due)


@dataclass(frozen=True, slots=True)
class FiredReminder:
    """One occurrence that fired and waits for its delivery."""

    occurrence: str
    """"<reminder id>@<unix second>": unique per occurrence."""
    device_id: str
    reminder_id: str
    text: str
    kind: ReminderKind
    due: float
    """When it was due (what a late delivery says)."""
    zone: str = ""


class ReminderStore(ABC):
    """The reminder part of `Store` (every backend implements it; tests/state/test_reminders_store.py)."""

    @abstractmethod
    async def put_reminder(self, reminder: Reminder, per_device: int) -> bool:
        """Add `reminder` (or replace the one with its id); False, and nothing written, when the
        device already has `per_device` others."""

    @abstractmethod
    async def reminders(self, device_id: str | None = None, limit: int = 1000) -> list[Reminder]:
        """Reminders of one device, or of all (at most `limit`), the soonest first."""

    @abstractmethod
    async def cancel_reminder(self, device_id: str, reminder_id: str) -> bool:
        """Remove one; False if the device has no reminder with that id."""

    @abstractmethod
    async def next_reminder_due(self) -> float | None:
        """The soonest `due` of all reminders, or None without any."""

    @abstractmethod
    async def due_reminders(self, now: float, limit: int) -> list[Reminder]:
        """At most `limit` reminders due at or before `now`, the soonest first."""

    @abstractmethod
    async def fire_reminder(self, reminder: Reminder, next_due: float | None, keep: int) -> bool:
        """The claim: if `reminder` is still due at `reminder.due`, move it to `next_due` (None:
        remove it) and add its occurrence to the device's fired list (past `keep` there, the
        oldest go), atomically; True for the one caller that did."""

    @abstractmethod
    async def claim_fired(
        self, device_id: str, now: float, until: float, occurrence: str | None = None, limit: int = 16
    ) -> list[FiredReminder]:
        """The device's fired occurrences (or only `occurrence`) nobody has claimed, or whose
        claim lapsed by `now`, oldest first (at most `limit`): now claimed by this caller until
        `until`, so each goes to one caller. They stay in the store until `settle_fired`."""

    @abstractmethod
    async def settle_fired(self, device_id: str, occurrences: Sequence[str], delivered: bool) -> None:
        """Claimed occurrences were said (`delivered`: removed) or not (their claim is dropped:
        the next delivery takes them)."""

    @abstractmethod
    async def take_fired(self, device_id: str, occurrence: str | None = None) -> list[FiredReminder]:
        """Remove and return the device's fired occurrences (or only `occurrence`), claimed or
        not, oldest first; each goes to one caller (forgetting a device; tests)."""

    @abstractmethod
    async def put_clip(self, token: str, data: bytes, until: float, keep: int) -> None:
        """Keep an audio clip (a `notify` file) under `token` until unix time `until`; past
        `keep` clips, the oldest go."""

    @abstractmethod
    async def clip(self, token: str) -> bytes | None:
        """The clip under `token`, None when unknown or expired."""
