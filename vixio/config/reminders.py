"""Configuration of reminders, alarms and timers, and of `notify` (docs/reminders.md)."""

from __future__ import annotations

from pydantic import Field

from vixio.core.settings import StrictModel


class NotifyConfig(StrictModel):
    """How an idle device that can be reached (firmware 2.5 `notify`, over MQTT) is sent a reminder: an Ogg/Opus file it fetches."""

    ttl_seconds: float = Field(default=300.0, gt=0, le=86400)
    """Seconds a rendered file stays at its URL; then the URL answers 404."""
    max_clips: int = Field(default=200, ge=1, le=100_000)
    """Files kept at once over the whole store; past this the oldest go."""
    max_seconds: float = Field(default=30.0, gt=0, le=300)
    """Longest audio rendered for one notify; a longer text is cut at a sentence."""
    url_base: str | None = None
    """Origin devices fetch the file from (e.g. http://192.168.1.10:8003); null: the origin of `xiaozhi.public_url`, else http://<this machine's LAN address>:<xiaozhi.http.port>."""


class RemindersConfig(StrictModel):
    """Reminders, alarms and timers (the `reminders` built-in tools), operator messages (`vixio say`), and how they reach a device."""

    max_per_device: int = Field(default=20, ge=1, le=500)
    """Reminders a device may have at once; one more is refused (the model says so)."""
    max_text_chars: int = Field(default=200, ge=10, le=2000)
    """Longest reminder text."""
    horizon_days: float = Field(default=366.0, gt=0, le=3660)
    """How far ahead a reminder may be set."""
    check_seconds: float = Field(default=30.0, ge=1, le=3600)
    """Longest sleep of each process's scheduler: a reminder another process added without waking it (another instance, or the store edited directly) fires at most this late."""
    keep_missed: int = Field(default=16, ge=1, le=500)
    """Fired reminders kept per device while it is away (told at its next session); past this the oldest go."""
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
