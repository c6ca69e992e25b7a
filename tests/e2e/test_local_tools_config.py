"""`tools.local`: your own functions from config.yaml, with a ToolContext, through the real server.

Real parts: config validation, the file/module loader, the Xiaozhi server, the simulated device,
openai-agents over litellm against the scripted OpenAI-compatible server, an aiohttp site on
loopback for the example's website check.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from vixio.app.server import VixioServer
from vixio.config.loader import ConfigError
from vixio.config.models import VixioConfig
from vixio.core.tools.context import ToolCallRecord, ToolContext
from vixio.core.tools.local import func_to_tool_definition
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.voice.stack import VoiceStack

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def config(llm: ScriptedLLMServer, tools: dict[str, Any]) -> VixioConfig:
    return VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "agent": {
                "provider": "litellm",
                "model": "openai/test-model",
                "api_base": llm.base_url,
                "api_key": "t",
                "timeout": 10,
            },
            "tools": tools,
        }
    )


def url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


async def ask(device: SimulatedDevice, text: str) -> list[str]:
    """Type a question; the sentences the device was told to show while it spoke."""
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=15)
    return [
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    ]


def tool_messages(llm: ScriptedLLMServer, request: int) -> list[dict[str, Any]]:
    return [m for m in llm.messages(request) if m["role"] == "tool"]


async def test_a_config_loaded_tool_knows_the_calling_device(
    llm: ScriptedLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIXIO_NOTES_DIR", str(tmp_path))
    llm.expect(
        Reply.tool_call("take_note", {"text": "buy milk"}, call_id="call_n"),
        Reply.text("Noted: buy milk."),
        Reply.tool_call("read_notes", {}, call_id="call_r"),
        Reply.text("Your note says to buy milk."),
    )
    server = VixioServer(
        config(
            llm, {"builtin": [], "local": [f"{EXAMPLES}/my_tools.py:take_note", f"{EXAMPLES}/my_tools.py:read_notes"]}
        )
    )
    await server.start()
    try:
        async with SimulatedDevice(
            ws_url=url(server), device_id="aa:bb:cc:dd:ee:01", listening_mode="manual"
        ) as device:
            await device.connect()
            assert await ask(device, "Note that I need to buy milk.") == ["Noted: buy milk."]
            assert await ask(device, "What are my notes?") == ["Your note says to buy milk."]
        offered = {t["function"]["name"]: t["function"] for t in llm.requests[0]["tools"]}
        assert set(offered) >= {"take_note", "read_notes"}
        # The context parameter is not the model's business.
        assert list(offered["take_note"]["parameters"]["properties"]) == ["text"]
        assert "ctx" not in offered["read_notes"]["parameters"]["properties"]
        assert offered["take_note"]["description"].startswith("Write down a short note")
        saved = json.loads((tmp_path / "aa_bb_cc_dd_ee_01.json").read_text())
        assert [note["text"] for note in saved] == ["buy milk"]
        assert tool_messages(llm, 1)[0]["content"] == "noted (1 notes on this device)"
        assert tool_messages(llm, 3)[-1]["content"].endswith(": buy milk")
        llm.assert_all_consumed()
    finally:
        await server.stop()


@pytest.fixture
async def website() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>up</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}/"
    await runner.cleanup()


async def test_an_async_entry_runs_in_the_background_and_speaks_through_its_context(
    llm: ScriptedLLMServer, website: str
) -> None:
    llm.expect(
        Reply.tool_call("check_website", {"url": website}, call_id="call_w"),
        Reply.text("I am checking it."),
        Reply.text("The site is up."),
    )
    server = VixioServer(
        config(
            llm,
            {
                "builtin": [],
                "local": [
                    {"function": f"{EXAMPLES}/my_tools.py:check_website", "async": True, "name": "check_website"}
                ],
            },
        )
    )
    await server.start()
    try:
        async with SimulatedDevice(ws_url=url(server), listening_mode="manual") as device:
            await device.connect()
            mark = device.mark()
            await device.send_text("Is my site up?")
            for _ in range(2):  # the turn's reply, then the background result's
                await device.wait_for("tts", state="stop", after=mark, timeout=15)
                mark = device.mark()
            spoken = [
                m.data["text"] for m in device.received if m.type == "tts" and m.data.get("state") == "sentence_start"
            ]
        assert "Let me check that website." in spoken  # ToolContext.say, from the background run
        assert spoken.index("I am checking it.") < spoken.index("The site is up.")
        assert '"type":"async_task"' in tool_messages(llm, 1)[0]["content"]
        note = llm.messages(2)[-1]
        assert note["role"] == "user" and "call_w" in note["content"] and "answered HTTP 200" in note["content"]
        llm.assert_all_consumed()
    finally:
        await server.stop()


def test_entries_that_cannot_load_are_all_named_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('missing API key')\n")
    fine = tmp_path / "fine.py"
    fine.write_text("LIMIT = 3\n\ndef hello(name: str) -> str:\n    return 'hi ' + name\n")
    config = VixioConfig.model_validate(
        {
            "agent": {"provider": "litellm", "model": "openai/x"},
            "tools": {
                "local": [
                    "no_such_package.tools:go",
                    f"{tmp_path}/absent.py:f",
                    f"{broken}:f",
                    f"{fine}:nope",
                    f"{fine}:LIMIT",
                    "json",
                    f"{fine}:hello",
                ]
            },
        }
    )
    with pytest.raises(ConfigError) as caught:
        VoiceStack(config)
    errors = caught.value.errors
    assert len(errors) == 6
    assert "'no_such_package.tools:go'" in errors[0] and "no module named 'no_such_package'" in errors[0]
    assert "there is no file" in errors[1] and "absent.py" in errors[1]
    assert "RuntimeError: missing API key" in errors[2]
    assert "has no function 'nope'" in errors[3]
    assert "is a int, not a function" in errors[4]
    assert 'expected "package.module:function"' in errors[5]


def test_entries_load_from_a_module_and_a_file_with_their_options(tmp_path: Path) -> None:
    tool_file = tmp_path / "shop.py"
    tool_file.write_text(
        "def order(item: str, count: int = 1) -> str:\n    '''Order something.'''\n    return f'{count} x {item}'\n"
    )
    config = VixioConfig.model_validate(
        {
            "agent": {"provider": "litellm", "model": "openai/x"},
            "tools": {
                "builtin": [],
                "local": [
                    "json:dumps",
                    {
                        "function": f"{tool_file}:order",
                        "name": "place_order",
                        "description": "Order from the shop.",
                        "timeout": 7,
                        "sub_type": "control",
                    },
                ],
            },
        }
    )
    voice = VoiceStack(config)
    names = [tool.name for tool in voice.local_tools]
    assert names == ["dumps", "place_order"]
    order = voice.local_tools[1]
    assert order.description == "Order from the shop." and order.sub_type == "control"
    assert order.parameters["required"] == ["item"]
    tools = voice.session_tools("s", device_id="dev-1")
    assert tools is not None
    policy = tools.toolset.policy
    assert policy.timeout_for(order) == 7 and policy.sub_type(order) == "control"
    assert tools.executor.device_id == "dev-1"


async def test_tool_context_and_result_observers_through_the_executor() -> None:
    seen: list[ToolContext] = []

    async def where_am_i(ctx: ToolContext, detail: bool = False) -> str:
        """Which device is asking."""
        seen.append(ctx)
        await ctx.say("looking")
        return ctx.device_id

    said: list[str] = []

    async def speaker(text: str) -> None:
        said.append(text)

    config = VixioConfig.model_validate(
        {"agent": {"provider": "litellm", "model": "openai/x"}, "tools": {"builtin": []}}
    )
    voice = VoiceStack(config)
    voice.local_tools.append(func_to_tool_definition(where_am_i))
    tools = voice.session_tools("sess-1", device_id="dev-9")
    assert tools is not None
    tools.executor.speaker = speaker
    observed: list[tuple[str, str | None, float | None]] = []
    later: list[str] = []

    def observer(record: ToolCallRecord) -> None:
        assert record.result is not None
        observed.append((record.request.call_id, record.result.result, record.duration_ms))

    async def async_observer(record: ToolCallRecord) -> None:
        later.append(record.request.tool_name)

    tools.context.add_observer(observer)
    tools.context.add_observer(async_observer)
    from vixio.core.tools.types import ToolCallRequest

    result = await tools.executor.execute(ToolCallRequest(call_id="c1", tool_name="where_am_i", arguments={}))
    assert result.result == "dev-9" and result.duration_ms is not None
    (ctx,) = seen
    assert (ctx.session_id, ctx.device_id, ctx.call_id, ctx.tool_name) == ("sess-1", "dev-9", "c1", "where_am_i")
    assert ctx.calls is tools.context and ctx.calls.get("c1") is not None
    assert said == ["looking"]
    assert observed[0][:2] == ("c1", "dev-9") and observed[0][2] is not None
    await asyncio.sleep(0)
    assert later == ["where_am_i"]
    await tools.close()


async def test_the_custom_pipeline_example_uses_device_and_local_tools(
    llm: ScriptedLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    monkeypatch.setenv("VIXIO_NOTES_DIR", str(tmp_path))
    spec = importlib.util.spec_from_file_location("agent_with_device_tools", EXAMPLES / "agent_with_device_tools.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    llm.expect(
        Reply.tool_call("self_audio_speaker_set_volume", {"volume": 20}, call_id="call_v"),
        Reply.tool_call("take_note", {"text": "volume lowered"}, call_id="call_n"),
        Reply.text("Done, the volume is 20."),
    )
    settings = config(llm, {})
    voice = VoiceStack(settings.model_copy(update={"agent": None}))
    server = VixioServer(settings, example.create_pipeline_factory(settings, voice))
    await server.start()
    try:
        async with SimulatedDevice(
            ws_url=url(server), device_id="aa:bb:cc:dd:ee:02", listening_mode="manual"
        ) as device:
            await device.connect()
            for _ in range(1500):  # the device's tools join the agent's list when listed (after litellm loads)
                if any(r.get("method") == "tools/list" for r in device.mcp_requests):
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            assert await ask(device, "Turn it down to 20 and note it.") == ["Done, the volume is 20."]
            assert device.status.volume == 20
        offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
        assert {"get_weather", "get_time", "take_note", "self_audio_speaker_set_volume"} <= set(offered)
        assert json.loads((tmp_path / "aa_bb_cc_dd_ee_02.json").read_text())[0]["text"] == "volume lowered"
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_an_async_entrys_own_timeout_bounds_its_background_run(tmp_path: Path) -> None:
    from vixio.core.tools.types import ToolCallRequest

    slow = tmp_path / "slow.py"
    slow.write_text(
        "import asyncio\n\nasync def crawl(site: str) -> str:\n    '''Crawl a site.'''\n"
        "    await asyncio.sleep(30)\n    return 'done'\n"
    )
    config = VixioConfig.model_validate(
        {
            "agent": {"provider": "litellm", "model": "openai/x"},
            "tools": {
                "builtin": [],
                "async_tools": {"timeout": 300},
                "local": [{"function": f"{slow}:crawl", "async": True, "timeout": 0.3}],
            },
        }
    )
    voice = VoiceStack(config)
    tools = voice.session_tools("s")
    assert tools is not None
    finished: list[str] = []
    runner = tools.executor.async_runner

    async def report(record: Any) -> None:
        finished.append(record.status)

    runner.on_complete = report  # type: ignore[union-attr]
    handle = await tools.executor.execute(ToolCallRequest(call_id="c1", tool_name="crawl", arguments={"site": "x"}))
    assert handle.status == "pending"
    for _ in range(300):
        if finished:
            break
        await asyncio.sleep(0.01)
    record = tools.context.task_for_call("c1")
    assert finished == ["failed"] and record is not None and "within 0.3 s" in (record.error or "")
    await tools.close()
    await voice.close()
