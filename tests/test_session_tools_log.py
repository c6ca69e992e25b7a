"""What the log says about the tools a model is offered (issue 46: "6 offered in all" was logged for
a model offered none)."""

from __future__ import annotations

import pytest
from loguru import logger

from vixio.core.tools.policy import ToolPolicy
from vixio.core.tools.types import ToolDefinition
from vixio.providers.agent.text_tools import ToolDefinitionConverter
from vixio.voice.session_tools import SessionTools

pytestmark = pytest.mark.unit

DEVICE_TOOLS = [
    ToolDefinition(name=f"self.audio_speaker.set_{n}", description="x", source="device")
    for n in ("volume", "mute", "theme")
]


async def _logged(offered: bool) -> list[str]:
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}", level="INFO")
    try:
        tools = SessionTools("s1", ToolPolicy())

        async def update(_tools: object) -> None:
            pass

        tools.bind_agent(ToolDefinitionConverter(), update, offered=offered)
        await tools.update_source("device", DEVICE_TOOLS)
        await tools.executor.close()
    finally:
        logger.remove(sink)
    return [line.strip() for line in lines if "tools from device" in line]


async def test_a_model_offered_no_tools_is_not_logged_as_offered_them() -> None:
    [line] = await _logged(offered=False)
    assert "offered in all" not in line
    assert "offered none" in line and "3" in line


async def test_a_model_offered_tools_is_logged_with_their_count() -> None:
    [line] = await _logged(offered=True)
    assert line.endswith("(3 offered in all)")
