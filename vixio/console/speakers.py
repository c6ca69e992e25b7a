"""The console's speakers section (Memory pane): each device's voiceprints, listed, deleted, enrolled.

    GET  /api/speakers[?device=aa:bb:...]           voiceprints (device, person, samples, at) and settings
    POST /api/devices/{device}/speakers/delete      {"person": "Alice"}
    POST /api/devices/{device}/speakers/enrol       {"person": "Alice", "mulaw": BASE64}: one recording added

An upload is one recording of 16 kHz mono G.711 µ-law (8 bits a sample): the console's HTTP port
takes bodies of at most 64 KiB (what a device sends is small), which holds about 3 s of it; the
page cuts a longer file into such pieces and sends each, and each adds to the person's voiceprint
(vixio/memory/speakers.py averages them). µ-law keeps about 38 dB of signal to noise, enough for
the encoder. No audio is kept: only the averaged embedding (docs/privacy.md). Operators only.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

import numpy as np
from aiohttp import web

from vixio.config.speakers import SpeakersConfig
from vixio.console.backend import ConsoleError
from vixio.console.replies import checked_device_id, json_body, json_reply
from vixio.state.store import Store, StoreError
from vixio.state.voiceprints import MAX_NAME_CHARS

MAX_UPLOAD_SECONDS = 3.5
MIN_UPLOAD_SECONDS = 1.0


def mulaw_to_float(data: bytes) -> np.ndarray:
    """G.711 µ-law bytes as float32 samples in [-1, 1]."""
    code = ~np.frombuffer(data, dtype=np.uint8)
    sign, exponent, mantissa = code & 0x80, (code >> 4) & 0x07, code & 0x0F
    magnitude = (((mantissa.astype(np.int32) << 3) + 0x84) << exponent) - 0x84
    return (np.where(sign != 0, -magnitude, magnitude) / 32768.0).astype(np.float32)


class SpeakersApi:
    """Routes over the state store's voiceprints."""

    def __init__(self, store: Store, config: SpeakersConfig) -> None:
        self.store = store
        self.config = config
        self._enrolling = asyncio.Lock()  # one embedding at a time: the console must not take the cores

    def register(self, add_route: Any, protect: Any) -> None:
        for method, path, handler in (
            ("GET", "/api/speakers", self._list),
            ("POST", "/api/devices/{device_id}/speakers/delete", self._delete),
            ("POST", "/api/devices/{device_id}/speakers/enrol", self._enrol),
        ):
            add_route(method, path, protect(handler))

    async def _list(self, request: web.Request) -> web.Response:
        device = request.query.get("device")
        device_id = checked_device_id(device, "device") if device else None
        prints = await _read(self.store.voiceprints(device_id))
        return json_reply(
            {
                "speakers": [
                    {
                        "device_id": p.device_id,
                        "person": p.person,
                        "samples": p.samples,
                        "at": p.at,
                        "profile": self.config.profile_of(p.person),
                    }
                    for p in prints
                ],
                "enabled": self.config.enabled,
                "threshold": self.config.threshold,
            }
        )

    async def _delete(self, request: web.Request) -> web.Response:
        device_id = checked_device_id(request.match_info["device_id"], "the device id in the path")
        person = _person(await json_body(request, '{"person": "Alice"}'))
        deleted = await _read(self.store.delete_voiceprint(device_id, person))
        if not deleted:
            raise ConsoleError(f"{device_id} has no voiceprint named {person!r}", 404)
        return json_reply({"deleted": person})

    async def _enrol(self, request: web.Request) -> web.Response:
        from vixio.memory.speakers import SpeakerBook, embed_recordings

        device_id = checked_device_id(request.match_info["device_id"], "the device id in the path")
        body = await json_body(request, '{"person": "Alice", "mulaw": "<base64 16 kHz mono µ-law>"}')
        person = _person(body)
        try:
            audio = base64.b64decode(str(body.get("mulaw", "")), validate=True)
        except (binascii.Error, ValueError):
            raise ConsoleError("mulaw must be base64 (16 kHz mono G.711 µ-law)") from None
        seconds = len(audio) / 16000
        if not MIN_UPLOAD_SECONDS <= seconds <= MAX_UPLOAD_SECONDS:
            raise ConsoleError(
                f"a recording of {seconds:.1f} s: send {MIN_UPLOAD_SECONDS:g} to {MAX_UPLOAD_SECONDS:g} s a request"
            )
        async with self._enrolling:
            try:
                (vector,) = await asyncio.to_thread(
                    embed_recordings, self.config.model, [(mulaw_to_float(audio), 16000)]
                )
            except (OSError, ImportError) as exc:  # the model is not installed or its file is missing
                raise ConsoleError(f"speakers.model {self.config.model!r} cannot be used: {exc}", 503) from None
        try:
            stored = await SpeakerBook(self.store, device_id).enrol(person, [vector])
        except ValueError as exc:
            raise ConsoleError(str(exc)) from None
        except StoreError as exc:
            raise ConsoleError(str(exc), 503) from None
        return json_reply({"person": stored.person, "samples": stored.samples})


def _person(body: dict[str, Any]) -> str:
    from vixio.state.voiceprints import clean_name

    try:
        return clean_name(str(body.get("person", "")))
    except ValueError:
        raise ConsoleError(f"person: a name of 1 to {MAX_NAME_CHARS} characters") from None


async def _read(call: Any) -> Any:
    try:
        return await call
    except StoreError as exc:
        raise ConsoleError(str(exc), 503) from None
