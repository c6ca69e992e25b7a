"""How one device's session is assembled: its profile, its tools (server, device MCP,
registerTools), its conversation memory resumed, who is speaking (voiceprints → the person whose
facts and `require_speaker` tools apply), and the pipeline the profile's voice stack builds.

`VixioServer` hands every new connection here (vixio/app/server.py); the transport knows none of it.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from loguru import logger

from vixio.app.profile_switch import SessionProfile
from vixio.core.pipeline import Pipeline
from vixio.core.session_state import SessionState
from vixio.profiles.book import DEFAULT
from vixio.transports.xiaozhi.websocket.transport import DeviceContext

if TYPE_CHECKING:
    from vixio.app.server import VixioServer


async def build_session_pipeline(server: VixioServer, context: DeviceContext) -> Pipeline:
    """The pipeline of one device session, with its tools, memory and profile registered on `server`."""
    session_id = context.session_id
    device_id = context.identity.device_id
    choice = await server.profiles.choose(device_id)
    stack = server.voice.for_profile(choice.name)
    tools = stack.session_tools(session_id, device_id=device_id)
    if tools is not None:
        server.tools[session_id] = tools

        async def forget() -> None:
            server.tools.pop(session_id, None)
            server.profiles.discard(session_id)

        tools.add_closer(forget)
        server.console.attach(session_id, tools)
        # Device (MCP) and registerTools tools join the session's tools when they are known.
        context.transport.set_device_tools_callback(context.session_id, tools.on_device_tools)
        if context.features.get("mcp"):
            tools.expect_device_tools()  # the first turn waits (bounded) for the device's list
    conversation = None
    memory = server.memory(choice.name)
    if memory is not None and tools is not None and device_id:
        conversation = await memory.resume(device_id)
        tools.add_closer(conversation.close)  # the last turn is stored before the session is gone
    pipeline = stack.build_pipeline(
        context.session_id,
        tools=tools,
        conversation=conversation,
        on_forgotten=partial(server.profiles.forgotten, session_id, device_id),
    )
    if conversation is not None:  # a reconnect goes on with its conversation: so do its turn numbers
        pipeline.continue_turns(conversation.turns_before)
    live = SessionProfile(
        session_id,
        choice,
        stack,
        pipeline,
        tools,
        resolve=server.voice.for_profile,
        memory_note=conversation.memory_text if conversation is not None else "",
    )
    context.greeting = live.greeting
    if conversation is not None and conversation.learner is not None and stack.speaker_encoder is not None:
        conversation.learner.person_source = partial(getattr, pipeline.state, "person")  # Alice's facts are Alice's
    if server.config.speakers.people and conversation is not None and stack.speaker_encoder is not None:
        state, people = pipeline.state, server.config.speakers
        live.speaker_profile = lambda: people.profile_of(state.person) if state.person else None
    if tools is not None:
        tools.executor.person = partial(_trusted_person, pipeline.state, server.config.speakers.tool_threshold)
    if tools is not None:
        server.profiles.add(live)
    if choice.name != DEFAULT:
        logger.bind(session=session_id, device=device_id).info("profile {} ({})", choice.name, choice.source)
    return pipeline


def _trusted_person(state: SessionState, threshold: float) -> str:
    """Who may run a `require_speaker` tool this turn: the recognised person when the voice matched
    at `speakers.tool_threshold` or more, else "" (docs/speakers.md)."""
    match = state.speaker
    return match.person if match is not None and match.score >= threshold else ""
