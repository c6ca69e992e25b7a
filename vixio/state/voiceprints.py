"""Voiceprints in the state store: who may be recognised by voice on each device.

A voiceprint is biometric data (docs/privacy.md): it is kept per device and per person, read
only by the sessions of that device, listed and deleted one by one (console, `vixio speakers`),
and erased with the device's record (`Store.forget_device`). What is kept is the averaged
speaker embedding (256 float32: 1 KB a person), never the audio it was made from.

`VoiceprintStore` is the part of the `Store` interface each backend implements
(vixio/state/sqlite_voiceprints.py, vixio/state/redis_voiceprints.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

MAX_PEOPLE = 16
"""Voiceprints a device may hold: a household, not a crowd (each costs a comparison a turn)."""
MAX_NAME_CHARS = 40


@dataclass(frozen=True, slots=True)
class Voiceprint:
    """One person's enrolled voice on one device."""

    device_id: str
    person: str
    """The name the person gave ("Alice"); the memory owner key of their turns."""
    vector: bytes
    """The unit embedding as little-endian float32."""
    samples: int
    """Utterances averaged into it (a later enrolment adds to them)."""
    at: float
    """Unix time of the last update."""

    def array(self) -> np.ndarray:
        return np.frombuffer(self.vector, dtype="<f4")


def clean_name(name: str) -> str:
    """The person's name as stored: printable, single-spaced, at most MAX_NAME_CHARS (ValueError if empty)."""
    cleaned = " ".join("".join(ch for ch in name if ch.isprintable()).split())[:MAX_NAME_CHARS]
    if not cleaned:
        raise ValueError("a voiceprint needs a person's name")
    return cleaned


class VoiceprintStore(ABC):
    """The voiceprint methods of `Store`."""

    @abstractmethod
    async def put_voiceprint(self, device_id: str, person: str, vector: bytes, samples: int) -> None:
        """Keep `person`'s voiceprint on `device_id`, replacing theirs."""

    @abstractmethod
    async def voiceprints(self, device_id: str | None = None) -> list[Voiceprint]:
        """The voiceprints of one device, or of all, by device then person."""

    @abstractmethod
    async def delete_voiceprint(self, device_id: str, person: str) -> bool:
        """Delete one person's voiceprint; False if there was none."""

    @abstractmethod
    async def clear_voiceprints(self, device_id: str) -> int:
        """Delete every voiceprint of `device_id`; how many there were."""
