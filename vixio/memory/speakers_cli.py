"""`vixio speakers`: list, enrol from recordings, or delete the voiceprints of a device.

    vixio speakers list [DEVICE] [--config config.yaml] [--json]
    vixio speakers enrol aa:bb:cc:dd:ee:ff Alice alice1.wav alice2.wav alice3.wav [--config config.yaml]
    vixio speakers delete aa:bb:cc:dd:ee:ff Alice [--config config.yaml]

It opens the store the config names, like `vixio memory`, so it works with the server running;
live sessions use a change from their next turn. `enrol` reads any file soundfile reads (WAV,
FLAC, OGG), a few sentences of one person, each at least 1 s, and adds them to that person's
voiceprint (docs/speakers.md). Exit status: 0 done, 1 the config, store or a recording failed,
2 `delete` found no such voiceprint.
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


def add_speakers_parser(commands: Any) -> None:
    speakers = commands.add_parser("speakers", help="list, enrol or delete voiceprints (who is speaking)")
    actions = speakers.add_subparsers(dest="speakers_command", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        "-c",
        default="config.yaml",
        metavar="FILE",
        help="path to config.yaml, for state and speakers.model (default: ./config.yaml)",
    )
    listing = actions.add_parser("list", parents=[common], help="the voiceprints of one device, or of all")
    listing.add_argument("device", nargs="?", type=device_id_argument, help="the device id (default: every device)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    enrol = actions.add_parser("enrol", parents=[common], help="add recordings of a person to their voiceprint")
    enrol.add_argument("device", type=device_id_argument, help="the device id (its lowercase MAC)")
    enrol.add_argument("person", help="the person's name (what the memory keys their facts by)")
    enrol.add_argument("recordings", nargs="+", metavar="FILE", help="recordings of that person (WAV, FLAC, OGG)")
    delete = actions.add_parser("delete", parents=[common], help="delete one person's voiceprint")
    delete.add_argument("device", type=device_id_argument, help="the device id")
    delete.add_argument("person", help="the name the voiceprint was enrolled under")


def run_speakers(args: argparse.Namespace) -> int:
    from vixio.config import ConfigError, load_config
    from vixio.state import open_store

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        return asyncio.run(_run(open_store(config.state, config.memory), args, config.speakers.model))
    except (StoreError, ValueError, OSError, ImportError) as exc:
        print(f"vixio: {exc}", file=sys.stderr)
        return 1


async def _run(store: Store, args: argparse.Namespace, model: str) -> int:
    from vixio.memory.speakers import SpeakerBook, embed_recordings

    if args.speakers_command == "enrol":  # before the store opens: a bad file changes nothing
        import soundfile

        recordings = [soundfile.read(path, dtype="float32") for path in args.recordings]
        vectors = await asyncio.to_thread(embed_recordings, model, recordings)
    await store.open()
    try:
        if args.speakers_command == "enrol":
            stored = await SpeakerBook(store, args.device).enrol(args.person, vectors)
            print(
                f"{args.device}: voiceprint of {stored.person} now from {stored.samples} recording(s), in "
                f"{store.location}"
            )
            return 0
        if args.speakers_command == "delete":
            if await store.delete_voiceprint(args.device, args.person):
                print(f"{args.device}: voiceprint of {args.person} deleted from {store.location}")
                return 0
            print(f"vixio: {args.device} has no voiceprint named {args.person!r}", file=sys.stderr)
            return 2
        prints = await store.voiceprints(args.device)
        if args.json:
            print(
                json.dumps(
                    [{"device": p.device_id, "person": p.person, "samples": p.samples, "at": p.at} for p in prints],
                    ensure_ascii=False,
                    indent=2,
                )
            )
            return 0
        if not prints:
            print("no voiceprints")
        for p in prints:
            when = datetime.fromtimestamp(p.at).strftime("%Y-%m-%d %H:%M:%S")
            print(f"{p.device_id}  {p.person}  ({p.samples} utterance(s), {when})")
        return 0
    finally:
        await store.close()
