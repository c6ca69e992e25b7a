"""`vixio memory`: see or erase what the state store keeps about one device.

    vixio memory show aa:bb:cc:dd:ee:ff [--config config.yaml] [--turns 20] [--json]
    vixio memory clear aa:bb:cc:dd:ee:ff [--config config.yaml]

It opens the store the config names (`state.path`) directly, so it works with the server running
(SQLite lets several processes share the file) or stopped. `clear` erases the device's
conversation history, long-term memory, profile assignment and held background results; its admission (activation,
allow-list) and pairing approvals stay, as those are the operator's decisions (docs/privacy.md).
A session live at that moment keeps what it already has in its model's history until it ends.
Exit status: 0 done, 1 the config or the store could not be used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from typing import Any

from vixio.state.store import Store, StoreError


def add_memory_parser(commands: Any) -> None:
    memory = commands.add_parser("memory", help="show or erase what the state store keeps about a device")
    actions = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("device", help="the device id (its lowercase MAC, aa:bb:cc:dd:ee:ff)")
    common.add_argument("--config", "-c", default="config.yaml", metavar="FILE",
                        help="path to config.yaml, for state.path (default: ./config.yaml)")
    show = actions.add_parser("show", parents=[common], help="the device's memory and latest turns")
    show.add_argument("--turns", type=int, default=20, metavar="N", help="latest turns to print (default: 20)")
    show.add_argument("--json", action="store_true", help="print JSON")
    actions.add_parser("clear", parents=[common], help="erase the device's history, memory and profile assignment")


def run_memory(args: argparse.Namespace) -> int:
    from vixio.config import ConfigError, load_config
    from vixio.state import open_store

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    device = args.device.strip().lower()
    try:
        return asyncio.run(_run(open_store(config.state, config.memory), args, device))
    except StoreError as exc:
        print(f"vixio: {exc}", file=sys.stderr)
        return 1


async def _run(store: Store, args: argparse.Namespace, device: str) -> int:
    await store.open()
    try:
        if args.memory_command == "clear":
            before = len(await store.recent_turns(device, limit=1_000_000))
            await store.forget_device(device)
            print(f"{device}: {before} turn(s), the long-term memory, the profile assignment and held "
                  f"background results erased from {store.location}")
            return 0
        memory = await store.memory(device)
        turns = await store.recent_turns(device, limit=max(0, args.turns))
        profile = await store.assigned_profile(device)
        if args.json:
            print(json.dumps({"device": device, "profile": profile,
                              "memory": None if memory is None else {"text": memory.text, "at": memory.at},
                              "turns": [{"conversation": t.conversation, "seq": t.seq, "at": t.at, "user": t.user,
                                         "assistant": t.assistant, "interrupted": t.interrupted} for t in turns]},
                             ensure_ascii=False, indent=2))
            return 0
        print(f"device {device} ({store.location})")
        print(f"profile: {profile or '(from config)'}")
        print(f"memory: {memory.text if memory is not None else '(none)'}")
        print(f"latest {len(turns)} turn(s):" if turns else "no stored turns")
        for turn in turns:
            when = datetime.fromtimestamp(turn.at).strftime("%Y-%m-%d %H:%M:%S")
            cut = " [interrupted]" if turn.interrupted else ""
            print(f"  {when} [{turn.conversation}#{turn.seq}]")
            if turn.user:
                print(f"    user: {turn.user}")
            print(f"    assistant: {turn.assistant}{cut}")
        return 0
    finally:
        await store.close()
