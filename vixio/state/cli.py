"""`vixio memory`: see, correct or erase what the state store keeps about one device.

    vixio memory show aa:bb:cc:dd:ee:ff [--config config.yaml] [--turns 20] [--json]
    vixio memory set aa:bb:cc:dd:ee:ff "The user is Alice." [--config config.yaml]   # "-": from stdin
    vixio memory edit aa:bb:cc:dd:ee:ff [--config config.yaml]                        # in $VISUAL/$EDITOR
    vixio memory clear aa:bb:cc:dd:ee:ff [--config config.yaml]
    vixio memory facts aa:bb:cc:dd:ee:ff [--json]                                     # what is known, identity first
    vixio memory forget-fact aa:bb:cc:dd:ee:ff "green tea" [--person P]               # by key or by words

It opens the store the config names (`state.path`) directly, so it works with the server running
(SQLite lets several processes share the file) or stopped. `clear` erases the device's
conversation history, long-term memory, profile assignment and held background results; its admission (activation,
allow-list) and pairing approvals stay, as those are the operator's decisions (docs/privacy.md).
`forget-fact` erases the facts a key ("like:green tea") or words ("green tea") name, with the
stored turns that said them, from every file of the store (docs/privacy.md).
`set` and `edit` replace the long-term memory (at most `memory.max_chars`; empty clears it).
A session live at that moment keeps what it already has until it ends (the long-term memory
written then learns only from the turns still stored): its next conversation has the change (the console's Memory pane also reaches live sessions at their next turn).
Exit status: 0 done, 1 the config or the store could not be used, or the text is too long.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from typing import Any

from vixio.core.device_ids import device_id_argument
from vixio.state.store import Store, StoreError


def add_memory_parser(commands: Any) -> None:
    memory = commands.add_parser("memory", help="show or erase what the state store keeps about a device")
    actions = memory.add_subparsers(dest="memory_command", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("device", type=device_id_argument, help="the device id (its lowercase MAC, aa:bb:cc:dd:ee:ff)")
    common.add_argument(
        "--config",
        "-c",
        default="config.yaml",
        metavar="FILE",
        help="path to config.yaml, for state.path (default: ./config.yaml)",
    )
    show = actions.add_parser("show", parents=[common], help="the device's memory and latest turns")
    show.add_argument("--turns", type=int, default=20, metavar="N", help="latest turns to print (default: 20)")
    show.add_argument("--json", action="store_true", help="print JSON")
    put = actions.add_parser("set", parents=[common], help="replace the device's long-term memory")
    put.add_argument("text", help='the new memory ("" clears it, "-" reads it from stdin)')
    actions.add_parser("edit", parents=[common], help="edit the device's long-term memory in $VISUAL or $EDITOR")
    actions.add_parser(
        "clear", parents=[common], help="erase the device's history, facts, memory, profile assignment and held results"
    )
    facts = actions.add_parser("facts", parents=[common], help="the facts learnt about the device's people")
    facts.add_argument("--json", action="store_true", help="print JSON")
    forget = actions.add_parser(
        "forget-fact", parents=[common], help="erase facts (by key or by words) and the turns that said them"
    )
    forget.add_argument("fact", help='a key from `facts` ("like:green tea") or words ("green tea")')
    forget.add_argument("--person", default=None, help='only this person\'s facts ("" the household)')


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
        return asyncio.run(_run(open_store(config.state, config.memory), args, device, config.memory.max_chars))
    except StoreError as exc:
        print(f"vixio: {exc}", file=sys.stderr)
        return 1


async def _run(store: Store, args: argparse.Namespace, device: str, max_chars: int) -> int:
    await store.open()
    try:
        if args.memory_command in ("set", "edit"):
            current = await store.memory(device)
            if args.memory_command == "set":
                text = sys.stdin.read() if args.text == "-" else args.text
            else:
                text = await asyncio.to_thread(_edit, current.text if current is not None else "", device)
                if text is None:
                    return 1
            text = text.strip()
            if len(text) > max_chars:
                print(
                    f"vixio: the memory is {len(text)} characters; at most {max_chars} (memory.max_chars)",
                    file=sys.stderr,
                )
                return 1
            await store.set_memory(device, text)
            print(
                f"{device}: long-term memory {'set' if text else 'cleared'} ({len(text)} characters) in "
                f"{store.location}"
            )
            return 0
        if args.memory_command in ("facts", "forget-fact"):
            return await _facts(store, args, device)
        if args.memory_command == "clear":
            before = len(await store.recent_turns(device, limit=1_000_000))
            await store.forget_device(device)
            print(
                f"{device}: {before} turn(s), the facts, the long-term memory, the profile assignment, held "
                f"background results and voiceprints erased from {store.location}"
            )
            return 0
        memory = await store.memory(device)
        turns = await store.recent_turns(device, limit=max(0, args.turns))
        profile = await store.assigned_profile(device)
        if args.json:
            print(
                json.dumps(
                    {
                        "device": device,
                        "profile": profile,
                        "memory": None if memory is None else {"text": memory.text, "at": memory.at},
                        "turns": [
                            {
                                "conversation": t.conversation,
                                "seq": t.seq,
                                "at": t.at,
                                "user": t.user,
                                "assistant": t.assistant,
                                "interrupted": t.interrupted,
                            }
                            for t in turns
                        ],
                    },
                    ensure_ascii=False,
                    indent=2,
                )
            )
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


async def _facts(store: Store, args: argparse.Namespace, device: str) -> int:
    from vixio.state.fact_forget import facts_named, forget_facts
    from vixio.state.fact_merge import LABELS, rank

    known = rank(await store.facts(device, getattr(args, "person", None)))
    if args.memory_command == "facts":
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "person": f.person,
                            "key": f.key,
                            "kind": f.kind,
                            "value": f.value,
                            "at": f.at,
                            "source": f.source,
                        }
                        for f in known
                    ],
                    ensure_ascii=False,
                    indent=2,
                )
            )
            return 0
        print(f"device {device} ({store.location}): {len(known)} fact(s)")
        for fact in known:
            when = datetime.fromtimestamp(fact.at).strftime("%Y-%m-%d %H:%M")
            who = f" [{fact.person}]" if fact.person else ""
            print(
                f"  {LABELS.get(fact.kind, fact.kind)}: {fact.value}{who}  (key {fact.key!r}, said {when}, "
                f"{fact.source})"
            )
        return 0
    named = [f for f in known if f.key == args.fact] or facts_named(known, args.fact)
    if not named:
        print(f"vixio: {device} has no fact {args.fact!r} (see `vixio memory facts {device}`)", file=sys.stderr)
        return 1
    deleted, turns = await forget_facts(store, device, named)
    print(
        f"{device}: {deleted} fact(s) ({'; '.join(f.value for f in named)}) and {len(turns)} turn(s) that said "
        f"them erased from {store.location}"
    )
    return 0


def _edit(text: str, device: str) -> str | None:
    """`text` as the operator left it in their editor; None when the editor failed."""
    import os
    import shlex
    import subprocess
    import tempfile

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="vixio-memory-") as folder:
        path = os.path.join(folder, device.replace(":", "-") + ".txt")
        with open(path, "w", encoding="utf-8") as file:
            file.write(text + "\n" if text else "")
        try:
            status = subprocess.call([*shlex.split(editor), path])
        except OSError as exc:
            print(f"vixio: cannot run the editor {editor!r} ($VISUAL/$EDITOR): {exc}", file=sys.stderr)
            return None
        if status != 0:
            print(f"vixio: the editor {editor!r} exited with {status}; the memory is unchanged", file=sys.stderr)
            return None
        with open(path, encoding="utf-8") as file:
            return file.read()
