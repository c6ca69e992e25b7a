"""The `vixio` command line.

    vixio config check --config config.yaml     # OK, or every error; non-zero exit on error
    vixio config reference                      # the configuration reference (docs/config.md)
    vixio serve --config config.yaml            # the WebSocket and OTA servers
    vixio device --ota http://127.0.0.1:8003/xiaozhi/ota/ --text "hello"   # a simulated device
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vixio import __version__
from vixio.config import ConfigError, load_config
from vixio.log import setup_logging

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

    serve = commands.add_parser("serve", help="run the WebSocket and OTA servers")
    serve.add_argument("--config", "-c", required=True, metavar="FILE", help="path to config.yaml")

    from vixio.testing.device_cli import add_device_parser

    add_device_parser(commands)
    return parser


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
        from vixio.testing.device_cli import run_device

        setup_logging(args.log_level or "WARNING")
        return run_device(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _config_command(args: argparse.Namespace) -> int:
    if args.config_command == "reference":
        from vixio.config.reference import render_reference

        sys.stdout.write(render_reference())
        return 0
    setup_logging(args.log_level or "WARNING")
    try:
        load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"OK: {args.config}")
    return 0


def _serve_command(args: argparse.Namespace) -> int:
    import asyncio

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    setup_logging(args.log_level or config.log.level, tracebacks=config.log.tracebacks)
    from vixio.server import serve

    try:
        asyncio.run(serve(config))
    except ConfigError as exc:  # found while starting, e.g. a tools.local entry that cannot be imported
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
