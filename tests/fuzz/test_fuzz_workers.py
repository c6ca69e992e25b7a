"""The fuzz corpus against `vixio serve --workers 2`, with an honest bystander on each worker.

The supervisor hands each case's connection to the worker holding the fewest, so the corpus
lands on both workers. Two bystander devices (one per worker: they connect first) complete a
typed turn, answered by an openai-agents Agent over the scripted LLM server and spoken with
espeak, after every few cases within a bound. Then malformed camera uploads go to the
supervisor, which forwards them to a worker: each is a 400. At the end the server still answers,
each case closed or stayed open as it should, and the log of all three processes holds no
ERROR line and no traceback.
"""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
import pytest

from tests.app.test_vision import MALFORMED_UPLOADS
from tests.transports.xiaozhi.hostile import TURN_BOUND, Bystander
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve, until

from .corpus import all_cases
from .test_fuzz_server import run_case

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

ANSWER = "Still here."


class WorkerBystander(Bystander):
    """A bystander that dials the supervisor's WebSocket URL."""

    def __init__(self, url: str, device_id: str) -> None:
        self.device = SimulatedDevice(ws_url=url, device_id=device_id)
        self.durations: list[float] = []


async def test_the_fuzz_corpus_against_two_workers_leaves_both_bystanders_served(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    # Any request gets the same short answer: the corpus' typed texts and the bystanders' turns alike.
    llm.expect(*(Reply.text(ANSWER) for _ in range(400)))
    serve = await start_serve(tmp_path, llm, "--workers", "2", vision=True)
    cases = all_cases()
    outcomes: dict[str, str] = {}
    try:
        await serve.wait_ready()
        http_base = serve.ota_url.removesuffix("/xiaozhi/ota/")
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                serve.ota_url, headers={"Device-Id": "aa:bb:cc:00:00:01", "Client-Id": "fuzz-bystander"}, data="{}"
            ) as reply,
        ):
            url = (await reply.json())["websocket"]["url"]
        bystanders = [WorkerBystander(url, f"aa:bb:cc:00:00:0{i}") for i in (1, 2)]
        async with bystanders[0], bystanders[1]:

            async def placed() -> dict[str, int] | None:
                body = await serve.metrics()
                where = {s["device_id"]: s["worker"] for s in body["detail"]}
                return where if len(where) == 2 else None

            where = await until(placed, 30, "both bystanders' sessions")
            assert sorted(where.values()) == [0, 1], where  # one on each worker
            started = time.monotonic()
            for index, case in enumerate(cases):
                outcomes[case.name] = await run_case(url, case, index)
                if index % 4 == 3:
                    for bystander in bystanders:
                        assert await bystander.turn() < TURN_BOUND, f"bystander slow after {case.name}"
            for bystander in bystanders:
                assert await bystander.turn() < TURN_BOUND
            corpus_seconds = time.monotonic() - started

            async with aiohttp.ClientSession() as http:
                for content_type, body in MALFORMED_UPLOADS:
                    async with http.post(
                        http_base + "/mcp/vision/explain",
                        data=body,
                        headers={"Content-Type": content_type, "Device-Id": "aa:bb:cc:00:00:09"},
                    ) as r:
                        assert r.status == 400, (content_type, await r.text())
                        assert (await r.json())["success"] is False
            # Both workers still serve: the bystanders' sessions are listed, each on its worker.
            assert await placed() == where
    finally:
        await serve.stop()
    for case in cases:
        if case.closes:
            assert outcomes[case.name] in ("closed 1007", "closed 1008", "closed 1009"), (
                case.name,
                outcomes[case.name],
            )
        else:
            assert outcomes[case.name] == "open", (case.name, outcomes[case.name])
    text = serve.text()
    bad = [line for line in text.splitlines() if "| ERROR" in line or "| CRITICAL" in line or "Traceback" in line]
    assert bad == [], bad[:5]
    assert "| w0 |" in text and "| w1 |" in text
    turns = [d for b in bystanders for d in b.durations]
    print(
        f"{len(cases)} cases against 2 workers in {corpus_seconds:.1f} s; bystander turns {len(turns)}, "
        f"max {max(turns) * 1000:.0f} ms; outcomes {sorted(set(outcomes.values()))}"
    )
