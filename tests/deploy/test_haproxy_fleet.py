"""deploy/haproxy.cfg as shipped (only its ports and the instances' addresses replaced), real
HAProxy in front of two `vixio serve` instances on loopback sharing one real redis-server: a
simulated device bootstraps and talks through it (OTA over HTTP, its WebSocket passed through in
TCP mode); its instance is killed with SIGKILL; the device reconnects through HAProxy, lands on
the other instance, which resumes the conversation the first one wrote to Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vixio.testing import redis_server
from vixio.testing.device import SimulatedDevice
from vixio.testing.fleet import MISSING, Fleet, haproxy_path
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.serve import until

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(haproxy_path() is None, reason=MISSING),
    pytest.mark.skipif(redis_server.missing() is not None, reason=str(redis_server.missing())),
]


async def talk(device: SimulatedDevice, text: str) -> str:
    """Say `text` (typed); the first sentence of the reply, once it was played."""
    mark = device.mark()
    await device.send_text(text)
    sentence = await device.wait_for("tts", state="sentence_start", after=mark, timeout=60)
    await device.wait_for("tts", state="stop", after=mark, timeout=60)
    return str(sentence["text"])


async def test_a_device_reconnects_through_haproxy_to_the_other_instance_and_finds_its_conversation(
    tmp_path: Path, llm: ScriptedLLMServer, redis: redis_server.RedisServer
) -> None:
    state = f"state: {{backend: redis, url: '{redis.url}', fleet_secret: '{redis_server.FLEET_SECRET}'}}\n"
    async with Fleet(tmp_path, llm, instances=2, extra=state) as fleet:
        async with SimulatedDevice(ota_url=fleet.ota_url, device_id="02:00:00:00:0f:01") as device:
            await device.connect()
            assert device.ws_url == fleet.ws_url  # OTA (through HAProxy) named the balancer, not an instance
            llm.expect(Reply.text("Hello Alice."))
            assert await talk(device, "my name is Alice") == "Hello Alice."
            first = await until(lambda: fleet.holding(device.device_id), 10, "the device's session")
            first_requests = len(llm.requests)

            first.kill_group()  # kill -9: supervisor and workers, no goodbye
            await device.wait_closed(timeout=30)  # HAProxy closes the device's side when the instance is gone

            llm.expect(Reply.text("You are Alice."))
            assert await talk(device, "what is my name") == "You are Alice."
            second = await fleet.holding(device.device_id)
            assert second is not None and second is not first
        llm.assert_all_consumed()
        # The other instance resumed the conversation from Redis: the model saw the first turn again.
        resumed = json.dumps(llm.messages(first_requests))
        assert "my name is Alice" in resumed and "Hello Alice." in resumed, resumed
