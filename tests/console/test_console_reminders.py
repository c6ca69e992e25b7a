"""The console's reminders (vixio/console/reminders.py) on a real server in this process: list,
add, cancel, the per-device bound, bad bodies refused with what is expected, `/api/say` to a
device with no session queued, and the page's Reminders pane served."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from vixio.app.server import VixioServer
from vixio.config.models import VixioConfig

pytestmark = pytest.mark.integration

DEVICE = "aa:bb:cc:dd:ee:42"


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    server = VixioServer(
        VixioConfig.model_validate(
            {
                "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0}},
                "state": {"path": str(tmp_path / "state.db")},
                "reminders": {"max_per_device": 2},
            }
        )
    )
    await server.start()
    yield f"http://127.0.0.1:{server.ota.port}"
    await server.stop()


async def call(base: str, method: str, path: str, body: dict[str, Any] | None = None, status: int = 200) -> Any:
    async with aiohttp.ClientSession() as http, http.request(method, base + path, json=body) as response:
        assert response.status == status, await response.text()
        return await response.json()


async def test_reminders_listed_added_bounded_and_cancelled(base: str) -> None:
    assert await call(base, "GET", "/api/reminders") == {"reminders": []}
    first = await call(
        base, "POST", "/api/reminders/add", {"device_id": DEVICE.upper(), "text": "tea", "in_seconds": 3600}
    )
    assert (
        first["device_id"] == DEVICE and first["kind"] == "reminder" and first["when"].startswith(("today", "tomorrow"))
    )
    await call(
        base,
        "POST",
        "/api/reminders/add",
        {"device_id": DEVICE, "text": "stretch", "kind": "alarm", "repeat": "weekdays", "time_of_day": "06:30"},
    )
    full = await call(
        base, "POST", "/api/reminders/add", {"device_id": DEVICE, "text": "third", "in_seconds": 60}, status=409
    )
    assert "max_per_device" in full["error"]
    listed = await call(base, "GET", f"/api/reminders?device={DEVICE}")
    assert {(r["text"], r["repeat"]) for r in listed["reminders"]} == {("tea", ""), ("stretch", "weekdays")}
    assert [r["due"] for r in listed["reminders"]] == sorted(r["due"] for r in listed["reminders"])
    assert await call(base, "POST", "/api/reminders/cancel", {"device_id": DEVICE, "id": first["id"]}) == {
        "device_id": DEVICE,
        "id": first["id"],
        "cancelled": True,
    }
    await call(base, "POST", "/api/reminders/cancel", {"device_id": DEVICE, "id": first["id"]}, status=404)
    assert [r["text"] for r in (await call(base, "GET", "/api/reminders"))["reminders"]] == ["stretch"]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"text": "tea", "in_seconds": 60}, "device_id"),
        ({"device_id": DEVICE, "text": "tea"}, "exactly one of"),
        ({"device_id": DEVICE, "text": "tea", "in_seconds": True}, "string or a number"),
        ({"device_id": DEVICE, "text": ["tea"], "in_seconds": 60}, "must be strings"),
        ({"device_id": DEVICE, "text": "tea", "at": "yesterday"}, "ISO"),
    ],
)
async def test_bad_bodies_are_refused_naming_what_is_wrong(base: str, body: dict[str, Any], error: str) -> None:
    answer = await call(base, "POST", "/api/reminders/add", body, status=400)
    assert error in answer["error"]


async def test_say_to_a_device_without_a_session_is_queued_and_the_pane_is_served(base: str) -> None:
    queued = await call(base, "POST", "/api/say", {"device": DEVICE, "text": "dinner is ready"})
    assert queued["queued"] is True and queued["device_id"] == DEVICE
    refused = await call(base, "POST", "/api/say", {"text": "x"}, status=400)
    assert refused["error"] == "say needs a session (or a device)"
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/console/") as page:
            assert 'id="pane-reminders"' in await page.text()
        async with http.get(base + "/console/reminders.js") as script:
            assert script.status == 200 and "/api/reminders/cancel" in await script.text()
