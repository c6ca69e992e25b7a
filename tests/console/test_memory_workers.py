"""The console's Memory pane over `vixio serve --workers 2`: the supervisor edits the shared store
and the live session on the other worker follows (its next turn carries the memory, a deleted turn
leaves its model's history). Real processes, real WebSockets, a real SQLite file, the scripted
model on loopback, espeak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.console.test_console_memory import said, system
from tests.fleet.test_workers_companions import api, start, worker_of
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

A, B = "aa:bb:cc:dd:ee:0a", "aa:bb:cc:dd:ee:0b"


async def say(llm: ScriptedLLMServer, device: SimulatedDevice, text: str, reply: str) -> list[dict[str, Any]]:
    llm.expect(Reply.text(reply))
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=30)
    return llm.messages()


async def test_an_edit_in_the_supervisor_reaches_the_session_on_the_other_worker(tmp_path: Path) -> None:
    llm = ScriptedLLMServer()
    await llm.start()
    serve, ws_url, base = await start(tmp_path, llm=llm, extra=f"state: {{path: {tmp_path / 'state.db'}}}\n")
    devices = [SimulatedDevice(ws_url=ws_url, device_id=mac, listening_mode="manual", mcp=False) for mac in (A, B)]
    try:
        for device in devices:
            await device.__aenter__()
            await device.connect()
            await worker_of(base, device.device_id)
        a, b = devices
        assert (await worker_of(base, B))[0] == 1
        await say(llm, a, "I am on the first worker", "Noted.")
        await say(llm, b, "my name is Bob", "Hello Bob!")
        await say(llm, b, "I collect stamps", "Nice.")

        async def stored() -> Any:
            listed = (await api(base, "GET", "/api/devices"))["devices"]
            return listed if {d["device_id"]: d["turns"] for d in listed} == {A: 1, B: 2} else None

        listed = await until(stored, 20, "both devices' turns in the store")
        assert all(len(d["live"]) == 1 for d in listed)

        body = await api(base, "POST", f"/api/devices/{B}/memory", {"text": "The user is Bob; he collects stamps."})
        assert body["live_sessions_updated"] == 1
        turns = (await api(base, "GET", f"/api/devices/{B}"))["turns"]
        stamps = next(t for t in turns if t["user"] == "I collect stamps")
        body = await api(
            base,
            "POST",
            f"/api/devices/{B}/turns/delete",
            {"conversation": stamps["conversation"], "seq": stamps["seq"]},
        )
        assert body["live_sessions_updated"] == 1
        messages = await say(llm, b, "what do I collect?", "Stamps.")
        assert "The user is Bob; he collects stamps." in system(messages)
        assert said(messages) == ["my name is Bob", "Hello Bob!", "what do I collect?"]
        # The session on w0 is not B's: its instructions carry no memory of B.
        messages = await say(llm, a, "anything new?", "No.")
        assert "Bob" not in system(messages)

        body = await api(base, "POST", f"/api/devices/{A}/forget")
        assert body["forgotten"] and body["live_sessions_updated"] == 1
        messages = await say(llm, a, "what did I say?", "Nothing yet.")
        assert said(messages) == ["what did I say?"]

        async def afresh() -> bool:
            turns = (await api(base, "GET", f"/api/devices/{A}"))["turns"]
            return [t["user"] for t in turns] == ["what did I say?"]

        await until(afresh, 20, "A's store to hold only the turn after forget")
        llm.assert_all_consumed()
    finally:
        for device in devices:
            await device.__aexit__(None, None, None)
        await serve.stop()
        await llm.stop()
    assert "Traceback" not in serve.text()
