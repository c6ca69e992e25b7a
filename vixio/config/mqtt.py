"""Configuration of the MQTT + UDP transport (`mqtt:`): the channel that keeps an idle device
reachable, and the UDP port its audio uses (docs/mqtt.md).

`mqtt: {enabled: true}` is all a household sets: vixio then runs its own broker on `port` and
its UDP audio on `udp_port`, and OTA hands devices MQTT credentials. `broker_url` points at an
external broker instead (a mosquitto with vixio's plugin); vixio then connects to it as a client.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from vixio.core.settings import StrictModel

MIN_SECRET_CHARS = 16


class MqttConfig(StrictModel):
    """MQTT + UDP for Xiaozhi devices (firmware picks MQTT whenever OTA hands out an `mqtt` section)."""

    enabled: bool = False
    """Hand devices MQTT + UDP through OTA (with their WebSocket settings too, which they keep for later) and serve it."""
    host: str = "0.0.0.0"
    """Address the embedded broker and the UDP audio socket listen on."""
    port: int = Field(default=1883, ge=0, le=65535)
    """The embedded broker's TCP port (plain MQTT 3.1.1; 0 picks a free one, for tests). The firmware speaks TLS only on port 8883 (docs/mqtt.md, "TLS")."""
    udp_port: int = Field(default=8884, ge=0, le=65535)
    """The UDP port audio uses in both directions (0 picks a free one, for tests). With `broker_url` and `vixio serve --workers N`, worker k listens on `udp_port + k` (open all N on the firewall)."""
    public_host: str | None = None
    """The host name or address devices reach the broker and the UDP port at; null: the host the device reached OTA at."""
    public_port: int | None = Field(default=None, ge=1, le=65535)
    """The broker port handed to devices when it is not `port` (a TLS terminator on 8883 in front, a NAT)."""
    public_udp_port: int | None = Field(default=None, ge=1, le=65535)
    """The UDP port handed to devices when it is not `udp_port` (a NAT in front; worker k of an external broker's instance hands out `public_udp_port + k`)."""
    broker_url: str | None = None
    """An external broker instead of the embedded one: `mqtt://<user>:<password>@<host>:<port>`, a mosquitto running deploy/mosquitto/vixio_devices.c with the same user, password and `secret` (docs/mqtt.md, "An external broker"). vixio connects as that user from worker w0; `public_host` (or `public_endpoint`) must then say where devices reach the broker and vixio's UDP port. null: the embedded broker."""
    public_endpoint: str | None = None
    """`host:port` handed to devices as the broker when it is not `public_host` with `public_port` (an external broker on another machine)."""
    topic_prefix: str = "vixio"
    """First level of every device topic: `<prefix>/<device key>/up` (the device publishes) and `<prefix>/<device key>/down` (it is delivered)."""
    secret: str = ""
    """HMAC key of the per-device MQTT passwords OTA issues (the same on every instance and on the broker's auth hook). Empty: a random one kept in `<state dir>/mqtt_secret` (mode 0600), made at first start."""
    keepalive: int = Field(default=240, ge=30, le=3600)
    """Keep-alive seconds handed to devices (the firmware's default is 240); the broker drops a client silent for 1.5 times this."""
    max_connections: int = Field(default=10000, ge=1)
    """Device connections the embedded broker holds at once; more are refused (CONNACK 3, server unavailable)."""
    max_packet_bytes: int = Field(default=64 * 1024, ge=1024, le=1024 * 1024)
    """Largest MQTT packet a device may send (MCP replies are the largest, a few KB); a larger one closes its connection."""
    max_audio_bytes: int = Field(default=1500, ge=64, le=65000)
    """Largest Opus payload in one UDP packet (a 60 ms frame is well under 400 bytes); a larger packet is dropped and counted."""

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not value or any(c in value for c in "+#/\0") or len(value) > 64:
            raise ValueError(f"mqtt.topic_prefix is {value!r}: 1-64 characters, no '+', '#', '/'")
        return value

    @field_validator("broker_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("mqtt://"):
            raise ValueError(f"mqtt.broker_url must be mqtt://user:password@host:port, got {value.split('@')[-1]!r}")
        return value

    def device_endpoint(self, host: str, broker_port: int) -> str:
        """The `endpoint` OTA hands out, for a device that reached OTA at `host`."""
        if self.public_endpoint:
            return self.public_endpoint
        return f"{self.public_host or host}:{self.public_port or broker_port}"

    def broker_port(self) -> int:
        """The broker's port as configured (the URL's for an external broker)."""
        if self.broker_url:
            from urllib.parse import urlsplit

            return urlsplit(self.broker_url).port or 1883
        return self.port

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str) -> str:
        if value and len(value) < MIN_SECRET_CHARS:
            raise ValueError(
                f"mqtt.secret must be at least {MIN_SECRET_CHARS} characters (or empty for a generated one)"
            )
        return value
