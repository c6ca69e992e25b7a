"""The console's speakers API on a real server and store: enrol from µ-law uploads (an owner's
small ONNX encoder made here), list, delete; bad uploads are refused with a reason."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("soxr")

from vixio.app.server import VixioServer  # noqa: E402
from vixio.config.models import VixioConfig  # noqa: E402
from vixio.console import Console  # noqa: E402
from vixio.console.speakers import mulaw_to_float  # noqa: E402
from vixio.providers.speaker import encoder as enc  # noqa: E402

from ..providers.speaker.test_encoder_small_model import small_state  # noqa: E402

pytestmark = pytest.mark.integration

TOKEN = "speakers-test-token-0123456789"
DEVICE = "aa:bb:cc:dd:ee:ff"


def mulaw(samples: np.ndarray) -> bytes:
    """G.711 µ-law, as the page encodes it (speakers.js)."""
    s = np.clip(np.round(samples * 32768), -32635, 32635).astype(np.int32)
    sign = np.where(s < 0, 0x80, 0)
    s = np.abs(s) + 0x84
    exponent = np.floor(np.log2(s)).astype(np.int32) - 7
    mantissa = (s >> (exponent + 3)) & 0x0F
    return (~(sign | (exponent << 4) | mantissa) & 0xFF).astype(np.uint8).tobytes()


def call(server: VixioServer, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.ota.port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_mulaw_decodes_what_the_page_encodes() -> None:
    samples = np.sin(np.arange(1600) * 0.01).astype(np.float32) * 0.5
    back = mulaw_to_float(mulaw(samples))
    assert np.max(np.abs(back - samples)) < 0.02  # 8-bit companding: within 2 % of full scale


async def test_enrol_list_and_delete_through_the_console(tmp_path: Path) -> None:
    import asyncio

    model = tmp_path / "owner.onnx"
    model.write_bytes(enc._graph(small_state()))
    config = VixioConfig.model_validate(
        {
            "xiaozhi": {"host": "127.0.0.1", "port": 0, "http": {"host": "127.0.0.1", "port": 0, "admin_token": TOKEN}},
            "state": {"path": str(tmp_path / "state.db")},
            "speakers": {"enabled": True, "model": str(model), "people": {"alice": {"profile": "kids"}}},
            "profiles": {"kids": {"tts": {"provider": "espeak"}}},
        }
    )
    server = VixioServer(config)
    Console(server)
    await server.start()
    try:
        voice = np.random.default_rng(2).normal(0, 0.1, 3 * 16000).astype(np.float32)
        upload = base64.b64encode(mulaw(voice)).decode()
        path = f"/api/devices/{DEVICE}/speakers"
        status, done = await asyncio.to_thread(call, server, path + "/enrol", {"person": "Alice", "mulaw": upload})
        assert (status, done) == (200, {"person": "Alice", "samples": 1})
        status, done = await asyncio.to_thread(call, server, path + "/enrol", {"person": "alice", "mulaw": upload})
        assert done == {"person": "Alice", "samples": 2}
        status, listed = await asyncio.to_thread(call, server, "/api/speakers")
        assert [(s["device_id"], s["person"], s["samples"], s["profile"]) for s in listed["speakers"]] == [
            (DEVICE, "Alice", 2, "kids")
        ]
        short = base64.b64encode(mulaw(voice[:8000])).decode()
        status, refused = await asyncio.to_thread(call, server, path + "/enrol", {"person": "Bob", "mulaw": short})
        assert status == 400 and "0.5 s" in refused["error"]
        status, refused = await asyncio.to_thread(call, server, path + "/enrol", {"person": "", "mulaw": upload})
        assert status == 400 and "person" in refused["error"]
        status, _ = await asyncio.to_thread(call, server, path + "/delete", {"person": "Alice"})
        assert status == 200
        status, _ = await asyncio.to_thread(call, server, path + "/delete", {"person": "Alice"})
        assert status == 404
        assert await server.store.voiceprints(DEVICE) == []
    finally:
        await server.stop()
