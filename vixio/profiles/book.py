"""Which profile a device gets: its run-time assignment (the store's), else `devices:`, else the
top-level config (`default`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from loguru import logger

from vixio.config.models import VixioConfig
from vixio.config.profiles import DEFAULT_NAME, ProfileErrors, effective_config, profile_for
from vixio.config.tools import ToolsConfig

DEFAULT = DEFAULT_NAME
"""The top-level config as a profile: `devices: {ID: default}` or `vixio profile assign ID default`."""

ProfileSource = Literal["assigned", "config", "default", "speaker"]


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """The profile a device has, and why."""

    name: str
    """A name under `profiles:`, or `default` (the top-level config)."""
    source: ProfileSource
    """assigned: at run time (console, `vixio profile assign`); config: `devices:`; default: neither names the device; speaker: the recognised voice's (`speakers.people`), for its turns."""

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.name, "profile_source": self.source}


class ProfileBook:
    """The config's profiles as whole configs, and the choice of one for a device."""

    def __init__(self, config: VixioConfig) -> None:
        self.config = config
        self._configs: dict[str, VixioConfig] = {DEFAULT: config}
        self._warned: set[str] = set()

    @property
    def names(self) -> list[str]:
        """`default` first, then the configured profiles in file order."""
        return [DEFAULT, *self.config.profiles]

    def known(self, name: str) -> bool:
        return name == DEFAULT or name in self.config.profiles

    def effective(self, name: str) -> VixioConfig:
        """Profile `name` as a whole config (made once); `default` is the config itself."""
        found = self._configs.get(name)
        if found is None:
            errors: list[str] = []
            source = self.config.model_dump(mode="json", by_alias=True, exclude={"profiles", "devices"})
            found = effective_config(self.config, source, name, errors)
            if found is None:  # the config was validated: only a profile changed since could fail
                raise ProfileErrors(errors)
            self._configs[name] = found
        return found

    def configured(self, device_id: str) -> ProfileChoice:
        """What `devices:` says, the run-time assignment aside."""
        name = profile_for(self.config.devices, device_id)
        return ProfileChoice(name or DEFAULT, "config" if name else "default")

    def choose(self, device_id: str, assigned: str | None) -> ProfileChoice:
        """The assignment when it names a profile of this config (else one WARNING), else `configured`."""
        if assigned is not None and self.known(assigned):
            return ProfileChoice(assigned, "assigned")
        if assigned is not None and assigned not in self._warned:
            self._warned.add(assigned)
            logger.bind(device=device_id).warning(
                "the profile {!r} assigned to this device is not in the config (profiles: {}); using {!r} until "
                "it is assigned again or cleared",
                assigned,
                ", ".join(self.names),
                self.configured(device_id).name,
            )
        return self.configured(device_id)

    def summary(self, name: str) -> dict[str, Any]:
        """What the console and `vixio profile list` show of a profile."""
        config = self.effective(name)
        agent, tts = config.agent, config.tts
        profile = self.config.profiles.get(name)
        return {
            "name": name,
            "description": profile.description if profile is not None else "the top-level config",
            "language": config.language,
            "model": getattr(agent, "model", None)
            or getattr(agent, "model_path", None)
            or getattr(agent, "provider", None),
            "voice": f"{tts.provider}:{getattr(tts, 'voice', None) or 'built-in'}" if tts is not None else None,
            "instructions": agent.system_prompt if agent is not None else None,
            "tools": tools_summary(config.tools),
            "memory": "on" if config.memory.enabled else "off",
            "devices": sorted(key for key, value in self.config.devices.items() if value == name),
        }


def tools_summary(tools: ToolsConfig) -> str:
    """Which tools a profile offers, in a few words: "on" said of a profile whose toggles let one
    tool through read as every tool."""
    if not tools.enabled:
        return "off"
    on = sorted(name for name, enabled in tools.toggles.items() if enabled)
    off = sorted(name for name, enabled in tools.toggles.items() if not enabled)
    if not tools.default_enabled:
        return f"only {', '.join(on)}" if on else "none"
    return f"all but {', '.join(off)}" if off else "on"
