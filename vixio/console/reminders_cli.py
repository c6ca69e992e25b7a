"""`vixio reminders` and `vixio say`: a device's reminders and an operator's message, over the console API.

    vixio reminders list [DEVICE] [--json]                       the soonest first
    vixio reminders add DEVICE TEXT (--in 10m | --at 2026-12-01T07:00 | --repeat weekdays --time 06:30)
                        [--kind reminder|alarm|timer]
    vixio reminders cancel DEVICE ID
    vixio say DEVICE "dinner is ready"                            spoken now: in its conversation, by
                                                                  notify when idle, else as the first
                                                                  words of its next session

It talks to a running `vixio serve` at `--url` (default http://127.0.0.1:8003, or $VIXIO_URL)
with `--token` (default $VIXIO_ADMIN_TOKEN), like `vixio identity`; times are the server's zone
(`agent.timezone`). Exit status: 0 done, 2 the server refused or could not be reached.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.parse
from typing import Any

from vixio.console.cli import ApiError, Client, connection_options

_DELAY = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?")


def delay_seconds(text: str) -> int:
    """ "90", "90s", "10m", "1h30m" → seconds; ArgumentTypeError otherwise."""
    match = _DELAY.fullmatch(text.strip().lower())
    if not text.strip() or match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a delay such as 90s, 10m or 1h30m")
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def add_reminders_parser(commands: Any) -> None:
    reminders = commands.add_parser("reminders", help="list, add or cancel a device's reminders, alarms and timers")
    common = connection_options()
    actions = reminders.add_subparsers(dest="reminders_command", metavar="ACTION", required=True)
    listing = actions.add_parser("list", parents=[common], help="the reminders of one device, or of all")
    listing.add_argument("device", nargs="?", help="a device id (its MAC); omit for every device")
    add = actions.add_parser("add", parents=[common], help="set a reminder for a device")
    add.add_argument("device", help="the device id (its MAC)")
    add.add_argument("text", help="what is said when it fires")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--in", dest="in_seconds", type=delay_seconds, help="a delay: 90s, 10m, 1h30m")
    when.add_argument("--at", help="a local date and time: 2026-12-01T07:00")
    when.add_argument("--repeat", help="daily, weekdays, weekends or days such as mon,wed,fri (with --time)")
    add.add_argument("--time", dest="time_of_day", help="HH:MM of a repeating one")
    add.add_argument("--kind", choices=("reminder", "alarm", "timer"), default="reminder")
    cancel = actions.add_parser("cancel", parents=[common], help="cancel one (its id from `list`)")
    cancel.add_argument("device", help="the device id (its MAC)")
    cancel.add_argument("id", help="the reminder's id")


def add_say_parser(commands: Any) -> None:
    say = commands.add_parser(
        "say", parents=[connection_options()], help="say something to a device now, whether it is talking, idle or away"
    )
    say.add_argument("device", help="the device id (its MAC)")
    say.add_argument("text", help="what to say")


def run_reminders(args: argparse.Namespace) -> int:
    client = Client(args.url, args.token)
    try:
        if args.reminders_command == "list":
            query = f"?{urllib.parse.urlencode({'device': args.device})}" if args.device else ""
            answer = client.request("/api/reminders" + query)
        elif args.reminders_command == "add":
            body = {
                "device_id": args.device,
                "text": args.text,
                "kind": args.kind,
                "in_seconds": args.in_seconds,
                "at": args.at,
                "repeat": args.repeat,
                "time_of_day": args.time_of_day,
            }
            answer = client.request("/api/reminders/add", {k: v for k, v in body.items() if v is not None})
        else:
            answer = client.request("/api/reminders/cancel", {"device_id": args.device, "id": args.id})
    except ApiError as exc:
        print(f"vixio reminders: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    elif args.reminders_command == "list":
        print(listing(answer["reminders"]))
    elif args.reminders_command == "add":
        print(f"set {line(answer)}")
    else:
        print(f"cancelled {answer['id']} of {answer['device_id']}")
    return 0


def run_say(args: argparse.Namespace) -> int:
    try:
        answer = Client(args.url, args.token).request("/api/say", {"device": args.device, "text": args.text})
    except ApiError as exc:
        print(f"vixio say: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    else:
        print(f"queued for {answer['device_id']}: {answer['text']}")
    return 0


def line(reminder: dict[str, Any]) -> str:
    repeat = f" (repeats {reminder['repeat']} at {reminder['time_of_day']})" if reminder["repeat"] else ""
    return (
        f"[{reminder['id']}] {reminder['device_id']}  {reminder['kind']} {reminder['when']}{repeat}: {reminder['text']}"
    )


def listing(reminders: list[dict[str, Any]]) -> str:
    return "\n".join(
        [
            "REMINDERS (id, device, kind, when, text)",
            *(f"  {line(r)}" for r in reminders),
            *["  none"] * (not reminders),
        ]
    )
