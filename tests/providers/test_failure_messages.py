"""Every cloud provider names why a request failed: a port nobody listens on, a host DNS does not
know (`.invalid` never resolves, RFC 6761), a server answering 401, each real on loopback; and
`failure_kind` sorts each failure into the kind `/metrics` counts it as."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import numpy as np
import pytest
from loguru import logger

from vixio.app.server import VixioServer
from vixio.app.vision import VisionError, VisionModel
from vixio.config.models import VixioConfig
from vixio.config.needs import missing_key
from vixio.config.pipeline import LitellmAgentConfig, OpenAIASRConfig, OpenAITTSConfig
from vixio.config.vision import VisionConfig
from vixio.core.failure import describe_failure, failure_kind, host_port
from vixio.providers.agent.base import AgentError
from vixio.providers.asr import ASRError, OpenAICompatibleASR
from vixio.providers.tts import OpenAICompatibleTTS, TTSError
from vixio.testing.device import SimulatedDevice
from vixio.testing.fault_servers import SpeechFaultServer
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.models

KEY = "the.api_key is empty (TEST_API_KEY unset)"
Condition = str  # "refused", "dns" or "401"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when this returns: nothing listens


async def fail_with(
    condition: Condition, call: Callable[[str], Awaitable[object]], *, speech: bool = False
) -> tuple[str, str]:
    """(the error message, what it must say) for `call(base_url)` under `condition`."""
    if condition == "refused":
        port = closed_port()
        return (
            await _message(call(f"http://127.0.0.1:{port}/v1"), "refused"),
            f"connection refused at 127.0.0.1:{port}; {KEY}",
        )
    if condition == "dns":
        return await _message(
            call("http://nonexistent.invalid/v1"), "dns"
        ), f"DNS lookup failed for nonexistent.invalid; {KEY}"
    if speech:
        async with SpeechFaultServer() as server:
            server.asr_mode = server.tts_mode = "http_401"
            return await _message(call(server.base_url), "auth"), "HTTP 401 Unauthorized"
    async with ScriptedLLMServer(Reply.error(401, "Incorrect API key provided")) as llm:
        return await _message(call(llm.base_url), "auth"), "HTTP 401 Unauthorized"


async def _message(attempt: Awaitable[object], kind: str) -> str:
    """The message of the provider error `attempt` raises, whose cause must be of `kind`."""
    with pytest.raises((AgentError, ASRError, TTSError, VisionError)) as caught:
        await attempt
    assert failure_kind(caught.value) == kind, caught.value
    return str(caught.value)


def check(message: str, expected: str, condition: Condition) -> None:
    assert expected in message, message
    assert "HTTP 500" not in message and "ConnectionKey" not in message and "Errno" not in message
    if condition == "401":
        assert "Incorrect API key provided" in message and message.endswith(KEY), message


CONDITIONS = ["refused", "dns", "401"]


@pytest.mark.parametrize("model", ["openai/test-model", "hosted_vllm/test-model"])  # openai SDK, litellm
@pytest.mark.parametrize("condition", CONDITIONS)
async def test_agent(condition: Condition, model: str) -> None:
    from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

    async def call(base: str) -> None:
        agent = OpenAIAgentProvider(model, api_base=base, api_key="k", timeout=10, missing_key=KEY)
        await agent.initialize()
        async for _ in agent.chat("hello"):
            pass

    message, expected = await fail_with(condition, call)
    check(message, expected, condition)
    if condition == "401":
        assert message.startswith("the language model at http://127.0.0.1:") and "rejected the API key" in message
    else:
        assert message.startswith("could not reach the language model at http://")


@pytest.mark.parametrize("condition", CONDITIONS)
async def test_asr(condition: Condition) -> None:
    async def call(base: str) -> str:
        asr = OpenAICompatibleASR(base, timeout=5, missing_key=KEY)
        try:
            return await asr.transcribe(np.zeros(3200, "<i2").tobytes(), 16000)
        finally:
            await asr.close()

    message, expected = await fail_with(condition, call, speech=True)
    check(message, expected, condition)


@pytest.mark.parametrize("condition", CONDITIONS)
async def test_tts(condition: Condition) -> None:
    async def call(base: str) -> list[bytes]:
        tts = OpenAICompatibleTTS(base, timeout=5, missing_key=KEY)
        try:
            return [pcm async for pcm in tts.synthesize("Hello there.")]
        finally:
            await tts.close()

    message, expected = await fail_with(condition, call, speech=True)
    check(message, expected, condition)


@pytest.mark.parametrize("condition", CONDITIONS)
async def test_vision(condition: Condition) -> None:
    async def call(base: str) -> str:
        model = VisionModel(VisionConfig(model="openai/test-vision", api_base=base, api_key="k", timeout=10))
        model.missing_key = KEY
        return await model.explain(b"\xff\xd8\xff\xe0 not really a jpeg", "what is this?")

    message, expected = await fail_with(condition, call)
    check(message, expected, condition)


def test_the_missing_key_named_for_each_section() -> None:
    deepseek = LitellmAgentConfig(provider="litellm", model="deepseek/deepseek-chat")
    assert missing_key(deepseek, "agent", environ={}) == "agent.api_key is empty (DEEPSEEK_API_KEY unset)"
    assert missing_key(deepseek, "agent", environ={"DEEPSEEK_API_KEY": "sk"}) is None
    local = LitellmAgentConfig(provider="litellm", model="openai/x", api_base="http://127.0.0.1:8080/v1")
    assert missing_key(local, "agent", environ={}) is None
    assert (
        missing_key(VisionConfig(model="gemini/gemini-2.0-flash"), "vision", environ={})
        == "vision.api_key is empty (GEMINI_API_KEY unset)"
    )
    cloud_asr = OpenAIASRConfig(provider="openai", api_base="https://api.groq.com/openai/v1")
    assert missing_key(cloud_asr, "asr", environ={}) == "asr.api_key is empty"
    loopback_tts = OpenAITTSConfig(provider="openai", api_base="http://127.0.0.1:9000/v1")
    assert missing_key(loopback_tts, "tts", environ={}) is None


def test_describe_failure_without_a_connection_cause() -> None:
    assert (
        describe_failure("https://api.x.com/v1", status=429, detail="slow down")
        == "HTTP 429 Too Many Requests: slow down"
    )
    assert describe_failure(None, exc=ValueError("bad"), missing_key="k") == "ValueError: bad; k"
    assert host_port("https://api.deepseek.com/beta") == ("api.deepseek.com", 443)


def test_failure_kinds_of_what_the_providers_say() -> None:
    assert (
        failure_kind(
            TTSError(
                "openai: POST http://x/v1/audio/speech (model 'm', voice 'v') returned "
                "HTTP 500 Internal Server Error: b'{}'"
            )
        )
        == "http_5xx"
    )
    assert failure_kind(ASRError("openai: POST http://x returned HTTP 429 Too Many Requests")) == "rate_limit"
    assert failure_kind(ASRError("openai: POST http://x returned HTTP 404 Not Found")) == "http_4xx"
    assert failure_kind(TTSError("openai: POST http://x stalled for more than 5 s")) == "timeout"
    assert failure_kind(AgentError("the connection to the language model at x broke off mid-reply")) == "connection"
    assert failure_kind(TTSError("openai: the audio is noise, not speech")) == "other"
    try:
        raise ConnectionRefusedError(111, "refused")
    except ConnectionRefusedError as cause:
        wrapped = TTSError("edge: voice failed")
        wrapped.__cause__ = cause
    assert failure_kind(wrapped) == "refused"


async def test_the_servers_log_names_the_cause_and_the_missing_key(
    monkeypatch: pytest.MonkeyPatch, speech_server: SpeechFaultServer
) -> None:
    # config.zh.yaml's agent with DEEPSEEK_API_KEY unset; its host made unresolvable without a
    # network (litellm reads DEEPSEEK_API_BASE), as on a machine offline.
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setenv("DEEPSEEK_API_BASE", "http://nonexistent.invalid/v1")
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}, "idle_timeout": 0},
            "agent": {"provider": "litellm", "model": "deepseek/deepseek-chat", "api_key": ""},
            "tts": {"provider": "openai", "api_base": speech_server.base_url, "timeout": 5},
        }
    )
    errors: list[str] = []
    sink = logger.add(lambda message: errors.append(message.record["message"]), level="ERROR")
    try:
        async with (
            VixioServer(config) as server,
            SimulatedDevice(ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/") as device,
        ):
            await device.connect()
            mark = device.mark()
            await device.send_text("你好")
            await device.wait_for("tts", state="stop", after=mark, timeout=30)
    finally:
        logger.remove(sink)
    (error,) = errors
    assert (
        "could not reach the language model at deepseek/deepseek-chat: DNS lookup failed for nonexistent.invalid; "
        "agent.api_key is empty (DEEPSEEK_API_KEY unset)"
    ) in error, error
    assert "HTTP 500" not in error


@pytest.fixture
async def speech_server() -> AsyncIterator[SpeechFaultServer]:
    async with SpeechFaultServer() as server:
        yield server
