"""The camera tool's upload URL, `/mcp/vision/explain`, answered by a vision-language model.

Every device is told this URL in MCP `initialize` (`capabilities.vision`). When the model calls
the device's `self.camera.take_photo`, the firmware POSTs `multipart/form-data` here — a
`question` text part and a `file` part (`camera.jpg`) — with `Device-Id`, `Client-Id` and
`Authorization: Bearer <token>` headers, and hands the raw response body back to the model as
the tool result. vixio answers like the reference server: `{"success": true, "action":
"RESPONSE", "response": "<the model's description>"}`; errors are `{"success": false,
"message": ...}` with an HTTP status. Without `vision:` in the config the answer is 501.

The token is the one OTA issued for the device (the same check as the WebSocket handshake);
with auth off any caller is served. Uploads are bounded (`vision.max_image_bytes`, a question
of at most 2000 characters) and read in pieces, never whole before the size is known.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import os
import time
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError
from loguru import logger

from vixio.config.needs import missing_key
from vixio.config.vision import VisionConfig
from vixio.core.failure import describe_failure
from vixio.metrics import count_provider_error
from vixio.transports.xiaozhi.session.auth import AuthError, DeviceAuthenticator

MAX_QUESTION_CHARS = 2000
DEFAULT_QUESTION = "What is in this picture?"
_READ_CHUNK = 64 * 1024


class VisionError(Exception):
    """The vision model could not answer; the message is fit for the device (and the model)."""


class VisionModel:
    """One litellm vision model, shared by every session."""

    def __init__(self, config: VisionConfig) -> None:
        self.config = config
        self.missing_key = missing_key(config, "vision")
        """The API key that is not set ("vision.api_key is empty (OPENAI_API_KEY unset)"), or None."""
        self._litellm: Any = None

    @property
    def where(self) -> str:
        return self.config.api_base or self.config.model

    async def load(self) -> None:
        """Import litellm off the event loop (about 3 s), offline."""
        if self._litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            self._litellm = await asyncio.to_thread(importlib.import_module, "litellm")
            self._litellm.suppress_debug_info = True

    async def explain(self, image: bytes, question: str, *, mime: str = "image/jpeg") -> str:
        """The model's answer to `question` about `image`; raises VisionError."""
        await self.load()
        config = self.config
        data_url = f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"
        messages = [
            {"role": "system", "content": config.prompt},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": question},
                    {"type": "image_url", "image_url": {"url": data_url}},
                ],
            },
        ]
        try:
            response = await self._litellm.acompletion(
                model=config.model,
                messages=messages,
                api_base=config.api_base,
                api_key=config.api_key,
                timeout=config.timeout,
                max_tokens=config.max_tokens,
                num_retries=0,
            )
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            detail = str(exc).strip().split("\n")[0][:200]
            cause = describe_failure(
                self.config.api_base,
                exc=exc,
                status=status if isinstance(status, int) else None,
                detail=detail,
                missing_key=self.missing_key,
            )
            raise VisionError(f"the vision model at {self.where} failed: {cause}") from exc
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError) as exc:
            raise VisionError(f"the vision model at {self.where} sent no answer") from exc
        if not text.strip():
            raise VisionError(f"the vision model at {self.where} gave an empty answer")
        return text.strip()


class VisionRoute:
    """The aiohttp handler of `POST /mcp/vision/explain`."""

    def __init__(self, config: VisionConfig | None, authenticator: DeviceAuthenticator) -> None:
        self.config = config
        self.model = VisionModel(config) if config is not None else None
        self.authenticator = authenticator

    async def handle(self, request: web.Request) -> web.Response:
        device = request.headers.get("Device-Id", "") or "?"
        log = logger.bind(device=device, component="vision")
        if self.model is None or self.config is None:
            await _discard(request)
            return _fail(501, "This server cannot look at pictures: no vision model is configured.")
        if self.authenticator.enabled:
            try:
                self.authenticator.authenticate(request.headers, request.query)
            except AuthError as exc:
                await _discard(request)
                log.info("vision upload refused: {}", exc)
                return _fail(401, f"unauthorized: {exc.reason}")
        try:
            async with asyncio.timeout(UPLOAD_TIMEOUT):  # a slow upload must not hold the handler
                question, image, mime = await read_upload(request, self.config.max_image_bytes)
        except TimeoutError:
            log.info("vision upload refused: it did not arrive within {:g} s", UPLOAD_TIMEOUT)
            return _fail(408, f"the upload did not arrive within {UPLOAD_TIMEOUT:g} s")
        except web.HTTPException as exc:
            log.info("vision upload refused: {}", exc.text)
            return _fail(exc.status, exc.text or exc.reason)
        started = time.perf_counter()
        try:
            answer = await self.model.explain(image, question, mime=mime)
        except VisionError as exc:
            count_provider_error("vision", exc)
            log.warning("vision: {}", exc)
            return _fail(502, str(exc))
        log.info(
            "vision: {} bytes, {!r} -> {} chars in {:.0f} ms",
            len(image),
            question[:80],
            len(answer),
            (time.perf_counter() - started) * 1000,
        )
        return web.json_response({"success": True, "action": "RESPONSE", "response": answer})


async def read_upload(request: web.Request, max_image_bytes: int) -> tuple[str, bytes, str]:
    """(question, image bytes, image MIME type) from the firmware's multipart body; raises
    HTTPBadRequest (also for a malformed body) / HTTPRequestEntityTooLarge with a reason."""
    if not request.content_type.startswith("multipart/"):
        raise web.HTTPBadRequest(
            text=f"expected multipart/form-data with question and file, got {request.content_type}"
        )
    question, image, mime = "", b"", "image/jpeg"
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise web.HTTPBadRequest(text="nested multipart bodies are not accepted")
            if part.name == "question":
                raw = await _read_part(part, MAX_QUESTION_CHARS * 4, "the question")
                question = raw.decode("utf-8", errors="replace").strip()[:MAX_QUESTION_CHARS]
            elif part.name == "file":
                image = await _read_part(part, max_image_bytes, "the image")
                declared = part.headers.get("Content-Type", "")
                mime = declared if declared.startswith("image/") else "image/jpeg"
            else:
                await part.release()
    # aiohttp's multipart reader reports a malformed body (no boundary, a missing or wrong
    # boundary line, bad part headers) with these; all are the sender's fault.
    except (ValueError, AssertionError, HttpProcessingError) as exc:
        raise web.HTTPBadRequest(text=f"the upload is not valid multipart/form-data: {str(exc)[:200]}") from None
    if not image:
        raise web.HTTPBadRequest(text="no image: the form has no file part, or it is empty")
    return question or DEFAULT_QUESTION, image, mime


async def _read_part(part: BodyPartReader, limit: int, what: str) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk(_READ_CHUNK):
        data += chunk
        if len(data) > limit:
            raise web.HTTPRequestEntityTooLarge(
                max_size=limit, actual_size=len(data), text=f"{what} is larger than {limit} bytes"
            )
    return bytes(data)


_DISCARD_LIMIT = 16 * 1024 * 1024
UPLOAD_TIMEOUT = 30.0
"""Seconds the firmware has to send its whole photo upload."""


async def _discard(request: web.Request) -> None:
    """Drain (a bounded amount of) what the device sent, so a client that writes its whole body
    before reading reads our answer; past the limit the connection is closed after it."""
    drained = 0
    while drained <= _DISCARD_LIMIT and (chunk := await request.content.readany()):
        drained += len(chunk)


def _fail(status: int, message: str) -> web.Response:
    return web.json_response({"success": False, "message": message}, status=status)
