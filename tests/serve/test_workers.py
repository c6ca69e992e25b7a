"""`vixio serve --workers 2` as an operator runs it: real processes sharing the WebSocket port,
real devices (OTA, WebSocket, Opus), an openai-agents Agent over litellm against a scripted
OpenAI-compatible server on loopback, espeak for speech."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.serve.supervisor import cpu_count, resolve_workers, reuse_port_supported
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import STARTUP_TIMEOUT, ServeProcess, alive, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]


async def test_two_workers_share_the_port_answer_devices_restart_and_stop_cleanly(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    serve = await start_serve(tmp_path, llm, "--workers", "2")
    async with AsyncExitStack() as stack:
        stack.callback(serve.kill_group)  # whatever fails below, nothing outlives the test
        ota_url = await serve.wait_ready()
        devices: dict[str, SimulatedDevice] = {}
        on_worker: dict[int, SimulatedDevice] = {}
        # The supervisor hands each device to the worker with the fewest: one each after two.
        for _ in range(16):
            device = await stack.enter_async_context(SimulatedDevice(ota_url=ota_url))
            await device.connect()
            devices[device.device_id] = device

            async def registered() -> dict[str, Any] | None:
                body = await serve.metrics()
                return body if body["sessions"] == len(devices) else None

            body = await until(registered, 30, "the new session in /metrics")
            for session in body["detail"]:
                on_worker.setdefault(session["worker"], devices[session["device_id"]])
            if len(on_worker) == 2:
                break
        assert sorted(on_worker) == [0, 1] and len(devices) == 2, f"not one device per worker: {body}"
        workers = {line["worker"]: line for line in body["workers"]}
        assert all(line["status"] == "up" and line["pid"] for line in workers.values())
        pids = {line["pid"] for line in workers.values()}
        assert len(pids) == 2 and serve.process.pid not in pids
        assert sum(line["sessions"] for line in workers.values()) == body["sessions"] == len(devices)
        assert all(line["rss_mb"] > 20 for line in workers.values())

        # A typed turn on each worker: the agent asks the scripted model, espeak speaks the answer.
        llm.expect(Reply.text("Hello from a worker."), Reply.text("Hello from a worker."))
        for index, device in sorted(on_worker.items()):
            mark = device.mark()
            await device.send_text(f"hello worker {index}")
            stt = await device.wait_for("stt", after=mark, timeout=30)
            assert stt["text"] == f"hello worker {index}"
            start = await device.wait_for("tts", state="sentence_start", after=mark, timeout=30)
            assert start["text"] == "Hello from a worker."
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
            assert len([f for f in device.audio_frames if f.played]) > 5 and device.faults == []
        llm.assert_all_consumed()
        assert sorted(m[-1]["content"] for m in (llm.messages(0), llm.messages(1))) == [
            "hello worker 0",
            "hello worker 1",
        ]

        # The console (served by the supervisor) sees every worker's sessions and reaches each.
        console = serve.ota_url.replace("/xiaozhi/ota/", "/api/")
        async with aiohttp.ClientSession() as http:
            async with http.get(console + "sessions") as response:
                listed = (await response.json())["sessions"]
            assert {s["worker"] for s in listed} == {0, 1} and len(listed) == len(devices)
            on_one = next(s for s in listed if s["device_id"] == on_worker[1].device_id)
            llm.expect(Reply.text("Said through the console."))
            mark = on_worker[1].mark()
            async with http.post(
                console + "say", json={"session": on_one["session_id"], "text": "from the console"}
            ) as response:
                assert response.status == 200, await response.text()
            assert (await on_worker[1].wait_for("stt", after=mark, timeout=30))["text"] == "from the console"
            await on_worker[1].wait_for("tts", state="stop", after=mark, timeout=30)
            async with http.get(console + "tools", params={"session": on_one["session_id"]}) as response:
                assert response.status == 200, await response.text()
            # Execute runs in the session's own executor, on the worker that holds it.
            async with http.post(
                console + "execute", json={"session": on_one["session_id"], "tool": "get_date", "arguments": {}}
            ) as response:
                executed = await response.json()
                assert (
                    response.status == 200 and executed["success"] and executed["session_id"] == on_one["session_id"]
                ), executed

        # A worker that dies is logged and replaced; its devices are cut off, the others stay.
        placed = {session["device_id"]: session["worker"] for session in body["detail"]}
        victim = workers[1]["pid"]
        os.kill(victim, signal.SIGKILL)
        await on_worker[1].wait_closed(timeout=15)

        async def replaced() -> dict[str, Any] | None:
            lines = {line["worker"]: line for line in (await serve.metrics())["workers"]}
            line = lines[1]
            return line if line["status"] == "up" and line["pid"] != victim else None

        new_line = await until(replaced, STARTUP_TIMEOUT, "worker 1 to be restarted")
        assert new_line["restarts"] == 1 and new_line["sessions"] == 0
        assert re.search(rf"worker w1 \(pid {victim}\) exited with code -9", serve.text())
        body = await serve.metrics()
        assert body["sessions"] == list(placed.values()).count(0)
        assert {session["worker"] for session in body["detail"]} == {0}
        mark = on_worker[0].mark()
        llm.expect(Reply.text("Still here."))
        await on_worker[0].send_text("are you there")
        await on_worker[0].wait_for("tts", state="stop", after=mark, timeout=30)

        # SIGTERM: every worker closes its sessions and exits, then the supervisor exits 0.
        children = {victim, new_line["pid"], *pids}
        serve.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.process.wait(), 60) == 0
        await on_worker[0].wait_closed(timeout=10)
        await until(_none_alive(children), 10, f"workers {children} to exit")
        log = serve.text()
        assert log.count("Put this OTA URL into your device") == 1
        assert "| w0 |" in log and "| w1 |" in log and "all workers stopped" in log
        assert "Traceback" not in log and "Fatal Python error" not in log


def _none_alive(pids: set[int]) -> Any:
    async def check() -> bool:
        return not any(alive(pid) for pid in pids)

    return check


async def assert_banner(serve: ServeProcess) -> None:
    """Next to the OTA URL: the console's URL and a `vixio device` command that runs as printed."""
    pattern = re.compile(r'No device at hand\? Try: (\S+) device --ota (\S+) --text "what time is it"')

    async def printed() -> re.Match[str] | None:
        return pattern.search(serve.text())  # the banner's last line, logged just after the OTA URL

    command = await until(printed, 10, "the banner's last line")
    local_ota = serve.ota_url.replace(serve.ota_url.split("/")[2].split(":")[0], "127.0.0.1", 1)
    assert f"Operator console: {local_ota.replace('/xiaozhi/ota/', '/console/')}" in serve.text()
    assert command.group(2) == local_ota
    assert os.access(command.group(1), os.X_OK) and command.group(1).endswith("vixio")


async def test_ctrl_c_to_the_process_group_leaves_no_process(tmp_path: Path) -> None:
    serve = await start_serve(tmp_path, None, "--workers", "2")
    try:
        await serve.wait_ready()
        await assert_banner(serve)
        pids = {line["pid"] for line in (await serve.metrics())["workers"]}
        assert len(pids) == 2
        os.killpg(serve.process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
        assert await asyncio.wait_for(serve.process.wait(), 60) == 0
        await until(_none_alive(pids), 10, f"workers {pids} to exit")
        assert "Traceback" not in serve.text() and "KeyboardInterrupt" not in serve.text()
    finally:
        serve.kill_group()


def environment_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as environ:
        pairs = [entry.partition(b"=") for entry in environ.read().split(b"\0") if entry]
    return {key.decode(): value.decode() for key, _, value in pairs}


async def test_workers_run_with_two_malloc_arenas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    serve = await start_serve(tmp_path, None, "--workers", "2")
    try:
        await serve.wait_ready()
        pids = [line["pid"] for line in (await serve.metrics())["workers"]]
        assert len(pids) == 2
        assert [environment_of(pid).get("MALLOC_ARENA_MAX") for pid in pids] == ["2", "2"]
        assert "MALLOC_ARENA_MAX" not in environment_of(serve.process.pid)  # the supervisor's own is untouched
    finally:
        serve.kill_group()


def test_an_operators_malloc_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from vixio.serve.lifecycle import _worker_environment

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert _worker_environment()["MALLOC_ARENA_MAX"] == "4"
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert _worker_environment()["MALLOC_ARENA_MAX"] == "2"


async def test_one_worker_is_the_single_process_server(tmp_path: Path) -> None:
    serve = await start_serve(tmp_path, None, "--workers", "1")
    try:
        await serve.wait_ready()
        await assert_banner(serve)
        body = await serve.metrics()
        assert [(line["worker"], line["pid"]) for line in body["workers"]] == [(0, serve.process.pid)]
        assert "supervisor" not in body
        serve.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(serve.process.wait(), 60) == 0
        assert "| main |" not in serve.text() and "vixio.serve.supervisor" not in serve.text()
    finally:
        serve.kill_group()


async def test_a_taken_websocket_port_is_an_error_not_a_shared_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = tmp_path / "config.yaml"
        config.write_text(f"xiaozhi: {{host: 127.0.0.1, port: {taken.getsockname()[1]}, http: {{port: 0}}}}\n")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vixio",
            "serve",
            "--config",
            str(config),
            "--workers",
            "2",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    # The startup check names the key before any worker starts (the supervisor's own bind check
    # is the second line of defence, for a port taken between the two).
    assert "xiaozhi.port" in out.decode() and "already in use" in out.decode()
    assert "| w0 |" not in out.decode()  # no worker was started


async def test_a_worker_that_cannot_start_stops_the_server_with_status_1(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    # Files `vixio config check` finds (so the preflight lets it through), a voice no worker can load.
    (tmp_path / "broken.onnx").write_bytes(b"not an onnx model")
    (tmp_path / "broken.onnx.json").write_text("{}")
    config.write_text(
        "xiaozhi: {host: 127.0.0.1, port: 0, http: {host: 127.0.0.1, port: 0}}\n"
        f"tts: {{provider: piper, voice: {tmp_path / 'broken.onnx'}}}\n"
    )
    serve = ServeProcess(
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vixio",
            "serve",
            "--config",
            str(config),
            "--workers",
            "2",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=(tmp_path / "serve.log").open("wb"),
            start_new_session=True,
        ),
        tmp_path / "serve.log",
    )
    try:
        assert await asyncio.wait_for(serve.process.wait(), STARTUP_TIMEOUT) == 1
        log = serve.text()
        assert re.search(r"cannot serve: worker w\d did not start \(exit code 1\)", log), log
        assert "broken.onnx" in log and "Put this OTA URL" not in log
        started = re.search(r"starting 2 workers \(pids (\d+), (\d+)\)", log)
        assert started, log
        await until(_none_alive({int(started[1]), int(started[2])}), 10, "no worker left")
        assert not alive(serve.process.pid)
    finally:
        serve.kill_group()


def test_worker_count_defaults_to_the_cores_and_refuses_zero(tmp_path: Path) -> None:
    assert resolve_workers(None) == cpu_count() <= len(os.sched_getaffinity(0))
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")  # docker run --cpus 1.5
    assert cpu_count(str(quota)) == min(2, len(os.sched_getaffinity(0)))
    quota.write_text("max 100000\n")
    assert cpu_count(str(quota)) == len(os.sched_getaffinity(0))
    assert resolve_workers(3) == 3
    from vixio.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--config", "config.yaml", "--workers", "0"])
