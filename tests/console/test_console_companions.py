"""The console's Companions pane in headless Chromium: a companion waiting to pair with a live
device is listed, **Approve** pairs it, **Unpair** takes it off the device again (real server,
real WebSockets; skips like test_console_browser.py when Chromium is missing)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tests.console.test_console_browser import WAIT, _browser
from tests.transports.xiaozhi.test_pairing_authorization import (
    A_ID,  # noqa: F401  (fixture)
    V_MAC,
    api,
    companion,
    connect_v,
    serve,
    servers,  # noqa: F401 (a fixture, named as a parameter)
    v_tools,
)

pytestmark = pytest.mark.browser


def _drive(browser: Any, base: str, pairing_id: str, shots: Path) -> dict[str, Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    found: dict[str, Any] = {}

    def css(selector: str) -> Any:
        return wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, selector)))

    browser.get(base + "/console/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "pairing-count"), "1"))  # seen from any pane
    css("#tab-companions").click()
    found["pending"] = css(f'#pairing-pending tr[data-id="{pairing_id}"]').text
    browser.save_screenshot(str(shots / "companions.png"))
    css(f'#pairing-pending button[data-id="{pairing_id}"]').click()
    row = css(f'#pairing-companions tr[data-id="{pairing_id}"]')
    wait.until(lambda b: "paired" in row.text)
    found["paired"] = row.text
    found["approved"] = css(f'#pairing-approved tr[data-id="{pairing_id}"]').text
    css(f'#pairing-companions button[data-id="{pairing_id}"]').click()
    wait.until(ec.alert_is_present()).accept()  # "Unpair robot-a from …?"
    css(f'#pairing-pending tr[data-id="{pairing_id}"]')
    found["after"] = browser.find_element(By.ID, "pairing-approved").text
    return found


async def test_approve_and_unpair_from_the_companions_pane(servers, tmp_path: Path) -> None:  # noqa: F811
    browser = _browser()
    h = await serve(servers, tmp_path)
    device, sid = await connect_v(h)
    a = companion(h, [])
    try:
        await a.connect(hello=False)
        pairing_id = (await a.register(mac_addr=V_MAC))["result"]["pairing_id"]
        shots = Path(os.environ.get("VIXIO_CONSOLE_SCREENSHOTS") or tmp_path)
        found = await asyncio.to_thread(_drive, browser, f"http://127.0.0.1:{h.server.ota.port}", pairing_id, shots)
        assert A_ID in found["pending"] and V_MAC in found["pending"] and "unlock_front_door" in found["pending"]
        assert "paired" in found["paired"] and "approved" in found["paired"] and A_ID in found["approved"]
        await a.wait_for_pairing("paired")
        await a.wait_for_pairing("pending_approval")  # unpaired from the page
        await v_tools(h, sid, set())
        assert A_ID not in found["after"]  # the approval is forgotten too
        assert (await api(h, "/api/pairing"))[1]["approved"] == []
    finally:
        await asyncio.to_thread(browser.quit)
        await a.close()
        await device.__aexit__(None, None, None)
