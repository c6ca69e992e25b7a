"""The console's re-binds (vixio/console/identity.py) against a real server and SQLite store: a
claimant of a connected device's MAC (another Client-Id) is listed with the Client-Id the MAC is
pinned to; dismissing drops it; approving re-pins the MAC; bad bodies and unknown requests are
refused; the operator token guards the routes; the console page approves one in a real browser."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.console.conftest import Live
from tests.console.test_console_browser import WAIT, _browser
from vixio.testing.device import SimulatedDevice
from vixio.transports.xiaozhi.session.identity import claimant_device_id

pytestmark = pytest.mark.browser


async def claim(live: Live, client_id: str) -> None:
    """A board with the live device's MAC and `client_id` connects and leaves."""
    url = f"ws://127.0.0.1:{live.server.transport.port}/xiaozhi/v1/"
    async with SimulatedDevice(ws_url=url, device_id=live.device.device_id, client_id=client_id, mcp=False) as board:
        await board.connect()
        assert live.device.connected  # the pinned device's session goes on


async def test_rebinds_are_listed_dismissed_and_approved(live: Live) -> None:
    device, pinned = live.device.device_id, live.device.client_id
    status, state = await live.get("/api/identities")
    assert status == 200 and state == {"rebinds": []}
    async with live.http.get(live.base + "/console/rebinds.js") as page:  # the pane's script is shipped
        assert page.status == 200 and "/api/identities/" in await page.text()
    await claim(live, "new-board")
    await claim(live, "new-board")
    await claim(live, "someone")
    status, state = await live.get("/api/identities")
    assert [(r["device_id"], r["client_id"], r["pinned_client_id"], r["attempts"]) for r in state["rebinds"]] == [
        (device, "someone", pinned, 1),
        (device, "new-board", pinned, 2),
    ]

    status, answer = await live.post("/api/identities/dismiss", {"device_id": device, "client_id": "someone"})
    assert status == 200 and answer["dismissed"] is True
    assert (await live.post("/api/identities/dismiss", {"device_id": device, "client_id": "someone"}))[0] == 404
    assert (await live.post("/api/identities/approve", {"device_id": device, "client_id": "someone"}))[0] == 404
    for bad in (
        {},
        {"device_id": device},
        {"device_id": "", "client_id": "x"},
        {"device_id": device, "client_id": 7},
        {"device_id": "x" * 500, "client_id": "new-board"},
    ):
        status, answer = await live.post("/api/identities/approve", bad)
        assert status == 400 and ("device_id" in answer["error"] or "client_id" in answer["error"]), (bad, answer)

    status, answer = await live.post("/api/identities/approve", {"device_id": device.upper(), "client_id": "new-board"})
    assert status == 200 and answer == {"device_id": device, "client_id": "new-board", "previous_client_id": pinned}
    pin = await live.server.store.identity_pin(device)
    assert pin is not None and pin.client_id == "new-board"
    assert (await live.get("/api/identities"))[1] == {"rebinds": []}
    # The board that was the device is the claimant now: reconnecting, it is served under an id of its own.
    await live.device.close()
    await live.device.connect()
    for _ in range(200):
        served = [c.device_id for c in live.server.transport.connections.values()]
        if served == [claimant_device_id(device, pinned)]:
            break
        await asyncio.sleep(0.05)
    assert served == [claimant_device_id(device, pinned)]


@pytest.mark.parametrize("live", [{"admin_token": "op-secret-for-tests"}], indirect=True)
async def test_the_routes_are_for_operators(live: Live) -> None:
    assert (await live.get("/api/identities"))[0] == 401
    body = {"device_id": live.device.device_id, "client_id": "x"}
    assert (await live.post("/api/identities/approve", body))[0] == 401
    headers = {"Authorization": "Bearer op-secret-for-tests"}
    assert (await live.get("/api/identities", headers=headers))[0] == 200
    assert (await live.post("/api/identities/dismiss", body, headers=headers))[0] == 404


def _approve_in_the_page(browser: Any, base: str, client_id: str) -> dict[str, Any]:
    """Companions pane: the re-bind is listed; Approve (and its confirmation) empties the list."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    browser.get(base + "/console/")
    wait.until(ec.element_to_be_clickable((By.ID, "tab-companions"))).click()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#rebinds tbody"), client_id))
    # The pane re-renders its table while it polls: read the row, again if it was just replaced.
    rows = WebDriverWait(browser, WAIT, ignored_exceptions=(StaleElementReferenceException,))
    found = {"row": rows.until(lambda page: page.find_element(By.CSS_SELECTOR, "#rebinds tbody tr").text)}

    def approve(page: Any) -> bool:
        page.find_element(By.CSS_SELECTOR, '#rebinds button[data-action="approve"]').click()
        return True

    rows.until(approve)
    wait.until(ec.alert_is_present())
    found["question"] = browser.switch_to.alert.text
    browser.switch_to.alert.accept()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#rebinds tbody"), "None."))
    found["error"] = browser.find_element(By.ID, "rebind-error").text
    return found


async def test_a_rebind_is_approved_in_a_real_browser(live: Live) -> None:
    browser = _browser()
    await claim(live, "new-board")
    try:
        found = await asyncio.to_thread(_approve_in_the_page, browser, live.base, "new-board")
    finally:
        await asyncio.to_thread(browser.quit)
    assert (
        live.device.device_id in found["row"] and "new-board" in found["row"] and live.device.client_id in found["row"]
    )
    assert "Client-Id new-board" in found["question"] and found["error"] == ""
    pin = await live.server.store.identity_pin(live.device.device_id)
    assert pin is not None and pin.client_id == "new-board"
