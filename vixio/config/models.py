"""The models behind config.yaml; docs/config.md is generated from them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vixio.config.tools import ToolsConfig
from vixio.config.vision import VisionConfig
from vixio.config.voice import AgentConfig, ASRConfig, SpeechConfig, TTSConfig, TurnConfig, VADConfig
from vixio.core.settings import StrictModel
from vixio.transports.xiaozhi.config import XiaozhiConfig

LogLevel = Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"]


class LogConfig(StrictModel):
    """Logging (loguru): one line per event, bound with session and device id."""

    level: LogLevel = "INFO"
    """Lowest level printed; `--log-level` on the command line wins over it."""
    tracebacks: bool = False
    """Print full tracebacks for logged exceptions; otherwise the exception type and message stay on the event's line."""


class PipelineConfig(StrictModel):
    """The per-session pipeline of stations."""

    queue_size: int = Field(default=32, ge=1, le=10_000)
    """Chunks each station may have queued before the one upstream waits (backpressure)."""


class VixioConfig(StrictModel):
    """Root of config.yaml."""

    log: LogConfig = Field(default_factory=LogConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    xiaozhi: XiaozhiConfig = Field(default_factory=XiaozhiConfig)
    vad: VADConfig = Field(default_factory=VADConfig)
    turn: TurnConfig = Field(default_factory=TurnConfig)
    asr: ASRConfig | None = None
    """Speech recognition; null leaves it out (typed text only)."""
    agent: AgentConfig | None = None
    """The assistant; null leaves it out (nothing answers)."""
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    """What the assistant may call, and how."""
    tts: TTSConfig | None = None
    """Speech synthesis; null leaves it out (subtitles only)."""
    speech: SpeechConfig = Field(default_factory=SpeechConfig)
    vision: VisionConfig | None = None
    """The model that answers the device's camera tool; null answers it with HTTP 501 (no vision)."""
