"""The console's Say and Execute with `vixio serve --workers 2`: one device on each worker, both
driven through the supervisor's HTTP port (the console's), each reaching only its own device."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.fleet.test_workers_companions import api, session_tools, worker_of
from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

VOLUME = "self.audio_speaker.set_volume"


async def test_say_and_execute_reach_the_device_on_each_worker(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    serve = await start_serve(tmp_path, llm, "--workers", "2")
    async with AsyncExitStack() as stack:
        stack.push_async_callback(serve.stop)
        await serve.wait_ready()
        base = serve.base_url
        devices = [
            await stack.enter_async_context(
                SimulatedDevice(ws_url=serve.ws_url, device_id=f"02:00:00:00:5a:0{n}", listening_mode="manual")
            )
            for n in range(2)
        ]
        placed: dict[int, tuple[SimulatedDevice, str]] = {}
        for device in devices:  # the supervisor sends each to the worker with the fewest connections
            await device.connect()
            worker, session = await worker_of(base, device.device_id)
            placed[worker] = (device, session)
        assert sorted(placed) == [0, 1]

        for worker, (device, session) in placed.items():

            async def listed(session: str = session) -> bool:
                return any(
                    VOLUME.replace(".", "_") == name or VOLUME == name for name in await session_tools(base, session)
                )

            await until(listed, 30, f"the device tools on worker {worker}")
            volume = 20 + 10 * worker
            executed = await api(
                base,
                "POST",
                "/api/execute",
                {"session": session, "tool": VOLUME.replace(".", "_"), "arguments": {"volume": volume}},
            )
            assert executed["success"], executed
            assert device.status.volume == volume

            llm.expect(Reply.text(f"Hello from worker {worker}."))
            mark, other = device.mark(), placed[1 - worker][0]
            other_mark = other.mark()
            assert (await api(base, "POST", "/api/say", {"session": session, "text": "hello"})) is not None
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            said = [
                m.data["text"]
                for m in device.received[mark:]
                if m.data.get("type") == "tts" and m.data.get("state") == "sentence_start"
            ]
            assert said == [f"Hello from worker {worker}."]
            assert [m for m in other.received[other_mark:] if m.data.get("type") == "tts"] == []
        assert placed[0][0].status.volume == 20 and placed[1][0].status.volume == 30
        llm.assert_all_consumed()
    assert "Traceback" not in serve.text()
