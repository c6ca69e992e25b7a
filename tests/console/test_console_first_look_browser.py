"""What a person sees on first opening the console, in headless Chromium (issue 46): no literal
"null" under a session without console runs, no favicon 404, no "Unknown tool here" before a
tool is picked, and a Memory pane that says what its empty box is for."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import Live
from tests.console.test_console_browser import WAIT, _browser

pytestmark = pytest.mark.browser


def _look(browser: Any, base: str, device_id: str, shots: Path) -> dict[str, Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    found: dict[str, Any] = {}

    def css(selector: str) -> Any:
        return wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, selector)))

    browser.get(base + "/console/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    css("#session-list tbody tr").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "session-detail"), "Nothing said yet."))
    found["detail"] = css("#session-detail").text
    browser.save_screenshot(str(shots / "sessions.png"))

    css("#tab-executor").click()
    found["executor"] = css("#exec-form").text

    css("#tab-memory").click()
    css(f'#memory-devices tr[data-device="{device_id}"]').click()
    box = css("#memory-text")
    found["memory_placeholder"] = box.get_attribute("placeholder")
    found["memory_value"] = box.get_attribute("value")
    browser.save_screenshot(str(shots / "memory.png"))
    found["log"] = [entry["message"] for entry in browser.get_log("browser")]
    return found


async def test_the_console_at_first_sight(live: Live, tmp_path: Path) -> None:
    browser = _browser(logs=True)
    try:
        found = await asyncio.to_thread(_look, browser, live.base, live.device.device_id, tmp_path)
    finally:
        await asyncio.to_thread(browser.quit)
    assert "null" not in found["detail"].split(), found["detail"]
    assert "Unknown tool" not in found["executor"] and "Pick a tool" in found["executor"], found["executor"]
    assert found["memory_value"] == "" and "Nothing remembered" in (found["memory_placeholder"] or "")
    assert not [line for line in found["log"] if "404" in line or "favicon" in line], found["log"]
