"""`vixio tools`: the console's Discovery, Executor and Parser on the command line, over its API.

    vixio tools list [--session ID|DEVICE|any] [--search TEXT] [--json]
    vixio tools call NAME [JSON | key=value ...] [--session ID|DEVICE|any] [--json]
    vixio tools parse [FILE|-] [--protocol auto|vcp|xml] [--json]

For headless servers: it talks to a running `vixio serve` at `--url` (default
http://127.0.0.1:8003, or $VIXIO_URL) with `--token` (default $VIXIO_ADMIN_TOKEN), the same
operator token the console page asks for. Exit status: 0 done, 1 the tool call failed,
2 the server refused or could not be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8003"
TIMEOUT = 120.0
"""Seconds to wait for an answer (a tool may take its whole policy timeout)."""


class ApiError(Exception):
    pass


def connection_options() -> argparse.ArgumentParser:
    """The options every console command shares (a parent parser): --url, --token, --json."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("VIXIO_URL", DEFAULT_URL),
        help="the server's HTTP (OTA) address (default: $VIXIO_URL or %(default)s)",
    )
    common.add_argument(
        "--token",
        default=os.environ.get("VIXIO_ADMIN_TOKEN", ""),
        help="operator token, xiaozhi.http.admin_token (default: $VIXIO_ADMIN_TOKEN)",
    )
    common.add_argument("--json", action="store_true", help="print the API's JSON answer")
    return common


def add_tools_parser(commands: Any) -> None:
    tools = commands.add_parser("tools", help="list, call or parse tools through a running server's console API")
    common = connection_options()
    actions = tools.add_subparsers(dest="tools_command", metavar="ACTION", required=True)
    session_help = "a session id, a device id, or `any` (the first live session); omit for process-wide tools"

    listing = actions.add_parser("list", parents=[common], help="every tool the agent could call")
    listing.add_argument("--session", "-s", help=session_help)
    listing.add_argument("--search", help="only tools whose name, description or source contains this")

    call = actions.add_parser("call", parents=[common], help="run one tool through the agent's executor")
    call.add_argument("name", help="the tool's public or original name")
    call.add_argument(
        "arguments", nargs="*", help="a JSON object, or key=value pairs (values read as JSON when they parse)"
    )
    call.add_argument("--session", "-s", help=session_help)

    parse = actions.add_parser(
        "parse", parents=[common], help="what the VCP/XML parsers and the speech filter make of a reply"
    )
    parse.add_argument("file", nargs="?", default="-", help="the model reply (default: standard input)")
    parse.add_argument("--protocol", "-p", choices=("auto", "vcp", "xml"), default="auto")


def run_tools(args: argparse.Namespace) -> int:
    client = Client(args.url, args.token)
    try:
        if args.tools_command == "list":
            return _list(client, args)
        if args.tools_command == "call":
            return _call(client, args)
        return _parse(client, args)
    except ApiError as exc:
        print(f"vixio tools: {exc}", file=sys.stderr)
        return 2


class Client:
    """The console API over HTTP (stdlib only)."""

    def __init__(self, url: str, token: str = "") -> None:
        self.url = url.rstrip("/")
        self.token = token

    def request(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="GET" if data is None else "POST")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise ApiError(f"{exc.code}: {message}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ApiError(f"cannot reach {self.url}: {exc}") from None

    def resolve_session(self, wanted: str | None) -> str | None:
        """A session id for a session id, a device id or `any`."""
        if not wanted:
            return None
        sessions = self.request("/api/sessions")["sessions"]
        for session in sessions:
            if wanted in (session["session_id"], session["device_id"]) or wanted == "any":
                return str(session["session_id"])
        live = ", ".join(f"{s['device_id']} ({s['session_id']})" for s in sessions) or "none"
        raise ApiError(f"no live session {wanted!r}; live sessions: {live}")


def _list(client: Client, args: argparse.Namespace) -> int:
    session = client.resolve_session(args.session)
    query = f"?session={urllib.parse.quote(session)}" if session else ""
    answer = client.request(f"/api/tools{query}")
    tools = answer["tools"]
    if args.search:
        needle = args.search.lower()
        tools = [
            t
            for t in tools
            if any(needle in str(t[k]).lower() for k in ("name", "original_name", "description", "source"))
        ]
    if args.json:
        print(json.dumps({**answer, "tools": tools}, ensure_ascii=False, indent=2))
        return 0
    width = max((len(t["name"]) for t in tools), default=4)
    print(f"{'NAME':<{width}}  SOURCE    PARAMS  POLICY")
    for tool in sorted(tools, key=lambda t: t["name"]):
        flags = [tool["sub_type"], f"{tool['timeout']:g}s"]
        flags += ["async"] * tool["async"] + ["confirm"] * tool["confirmation"]
        if not tool["enabled"]:
            flags.insert(0, "OFF")
        original = "" if tool["original_name"] == tool["name"] else f"  ({tool['original_name']})"
        print(
            f"{tool['name']:<{width}}  {tool['source']:<8}  {tool['parameter_count']:>6}  {','.join(flags)}{original}"
        )
    print(f"{len(tools)} tools" + (f" of session {session}" if session else " (process-wide)"))
    return 0


def call_arguments(items: list[str]) -> dict[str, Any]:
    """`{"volume": 30}` or `volume=30 name=kitchen` → an arguments object."""
    if len(items) == 1 and items[0].lstrip().startswith("{"):
        try:
            value = json.loads(items[0])
        except ValueError as exc:
            raise ApiError(f"arguments are not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ApiError("arguments must be a JSON object")
        return value
    arguments: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ApiError(f"argument {item!r} is not key=value")
        try:
            arguments[key] = json.loads(raw)
        except ValueError:
            arguments[key] = raw
    return arguments


def _call(client: Client, args: argparse.Namespace) -> int:
    arguments = call_arguments(args.arguments)
    session = client.resolve_session(args.session)
    answer = client.request("/api/execute", {"session": session, "tool": args.name, "arguments": arguments})
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    else:
        print(
            f"{answer['status']} in {answer['ms']} ms: {answer['tool']}({json.dumps(answer['arguments'], ensure_ascii=False)})"
        )
        print(answer["result"] if answer["success"] else f"Error: {answer['error']}")
    return 0 if answer["success"] else 1


def _parse(client: Client, args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise ApiError(f"cannot read {args.file}: {exc}") from None
    answer = client.request("/api/parse", {"text": text, "protocol": args.protocol})
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
        return 0
    for request in answer["requests"]:
        print(
            f"[{request['protocol']}] {request['tool'] or '?'} {json.dumps(request['arguments'], ensure_ascii=False)}"
            f"  id={request['request_id']}"
        )
    if not answer["requests"]:
        print("no tool request found")
    for error in answer["errors"]:
        print(f"error: {error}")
    print(f"spoken: {answer['speech'].strip()!r}")
    return 0
