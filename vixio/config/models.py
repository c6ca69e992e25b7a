"""The models behind config.yaml; docs/config.md is generated from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ModelWrapValidatorHandler, field_validator, model_validator

from vixio.config.languages import Language, apply_language, language_pack
from vixio.config.memory import MemoryConfig, StateConfig
from vixio.config.mqtt import MqttConfig
from vixio.config.pipeline import AgentConfig, ASRConfig, SpeechConfig, TTSConfig, TurnConfig, VADConfig
from vixio.config.profiles import DevicesConfig, ProfilesConfig, lower_device_keys, materialize
from vixio.config.reminders import RemindersConfig
from vixio.config.speakers import SpeakersConfig
from vixio.config.tools import ToolsConfig
from vixio.config.vision import VisionConfig
from vixio.config.xiaozhi import XiaozhiConfig
from vixio.core.settings import StrictModel

LogLevel = Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"]


class LogConfig(StrictModel):
    """Logging (loguru): one line per event, bound with session and device id."""

    level: LogLevel = "INFO"
    """Lowest level printed (any case); `--log-level` on the command line wins over it."""
    tracebacks: bool = False
    """Print full tracebacks for logged exceptions; otherwise the exception type and message stay on the event's line."""

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class ServerConfig(StrictModel):
    """The server processes (see docs/deploy.md, "Using all cores")."""

    workers: int | None = Field(default=None, ge=1, le=256)
    """Worker processes sharing the WebSocket port, each with its own models; null means one per CPU core; 1 runs everything in one process. `vixio serve --workers N` wins over it."""
    shutdown_timeout: float = Field(default=10.0, gt=0)
    """Seconds workers get to close their sessions on shutdown before they are killed."""
    drain_timeout: float = Field(default=15.0, ge=0)
    """On SIGTERM (`docker stop`, Kubernetes), seconds the replies being made or spoken get to finish before the sessions close: the HTTP port closes first (health checks fail) and no new device is taken meanwhile. Ctrl-C (SIGINT) does not wait; 0 never waits."""
    instance: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    """This server's name in a fleet (several instances on one Redis): its sessions are listed as "<instance>/w0" in the live-session directory and the console. null: the host name with `state.backend: redis` (a pod's name on Kubernetes), nothing on one machine."""
    directory_ttl: float = Field(default=30.0, ge=1, le=3600)
    """Seconds the live-session directory keeps a process's sessions after its last heartbeat (sent every third of this): how long a killed instance's devices stay listed."""


class PipelineConfig(StrictModel):
    """The per-session pipeline of stations."""

    queue_size: int = Field(default=32, ge=1, le=10_000)
    """Chunks each station may have queued before the one upstream waits (backpressure)."""
    prewarm: bool = True
    """When a device connects and when its user starts speaking, open a connection to each cloud API (an `openai` ASR or TTS, an `openai/...` agent model) that had no request in the last 4 s, with one HEAD request, so the turn does not wait for DNS, TCP and TLS (2-4 round trips per API, on the way to the first answer). false: connect when a turn needs it."""


class VixioConfig(StrictModel):
    """Root of config.yaml."""

    language: Language = "en"
    """What the assistant speaks and hears: sets Whisper's language and model, the default voices, the greeting, every spoken `speech.*` text, the idle goodbye, the confirmation words and the default system prompt (vixio/config/languages.py). Keys set in the file win."""
    log: LogConfig = Field(default_factory=LogConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    xiaozhi: XiaozhiConfig = Field(default_factory=XiaozhiConfig)
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    """MQTT + UDP for Xiaozhi devices: keeps idle devices reachable (docs/mqtt.md); off unless `enabled`."""
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
    state: StateConfig = Field(default_factory=StateConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    reminders: RemindersConfig = Field(default_factory=RemindersConfig)
    speakers: SpeakersConfig = Field(default_factory=SpeakersConfig)
    """Who is speaking: voiceprints per device, per-person profiles and memory (docs/speakers.md)."""
    profiles: ProfilesConfig = Field(default_factory=dict)
    """Per-device assistants by name: each names only what differs from this top-level config, which is the default profile (see docs/config.md, "Profiles")."""
    devices: DevicesConfig = Field(default_factory=dict)
    """Which profile a device gets: its id (lowercase MAC) or a shell-style pattern (`aa:bb:cc:*`; the longest matching pattern wins) → a profile name. Devices named nowhere get the top-level config; an assignment made at run time (console, `vixio profile assign`) wins until cleared."""

    @field_validator("devices", mode="before")
    @classmethod
    def _lowercase_ids(cls, value: Any) -> Any:
        return lower_device_keys(value)

    @model_validator(mode="before")
    @classmethod
    def _builtin_idle_goodbye(cls, data: Any) -> Any:
        """`xiaozhi.idle_goodbye: true` is the language's goodbye, `false` none."""
        xiaozhi = data.get("xiaozhi") if isinstance(data, dict) else None
        if isinstance(xiaozhi, dict) and isinstance(xiaozhi.get("idle_goodbye"), bool):
            language = data.get("language", "en")
            goodbye = language_pack(language).idle_goodbye if language in ("en", "zh") else None
            data = {**data, "xiaozhi": {**xiaozhi, "idle_goodbye": goodbye if xiaozhi["idle_goodbye"] else None}}
        return data

    @model_validator(mode="after")
    def _apply_language(self) -> VixioConfig:
        return apply_language(self)

    @model_validator(mode="wrap")
    @classmethod
    def _materialize_profiles(cls, data: Any, handler: ModelWrapValidatorHandler[VixioConfig]) -> VixioConfig:
        """Each profile validated as a whole config and kept as the explicit change it makes (vixio/config/profiles.py).
        Defined last: the other validators (the language's texts) have run inside `handler`."""
        config = handler(data)
        if isinstance(data, dict) and (config.profiles or config.devices):
            materialize(config, data)
        return config
