"""Errors raised by the simulated Xiaozhi device.

Each message says what the server did (or failed to do) and what a real device would
do about it, so a failing test reads as a diagnosis.
"""

from __future__ import annotations


class DeviceError(RuntimeError):
    """The simulated device could not complete what was asked."""


class OtaError(DeviceError):
    """The OTA/activation endpoint answered in a way a real device cannot use."""


class HelloError(DeviceError):
    """The server hello was missing, late or unusable."""


class DeviceDisconnected(DeviceError):
    """The WebSocket closed while the device was waiting for, or sending, something."""
