"""Headless Chromium drives the console against a real server with a simulated device connected.

Needs Debian's `chromium` and `chromium-driver` packages (`make test` installs them when it runs as
root on Debian/Ubuntu) and the `selenium` package (the test extra); skips naming what is missing.
Screenshots of each pane go to $VIXIO_CONSOLE_SCREENSHOTS when set (docs/console/ is made with
`VIXIO_CONSOLE_SCREENSHOTS=docs/console pytest tests/console/test_console_browser.py`), else to
a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import Live
from tests.console.test_console_api import VCP_BLOCK, XML_BLOCK
from vixio.testing.llm_server import Reply

pytestmark = pytest.mark.browser

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER_PATHS = ("/usr/bin/chromedriver",)
WAIT = 30.0
"""Seconds any one thing may take to appear (generous: the machine may be loaded)."""


def _first(paths: tuple[str, ...], name: str) -> str | None:
    return next((path for path in paths if os.access(path, os.X_OK)), None) or shutil.which(name)


def _browser(*, logs: bool = False) -> Any:
    """Headless Chromium; with `logs`, its console (errors such as a 404) is kept for `get_log("browser")`."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("the selenium package is missing (pip install 'vixio[test]')")
    chromium = _first(CHROMIUM_PATHS, "chromium")
    driver = _first(DRIVER_PATHS, "chromedriver")
    if chromium is None or driver is None:
        missing = " and ".join(name for name, path in (("chromium", chromium), ("chromium-driver", driver)) if not path)
        pytest.skip(f"Debian package {missing} is not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1360,900",
    ):
        options.add_argument(flag)
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def _drive(browser: Any, base: str, shots: Path, volume_calls: Any) -> dict[str, Any]:
    """The whole browser session (blocking; runs in a thread while the server serves)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    found: dict[str, Any] = {}

    def css(selector: str) -> Any:
        return wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, selector)))

    def paste(selector: str, text: str) -> None:
        browser.execute_script("arguments[0].value = arguments[1]", css(selector), text)

    browser.get(base + "/console/")
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    css("#session-list tbody tr")

    # Discovery: the device's tools appear; searching filters them.
    css("#tab-discovery").click()
    css('#tool-list li[data-name="self_audio_speaker_set_volume"]')
    found["all_tools"] = [
        li.get_attribute("data-name") for li in browser.find_elements(By.CSS_SELECTOR, "#tool-list li")
    ]
    css("#discovery-search").send_keys("set_volume")
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#tool-list li")) < len(found["all_tools"]))
    found["filtered"] = [
        li.get_attribute("data-name") for li in browser.find_elements(By.CSS_SELECTOR, "#tool-list li")
    ]
    css('#tool-list li[data-name="self_audio_speaker_set_volume"]').click()
    found["detail"] = css("#tool-detail").text
    browser.save_screenshot(str(shots / "discovery.png"))

    # Executor: the schema's integer becomes a number field; running it reaches the device.
    css("#load-into-executor").click()
    field = css('#exec-form [data-arg="volume"]')
    found["field"] = (field.tag_name, field.get_attribute("type"), field.get_attribute("data-kind"))
    field.send_keys("30")
    css("#exec-mode-json").click()  # switching modes keeps what was typed
    found["json"] = css("#exec-json").get_attribute("value")
    css("#exec-mode-form").click()
    found["field_after"] = css('#exec-form [data-arg="volume"]').get_attribute("value")
    css("#exec-run").click()
    outcome = css("#exec-outcome")
    wait.until(lambda b: outcome.get_attribute("data-status") is not None)
    found["outcome"] = (outcome.get_attribute("data-status"), css("#exec-duration").text, css("#exec-output").text)
    found["history"] = css("#exec-history li").text
    deadline = time.monotonic() + WAIT
    while not volume_calls() and time.monotonic() < deadline:
        time.sleep(0.05)
    browser.save_screenshot(str(shots / "executor.png"))

    # Parser: a VCP block and an XML block.
    css("#tab-parser").click()
    paste("#parse-text", VCP_BLOCK)
    Select(css("#parse-protocol")).select_by_value("vcp")
    css("#parse-run").click()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#parse-requests tbody"), "self_audio"))
    found["vcp"] = (css(".parsed-tool").text, css(".parsed-args").text, css("#parse-speech").text)
    paste("#parse-text", XML_BLOCK)
    Select(css("#parse-protocol")).select_by_value("xml")
    css("#parse-run").click()
    wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "#parse-requests tbody"), "get_time"))
    found["xml"] = (css(".parsed-tool").text, css(".parsed-args").text, css("#parse-speech").text)
    paste("#parse-text", VCP_BLOCK + "\n\n" + XML_BLOCK)
    Select(css("#parse-protocol")).select_by_value("auto")
    css("#parse-run").click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#parse-requests tr.parsed")) == 2)
    browser.save_screenshot(str(shots / "parser.png"))

    # Say: the reply arrives in Sessions without a reload.
    css("#tab-sessions").click()
    css("#say-text").send_keys("What is the volume now?")
    css("#say-send").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "conversation"), "The volume is 30."))
    wait.until(ec.text_to_be_present_in_element((By.ID, "conversation"), "first_frame_sent"))
    found["conversation"] = css("#conversation").text
    browser.save_screenshot(str(shots / "sessions.png"))

    # Process-wide: no session picked, the tools every session starts with; the choice sticks.
    Select(css("#session-select")).select_by_value("")
    css("#tab-discovery").click()
    browser.execute_script(
        "const s = arguments[0]; s.value = ''; s.dispatchEvent(new Event('input'))", css("#discovery-search")
    )
    wait.until(ec.text_to_be_present_in_element((By.ID, "discovery-scope"), "process-wide"))
    css('#tool-list li[data-name="get_time"]')
    time.sleep(1.5)  # a few live updates later
    found["process_wide"] = [
        li.get_attribute("data-name") for li in browser.find_elements(By.CSS_SELECTOR, "#tool-list li")
    ]
    found["still_process_wide"] = Select(css("#session-select")).first_selected_option.get_attribute("value") == ""
    return found


# A real TTS (espeak-ng, offline) so the turn has audio and all its latency marks after the LLM.
@pytest.mark.parametrize("live", [{"tts": {"provider": "espeak", "voice": "en-us"}}], indirect=True)
async def test_console_in_a_real_browser(live: Live, tmp_path: Path) -> None:
    browser = _browser()
    shots = Path(os.environ.get("VIXIO_CONSOLE_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    live.llm.expect(Reply.tool_call("self_get_device_status", {}, call_id="c1"), Reply.text("The volume is 30."))

    def volume_calls() -> list[dict[str, Any]]:
        return [
            r
            for r in list(live.device.mcp_requests)
            if r.get("method") == "tools/call" and r["params"]["name"] == "self.audio_speaker.set_volume"
        ]

    try:
        found = await asyncio.to_thread(_drive, browser, live.base, shots, volume_calls)
    finally:
        await asyncio.to_thread(browser.quit)

    assert {"self_audio_speaker_set_volume", "self_get_device_status", "get_time"} <= set(found["all_tools"])
    assert found["filtered"] == ["self_audio_speaker_set_volume"]
    assert "self.audio_speaker.set_volume" in found["detail"] and "integer" in found["detail"]
    assert found["field"] == ("input", "number", "integer")
    assert '"volume": 30' in found["json"] and found["field_after"] == "30"
    status, duration, output = found["outcome"]
    assert status == "completed" and duration.endswith(" ms") and output == "true"
    assert "completed" in found["history"]
    (call,) = volume_calls()
    assert call["params"]["arguments"] == {"volume": 30}
    assert live.device.status.volume == 30
    assert found["vcp"] == ("self_audio_speaker_set_volume", '{"volume":"30"}', "Sure, let me turn it down.")
    assert found["xml"] == ("get_time", '{"timezone":"Europe/Paris"}', "Checking the time.")
    conversation = found["conversation"]
    assert "What is the volume now?" in conversation and "self_get_device_status" in conversation
    assert "tts_first_audio" in conversation and "first_frame_sent" in conversation
    assert "get_time" in found["process_wide"] and "self_audio_speaker_set_volume" not in found["process_wide"]
    assert found["still_process_wide"]
    for name in ("discovery", "executor", "parser", "sessions"):
        assert (shots / f"{name}.png").stat().st_size > 10_000


def _sign_in(browser: Any, base: str) -> dict[str, Any]:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, WAIT)
    found: dict[str, Any] = {}
    browser.get(base + "/console/")
    token = wait.until(ec.visibility_of_element_located((By.ID, "login-token")))
    found["asked"] = browser.find_element(By.ID, "auth-note").text
    found["rows_before"] = len(browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr"))
    token.send_keys("wrong")
    browser.find_element(By.ID, "login-send").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "auth-note"), "wrong operator token"))
    token.clear()
    token.send_keys("browser-token-for-tests")
    browser.find_element(By.ID, "login-send").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#session-list tbody tr")))
    found["form_hidden"] = not browser.find_element(By.ID, "login").is_displayed()
    found["cookie"] = browser.get_cookie("vixio_admin")
    browser.refresh()  # the cookie keeps the operator signed in
    wait.until(ec.text_to_be_present_in_element((By.ID, "live"), "live"))
    found["rows_after_reload"] = len(
        wait.until(ec.visibility_of_all_elements_located((By.CSS_SELECTOR, "#session-list tbody tr")))
    )
    return found


@pytest.mark.parametrize("live", [{"admin_token": "browser-token-for-tests"}], indirect=True)
async def test_the_page_asks_for_the_token_once(live: Live) -> None:
    browser = _browser()
    try:
        found = await asyncio.to_thread(_sign_in, browser, live.base)
    finally:
        await asyncio.to_thread(browser.quit)
    assert "operator token" in found["asked"] and found["rows_before"] == 0
    assert found["form_hidden"]
    assert found["cookie"]["httpOnly"] and found["cookie"]["sameSite"] == "Strict"
    assert found["rows_after_reload"] == 1
