"""What a server process does and says as it starts: freeze the loaded heap, warn about a
risky config, and print the banner (the OTA URL for devices, the console, a smoke command).

Shared by the single-process server (vixio/app/server.py) and the supervisor of `vixio serve
--workers N` (vixio/serve/supervisor.py), which prints the banner once for all its workers.
"""

from __future__ import annotations

import gc
import socket
import sys
from pathlib import Path

from loguru import logger

from vixio.config.languages import language_pack
from vixio.config.models import VixioConfig
from vixio.config.needs import missing_keys

GC_GEN0_THRESHOLD = 10_000
"""Allocations between young collections (CPython's default 700 makes one per ~1 ms of load)."""


def freeze_startup_heap() -> None:
    """Move everything loaded so far (modules, models, library types: ~200,000 objects) out of
    the garbage collector's reach. A full collection walks every tracked object: ~160 ms with
    the voice stack loaded, during which no session on this loop runs (late downlink frames, a
    stalled turn). Objects made after this (sessions, turns) are still collected as usual."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def warn_about_open_tokens(config: VixioConfig) -> None:
    """With auth on but neither activation nor an allow-list, OTA gives a token to every caller."""
    xiaozhi = config.xiaozhi
    if xiaozhi.auth.enabled and not xiaozhi.activation.enabled and not xiaozhi.auth.allowed_devices:
        logger.warning(
            "auth.enabled is on, but with neither activation.enabled nor auth.allowed_devices any "
            "device that can reach the OTA port gets a token: auth then keeps out only clients "
            "that skip OTA (see docs/security.md)"
        )


def lan_addresses() -> list[str]:
    """This machine's non-loopback IPv4 addresses, the default route's first (sends nothing)."""
    found: list[str] = []
    for probe in ("10.255.255.255", "192.168.255.255", "172.31.255.255"):
        # Connecting a UDP socket only picks the source address the route would use.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            try:
                udp.connect((probe, 1))
                found.append(str(udp.getsockname()[0]))
            except OSError:
                continue
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
    except OSError:
        infos = []
    found += [str(info[4][0]) for info in infos]
    return [a for a in dict.fromkeys(found) if not a.startswith(("127.", "0."))]


def log_http_urls(host: str, port: int, config: VixioConfig | None = None) -> None:
    """The startup banner: the OTA URL for devices, the console's URL and a device smoke command in
    the config's language, then — last, once per server, where a person reads — a missing API key."""
    hosts = (lan_addresses() or ["127.0.0.1"]) if host in ("0.0.0.0", "::", "") else [host]
    urls = " or ".join(f"http://{address}:{port}/xiaozhi/ota/" for address in hosts)
    logger.info("OTA server on {}:{}. Put this OTA URL into your device: {}", host, port, urls)
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    logger.info("Operator console: http://{}:{}/console/", local, port)
    question = language_pack(config.language).smoke_question if config is not None else "what time is it"
    logger.info(
        'No device at hand? Try: {} device --ota http://{}:{}/xiaozhi/ota/ --text "{}"',
        vixio_command(),
        local,
        port,
        question,
    )
    for problem in missing_keys(config) if config is not None else ():
        logger.warning(problem)


def vixio_command() -> str:
    """How to run `vixio` from the current directory: e.g. `.venv/bin/vixio` (no activated venv needed)."""
    script = Path(sys.executable).parent / "vixio"
    if not script.exists():
        return "vixio"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def lan_address() -> str:
    """This machine's first LAN IPv4 address (or a placeholder saying none was found)."""
    addresses = lan_addresses()
    return addresses[0] if addresses else "<this-machine's-LAN-IP>"
