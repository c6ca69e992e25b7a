"""What one process counts: the series an operator alerts on, in this process's registry.

Names follow Prometheus' conventions (base units, `_total` on counters). Every label value is
from a fixed set, and every series exists from the start at 0, so `increase()` sees the first one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from vixio.core.failure import FAILURE_KINDS, failure_kind

ProviderKind = Literal["agent", "asr", "tts", "vision"]
PROVIDER_KINDS: tuple[ProviderKind, ...] = ("agent", "asr", "tts", "vision")
TurnOutcome = Literal["answered", "interrupted"]
StoreErrorKind = Literal["unavailable", "write"]

REGISTRY = CollectorRegistry(auto_describe=True)
"""This process's series (not prometheus_client's global registry: its process and platform
collectors would be summed across workers, which means nothing for most of them)."""

SESSIONS = Gauge("vixio_sessions", "Devices connected now (WebSocket sessions).", registry=REGISTRY)
SESSIONS_STARTED = Counter(
    "vixio_sessions_started", "WebSocket sessions started (a device's hello accepted).", registry=REGISTRY
)
TURNS = Counter(
    "vixio_turns",
    "Replies the server gave, by how they ended: played to the end (answered) or cut "
    "off (interrupted: barge-in, abort, the session closing).",
    ["outcome"],
    registry=REGISTRY,
)
TURN_LATENCY = Histogram(
    "vixio_turn_latency_seconds",
    "Spoken turns: from the end of the user's speech (the VAD's verdict) to the first audio frame of the reply "
    "sent to the device.",
    buckets=(0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0),
    registry=REGISTRY,
)
LATE_FRAMES = Counter(
    "vixio_late_frames",
    "Reply audio frames that were ready before the device had played everything sent before them but were "
    "sent after that (the device's buffer ran dry: the server could not keep up).",
    registry=REGISTRY,
)
VAD_QUIET_WINDOWS = Counter(
    "vixio_vad_quiet_windows",
    "Microphone windows (32 ms) left unscored by the VAD model: quieter than vad.quiet_below_dbfs while nobody spoke.",
    registry=REGISTRY,
)
INTERRUPTIONS = Counter(
    "vixio_interruptions",
    "Speech over a reply that paused it, by verdict: real (a barge-in: the reply was cancelled) or false (echo, "
    "a cough, a backchannel: the reply resumed).",
    ["verdict"],
    registry=REGISTRY,
)
ECHO_FRAMES = Counter(
    "vixio_echo_cancelled_frames",
    "Uplink frames that went through server-side echo cancellation (devices whose hello has features.aec, while "
    "a reply played).",
    registry=REGISTRY,
)
ECHO_ERLE = Histogram(
    "vixio_echo_erle_db",
    "Per session at its end, server-side echo cancellation's echo return loss enhancement (dB) over the frames "
    "it cancelled; the user's speech over the reply counts as residual, so a lower bound.",
    buckets=(0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0),
    registry=REGISTRY,
)
PROVIDER_ERRORS = Counter(
    "vixio_provider_errors",
    "Failed requests to a provider, by provider and kind of cause.",
    ["provider", "cause"],
    registry=REGISTRY,
)
STORE_ERRORS = Counter(
    "vixio_store_errors",
    "Failed state-store calls: the store could not be used (unavailable) or one write was lost (write).",
    ["kind"],
    registry=REGISTRY,
)

for _outcome in ("answered", "interrupted"):
    TURNS.labels(_outcome)
for _verdict in ("real", "false"):
    INTERRUPTIONS.labels(_verdict)
for _provider in PROVIDER_KINDS:
    for _cause in FAILURE_KINDS:
        PROVIDER_ERRORS.labels(_provider, _cause)
for _kind in ("unavailable", "write"):
    STORE_ERRORS.labels(_kind)


def reply_ended(marks: Mapping[str, float], outcome: TurnOutcome) -> None:
    """One reply ended; `marks` are its turn's latency marks (vixio.core.session_state.TurnMetrics)."""
    TURNS.labels(outcome).inc()
    spoken, first_frame = marks.get("speech_end"), marks.get("first_frame_sent")
    if spoken is not None and first_frame is not None and first_frame >= spoken:
        TURN_LATENCY.observe(first_frame - spoken)


def count_provider_error(provider: ProviderKind, exc: BaseException) -> None:
    """A request to the `provider` failed with `exc` (its cause kind: vixio/core/failure.py)."""
    PROVIDER_ERRORS.labels(provider, failure_kind(exc)).inc()


def count_store_error(kind: StoreErrorKind) -> None:
    STORE_ERRORS.labels(kind).inc()


MQTT_REFUSED = Counter(
    "vixio_mqtt_refused",
    "MQTT packets or connections the embedded broker refused, by reason "
    "(credentials, topic: a device publishing outside its own topic, malformed, busy, keepalive).",
    ["reason"],
    registry=REGISTRY,
)
MQTT_CLIENTS = Gauge(
    "vixio_mqtt_clients", "Devices connected to the embedded MQTT broker now (idle ones included).", registry=REGISTRY
)
UDP_DROPPED = Counter(
    "vixio_udp_audio_dropped",
    "UDP audio packets dropped, by reason (short, type, length: not "
    "the firmware's format; unknown: no such session; address: from another sender than the "
    "session's; replay: sequence not above the last, a replay or reordered packet).",
    ["reason"],
    registry=REGISTRY,
)
