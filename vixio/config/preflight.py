"""Checks that catch, before any model loads, what would otherwise fail at run time.

`vixio config check` prints every problem; `vixio serve` refuses to start on the first ones,
in one line each naming the config key. Nothing here imports a provider or loads a model: extras
are looked up with `importlib.util.find_spec`, ports are bound and released at once.
"""

from __future__ import annotations

import errno
import importlib.util
import socket

from vixio.config.extras import PROVIDER_EXTRAS, install_hint
from vixio.config.memory import FLEET_SECRET_MISSING
from vixio.config.models import VixioConfig
from vixio.config.needs import profile_config, provider_needs
from vixio.config.pipeline import FasterWhisperASRConfig, LitellmAgentConfig
from vixio.config.voice_check import voice_problems


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def extra_problems(config: VixioConfig) -> list[str]:
    """Providers (and the transport) whose extra is not installed, with the command that installs it:
    one line per extra, naming the first config key that needs it."""
    problems: list[str] = []
    reported: set[str] = set()
    for key, provider, row in provider_needs(config):
        need = PROVIDER_EXTRAS[row]
        missing = [module for module in need.modules if _missing(module)]
        if not missing or need.extra in reported:
            continue
        reported.add(need.extra)
        what = {"xiaozhi": "xiaozhi: the transport", "state": f"state.backend {provider!r}"}.get(
            key, f"{key}.provider {provider!r}"
        )
        if need.extra:
            problems.append(
                f"{what} needs the '{need.extra}' extra, which is not installed ({', '.join(missing)} "
                f"missing): {install_hint(need.extra)}"
            )
        else:
            problems.append(f"{what} needs {', '.join(missing)}, a dependency of vixio itself: {install_hint('')}")
    return problems


def config_problems(config: VixioConfig) -> list[str]:
    """Valid YAML and types, but a combination that fails at run time; each profile's too
    (`profiles.NAME.` and the key), where it differs from the top-level config's."""
    problems = _combination_problems(config) + voice_problems(config)
    for name in config.profiles:
        profile = profile_config(config, name)
        problems += [
            f"profiles.{name}.{problem}"
            for problem in _combination_problems(profile) + voice_problems(profile)
            if problem not in problems
        ]
    return problems


def _combination_problems(config: VixioConfig) -> list[str]:
    problems: list[str] = []
    asr = config.asr
    if isinstance(asr, FasterWhisperASRConfig) and asr.model.endswith(".en") and asr.language not in (None, "en"):
        problems.append(
            f"asr.model {asr.model!r} is English-only but asr.language is {asr.language!r}: "
            "use a multilingual model (e.g. 'base') or language 'en'"
        )
    agent = config.agent
    if isinstance(agent, LitellmAgentConfig) and "/" not in agent.model:
        problems.append(
            f"agent.model {agent.model!r} has no provider prefix: litellm needs e.g. "
            f"'openai/{agent.model}' (an OpenAI-compatible server) or 'ollama/{agent.model}'"
        )
    if config.state.backend == "redis" and not config.state.fleet_secret:
        problems.append(FLEET_SECRET_MISSING)
    ws, http = config.xiaozhi, config.xiaozhi.http
    if ws.port and ws.port == http.port:
        problems.append(
            f"xiaozhi.port and xiaozhi.http.port are both {ws.port}: the WebSocket and HTTP servers need a port each"
        )
    return problems


def port_problems(config: VixioConfig) -> list[str]:
    """Ports another program already holds (bound and released at once)."""
    problems: list[str] = []
    for key, host, port in (
        ("xiaozhi.port", config.xiaozhi.host, config.xiaozhi.port),
        ("xiaozhi.http.port", config.xiaozhi.http.host, config.xiaozhi.http.port),
    ):
        if not port:
            continue
        why = _bind_error(host, port)
        if why:
            problems.append(f"{key} {port} {why}")
    return problems


def _bind_error(host: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's servers do
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "is already in use (another vixio, or another program?)"
            if exc.errno == errno.EACCES:
                return "needs privileges (ports below 1024): choose a port above 1024"
            return f"cannot be opened on {host!r}: {exc.strerror or exc}"
    return ""


def startup_problems(config: VixioConfig) -> list[str]:
    """Everything `vixio serve` checks before it loads a model."""
    return [*config_problems(config), *extra_problems(config), *port_problems(config)]
