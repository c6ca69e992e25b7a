"""What a fired reminder says (English and Mandarin, on time and missed) and how the tools' and
the console's arguments are checked and bounded (vixio/app/reminders.py, vixio/state/reminder_tools.py)."""

from __future__ import annotations

import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from vixio.app.notify import sentences
from vixio.app.reminders import spoken_text
from vixio.config.reminders import RemindersConfig
from vixio.state.reminder_tools import build_reminder
from vixio.state.reminders import FiredReminder

pytestmark = pytest.mark.unit

DEVICE = "aa:bb:cc:dd:ee:ff"
SHANGHAI = "Asia/Shanghai"


def fired(text: str, due: float, kind: str = "reminder") -> FiredReminder:
    return FiredReminder("r1@1", DEVICE, "r1", text, kind, due, SHANGHAI)  # type: ignore[arg-type]


def test_on_time_and_missed_in_english_and_mandarin() -> None:
    seven = datetime(2026, 11, 30, 7, 0, tzinfo=ZoneInfo(SHANGHAI)).timestamp()
    assert spoken_text(fired("take your medicine", seven), "en", seven + 5) == "Reminder: take your medicine."
    assert spoken_text(fired("wake up", seven, "alarm"), "en", seven) == "Alarm: wake up."
    assert spoken_text(fired("the eggs", seven, "timer"), "en", seven) == "Time's up: the eggs."
    assert (
        spoken_text(fired("take your medicine.", seven), "en", seven + 3600)
        == "You missed a reminder at 07:00: take your medicine."
    )
    assert (
        spoken_text(fired("wake up", seven, "alarm"), "en", seven + 86400)
        == "You missed an alarm at Mon 30 Nov at 07:00: wake up."
    )
    assert spoken_text(fired("吃药", seven), "zh", seven) == "提醒：吃药。"
    assert spoken_text(fired("吃药。", seven), "zh", seven + 600) == "你错过了07:00的提醒：吃药。"
    assert spoken_text(fired("起床", seven, "alarm"), "zh", seven + 86400) == "你错过了11月30日07:00的闹钟：起床。"
    assert spoken_text(fired("dinner is ready", seven, "message"), "en", seven) == "dinner is ready."


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"text": "   "}, "needs a text"),
        ({"text": "x" * 201, "in_seconds": 5}, "longer than 200"),
        ({"text": "tea"}, "exactly one of"),
        ({"text": "tea", "in_seconds": 5, "at": "2030-01-01T07:00"}, "exactly one of"),
        ({"text": "tea", "in_seconds": 400 * 86400}, "in_seconds must be from 1"),
        ({"text": "tea", "at": "tomorrow at seven"}, "not an ISO local date"),
        ({"text": "tea", "at": "2020-01-01T07:00"}, "has passed"),
        ({"text": "tea", "at": "2099-01-01T07:00"}, "at most 366 days"),
        ({"text": "tea", "repeat": "sometimes", "time_of_day": "07:00"}, "daily, weekdays"),
        ({"text": "tea", "repeat": "weekdays", "time_of_day": "25:00"}, "HH:MM"),
        ({"text": "tea", "in_seconds": 5, "kind": "nap"}, "kind must be"),
    ],
)
def test_arguments_are_checked_and_bounded(arguments: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        build_reminder(DEVICE, config=RemindersConfig(), zone=SHANGHAI, **arguments)  # type: ignore[arg-type]


def test_a_local_time_is_read_in_the_devices_zone_and_a_repeat_gets_its_next_time() -> None:
    now = datetime(2026, 11, 28, 20, 0, tzinfo=ZoneInfo(SHANGHAI)).timestamp()  # a Saturday evening
    at = build_reminder(DEVICE, "take your medicine", RemindersConfig(), SHANGHAI, at="2026-11-29T07:00", now=now)
    assert at.due == datetime(2026, 11, 29, 7, 0, tzinfo=ZoneInfo(SHANGHAI)).timestamp() and at.zone == SHANGHAI
    weekdays = build_reminder(
        DEVICE, "起床", RemindersConfig(), SHANGHAI, kind="alarm", repeat="Weekdays", time_of_day="6:30", now=now
    )
    assert (weekdays.repeat, weekdays.at) == ("weekdays", "06:30")
    assert weekdays.due == datetime(2026, 11, 30, 6, 30, tzinfo=ZoneInfo(SHANGHAI)).timestamp()  # Monday
    assert weekdays.following(weekdays.due) == datetime(2026, 12, 1, 6, 30, tzinfo=ZoneInfo(SHANGHAI)).timestamp()
    timer = build_reminder(DEVICE, " the   eggs ", RemindersConfig(), "", kind="timer", in_seconds=600)
    assert timer.text == "the eggs" and timer.due == pytest.approx(time.time() + 600, abs=2)
    assert timer.following(timer.due) is None


def test_notify_subtitles_are_cut_at_sentence_ends_in_both_languages() -> None:
    assert sentences("Reminder: the laundry. Hang it up!  ") == ["Reminder: the laundry.", "Hang it up!"]
    assert sentences("提醒：吃药。然后喝水！") == ["提醒：吃药。", "然后喝水！"]
