"""`vision:` — the model that answers the device's camera tool (`/mcp/vision/explain`)."""

from __future__ import annotations

from pydantic import Field

from vixio.core.settings import StrictModel


class VisionConfig(StrictModel):
    """A vision-language model for the camera tool: any litellm vision model, or an OpenAI-compatible endpoint."""

    model: str = Field(min_length=1)
    """A litellm model string, e.g. openai/gpt-4o-mini, gemini/gemini-2.0-flash, ollama/llava, or openai/<name> with `api_base`."""
    api_base: str | None = None
    """Base URL of an OpenAI-compatible server (vLLM, LM Studio, Qwen-VL behind one)."""
    api_key: str | None = None
    """Use ${...}; null lets litellm read the provider's usual environment variable."""
    prompt: str = (
        "You are the eyes of a voice assistant. Answer the user's question about the photo in two or "
        "three short spoken sentences; if there is no question, describe what matters in the picture."
    )
    """System prompt for every picture."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds the model may take; the firmware's tool call itself times out after 30 s."""
    max_tokens: int | None = Field(default=300, ge=1)
    """Longest answer; null leaves it to the model."""
    max_image_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """Largest upload accepted (a device JPEG is usually under 200 KB); larger ones get HTTP 413."""
