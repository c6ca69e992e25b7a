"""A pipeline of your own whose agent uses the device's tools and your local tools (seed 000 §7).

    python examples/agent_with_device_tools.py --config config.yaml

`vixio serve` builds this wiring from config.yaml; write it yourself when you want a different
pipeline. The agent starts with the local tools; the device's MCP tools (volume, screen,
camera...) and tools a `mcp/registerTools` client offers join when the transport reports them,
also mid-conversation. Every call goes through the session's ToolExecutor (policy, argument
checks, timeouts, the call record), and local tools that take a `ToolContext` learn which device
called them.

The agent is the one config.yaml configures. With the default (`provider: local-llama`,
SmolLM2-135M, offline) the pipeline runs and answers, but that model is too small to call tools,
so it is offered none; with `provider: litellm` and a model that calls tools (e.g.
`openai/gpt-4o-mini`, `deepseek/deepseek-chat`, `ollama/qwen2.5`) it uses them.

Speech parts (VAD, ASR, TTS) are used when config.yaml configures them; without them the device
(or `vixio device --text ...`) talks to the agent in typed text and reads subtitles. Try it with

    .venv/bin/vixio device --ota http://127.0.0.1:8003/xiaozhi/ota/ --text "turn the volume down"
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from vixio.config import load_config
from vixio.config.models import VixioConfig
from vixio.config.pipeline import LocalLlamaAgentConfig
from vixio.providers.agent.base import AgentProvider
from vixio.core.pipeline import Pipeline
from vixio.core.station import Station
from vixio.core.tools.local import BUILTIN_LOCAL_TOOLS, func_to_tool_definition
from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
from vixio.providers.agent.openai_agents.tools import OpenAIAgentToolConverter
from vixio.app.server import VixioServer
from vixio.voice.session_tools import SessionTools
from vixio.stations import (
    AgentStation,
    ASRStation,
    SentenceAggregatorStation,
    TextAggregatorStation,
    TTSStation,
    TurnDetectorStation,
    VADStation,
)
from vixio.transports.xiaozhi.websocket.transport import DeviceContext
from vixio.voice.stack import VoiceStack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from my_tools import read_notes, take_note  # noqa: E402  (this directory's example tools)

SYSTEM_PROMPT = ("You are a voice assistant on a small device. Answer in one or two short sentences. "
                 "Use the device's tools to change its volume or screen, and the note tools to remember things.")


async def get_weather(city: str) -> str:
    """Today's weather for a city (a fixed answer: put your weather service here)."""
    return f"{city}: sunny, 25°C"


LOCAL_TOOLS = [func_to_tool_definition(f) for f in (*BUILTIN_LOCAL_TOOLS, get_weather, take_note, read_notes)]


def create_agent_provider(config: VixioConfig) -> AgentProvider:
    """A new agent provider (one per session: it holds the conversation) for `config.agent`."""
    agent_config = config.agent
    assert agent_config is not None
    if isinstance(agent_config, LocalLlamaAgentConfig):
        from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider

        return LocalLlamaAgentProvider(agent_config.model_path, n_ctx=agent_config.n_ctx, timeout=agent_config.timeout)
    return OpenAIAgentProvider(agent_config.model, api_base=agent_config.api_base, api_key=agent_config.api_key,
                               timeout=agent_config.timeout, max_tool_iterations=config.tools.max_iterations)


def create_pipeline_factory(config: VixioConfig, voice: VoiceStack):  # noqa: ANN201 (a PipelineFactory)
    """The per-device pipeline factory the server calls after each device's hello."""
    if config.agent is None:
        raise SystemExit("this example needs an `agent:` section (config.yaml has one)")

    async def create_pipeline(context: DeviceContext) -> Pipeline:
        session_id = context.session_id
        # 1. The session's tools: local ones now; the executor runs every call.
        tools = SessionTools(session_id, config.tools.policy(), local=LOCAL_TOOLS)
        tools.executor.device_id = context.identity.device_id
        # 2. The agent, with the local tools converted for openai-agents.
        agent = AgentStation(create_agent_provider(config), system_prompt=SYSTEM_PROMPT, executor=tools.executor)
        # 3. Keep the agent's list in sync: device tools arrive later and replace it (hot swap).
        agent.tools = tools.bind_agent(OpenAIAgentToolConverter(tools.executor), agent.update_tools)
        tools.executor.speaker = agent.say  # ToolContext.say speaks through this pipeline
        context.transport.set_device_tools_callback(session_id, tools.on_device_tools)
        # 4. The stations.
        stations: list[Station] = []
        if voice.vad is not None and voice.asr is not None:
            stations += [VADStation(voice.vad), TurnDetectorStation(), ASRStation(voice.asr)]
        stations += [TextAggregatorStation(), agent, SentenceAggregatorStation()]
        if voice.tts is not None:
            # The stack's circuit: its offline fallback speaks while the TTS fails (tts.fallback).
            stations.append(TTSStation(voice.tts, output_sample_rate=24000, circuit=voice.tts_circuit))
        return Pipeline(stations, session_id=session_id)

    return create_pipeline


async def run(config: VixioConfig) -> None:
    voice = VoiceStack(config.model_copy(update={"agent": None}))  # speech providers only
    await voice.load()
    server = VixioServer(config, create_pipeline_factory(config, voice))
    async with server:
        print(f"listening: ws://{config.xiaozhi.host}:{server.transport.port}/xiaozhi/v1/, "
              f"OTA http://127.0.0.1:{server.ota.port}/xiaozhi/ota/ — Ctrl-C to stop", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config.yaml")
    args = parser.parse_args()
    config = load_config(args.config)
    try:
        asyncio.run(run(config))
    except KeyboardInterrupt:
        pass
    finally:
        if isinstance(config.agent, LocalLlamaAgentConfig):
            from vixio.providers.agent.llama.weights import close_models

            close_models()  # now: left to the interpreter's exit, llama-cpp's __del__ prints a traceback


if __name__ == "__main__":
    main()
