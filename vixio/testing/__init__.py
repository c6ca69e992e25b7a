"""Test doubles and harnesses for vixio: a simulated Xiaozhi device and friends.

Nothing is imported eagerly, so `vixio.testing.device.cli` (wired into the `vixio` CLI)
loads without the `xiaozhi` extra; `from vixio.testing import SimulatedDevice` still works.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DeviceTool", "SimulatedDevice"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vixio.testing import device

        return getattr(device, name)
    raise AttributeError(f"module 'vixio.testing' has no attribute {name!r}")
