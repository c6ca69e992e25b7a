"""Redis stopped and restarted under a live conversation: a real server with `state.backend: redis`,
a real redis-server, simulated devices over real WebSockets, the scripted model on loopback.
The conversation keeps answering, a device connecting meanwhile is served, the operator gets one
ERROR and no traceback, and the store is used again once Redis is back, without a restart of vixio."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from loguru import logger

from vixio.state.store import StoreError
from vixio.testing import redis_server
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.redis_server import RedisServer

from .test_resume import ALICE, conversation, hang_up, say, start, url

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(redis_server.missing() is not None, reason=redis_server.missing() or ""),
]


async def test_a_conversation_goes_on_while_redis_is_stopped_and_restarted(
    llm: ScriptedLLMServer, tmp_path: Path
) -> None:
    redis = RedisServer.start(tmp_path / "redis")
    records: list[tuple[str, str, bool]] = []
    sink = logger.add(
        lambda m: records.append((m.record["level"].name, m.record["message"], m.record["exception"] is not None)),
        level="INFO",
    )
    llm.expect(*(Reply.text(f"Answer {n}.") for n in range(7)))
    server = await start(llm, tmp_path, state={"backend": "redis", "url": redis.url, "timeout": 0.5})
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False) as device:
            await device.connect()
            await say(device, ALICE)
            await until_stored(server, device.device_id, ALICE)  # the write happens behind the reply

            redis.stop()
            started = time.monotonic()
            for n in range(3):  # each reply arrives; its turn is not stored
                await say(device, f"question {n} while Redis is down")
            assert time.monotonic() - started < 20
            async with SimulatedDevice(ws_url=url(server), mcp=False) as newcomer:  # a new session starts too
                await newcomer.connect()
                await say(newcomer, "hello, anyone there?")

            redis.restart()  # empty: it kept nothing on disk

            async def store_works() -> bool:
                try:
                    await server.store.admission(device.device_id)
                except StoreError:
                    return False
                return True

            deadline = time.monotonic() + 15  # the backoff is at most 8 s
            while not await store_works():
                assert time.monotonic() < deadline, "the store did not recover"
                await asyncio.sleep(0.1)
            await say(device, "and now?")
            await until_stored(server, device.device_id, "and now?")
            await hang_up(server, device)
            await device.connect()  # resumes from what Redis holds now
            await say(device, "what did I just ask?")
        assert conversation(llm.messages(6)) == [
            ("user", "and now?"),
            ("assistant", "Answer 5."),
            ("user", "what did I just ask?"),
        ]
        assert len(llm.requests) == 7
    finally:
        logger.remove(sink)
        await server.stop()
        redis.close()
    errors = [message for level, message, _ in records if level in ("ERROR", "CRITICAL")]
    assert len(errors) == 1 and "cannot reach Redis" in errors[0], errors
    assert not [message for _, message, traced in records if traced], "a traceback was logged"
    assert sum("works again" in message for _, message, _ in records) == 1


async def until_stored(server: object, device_id: str, text: str) -> None:
    store = server.store  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while text not in [t.user for t in await store.recent_turns(device_id, 5)]:
        assert time.monotonic() < deadline, f"{text!r} was not stored"
        await asyncio.sleep(0.05)


async def test_ota_with_activation_answers_503_while_redis_is_down_and_no_traceback(tmp_path: Path) -> None:
    import aiohttp

    from vixio.config.xiaozhi import XiaozhiConfig
    from vixio.state.redis import RedisStore
    from vixio.transports.xiaozhi.http.ota import OtaServer
    from vixio.transports.xiaozhi.session.auth import DeviceAuthenticator

    from ..transports.xiaozhi.test_ota import DEVICE, post_ota

    redis = RedisServer.start(tmp_path / "redis")
    store = RedisStore(redis.url, timeout=0.5)
    await store.open()
    config = XiaozhiConfig.model_validate({"http": {"host": "127.0.0.1", "port": 0}, "activation": {"enabled": True}})
    ota = OtaServer(config, DeviceAuthenticator(config.auth), websocket_port=8000, store=store)
    await ota.start()
    traced: list[str] = []
    sink = logger.add(lambda m: traced.append(m.record["message"]) if m.record["exception"] else None, level="INFO")
    try:
        async with aiohttp.ClientSession() as http:
            await store.admit(DEVICE, via="activation")
            status, reply = await post_ota(http, ota)
            assert status == 200 and "activation" not in reply
            redis.stop()
            for _ in range(3):
                status, reply = await post_ota(http, ota)
                assert status == 503 and "try again" in reply["error"] and "redis://" not in reply["error"]
            redis.restart()
            deadline = time.monotonic() + 15  # the backoff is at most 8 s
            while (status := (await post_ota(http, ota))[0]) == 503:
                assert time.monotonic() < deadline, "OTA did not recover"
                await asyncio.sleep(0.2)
            assert status == 200
    finally:
        logger.remove(sink)
        await ota.stop()
        await store.close()
        redis.close()
    assert traced == []
