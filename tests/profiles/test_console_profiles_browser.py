"""Headless Chromium assigns a profile from the console page to a live session; the device's next
turn reaches the model with the profile's instructions and model (the page's list shows it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.console.test_console_browser import WAIT, _browser
from vixio.state.sqlite import SqliteStore
from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer
from vixio.testing.speech_servers import SlowSpeechServer

from .test_profiles_session import (
    ADULT,
    KIDS_PROMPT,
    ask,
    profiles_config,
    start,
    system,
    tts,
    url,
)

pytestmark = pytest.mark.browser

__all__ = ["tts"]  # the fixture


def _assign_kids(browser: Any, base: str) -> dict[str, str]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, WAIT)

    def css(selector: str) -> Any:
        return wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, selector)))

    browser.get(base + "/console/")
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#session-list td.profile"), "default"))
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#profile-select option")) == 2)
    Select(css("#profile-select")).select_by_value("kids")
    css("#profile-assign").click()
    # The answer's line, or the detail re-rendered by the live update that follows it.
    wait.until(ec.text_to_be_present_in_element((By.ID, "profile-status"), "kids"))
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#session-list td.profile"), "→ kids"))
    return {"row": css("#session-list td.profile").text}


async def test_the_page_assigns_a_profile_to_a_live_session(
    llm: ScriptedLLMServer, tts: SlowSpeechServer, tmp_path: Path
) -> None:
    browser = _browser()
    llm.expect(Reply.text("Good evening."), Reply.text("Hi kiddo."))
    server = await start(profiles_config(llm, tts, tmp_path))
    try:
        async with SimulatedDevice(ws_url=url(server), mcp=False, device_id=ADULT) as device:
            await device.connect()
            await ask(device, "hello")
            found = await asyncio.to_thread(_assign_kids, browser, f"http://127.0.0.1:{server.ota.port}")
            await ask(device, "hello again")
    finally:
        await asyncio.to_thread(browser.quit)
        await server.stop()
    assert found["row"] == "default → kids at the next turn"
    assert llm.requests[1]["model"] == "kids-model" and system(llm, 1).startswith(KIDS_PROMPT)
    assert await stored_assignment(tmp_path) == "kids"


async def stored_assignment(tmp_path: Path) -> str | None:
    store = SqliteStore(tmp_path / "data" / "state.db")
    await store.open()
    try:
        return await store.assigned_profile(ADULT)
    finally:
        await store.close()
