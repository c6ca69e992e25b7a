"""The `vixio` command line.

vixio config check --config config.yaml     # OK, or every error; non-zero exit on error
vixio config reference                      # the configuration reference (docs/config.md)
vixio config extras --config config.zh.yaml # the pip extras its providers need: pip install -e ".[$(...)]"
vixio serve [--config config.yaml]          # the WebSocket and OTA servers, one worker per core
vixio serve --workers 1                     # all in this one process
vixio device --ota http://127.0.0.1:8003/xiaozhi/ota/ --text "hello"   # a simulated device
vixio tools list | call NAME k=v | parse FILE   # the operator console's tools, over its API
vixio pairing list | approve ID | revoke ID     # companions asking to pair with a device
vixio identity list | approve DEVICE CLIENT_ID | dismiss DEVICE CLIENT_ID   # a re-flashed board's re-bind
vixio memory show|clear DEVICE              # what the state store keeps about a device
vixio speakers list|enrol|delete            # voiceprints: who is speaking (docs/speakers.md)
vixio profile list | show DEVICE | assign DEVICE PROFILE | clear DEVICE   # each device's assistant
vixio reminders list [DEVICE] | add DEVICE TEXT --in 10m | cancel DEVICE ID   # reminders, alarms, timers
vixio say DEVICE "dinner is ready"          # said to a device now, talking, idle or away
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vixio import __version__
from vixio.app.log import setup_logging
from vixio.config import ConfigError, load_config

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vixio",
        description="vixio: a voice-agent server for Xiaozhi ESP32 devices.",
    )
    parser.add_argument("--version", action="version", version=f"vixio {__version__}")
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        help="override the config's log.level",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    config = commands.add_parser("config", help="check or document the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    check = config_commands.add_parser("check", help="validate a config file: prints OK or every error")
    check.add_argument("--config", "-c", required=True, metavar="FILE", help="path to config.yaml")
    config_commands.add_parser("reference", help="print every config key as Markdown (docs/config.md)")
    extras = config_commands.add_parser(
        "extras", help="print the vixio extras a config's providers need, comma-separated"
    )
    extras.add_argument("--config", "-c", required=True, metavar="FILE", help="path to config.yaml")

    serve = commands.add_parser("serve", help="run the WebSocket and OTA servers")
    serve.add_argument(
        "--config", "-c", default="config.yaml", metavar="FILE", help="path to config.yaml (default: ./config.yaml)"
    )
    serve.add_argument(
        "--workers",
        "-w",
        type=_positive_int,
        metavar="N",
        help="worker processes sharing the WebSocket port (default: server.workers, else one per "
        "core); 1 serves from this process alone",
    )

    from vixio.testing.device.cli import add_device_parser

    add_device_parser(commands)
    from vixio.console.cli import add_tools_parser

    add_tools_parser(commands)
    from vixio.console.pairing_cli import add_pairing_parser

    add_pairing_parser(commands)
    from vixio.console.identity_cli import add_identity_parser

    add_identity_parser(commands)
    from vixio.console.reminders_cli import add_reminders_parser, add_say_parser

    add_reminders_parser(commands)
    add_say_parser(commands)
    from vixio.console.profiles_cli import add_profile_parser
    from vixio.state.cli import add_memory_parser

    add_memory_parser(commands)
    add_profile_parser(commands)
    from vixio.memory.speakers_cli import add_speakers_parser

    add_speakers_parser(commands)
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "config":
        return _config_command(args)
    if args.command == "serve":
        return _serve_command(args)
    if args.command == "device":
        from vixio.testing.device.cli import run_device

        setup_logging(args.log_level or "WARNING")
        return run_device(args)
    if args.command == "tools":
        from vixio.console.cli import run_tools

        return run_tools(args)
    if args.command == "pairing":
        from vixio.console.pairing_cli import run_pairing

        return run_pairing(args)
    if args.command == "identity":
        from vixio.console.identity_cli import run_identity

        return run_identity(args)
    if args.command in ("reminders", "say"):
        from vixio.console.reminders_cli import run_reminders, run_say

        return run_reminders(args) if args.command == "reminders" else run_say(args)
    if args.command == "profile":
        from vixio.console.profiles_cli import run_profile

        return run_profile(args)
    if args.command == "memory":
        from vixio.state.cli import run_memory

        setup_logging(args.log_level or "WARNING")
        return run_memory(args)
    if args.command == "speakers":
        from vixio.memory.speakers_cli import run_speakers

        setup_logging(args.log_level or "WARNING")
        return run_speakers(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _config_command(args: argparse.Namespace) -> int:
    if args.config_command == "reference":
        from vixio.config.reference import render_reference

        sys.stdout.write(render_reference())
        return 0
    if args.config_command == "extras":
        from vixio.config.needs import print_extras

        return print_extras(args.config)
    setup_logging(args.log_level or "WARNING")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    from vixio.config.preflight import config_problems, extra_problems

    problems = [*config_problems(config), *extra_problems(config)]
    if problems:
        print(ConfigError(args.config, problems), file=sys.stderr)
        return 1
    from vixio.config.needs import missing_keys

    # Valid, but a cloud service without its key fails every turn: not "OK" (the exit stays 0).
    for warning in missing_keys(config):
        print(f"warning: {warning}")
    print(f"OK: {args.config}" + (" (with the warnings above)" if missing_keys(config) else ""))
    return 0


def _serve_command(args: argparse.Namespace) -> int:
    import asyncio

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    from vixio.serve.supervisor import resolve_workers

    try:
        workers = resolve_workers(args.workers or config.server.workers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    config.server.workers = workers  # resolved: each process knows how many share the cores
    level = args.log_level or config.log.level
    from vixio.fleet.directory import in_fleet

    # A fleet member runs the supervisor even with one worker: its workers reach the other instances.
    one_process = workers == 1 and not in_fleet(config)
    setup_logging(level, tracebacks=config.log.tracebacks, process="" if one_process else "main")
    from vixio.config.preflight import startup_problems
    from vixio.state import StoreError

    problems = startup_problems(config)  # before any model loads: one line each, naming the key
    for problem in problems:
        print(f"vixio: {problem}", file=sys.stderr)
    if problems:
        return 1
    from vixio.fleet.plan import raise_open_file_limit

    too_few_files = raise_open_file_limit(config.xiaozhi.max_connections)
    if too_few_files:
        print(f"vixio: warning: {too_few_files}", file=sys.stderr)
    try:
        if one_process:
            from vixio.app.server import serve

            asyncio.run(serve(config))
            return 0
        from vixio.serve.supervisor import serve_workers

        config.log.level = level  # the workers log at the level given here
        return asyncio.run(serve_workers(config, workers))
    except KeyboardInterrupt:
        return 130
    except ConfigError as exc:  # found while starting, e.g. a tools.local entry that cannot be imported
        print(exc, file=sys.stderr)
        return 1
    except StoreError as exc:  # the state file is damaged, locked or unwritable: the message says what to do
        print(f"vixio: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if config.log.tracebacks:
            raise
        print(f"vixio: {type(exc).__name__}: {exc} (log.tracebacks: true shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
