"""The console in headless Firefox (Debian's firefox-esr, through Marionette): it loads, follows
the live session, builds the executor form, runs a tool on the device and parses a reply.
Skips when Firefox is not installed (the Chromium test is the required one)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import Live
from tests.console.marionette import Firefox, firefox_binary

pytestmark = pytest.mark.browser


def _drive(binary: str, profile: Path, base: str) -> dict[str, Any]:
    browser = Firefox(binary, profile)
    found: dict[str, Any] = {}
    try:
        browser.get(base + "/console/")
        found["live"] = browser.wait("return document.getElementById('live').textContent === 'live'")
        found["rows"] = browser.wait("return document.querySelectorAll('#session-list tbody tr').length")
        browser.js("document.getElementById('tab-discovery').click()")
        found["tools"] = browser.wait(
            "const names = [...document.querySelectorAll('#tool-list li')].map(li => li.dataset.name);"
            "return names.includes('self_audio_speaker_set_volume') && names"
        )
        browser.js(
            "document.querySelector('#tool-list li[data-name=\"self_audio_speaker_set_volume\"]').click();"
            "document.getElementById('load-into-executor').click()"
        )
        found["field"] = browser.wait(
            "const f = document.querySelector('#exec-form [data-arg=volume]');"
            "return f && [f.tagName, f.type, f.dataset.kind]"
        )
        browser.js(
            "const f = document.querySelector('#exec-form [data-arg=volume]'); f.value = '42';"
            "f.dispatchEvent(new Event('input')); document.getElementById('exec-run').click()"
        )
        found["outcome"] = browser.wait(
            "const o = document.getElementById('exec-outcome');"
            "return o && [o.dataset.status, document.getElementById('exec-output').textContent]"
        )
        browser.js(
            "document.getElementById('tab-parser').click();"
            "document.getElementById('parse-text').value = 'Hi.<function_calls><invoke name=\"get_time\">"
            "</invoke></function_calls>'; document.getElementById('parse-run').click()"
        )
        found["parsed"] = browser.wait(
            "const t = document.querySelector('.parsed-tool');"
            "return t && [t.textContent, document.getElementById('parse-speech').textContent]"
        )
    finally:
        browser.close()
    return found


async def test_console_in_firefox(live: Live, tmp_path: Path) -> None:
    binary = firefox_binary()
    if binary is None:
        pytest.skip("Debian package firefox-esr is not installed (optional: the Chromium test is the required one)")
    found = await asyncio.to_thread(_drive, binary, tmp_path / "profile", live.base)
    assert found["live"] and found["rows"] == 1
    assert {"self_audio_speaker_set_volume", "get_time"} <= set(found["tools"])
    assert found["field"] == ["INPUT", "number", "integer"]
    assert found["outcome"] == ["completed", "true"]
    assert live.device.status.volume == 42
    assert found["parsed"] == ["get_time", "Hi."]
