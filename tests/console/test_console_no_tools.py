"""The console page says when the agent's model is offered no tools (in a real browser)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.console.test_console_browser import WAIT, _browser
from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import ScriptedLLMServer
from vixio.voice.agent_model import NOT_OFFERED_LABEL

pytestmark = pytest.mark.browser


def _read_labels(browser: Any, base: str) -> dict[str, str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    browser.get(base + "/console/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "detail-tools"), NOT_OFFERED_LABEL))
    detail = browser.find_element(By.ID, "detail-tools").text
    browser.find_element(By.ID, "tab-discovery").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "discovery-scope"), NOT_OFFERED_LABEL))
    return {"detail": detail, "scope": browser.find_element(By.ID, "discovery-scope").text}


async def test_the_page_shows_tools_not_offered_to_this_model(llm: ScriptedLLMServer) -> None:
    browser = _browser()
    server = VixioServer(
        VixioConfig.model_validate(
            {
                "xiaozhi": {
                    "host": "127.0.0.1",
                    "port": 0,
                    "idle_timeout": 0,
                    "http": {"host": "127.0.0.1", "port": 0},
                },
                "agent": {
                    "provider": "litellm",
                    "model": "openai/gpt-5-chat-latest",
                    "api_base": llm.base_url,
                    "api_key": "t",
                },
            }
        )
    )
    await server.start()
    try:
        async with SimulatedDevice(
            ws_url=f"ws://127.0.0.1:{server.transport.port}/xiaozhi/v1/", listening_mode="manual"
        ) as device:
            await device.connect()
            labels = await asyncio.to_thread(_read_labels, browser, f"http://127.0.0.1:{server.ota.port}")
    finally:
        await asyncio.to_thread(browser.quit)
        await server.stop()
    assert labels["detail"].endswith(f"({NOT_OFFERED_LABEL})")  # the device's tools are still counted
    assert labels["scope"].endswith(NOT_OFFERED_LABEL)
