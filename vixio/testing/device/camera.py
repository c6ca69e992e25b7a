"""The simulated device's camera: `self.camera.take_photo` as the firmware implements it.

The firmware's camera tool takes a picture and POSTs it, with the model's question, as
`multipart/form-data` (`question`, and `file` named `camera.jpg`) to the URL the server gave in
MCP `initialize` (`capabilities.vision.url`), with `Device-Id`, `Client-Id` and
`Authorization: Bearer <capabilities.vision.token>`. The tool's result is the raw HTTP body.

    camera = SimulatedCamera(jpeg_bytes)
    device = SimulatedDevice(ws_url=..., tools=[camera.tool])
    camera.attach(device)
"""

from __future__ import annotations

from typing import Any

import aiohttp

from vixio.testing.device import SimulatedDevice
from vixio.testing.device.tools import DeviceTool

TAKE_PHOTO = "self.camera.take_photo"


class SimulatedCamera:
    """A camera that "sees" fixed image bytes (any JPEG you pass)."""

    def __init__(self, image: bytes, *, timeout: float = 30.0) -> None:
        self.image = image
        self.timeout = timeout
        self.uploads: list[dict[str, Any]] = []
        """Each upload: url, question, status, body (for assertions)."""
        self._device: SimulatedDevice | None = None
        self.tool = DeviceTool(
            TAKE_PHOTO,
            "Take a photo with the camera and explain it. Use it when the user asks what you see. "
            "Args: `question`: what to find out about the photo.",
            {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
            self._take_photo,
        )

    def attach(self, device: SimulatedDevice) -> None:
        """The device whose identity and `capabilities.vision` the uploads use."""
        self._device = device

    async def _take_photo(self, arguments: dict[str, Any]) -> str:
        device = self._device
        if device is None:
            raise RuntimeError("camera not attached to a device")
        vision = device.mcp_stats.vision or {}
        url = str(vision.get("url") or "")
        if not url:
            raise RuntimeError("no vision URL from initialize")
        headers = {"Device-Id": device.device_id, "Client-Id": device.client_id}
        if vision.get("token"):
            headers["Authorization"] = f"Bearer {vision['token']}"
        form = aiohttp.FormData()
        form.add_field("question", str(arguments["question"]))
        form.add_field("file", self.image, filename="camera.jpg", content_type="image/jpeg")
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, data=form, headers=headers) as response,
        ):
            body = await response.text()
        self.uploads.append({"url": url, "question": arguments["question"], "status": response.status, "body": body})
        return body  # the firmware hands the raw response body to the model
