"""`vixio pairing`: the console's companions on the command line, over its API.

    vixio pairing list [--json]          companions waiting for approval, let in, and approved
    vixio pairing approve PAIRING_ID     let a waiting companion pair (remembered across restarts)
    vixio pairing revoke PAIRING_ID      forget the approval and unpair it now

It talks to a running `vixio serve` at `--url` (default http://127.0.0.1:8003, or $VIXIO_URL)
with `--token` (default $VIXIO_ADMIN_TOKEN), like `vixio tools`. Exit status: 0 done, 2 the
server refused or could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from vixio.console.cli import ApiError, Client, connection_options


def add_pairing_parser(commands: Any) -> None:
    pairing = commands.add_parser("pairing", help="approve or revoke companions that ask to pair with a device")
    common = connection_options()
    actions = pairing.add_subparsers(dest="pairing_command", metavar="ACTION", required=True)
    actions.add_parser("list", parents=[common], help="companions waiting for approval, let in, and approved")
    approve = actions.add_parser("approve", parents=[common], help="let a waiting companion pair (remembered)")
    approve.add_argument("id", help="its pairing id (from `vixio pairing list` or the console)")
    revoke = actions.add_parser("revoke", parents=[common], help="forget an approval and unpair the companion now")
    revoke.add_argument("id", help="its pairing id")


def run_pairing(args: argparse.Namespace) -> int:
    client = Client(args.url, args.token)
    try:
        if args.pairing_command == "list":
            answer = client.request("/api/pairing")
            print(json.dumps(answer, ensure_ascii=False, indent=2) if args.json else _listing(answer))
            return 0
        answer = client.request(f"/api/pairing/{args.pairing_command}", {"id": args.id})
    except ApiError as exc:
        print(f"vixio pairing: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    elif args.pairing_command == "approve":
        approved = answer["approved"]
        live = answer["companions"]
        state = (
            "paired now"
            if any(c["paired"] for c in live)
            else "waiting for the device"
            if live
            else "it is not connected now; it pairs when it registers again"
        )
        print(f"approved {approved['id']}: companion {approved['companion']} may pair with {approved['mac']} ({state})")
    else:
        revoked = answer["revoked"]
        print(
            f"revoked {args.id}"
            + (f" (companion {revoked['companion']} for {revoked['mac']})" if revoked else " (it had no approval)")
            + f"; {answer['unpaired']} live companion(s) unpaired"
        )
    return 0


def _listing(answer: dict[str, Any]) -> str:
    lines = ["WAITING FOR APPROVAL"]
    lines += [
        f"  {e['id']}  {e['companion']} -> {e['mac']}  tools: {', '.join(e['tools']) or '-'}"
        + (f"  (token refused: {e['refusal']})" if e.get("refusal") else "")
        for e in answer["pending"]
    ]
    lines += ["  none"] * (not answer["pending"])
    lines.append("COMPANIONS")
    lines += [
        f"  {e['id']}  {e['companion']} -> {e['mac']}  {'paired' if e['paired'] else 'waiting for device'}"
        f" (by {e['grant']})  tools: {', '.join(e['tools']) or '-'}"
        for e in answer["companions"]
    ]
    lines += ["  none"] * (not answer["companions"])
    lines.append("APPROVED (remembered)")
    lines += [
        f"  {a['id']}  {a['companion']} -> {a['mac']}  since "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(a['approved_at']))}"
        for a in answer["approved"]
    ]
    lines += ["  none"] * (not answer["approved"])
    return "\n".join(lines)
