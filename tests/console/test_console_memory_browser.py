"""Headless Chromium drives the console's Memory pane against a real server (real SQLite store)
with a simulated device connected: a device that is not connected is listed from the store, its
memory edited and a turn deleted; the connected device's memory edited in the page reaches its
next turn; Forget everything empties the store. (Skips like test_console_browser.py when
Chromium is missing.)"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import Live
from tests.console.test_console_browser import WAIT, _browser
from tests.console.test_console_memory import said, system, turn, until_stored
from vixio.state.store import StoredTurn

pytestmark = pytest.mark.browser

AWAY = "02:00:00:00:00:bb"


def _drive(browser: Any, base: str, device: str, shots: Path) -> dict[str, Any]:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    # The detail is drawn again after every change: an element found a moment ago may be gone.
    wait = WebDriverWait(browser, WAIT, ignored_exceptions=(StaleElementReferenceException,))
    found: dict[str, Any] = {}

    def css(selector: str) -> Any:
        return wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, selector)))

    def status(text: str) -> None:
        wait.until(ec.text_to_be_present_in_element((By.ID, "memory-status"), text))

    def select(device_id: str) -> None:
        css(f'#memory-devices tr[data-device="{device_id}"]').click()
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#memory-detail h2"), f"Device {device_id}"))

    browser.get(base + "/console/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    css("#tab-memory").click()
    css(f'#memory-devices tr[data-device="{AWAY}"]')
    found["rows"] = [
        (row.get_attribute("data-device"), row.text)
        for row in browser.find_elements(By.CSS_SELECTOR, "#memory-devices tbody tr[data-device]")
    ]

    # The device that is away: its memory shown, edited; one of its turns deleted.
    select(AWAY)
    text = css("#memory-text")
    wait.until(lambda b: text.get_attribute("value") == "The user likes trains.")
    found["away_turns"] = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#memory-turns .turn")]
    browser.save_screenshot(str(shots / "memory.png"))
    text.clear()
    text.send_keys("The user likes trains and <b>boats</b>.")
    css("#memory-save").click()
    status("Done")
    css('#memory-turns .turn[data-seq="0"] .turn-delete').click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#memory-turns .turn")) == 1)
    found["away_turns_after"] = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#memory-turns .turn")]

    # The connected device: its memory written here.
    select(device)
    css("#memory-text").send_keys("The user is called Alice.")
    css("#memory-save").click()
    status("1 live session follow")
    found["live_status"] = css("#memory-status").text

    # Back to the away device: Forget everything (the confirmation answered yes).
    select(AWAY)
    wait.until(lambda b: "boats" in css("#memory-text").get_attribute("value"))
    browser.execute_script("window.confirm = () => true")
    css("#memory-forget").click()
    wait.until(lambda b: css("#memory-text").get_attribute("value") == "")
    wait.until(lambda b: not b.find_elements(By.CSS_SELECTOR, f'#memory-devices tr[data-device="{AWAY}"]'))
    return found


async def test_memory_pane_in_a_real_browser(live: Live, tmp_path: Path) -> None:
    browser = _browser()
    shots = Path(os.environ.get("VIXIO_CONSOLE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    store, device = live.server.store, live.device.device_id
    now = time.time()
    await store.put_turn(AWAY, StoredTurn("old", 0, "I like trains", "Trains are great.", at=now - 7200))
    await store.put_turn(AWAY, StoredTurn("old", 1, "and boats", "Boats too.", at=now - 7100))
    await store.set_memory(AWAY, "The user likes trains.")
    await turn(live, "hello there", "Hello!")
    await until_stored(live, device, 1)
    try:
        found = await asyncio.to_thread(_drive, browser, live.base, device, shots)
    finally:
        await asyncio.to_thread(browser.quit)

    assert [row[0] for row in found["rows"]][:2] == [device, AWAY] and "connected" in found["rows"][0][1]
    assert len(found["away_turns"]) == 2 and "and boats" in found["away_turns"][0]
    assert len(found["away_turns_after"]) == 1 and "and boats" in found["away_turns_after"][0]
    assert "1 live session follow" in found["live_status"]
    # The connected device's next turn carries what was typed in the page.
    messages = await turn(live, "who am I?", "Alice.")
    assert "The user is called Alice." in system(messages) and said(messages)[:2] == ["hello there", "Hello!"]
    # Forget everything erased the away device.
    assert await store.memory(AWAY) is None and await store.recent_turns(AWAY, 10) == []
    assert (shots / "memory.png").stat().st_size > 10_000
