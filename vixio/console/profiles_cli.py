"""`vixio profile`: each device's assistant on the command line, over the console's API.

    vixio profile list [--json]               the profiles, devices: and live sessions' profiles
    vixio profile show DEVICE [--json]        the device's profile now, and why
    vixio profile assign DEVICE PROFILE       kept in the state store, wins over devices: until cleared;
                                              the device's live sessions switch at their next turn
    vixio profile clear DEVICE                the config decides again

It talks to a running `vixio serve` at `--url` (default http://127.0.0.1:8003, or $VIXIO_URL)
with `--token` (default $VIXIO_ADMIN_TOKEN), like `vixio pairing`: the server that keeps the
assignment also tells the live sessions. Exit status: 0 done, 2 the server refused or could not
be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.parse
from typing import Any

from vixio.console.cli import ApiError, Client, connection_options
from vixio.core.device_ids import device_id_argument


def add_profile_parser(commands: Any) -> None:
    profile = commands.add_parser("profile", help="show, assign or clear the profile (assistant) of a device")
    common = connection_options()
    actions = profile.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    actions.add_parser("list", parents=[common], help="the profiles, devices: and the live sessions' profiles")
    show = actions.add_parser("show", parents=[common], help="the device's profile now, and why")
    show.add_argument("device", type=device_id_argument, help="the device id (its MAC, aa:bb:cc:dd:ee:ff)")
    assign = actions.add_parser(
        "assign", parents=[common], help="give a device a profile (wins over devices: until cleared)"
    )
    assign.add_argument("device", type=device_id_argument, help="the device id")
    assign.add_argument("profile", help="a profile's name, or `default` for the top-level config")
    clear = actions.add_parser("clear", parents=[common], help="remove the device's assignment (the config decides)")
    clear.add_argument("device", type=device_id_argument, help="the device id")


def run_profile(args: argparse.Namespace) -> int:
    client = Client(args.url, args.token)
    try:
        if args.profile_command == "list":
            answer = {**client.request("/api/profiles"), "sessions": client.request("/api/sessions")["sessions"]}
            text = _listing(answer)
        elif args.profile_command == "show":
            answer = client.request(f"/api/profiles/{urllib.parse.quote(args.device.strip(), safe=':')}")
            text = _device(answer)
        elif args.profile_command == "assign":
            answer = client.request("/api/profiles/assign", {"device": args.device, "profile": args.profile})
            text = _assigned(answer)
        else:
            answer = client.request("/api/profiles/clear", {"device": args.device})
            text = _assigned(answer)
    except ApiError as exc:
        print(f"vixio profile: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(answer, ensure_ascii=False, indent=2) if args.json else text)
    return 0


def _listing(answer: dict[str, Any]) -> str:
    lines = ["PROFILES"]
    for p in answer["profiles"]:
        lines.append(
            f"  {p['name']:<16} {p['language']}  model {p['model'] or '-'}  voice {p['voice'] or '-'}  "
            f"tools {p['tools']}  memory {p['memory']}" + (f"  — {p['description']}" if p["description"] else "")
        )
    lines.append("DEVICES (config)")
    lines += [f"  {pattern:<20} {name}" for pattern, name in answer["devices"].items()] or ["  none"]
    lines.append("LIVE SESSIONS")
    lines += [
        f"  {s['device_id']:<20} {s.get('profile') or '-'} ({s.get('profile_source') or '-'})"
        + (f" -> {s['profile_pending']} at the next turn" if s.get("profile_pending") else "")
        + (f"  w{s['worker']}" if "worker" in s else "")
        for s in answer["sessions"]
    ] or ["  none"]
    return "\n".join(lines)


def _device(answer: dict[str, Any]) -> str:
    why = {"assigned": "assigned at run time", "config": "from devices:", "default": "named nowhere"}
    lines = [
        f"{answer['device']}: {answer['profile']} ({why[answer['profile_source']]})",
        f"  assigned: {answer['assigned'] or '-'}; devices: gives {answer['configured']}",
    ]
    lines += [
        f"  live session {s['session_id']}: {s.get('profile')}"
        + (f" -> {s['profile_pending']} at the next turn" if s.get("profile_pending") else "")
        for s in answer["sessions"]
    ]
    return "\n".join(lines)


def _assigned(answer: dict[str, Any]) -> str:
    done = (
        f"assigned {answer['assigned']} to {answer['device']}"
        if answer["assigned"] is not None
        else f"cleared {answer['device']}'s assignment: it gets {answer['profile']} ({answer['profile_source']})"
    )
    sessions = answer["sessions"]
    live = (
        f"; {len(sessions)} live session(s) switch at their next turn"
        if sessions
        else "; no live session (its next connection uses it)"
    )
    return done + live
