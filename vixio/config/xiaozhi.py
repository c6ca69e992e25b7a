"""Configuration of the Xiaozhi transport: WebSocket server, OTA/HTTP side, auth, activation, device MCP.

Every model forbids unknown keys so a typo in config.yaml is reported with its path
instead of being silently ignored.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from vixio.core.json_limits import DEFAULT_MAX_DEPTH
from vixio.core.settings import StrictModel as _Strict
from vixio.core.tools.limits import ToolLimitsConfig

MIN_ADMIN_TOKEN_CHARS = 16
"""Shortest operator token: it is the whole of an operator's identity, and guessing is throttled,
not impossible."""
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""Largest `max_message_bytes` allowed: each connection may hold one message this size in memory."""
MAKE_A_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(24))"'


class AuthConfig(_Strict):
    """Bearer tokens for the WebSocket handshake, issued by OTA (off by default)."""

    enabled: bool = False
    """Verify `Authorization: Bearer <token>` at the handshake; refuse with HTTP 401 otherwise."""
    secret: str = ""
    """HMAC-SHA256 key for tokens; required when `enabled`. Use `${VIXIO_AUTH_SECRET}`."""
    token_ttl: int = Field(default=30 * 24 * 3600, gt=0)
    """Seconds a token stays valid after it was issued."""
    allowed_devices: list[str] = Field(default_factory=list)
    """Device ids (lowercase MAC) that connect without a token."""

    @model_validator(mode="after")
    def _secret_when_enabled(self) -> AuthConfig:
        if self.enabled and not self.secret:
            raise ValueError("auth.enabled is true but auth.secret is empty; set a secret (e.g. ${VIXIO_AUTH_SECRET})")
        return self


class ActivationConfig(_Strict):
    """Optional binding step: the device shows a 6-digit code that an operator confirms, or proves
    with its eFuse key that it is one of the owner's (`device_keys`)."""

    enabled: bool = False
    """Send an `activation` object in the OTA reply until the device's code is confirmed."""
    message: str = "Activation code: {code}"
    """Text the device shows and speaks; `{code}` is replaced by the 6-digit code. Unset: the top-level `language`'s."""
    state_file: str = ".vixio/activations.json"
    """The JSON file in which vixio before the state store kept confirmed devices: imported into the store (`state.path`) at startup and renamed `<file>.imported`. Confirmed devices now live in the store."""
    device_keys: dict[str, str] = Field(default_factory=dict, repr=False)
    """Activation v2: serial number -> the HMAC key burnt into that device's eFuse key block KEY0 (64 hex digits). A device whose `/activate` poll carries an HMAC of the challenge this server gave it that verifies with its serial number's key is confirmed without an operator. Keys are never logged; keep them out of config.yaml with `${VAR}` or `device_keys_file`. Checked at startup (an error names the serial number, never the key)."""
    device_keys_file: str | None = None
    """A file of device keys, read at startup in addition to `device_keys`: one `<serial number> <64 hex digits>` a line, `#` comments."""
    new_codes_per_minute: int = Field(default=30, ge=0)
    """New activation codes one client address (IPv6: one /64) may create a minute; OTA answers the rest HTTP 429, so a flood of invented device ids cannot crowd out a device waiting with its code. 0: no per-address limit (behind a reverse proxy every client has the proxy's address, so this limits all new devices together; limit clients at the proxy)."""


class PairingConfig(_Strict):
    """Who may pair a registerTools companion with a device (docs/security.md, "Who may pair a companion")."""

    trust_mac: bool = False
    """Pair any client with the device its `mac_addr` names, as the registerTools design does (docs/tool-systems.md §3) (no token, no approval); logged as a WARNING at startup. Off: a companion presents the device's own token (auth on) or waits for an operator's approval."""
    state_file: str = ".vixio/pairings.json"
    """The JSON file in which vixio before the state store kept operator-approved companions: imported into the store (`state.path`) at startup and renamed `<file>.imported`. `vixio serve` keeps approvals in the store."""


class HttpConfig(_Strict):
    """The HTTP side: OTA, activation, health."""

    host: str = "0.0.0.0"
    """Address the HTTP server listens on; 0.0.0.0 means every interface."""
    port: int = Field(default=8003, ge=0, le=65535)
    """0 picks a free port (useful in tests)."""
    timezone_offset: int | None = None
    """Minutes east of UTC sent as `server_time.timezone_offset`; null uses the server's local zone."""
    admin_token: str = ""
    """Operator token for operator routes (metrics details, activation confirm, the console): sent as `Authorization: Bearer <token>`; at least 16 characters (make one with `python -c "import secrets; print(secrets.token_urlsafe(24))"`). Empty: those routes answer only callers on this machine. Use `${VIXIO_ADMIN_TOKEN}`."""
    keepalive_timeout: float = Field(default=15.0, gt=0)
    """Seconds a connection may sit without a complete request (idle keep-alive, or headers arriving too slowly) before it is closed."""
    body_timeout: float = Field(default=10.0, gt=0)
    """Seconds a request body may take to arrive; then the request gets HTTP 408."""
    max_connections: int = Field(default=256, ge=1)
    """Open HTTP connections at once; further ones get HTTP 503 on accept and are closed (keep it below the process's open-file limit)."""
    max_connections_per_address: int = Field(default=64, ge=0)
    """Open HTTP connections at once from one client address (IPv6: one /64); further ones from it get HTTP 503 on accept, so one client cannot hold the port that devices need for OTA and activation. 0: no per-address share (behind a reverse proxy every connection comes from the proxy's address; limit clients there)."""

    @field_validator("admin_token")
    @classmethod
    def _token_long_enough(cls, value: str) -> str:
        if value and len(value) < MIN_ADMIN_TOKEN_CHARS:
            raise ValueError(
                f"xiaozhi.http.admin_token is {len(value)} characters; an operator token needs at least "
                f"{MIN_ADMIN_TOKEN_CHARS} (make one with {MAKE_A_TOKEN}), or leave it empty to let "
                "only callers on this machine use operator routes"
            )
        return value


class McpConfig(_Strict):
    """The device's own tools, reached over MCP inside the WebSocket session."""

    tool_call_timeout: float = Field(default=30.0, gt=0)
    """Seconds a device tool has to answer; then the call fails (the model is told) and the device gets `notifications/cancelled`."""
    list_timeout: float = Field(default=10.0, gt=0)
    """Seconds the device has to answer `initialize` and each `tools/list` page; without an answer the session runs without device tools."""
    vision_url: str | None = None
    """Camera upload URL sent in `initialize` (`capabilities.vision.url`); null means http://<host the device dialled>:<http.port>/mcp/vision/explain, or the `public_url` origin when that is set."""
    limits: ToolLimitsConfig = Field(default_factory=ToolLimitsConfig)


class XiaozhiConfig(_Strict):
    """The Xiaozhi WebSocket transport."""

    host: str = "0.0.0.0"
    """Address the WebSocket server listens on; 0.0.0.0 means every interface."""
    port: int = Field(default=8000, ge=0, le=65535)
    """WebSocket port; 0 picks a free port (useful in tests)."""
    path: str = "/xiaozhi/v1/"
    """Path put into the URL that OTA hands out; any path is accepted on connect."""
    public_url: str | None = None
    """WebSocket URL that OTA gives devices (e.g. wss://voice.example.com/xiaozhi/v1/); null means ws://<LAN IP>:<port><path>."""
    hello_timeout: float = Field(default=10.0, gt=0)
    """Seconds a new connection has to send its hello before it is closed."""
    idle_timeout: float = Field(default=120.0, ge=0)
    """Seconds without user speech after which the session is closed; 0 disables."""
    idle_goodbye: str | None = None
    """Spoken before an idle close when set (needs a TTS in the pipeline); in config.yaml `true` speaks the top-level `language`'s built-in goodbye."""
    wake_words: list[str] = Field(
        default_factory=lambda: ["你好小智", "你好小志", "小爱同学", "hi esp", "hey jarvis", "alexa"]
    )
    """`listen detect` texts treated as a wake word (greeting) rather than a typed utterance; matched case-insensitively."""
    greeting: str = "Hi, how can I help?"
    """What the assistant says after a wake word; empty to stay silent. Unset: the top-level `language`'s greeting."""
    prebuffer_frames: int = Field(default=5, ge=1, le=30)
    """Downlink frames sent ahead of real time (then frames go out four at a time, so at times three
    more); the device drops packets past 40 queued."""
    server_aec: bool = True
    """Cancel the reply's echo in the microphone of devices whose hello has `features.aec` (firmware built with CONFIG_USE_SERVER_AEC, protocol v2) before the VAD hears it: WebRTC AEC3 on a worker thread, aligned by the v2 timestamps (docs/barge-in.md). Needs vixio[aec]; without it such devices are served uncancelled, with a warning. false: never."""
    server_aec_double_talk: bool = False
    """With `server_aec`: a per-band double-talk detector after AEC3 passes a user it hears over the reply through a gentler suppressor, where AEC3's own dims them below the VAD. Measured at 200 replies and 200 questions (docs/barge-in.md): missed interruptions 11 % -> 4 %, but replies paused by their own echo 8 % -> 13 % (cancelled by it 3.5 % -> 4 %), ERLE 1.6 dB lower, +0.25 ms of CPU per frame and 10 ms of delay. true for boards whose users are not heard over the reply."""
    max_message_bytes: int = Field(default=256 * 1024, ge=1024)
    """Larger WebSocket messages close the connection with code 1009 (protects the server); at most 16 MiB (16777216), since every connection may hold one such message in memory."""
    max_json_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=8, le=512)
    """Text frames nested deeper close the connection with code 1008 (a device's deepest message nests about 8)."""
    max_connections: int = Field(default=1000, ge=1)
    """Open WebSocket connections at once; further handshakes get HTTP 503 (keep it below the process's open-file limit)."""
    audio_burst_seconds: float = Field(default=5.0, ge=0.5, le=60.0)
    """Seconds of microphone audio a device may send ahead of real time (a Wi-Fi stall's backlog; the firmware queues at most ~2.4 s). Audio beyond it is dropped with a warning, so a client flooding audio costs no more VAD work than one that talks."""
    opus_complexity: int = Field(default=1, ge=0, le=10)
    """libopus encoder complexity of the audio sent to devices (0-10): CPU against quality. 1 costs ~70 µs a 60 ms 24 kHz frame (2-core VM), 3 ~80, 5 ~118, 0 ~53, 10 (libopus' own default) ~630 µs. On Piper speech, the decoded audio's log-spectral distance from the original is 7.37 dB at 1-3, 7.30 at 5, 6.95 at 10 and 9.10 at 0: 0 is audibly duller, 1-5 alike (measured again with another alignment: 9.14 at 1, 9.12 at 3, 9.05 at 5, 11.31 at 0)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Names of this server (besides its own addresses, localhost, the machine's host name and the hosts of `public_url` and `mcp.vision_url`): a request whose `Host` header names one has it put into the WebSocket and vision URLs handed to devices (any other Host is ignored there), and only such requests reach operator routes (the console, `/api/`, `/metrics`, activation confirm; others get HTTP 403)."""
    http: HttpConfig = Field(default_factory=HttpConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    activation: ActivationConfig = Field(default_factory=ActivationConfig)
    pairing: PairingConfig = Field(default_factory=PairingConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)

    @field_validator("max_message_bytes")
    @classmethod
    def _message_size_bounded(cls, value: int) -> int:
        if value > MAX_MESSAGE_BYTES:
            raise ValueError(
                f"xiaozhi.max_message_bytes is {value}; at most {MAX_MESSAGE_BYTES} (16 MiB): every "
                "connection may hold one message this large in memory, and a device's largest message "
                "(a tools/list page) is a few KiB"
            )
        return value

    @field_validator("path")
    @classmethod
    def _path_is_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must start with '/', got {value!r}")
        return value
