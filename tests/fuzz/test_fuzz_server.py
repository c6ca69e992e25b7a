"""The fuzz corpus (corpus.py) against the real server over real sockets.

Each case gets its own connection. While the corpus runs, an honest bystander device completes
a typed turn after every few cases within a bound. At the end the server still answers, the
cases that must close their connection closed it with 1007/1008/1009, the others are still
open, and the log holds no ERROR line and no traceback.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import websockets

from tests.transports.xiaozhi.conftest import make_server, ws_url  # noqa: F401 - make_server is a fixture
from tests.transports.xiaozhi.hostile import TURN_BOUND, Bystander, captured_logs

from .corpus import Case, Text, all_cases

pytestmark = pytest.mark.integration

HELLO = {
    "type": "hello",
    "version": 1,
    "transport": "websocket",
    "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
}


async def run_case(url: str, case: Case, index: int) -> str:
    """Play one case; returns "open" or "closed <code>"."""
    headers = {
        "Device-Id": f"fe:ed:00:00:{index // 256:02x}:{index % 256:02x}",
        "Client-Id": f"fuzz-{index}",
        "Protocol-Version": str(case.protocol_version),
    }
    # max_queue=None: this client reads nothing while it plays a case, and with websockets' flow
    # control it would stop reading after 16 unread messages (a hello-flood case gets one answer
    # per hello), so a pong that came after them was never seen: the case "timed out" whenever a
    # loaded server read the ping after answering 16 hellos.
    async with websockets.connect(
        url, additional_headers=headers, max_size=None, max_queue=None, open_timeout=10
    ) as ws:
        if case.hello:
            await ws.send(json.dumps({**HELLO, "version": case.protocol_version, "features": case.features}))
            await asyncio.wait_for(_server_hello(ws), 10)
        try:
            for frame in case.frames:
                if isinstance(frame, Text):
                    await ws.send(frame.data, text=True)
                else:
                    await ws.send(frame)
            # The connection is still served if a ping comes back.
            pong = await ws.ping()
            await asyncio.wait_for(pong, 10)
        except websockets.ConnectionClosed:
            pass
        except TimeoutError:
            if not case.closes:
                raise
        if case.closes:
            await asyncio.wait_for(ws.wait_closed(), 10)
        return "open" if ws.close_code is None else f"closed {ws.close_code}"


async def _server_hello(ws: Any) -> None:
    while True:
        message = await ws.recv()
        if isinstance(message, str) and json.loads(message).get("type") == "hello":
            return


async def test_the_fuzz_corpus_leaves_the_server_serving_and_the_log_clean(make_server) -> None:  # noqa: F811
    server = await make_server(reply_seconds=0.2)
    url = ws_url(server)
    cases = all_cases()
    outcomes: dict[str, str] = {}
    started = time.monotonic()
    async with captured_logs("DEBUG") as logs:
        async with Bystander(server) as bystander:
            for index, case in enumerate(cases):
                try:
                    outcomes[case.name] = await run_case(url, case, index)
                except TimeoutError as exc:
                    raise AssertionError(f"case {case.name!r}: the server did not answer within 10 s") from exc
                if index % 4 == 3:
                    assert await bystander.turn() < TURN_BOUND, f"bystander slow after {case.name}"
            assert await bystander.turn() < TURN_BOUND
        await asyncio.sleep(0.3)  # sessions finish closing
    for case in cases:
        if case.closes:
            assert outcomes[case.name] in ("closed 1007", "closed 1008", "closed 1009"), (
                case.name,
                outcomes[case.name],
            )
        else:
            assert outcomes[case.name] == "open", (case.name, outcomes[case.name])
    bad = [(r.level, r.message) for r in logs.tracebacks()]
    assert bad == [], bad[:5]
    assert len(bystander.durations) >= len(cases) // 4
    assert time.monotonic() - started < 60
    print(
        f"{len(cases)} cases, {sum(len(c.frames) for c in cases)} frames in {time.monotonic() - started:.1f} s; "
        f"bystander turns max {max(bystander.durations) * 1000:.0f} ms; outcomes {sorted(set(outcomes.values()))}"
    )
