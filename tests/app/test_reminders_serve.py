"""Reminders across processes: `vixio serve --workers 2` on SQLite, where a reminder set by voice
outlives a restart of the whole server and is the first words of the device's next session, once,
and the CLI lists, adds and cancels; and two instances on one real redis-server, whose schedulers
race for the same due reminders, each of which fires exactly once. Real processes, real
WebSockets, the scripted model on loopback, espeak."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fleet.test_fleet import api, start_instance
from vixio.serve.supervisor import reuse_port_supported
from vixio.state.redis import RedisStore
from vixio.testing.device import ReceivedMessage, SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.redis_server import RedisServer
from vixio.testing.serve import ServeProcess, start_serve, until

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

DEVICE = "02:00:00:00:7e:02"
EXTRA = "tools: {builtin: [get_time, reminders]}\nreminders: {check_seconds: 2}\n"


def first_words(device: SimulatedDevice, after: int) -> list[str]:
    return [
        m.data["text"]
        for m in device.received[after:]
        if isinstance(m, ReceivedMessage) and m.type == "tts" and m.data.get("state") == "sentence_start"
    ]


def cli(base: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vixio", *args, "--url", base], capture_output=True, text=True, timeout=60, check=False
    )


def rows(state: Path, table: str) -> list[tuple[str, str]]:
    with sqlite3.connect(state) as connection:
        return connection.execute(f"SELECT device_id, text FROM {table}").fetchall()


async def test_a_reminder_set_by_voice_outlives_a_restart_and_is_said_once_and_the_cli_manages_them(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.db"
    extra = f"state: {{path: {state}}}\n{EXTRA}"
    llm = ScriptedLLMServer()
    await llm.start()
    serve = await start_serve(tmp_path, llm, "--workers", "2", extra=extra)
    devices: list[SimulatedDevice] = []

    async def connect(url: str) -> SimulatedDevice:
        device = SimulatedDevice(ws_url=url, device_id=DEVICE, listening_mode="manual", mcp=False)
        devices.append(device)
        await device.__aenter__()
        await device.connect()
        return device

    try:
        await serve.wait_ready()
        llm.expect(
            Reply.tool_call("set_reminder", {"text": "take your medicine", "in_seconds": 40}),
            Reply.text("I will remind you."),
        )
        device = await connect(serve.ws_url)
        mark = device.mark()
        await device.send_text("remind me in forty seconds to take my medicine")
        await device.wait_for("tts", state="stop", after=mark, timeout=30)
        await device.close()
        set_at = time.time()
        assert rows(state, "reminders") == [(DEVICE, "take your medicine")]

        serve.process.send_signal(signal.SIGTERM)  # the whole server stops before it is due
        assert await serve.process.wait() == 0, serve.text()
        first_log = serve.text()
        assert " fired " not in first_log
        (tmp_path / "serve.log").rename(tmp_path / "serve-1.log")
        serve = await start_serve(tmp_path, llm, "--workers", "2", extra=extra)
        await serve.wait_ready()
        # The CLI (over the console API of the server started again) while the reminder waits.
        added = cli(serve.base_url, "reminders", "add", DEVICE, "water the plants", "--in", "1h", "--json")
        assert added.returncode == 0, added.stderr
        plants = json.loads(added.stdout)["id"]
        listed = cli(serve.base_url, "reminders", "list", DEVICE)
        assert listed.returncode == 0 and f"[{plants}]" in listed.stdout, listed.stdout
        assert cli(serve.base_url, "reminders", "cancel", DEVICE, plants).returncode == 0
        assert "water the plants" not in cli(serve.base_url, "reminders", "list").stdout
        assert cli(serve.base_url, "reminders", "cancel", DEVICE, plants).returncode == 2  # already gone

        async def fired() -> bool:
            return bool(rows(state, "fired_reminders"))

        await until(fired, max(10.0, set_at + 40 - time.time() + 15), "the reminder to fire")
        assert rows(state, "reminders") == []
        mark = device.mark()
        device = await connect(serve.ws_url)
        await device.wait_for("tts", state="stop", after=0, timeout=30)
        [said] = first_words(device, 0)
        # Spoken as due, or as missed when the restart took long on a loaded machine.
        assert said == "Reminder: take your medicine." or said.startswith("You missed a reminder at "), said
        await device.close()
        llm.expect(Reply.text("Hello."))
        device = await connect(serve.ws_url)
        await device.send_text("hello")
        await device.wait_for("tts", state="stop", timeout=30)
        assert first_words(device, 0) == ["Hello."]  # told once
        assert rows(state, "fired_reminders") == []
        assert serve.text().count(" fired (") == 1
        said_again = cli(serve.base_url, "say", DEVICE, "dinner is ready")
        assert said_again.returncode == 0 and "queued" in said_again.stdout
        await until(lambda: asyncio.sleep(0, "dinner is ready." in first_words(device, 0)), 20, "the message")
        llm.assert_all_consumed()
    finally:
        for device in devices:
            await device.__aexit__(None, None, None)
        serve.kill_group()
        await serve.process.wait()
        await llm.stop()
    assert "Traceback" not in serve.text()


async def test_two_instances_race_for_due_reminders_and_each_fires_once(tmp_path: Path, redis: RedisServer) -> None:
    instances: list[ServeProcess] = []
    store = RedisStore(redis.url, prefix="fleet:")
    try:
        for name in ("east", "west"):
            instances.append(await start_instance(tmp_path, name, redis, None, extra="reminders: {check_seconds: 1}"))
        await asyncio.gather(*(instance.wait_ready() for instance in instances))
        await store.open()
        devices = [f"02:00:00:00:7e:{n:02x}" for n in range(3, 7)]
        for index in range(12):  # added on both, all due at once: both schedulers see them
            body = {"device_id": devices[index % 4], "text": f"reminder {index}", "in_seconds": 3}
            await api(instances[index % 2], "POST", "/api/reminders/add", body)
        await until(lambda: _all_fired(store, devices), 30, "every reminder to fire")
        await asyncio.sleep(2.5)  # both schedulers looked again at least twice
        fired = {device: [f.text for f in await store.take_fired(device)] for device in devices}
        assert sorted(text for texts in fired.values() for text in texts) == sorted(f"reminder {i}" for i in range(12))
        claims = [instance.text().count(" fired (") for instance in instances]
        assert sum(claims) == 12, claims
        assert await store.reminders() == []
    finally:
        await store.close()
        for instance in instances:
            instance.kill_group()
            await instance.process.wait()


async def _all_fired(store: RedisStore, devices: list[str]) -> bool:
    return not await store.reminders()
