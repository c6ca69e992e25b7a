"""Profiles: per-device assistants (`profiles:` and `devices:` in config.yaml).

    profiles:
      kids:
        instructions: You talk with children aged 6 to 10. Keep it short and kind.
        voice: en-us+f3
        tools: {toggles: {"self.reboot": false}, require_confirmation: true}
      kitchen:
        language: zh
        model: openai/qwen-plus
    devices:
      "aa:bb:cc:dd:ee:01": kids
      "aa:bb:cc:dd:ee:*": kitchen

The top-level config is the default profile: a device no `devices:` entry names (and no
run-time assignment, vixio/profiles/) gets it, so a config without profiles works unchanged. A
profile names only what differs: its sections are merged key by key onto the top-level ones
(a section that names another `provider` replaces the top-level one), then validated as a whole
config, so every key is checked as it is at the top level.

After validation each profile holds what it changes explicitly, the texts its `language` brings
included (`materialize`): workers get the validated config as JSON, in which every key is set,
so a worker could not tell a language's built-in text from one written in the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field, ValidationError

from vixio.config.languages import Language
from vixio.core.settings import StrictModel

if TYPE_CHECKING:
    from vixio.config.models import VixioConfig

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _profile_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError("a profile name is letters, digits, '_', '.' and '-' (at most 64, no spaces)")
    return value


ProfileName = Annotated[str, AfterValidator(_profile_name)]
"""Letters, digits, `_`, `.`, `-`; at most 64 characters."""

DEFAULT_NAME = "default"
"""The top-level config as a profile (a name `devices:` and run-time assignments may use)."""
SECTIONS = ("agent", "asr", "tts", "tools", "memory", "speech")
"""Config sections a profile may override (key by key)."""
PROCESS_WIDE = {
    "tools": ("builtin", "local", "async_tools", "mcp_servers"),
    "memory": ("history_days",),
}
"""Keys of those sections that belong to the whole process: a profile toggles tools, it does not load them."""
PROVIDER_SECTIONS = ("agent", "asr", "tts")
"""Sections chosen by `provider` (null at the top level: left out)."""
SHORTCUTS = {"instructions": ("agent", "system_prompt"), "model": ("agent", "model"), "voice": ("tts", "voice")}


class ProfileConfig(StrictModel):
    """One assistant a device can have; every key is optional and only what it names differs from the top-level config."""

    description: str = ""
    """A line for the console and `vixio profile list`."""
    language: Language | None = None
    """What this assistant speaks and hears, as the top-level `language` (its built-in texts, voices and prompt unless this profile or the top-level config names them)."""
    greeting: str | None = None
    """Said after the wake word (`xiaozhi.greeting`)."""
    instructions: str | None = None
    """The persona: the model's instructions (`agent.system_prompt`)."""
    model: str | None = None
    """The agent's model (`agent.model`, a litellm model string)."""
    voice: str | None = None
    """The TTS voice (`tts.voice` of the top-level TTS provider, or of this profile's `tts`)."""
    agent: dict[str, Any] = Field(default_factory=dict)
    """Any `agent:` key (temperature, max_tokens, api_base, ...); with another `provider`, the whole section."""
    asr: dict[str, Any] = Field(default_factory=dict)
    """Any `asr:` key (e.g. a multilingual model for another language)."""
    tts: dict[str, Any] = Field(default_factory=dict)
    """Any `tts:` key (rate, pitch, ...); with another `provider` (e.g. edge), the whole section."""
    tools: dict[str, Any] = Field(default_factory=dict)
    """The tool policy (docs/tool-systems.md §5): enabled, default_enabled, toggles, require_confirmation, confirm_words, max_iterations, timeout, timeouts, parallel, default_sub_type, sub_types. Which tools exist (builtin, local, mcp_servers, async_tools) is the top-level config's."""
    memory: dict[str, Any] = Field(default_factory=dict)
    """Any `memory:` key but history_days (enabled, resume_minutes, max_turns, long_term, model, max_chars); applied from the device's next connection."""
    speech: dict[str, Any] = Field(default_factory=dict)
    """Any `speech:` key (apology, empty_reply, filler, ...)."""


ProfilesConfig = dict[ProfileName, ProfileConfig]
DevicesConfig = dict[str, str]
"""Device id (its lowercase MAC) or shell-style pattern (`aa:bb:cc:*`, `*` for every device) → profile name."""


class ProfileErrors(ValueError):
    """Profiles that do not validate; `errors` holds one line per problem, each naming its key."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def profile_for(devices: Mapping[str, str], device_id: str) -> str:
    """The profile `devices:` gives `device_id` ("" for the top-level config): its own entry, else
    the most specific matching pattern (the longest)."""
    device_id = device_id.lower()
    exact = devices.get(device_id)
    if exact is not None:
        return exact
    matches = [pattern for pattern in devices if _is_pattern(pattern) and fnmatchcase(device_id, pattern.lower())]
    return devices[max(matches, key=len)] if matches else ""


def _is_pattern(key: str) -> bool:
    return any(char in key for char in "*?[")


def profile_source(base: Mapping[str, Any], profile: ProfileConfig, errors: list[str], where: str) -> dict[str, Any]:
    """`base` (a config as data, without profiles) with `profile` merged onto it."""
    merged = {key: value for key, value in base.items() if key not in ("profiles", "devices")}
    sections: dict[str, dict[str, Any]] = {name: dict(getattr(profile, name)) for name in SECTIONS}
    for shortcut, (section, key) in SHORTCUTS.items():
        value = getattr(profile, shortcut)
        if value is None:
            continue
        if key in sections[section]:
            errors.append(f"{where}.{shortcut}: given twice (also as {section}.{key}); keep one")
        sections[section][key] = value
    if profile.language is not None:
        merged["language"] = profile.language
    if profile.greeting is not None:
        merged["xiaozhi"] = {**(merged.get("xiaozhi") or {}), "greeting": profile.greeting}
    for name, override in sections.items():
        if not override:
            continue
        for key in PROCESS_WIDE.get(name, ()):
            if key in override:
                hint = " (use tools.toggles to turn a tool off for this profile)" if name == "tools" else ""
                errors.append(f"{where}.{name}.{key}: belongs to the whole server, a profile cannot change it{hint}")
        current = merged.get(name)
        if current is None and name in PROVIDER_SECTIONS and "provider" not in override:
            errors.append(
                f"{where}.{name}: the top-level config has no {name} section to change; "
                f"give this profile's {name} a provider"
            )
            continue
        if not isinstance(current, Mapping) or (
            "provider" in override and override["provider"] != current.get("provider")
        ):
            merged[name] = dict(override)  # another provider: its own section
        else:
            merged[name] = deep_merge(current, override)
    return merged


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` onto `base`, mappings key by key, everything else replaced."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        merged[key] = (
            deep_merge(current, value) if isinstance(current, Mapping) and isinstance(value, Mapping) else value
        )
    return merged


def _diff(base: Any, effective: Any) -> Any:
    """What `effective` changes in `base` (mappings key by key); `_SAME` when nothing."""
    if isinstance(base, Mapping) and isinstance(effective, Mapping):
        changed = {key: d for key, value in effective.items() if (d := _diff(base.get(key, _SAME), value)) is not _SAME}
        return changed or _SAME
    return _SAME if base == effective else effective


_SAME = object()


def effective_config(
    config: VixioConfig, source: Mapping[str, Any], name: str, errors: list[str]
) -> VixioConfig | None:
    """Profile `name` of `config` as a whole config (None with its problems added to `errors`);
    `source` is the config as written (or as the supervisor sent it)."""
    from vixio.config.loader import describe_error
    from vixio.config.models import VixioConfig

    where = f"profiles.{name}"
    before = len(errors)
    data = profile_source(source, config.profiles[name], errors, where)
    if len(errors) > before:
        return None
    try:
        return VixioConfig.model_validate(data)
    except ValidationError as exc:
        errors.extend(
            f"{where}.{line}" if not line.startswith("<root>") else f"{where}: {line[8:]}"
            for line in (describe_error(error) for error in exc.errors())
        )
        return None


def materialize(config: VixioConfig, source: Mapping[str, Any]) -> None:
    """Check every profile and the `devices:` names; rewrite each profile as the explicit change it
    makes to the top-level config (see the module docstring). Raises ProfileErrors."""
    errors: list[str] = []
    if DEFAULT_NAME in config.profiles:
        errors.append(
            f"profiles.{DEFAULT_NAME}: the name is the top-level config's (the default profile); "
            "write those keys at the top level, or give this profile another name"
        )
    for pattern, name in config.devices.items():
        if name not in config.profiles and name != DEFAULT_NAME:
            known = ", ".join([DEFAULT_NAME, *config.profiles])
            errors.append(f"devices.{pattern}: no profile {name!r} (profiles: {known})")
    base = config.model_dump(mode="json", by_alias=True, exclude={"profiles", "devices"})
    for name, profile in config.profiles.items():
        if name == DEFAULT_NAME:
            continue
        effective = effective_config(config, source, name, errors)
        if effective is None:
            continue
        changes = _diff(base, effective.model_dump(mode="json", by_alias=True, exclude={"profiles", "devices"}))
        changes = {} if changes is _SAME else changes
        explicit: dict[str, Any] = {"description": profile.description}
        if "language" in changes:
            explicit["language"] = changes["language"]
        greeting = changes.get("xiaozhi", {}).get("greeting")
        if greeting is not None:
            explicit["greeting"] = greeting
        for section in SECTIONS:
            change = changes.get(section)
            if change is None:
                continue
            replaced = isinstance(base.get(section), Mapping) and isinstance(change, Mapping) and "provider" in change
            whole = base.get(section) is None or replaced
            explicit[section] = getattr(effective, section).model_dump(mode="json", by_alias=True) if whole else change
        config.profiles[name] = ProfileConfig.model_validate(explicit)
    if errors:
        raise ProfileErrors(errors)


def lower_device_keys(devices: Any) -> Any:
    """Device ids are lowercase MACs: `AA:BB:...` in the file means `aa:bb:...`."""
    if isinstance(devices, Mapping):
        return {str(key).strip().lower(): value for key, value in devices.items()}
    return devices
