"""`vixio identity`: devices asked for by another Client-Id (a re-flashed board), over the console API.

    vixio identity list [--json]                   pending re-binds, the most recent first
    vixio identity approve DEVICE CLIENT_ID        pin DEVICE to CLIENT_ID: that board is the device again
    vixio identity dismiss DEVICE CLIENT_ID        drop the request (it asks again when it reconnects)

It talks to a running `vixio serve` at `--url` (default http://127.0.0.1:8003, or $VIXIO_URL)
with `--token` (default $VIXIO_ADMIN_TOKEN), like `vixio pairing`. Exit status: 0 done, 2 the
server refused or could not be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from vixio.console.cli import ApiError, Client, connection_options


def add_identity_parser(commands: Any) -> None:
    identity = commands.add_parser("identity", help="approve or dismiss a device's re-bind to a new Client-Id")
    common = connection_options()
    actions = identity.add_subparsers(dest="identity_command", metavar="ACTION", required=True)
    actions.add_parser("list", parents=[common], help="re-binds waiting for an operator")
    for action, what in (
        ("approve", "pin the device to this Client-Id (the re-flashed board is the device again)"),
        ("dismiss", "drop the request"),
    ):
        parser = actions.add_parser(action, parents=[common], help=what)
        parser.add_argument("device", help="the device id (its MAC)")
        parser.add_argument("client_id", help="the Client-Id that asked (from `vixio identity list`)")


def run_identity(args: argparse.Namespace) -> int:
    client = Client(args.url, args.token)
    try:
        if args.identity_command == "list":
            answer = client.request("/api/identities")
        else:
            answer = client.request(
                f"/api/identities/{args.identity_command}", {"device_id": args.device, "client_id": args.client_id}
            )
    except ApiError as exc:
        print(f"vixio identity: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    elif args.identity_command == "list":
        print(_listing(answer))
    elif args.identity_command == "approve":
        print(
            f"{answer['device_id']} is pinned to Client-Id {answer['client_id']} (was "
            f"{answer['previous_client_id']}): that board is the device from its next connection"
        )
    else:
        print(f"dismissed the re-bind of {answer['device_id']} to Client-Id {answer['client_id']}")
    return 0


def _listing(answer: dict[str, Any]) -> str:
    lines = ["RE-BINDS WAITING FOR AN OPERATOR (device, new Client-Id, pinned Client-Id, attempts, last)"]
    lines += [
        f"  {r['device_id']}  {r['client_id']}  pinned: {r['pinned_client_id'] or '-'}  {r['attempts']}x  "
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(r['last']))}"
        for r in answer["rebinds"]
    ]
    lines += ["  none"] * (not answer["rebinds"])
    return "\n".join(lines)
