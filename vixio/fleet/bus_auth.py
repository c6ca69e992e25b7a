"""The fleet bus's signatures: only a holder of `state.fleet_secret` can make an instance act.

Anyone who can PUBLISH on the fleet's Redis could otherwise send a worker a console call (say
something to a device, set its volume, close its session). Every message on the bus is sealed:

    v1.<HMAC-SHA256 hex>.{"to": "vixio:bus:b/w0", "ts": 1764380000.25, "mid": "<96 random bits>", ...}

The HMAC covers the whole JSON text, which names the channel it is for (`to`), when it was sent
(`ts`, unix seconds) and a random message id (`mid`). A receiver drops, with one log line per
kind (then a count at most once a minute):

- a message without the `v1.` seal (unsigned), or whose HMAC is wrong (forged, or another
  fleet's secret);
- one addressed to another channel (captured on one worker's channel, published on another's);
- one sent more than `WINDOW` seconds ago or ahead (replayed later; the instances' clocks must
  agree within that, as NTP keeps them);
- one whose id it has already accepted (replayed within the window): ids are remembered until
  their message leaves the window.

Verification is the HMAC first: an unsigned or forged message costs one HMAC and is never parsed
or remembered, so only the fleet's own traffic fills the memory of ids (bounded by `MAX_REMEMBERED`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from loguru import logger

from vixio.core.log_throttle import LogThrottle

log = logger.bind(component="vixio.bus")

SEAL = "v1."
"""The start of every sealed message (the version of this format)."""
WINDOW = 30.0
"""Seconds a message stays acceptable after (and before, for clock skew) its timestamp."""
MAX_REMEMBERED = 100_000
"""Message ids remembered at most; beyond it (a fleet sending over 1,600 calls a second to one
worker) messages are refused until older ids leave the window."""
REASONS = {
    "oversized": "too large for a bus message",
    "unsigned": "not signed (no v1. seal)",
    "forged": "signed with another secret (forged, or an instance whose state.fleet_secret differs)",
    "misaddressed": "addressed to another channel (replayed from it)",
    "stale": f"timestamped more than {WINDOW:g} s away (replayed later, or the hosts' clocks disagree)",
    "replayed": "already received (replayed)",
    "flooded": f"one of over {MAX_REMEMBERED} calls in {WINDOW:g} s",
    "malformed": "signed but not a bus message",
}
"""Why a message is dropped, as the log line says it."""


class Refused(Exception):
    """A message that is dropped; `reason` is a key of `REASONS`."""

    def __init__(self, reason: str) -> None:
        super().__init__(REASONS[reason])
        self.reason = reason


class BusSigner:
    """Seals this process's messages and opens the ones it receives (see the module docstring)."""

    def __init__(
        self, secret: str, *, also_accepted: Sequence[str] = (), channel: str, clock: Callable[[], float] = time.time
    ) -> None:
        if not secret:
            raise ValueError("the fleet bus needs state.fleet_secret")
        self._key = secret.encode()
        self._keys = [self._key, *(extra.encode() for extra in also_accepted if extra)]
        self.channel = channel
        """This process's channel: the only `to` it accepts."""
        self._clock = clock
        self._seen: dict[str, float] = {}
        """Accepted message ids -> when they leave the window."""
        self._expiries: deque[tuple[float, str]] = deque()
        self._throttles: dict[str, LogThrottle] = {}
        self.refused: dict[str, int] = {}
        """Messages dropped so far, by reason."""

    def seal(self, to: str, message: dict[str, Any]) -> str:
        """`message` (a call or an answer) for the channel `to`, signed."""
        body = json.dumps(
            {"to": to, "ts": self._clock(), "mid": secrets.token_hex(12), **message}, separators=(",", ":"), default=str
        )
        return f"{SEAL}{_mac(self._key, body.encode())}.{body}"

    def open(self, data: bytes | str) -> dict[str, Any]:
        """The message in `data`; `Refused` if it is not a genuine, fresh one for this channel."""
        raw = data if isinstance(data, bytes) else data.encode()
        if not raw.startswith(SEAL.encode()) or raw[len(SEAL) + 64 : len(SEAL) + 65] != b".":
            raise Refused("unsigned")
        mac, body = raw[len(SEAL) : len(SEAL) + 64], raw[len(SEAL) + 65 :]
        if not any(hmac.compare_digest(mac, _mac(key, body).encode()) for key in self._keys):
            raise Refused("forged")
        try:
            message = json.loads(body)
            to, sent, mid = message["to"], float(message["ts"]), message["mid"]
        except (ValueError, KeyError, TypeError):
            raise Refused("malformed") from None
        if not isinstance(message, dict) or to != self.channel:
            raise Refused("misaddressed")
        now = self._clock()
        if not abs(now - sent) <= WINDOW:  # also refuses NaN
            raise Refused("stale")
        self._forget_expired(now)
        if not isinstance(mid, str) or mid in self._seen:
            raise Refused("replayed")
        if len(self._seen) >= MAX_REMEMBERED:
            raise Refused("flooded")
        expires = max(now, sent) + WINDOW
        self._seen[mid] = expires
        self._expiries.append((expires, mid))
        return message

    def dropped(self, refusal: Refused, size: int) -> None:
        """Count a dropped message; one log line per reason, then a count at most once a minute."""
        self.refused[refusal.reason] = self.refused.get(refusal.reason, 0) + 1
        throttle = self._throttles.setdefault(refusal.reason, LogThrottle(first=1, every=60.0))
        count = throttle.hit()
        if count is None:
            return
        again = f" ({count} more since the last line)" if count else ""
        log.warning(
            "fleet bus: dropped a message of {} bytes on {}: {}{}; only instances with this fleet's "
            "state.fleet_secret may send calls",
            size,
            self.channel,
            refusal,
            again,
        )

    def _forget_expired(self, now: float) -> None:
        # Expiries are appended in about the order they fall due (senders' clocks differ by a
        # little): an id pruned late is only remembered a little longer.
        while self._expiries and self._expiries[0][0] < now:
            _, mid = self._expiries.popleft()
            if self._seen.get(mid, now) < now:
                del self._seen[mid]


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()
