"""Every patch of a third-party library's private internals, one module per library.

Each module's `install()` replaces something the library does not offer a seam for, because
the library's own path costs measurable event-loop time (each module says how much, and what
upstream would need to change for the patch to go away). A patch installs only on the library
versions it was checked against (`CHECKED` in each module); on any other version it logs one
line and leaves the library as it is, and `tests/patches/` fails loudly when a checked version
changes the shape a patch relies on.

`VIXIO_NO_PATCHES=1` in the environment installs none of them (for debugging: is it the patch
or the library?). Worker processes inherit the environment, so one switch covers the whole
server. What that costs is measured by `bench/bench_patches.py` (docs/patches.md).

A few modules here also hold *reads* of private attributes vixio cannot run without (the
websockets server's protocol factory, aiohttp's server settings): those are not patches and the
switch does not remove them, but they live here so every reliance on a library's internals is
in one folder, each under a shape test.
"""

from __future__ import annotations

import importlib
import os
from importlib import metadata
from typing import Any

from loguru import logger

SWITCH = "VIXIO_NO_PATCHES"
_refused: set[str] = set()


def enabled() -> bool:
    """False when `VIXIO_NO_PATCHES` is set to anything but "", "0" or "false"."""
    return os.environ.get(SWITCH, "").strip().lower() in ("", "0", "false", "no")


def load(module: str) -> Any:
    """`importlib.import_module`, typed as what a patch treats it as: a namespace of private names."""
    return importlib.import_module(module)


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def allowed(distribution: str, checked: tuple[str, ...], what: str) -> bool:
    """Whether a patch of `distribution` may install: the switch is off and the installed version
    starts with one of `checked`. Otherwise one log line per distribution and reason, then False."""
    if not enabled():
        _note_once(SWITCH, f"{SWITCH} is set: no library is patched (vixio/patches/)")
        return False
    version = installed_version(distribution)
    if version is None:
        return False
    if not version.startswith(checked):
        _note_once(
            distribution,
            f"{distribution} {version} is not a version vixio's patch was checked against "
            f"({', '.join(v + '*' for v in checked)}): {what} left as the library does it",
        )
        return False
    return True


def _note_once(key: str, message: str) -> None:
    if key not in _refused:
        _refused.add(key)
        logger.info(message)
