"""The camera tool end to end: simulated firmware ⇄ vixio ⇄ scripted LLM, and the vision route's edges.

The model calls the device's `self.camera.take_photo`; the simulated firmware uploads the photo
as multipart with its token to the URL from `initialize`; vixio hands it to the configured vision
model (the scripted OpenAI-compatible server, which receives the image) and the answer goes
back through the device to the agent, which speaks it.
"""

from __future__ import annotations

import base64
import os
from typing import Any

import aiohttp
import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.device.camera import SimulatedCamera
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.transports.xiaozhi.session.auth import issue_token

pytestmark = pytest.mark.integration

PHOTO = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + os.urandom(3000) + b"\xff\xd9"
SECRET = "vision-test-secret"


async def start(llm: ScriptedLLMServer, *, vision: bool = True, **vision_options: Any) -> VixioServer:
    settings: dict[str, Any] = {
        "xiaozhi": {
            "host": "127.0.0.1",
            "port": 0,
            "http": {"host": "127.0.0.1", "port": 0},
            "idle_timeout": 0,
            "auth": {"enabled": True, "secret": SECRET},
        },
        "agent": {
            "provider": "litellm",
            "model": "openai/test-model",
            "api_base": llm.base_url,
            "api_key": "t",
            "timeout": 20,
        },
        "tools": {"builtin": []},
    }
    if vision:
        settings["vision"] = {"model": "openai/test-vlm", "api_base": llm.base_url, "api_key": "v", **vision_options}
    server = VixioServer(VixioConfig.model_validate(settings))
    await server.start()
    return server


def device_for(server: VixioServer, camera: SimulatedCamera) -> SimulatedDevice:
    device_id, client_id = "aa:bb:cc:00:11:22", "client-vision"
    device = SimulatedDevice(
        ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/",
        device_id=device_id,
        client_id=client_id,
        token=issue_token(SECRET, client_id, device_id),
        listening_mode="manual",
        tools=[camera.tool],
    )
    camera.attach(device)
    return device


async def ask(device: SimulatedDevice, text: str) -> str:
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=30)
    return " ".join(
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    )


def sees_the_photo(body: dict[str, Any]) -> None:
    assert body["model"] == "test-vlm"
    user = body["messages"][-1]
    parts = {part["type"]: part for part in user["content"]}
    assert parts["text"]["text"] == "What fruit is on the table?"
    assert parts["image_url"]["image_url"]["url"] == "data:image/jpeg;base64," + base64.b64encode(PHOTO).decode()


async def wait_for_tool(server: VixioServer, name: str) -> None:
    import asyncio

    for _ in range(1000):
        if any(name in [t.name for t in tools.tools] for tools in server.tools.values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{name} never offered")


async def test_the_camera_tool_is_answered_by_the_vision_model(llm: ScriptedLLMServer) -> None:
    llm.expect(
        Reply.tool_call("self_camera_take_photo", {"question": "What fruit is on the table?"}, call_id="call_cam"),
        Reply.text("A red apple on a wooden table.", check=sees_the_photo),
        Reply.text("I can see a red apple."),
    )
    server = await start(llm)
    camera = SimulatedCamera(PHOTO)
    try:
        async with device_for(server, camera) as device:
            await device.connect()
            await wait_for_tool(server, "self_camera_take_photo")
            assert await ask(device, "What do you see?") == "I can see a red apple."
        (upload,) = camera.uploads
        assert upload["status"] == 200 and upload["url"].endswith("/mcp/vision/explain")
        tool_result = [m for m in llm.messages(2) if m["role"] == "tool"][0]["content"]
        assert (
            '"response": "A red apple on a wooden table."' in tool_result
            or '"response":"A red apple on a wooden table."' in tool_result
        )
        assert '"success": true' in tool_result or '"success":true' in tool_result
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_without_a_vision_model_the_camera_is_told_501(llm: ScriptedLLMServer) -> None:
    llm.expect(
        Reply.tool_call("self_camera_take_photo", {"question": "What fruit is on the table?"}, call_id="call_cam"),
        Reply.text("I cannot see right now."),
    )
    server = await start(llm, vision=False)
    camera = SimulatedCamera(PHOTO)
    try:
        async with device_for(server, camera) as device:
            await device.connect()
            await wait_for_tool(server, "self_camera_take_photo")
            assert await ask(device, "What do you see?") == "I cannot see right now."
        assert camera.uploads[0]["status"] == 501
        assert "no vision model is configured" in camera.uploads[0]["body"]
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def post(
    server: VixioServer, *, headers: dict[str, str], image: bytes | None = PHOTO, question: str = "what?"
) -> tuple[int, dict[str, Any]]:
    form = aiohttp.FormData()
    form.add_field("question", question)
    if image is not None:
        form.add_field("file", image, filename="camera.jpg", content_type="image/jpeg")
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://127.0.0.1:{server.ota.port}/mcp/vision/explain", data=form, headers=headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def test_the_route_checks_the_token_the_size_and_the_form(llm: ScriptedLLMServer) -> None:
    llm.expect(Reply.error(500, "vlm overloaded"))
    server = await start(llm, max_image_bytes=2048)
    ids = {"Device-Id": "aa:bb:cc:00:11:22", "Client-Id": "client-vision"}
    good = {**ids, "Authorization": "Bearer " + issue_token(SECRET, "client-vision", "aa:bb:cc:00:11:22")}
    try:
        status, body = await post(server, headers=ids)
        assert status == 401 and body["success"] is False and "token" in body["message"]
        status, body = await post(server, headers={**ids, "Authorization": "Bearer nope.123"})
        assert status == 401
        status, body = await post(server, headers=good)  # PHOTO is over 2048 bytes
        assert status == 413 and "larger than 2048 bytes" in body["message"]
        status, body = await post(server, headers=good, image=None)
        assert status == 400 and "expected multipart/form-data" in body["message"]
        status, body = await post(server, headers=good, image=PHOTO[:1000])
        assert status == 502 and "vision model" in body["message"] and "vlm overloaded" in body["message"]
        assert not llm.pending
    finally:
        await server.stop()


MALFORMED_UPLOADS = [
    # (Content-Type, body): the issue's two, a preamble that never reaches a boundary, an unclosed
    # part, and a part without headers' end.
    ("multipart/form-data; boundary=zzz", b"--zzz\r\ngarbage" + b"\x00\xff" * 200),
    ("multipart/form-data", b'--zzz\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc\r\n--zzz--\r\n'),
    ("multipart/form-data; boundary=zzz", b"no boundary anywhere in here"),
    ("multipart/form-data; boundary=zzz", b'--zzz\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc'),
    ("multipart/form-data; boundary=" + "z" * 100, b"--" + b"z" * 100 + b"\r\n"),
]


async def post_raw(port: int, headers: dict[str, str], content_type: str, body: bytes) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}/mcp/vision/explain", data=body, headers={**headers, "Content-Type": content_type}
        ) as response,
    ):
        return response.status, await response.json(content_type=None)


async def test_a_malformed_upload_is_400_without_a_traceback(llm: ScriptedLLMServer) -> None:
    from tests.transports.xiaozhi.hostile import captured_logs

    server = await start(llm)
    good = {
        "Device-Id": "aa:bb:cc:00:11:22",
        "Client-Id": "client-vision",
        "Authorization": "Bearer " + issue_token(SECRET, "client-vision", "aa:bb:cc:00:11:22"),
    }
    try:
        async with captured_logs("INFO") as logs:
            for content_type, body in MALFORMED_UPLOADS:
                status, reply = await post_raw(server.ota.port, good, content_type, body)
                assert status == 400, (content_type, body[:40], reply)
                assert reply["success"] is False and reply["message"], reply
        assert logs.tracebacks() == []
        assert len(logs.lines("vision upload refused")) == len(MALFORMED_UPLOADS)
        assert not llm.pending  # the model was never asked
    finally:
        await server.stop()
