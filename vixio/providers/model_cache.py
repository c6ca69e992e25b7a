"""Where vixio keeps model files it derives from installed packages (never downloaded ones).

`$VIXIO_CACHE_DIR`, else `$XDG_CACHE_HOME/vixio`, else `~/.cache/vixio`. Everything in it is
rebuilt from the packages when missing, and written with atomic renames, so a crash or a
concurrent worker never leaves a half-written model behind.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Directory for derived models: `$VIXIO_CACHE_DIR`, `$XDG_CACHE_HOME/vixio` or `~/.cache/vixio`."""
    if configured := os.environ.get("VIXIO_CACHE_DIR"):
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "vixio"
