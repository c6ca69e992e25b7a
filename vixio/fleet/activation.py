"""Activation codes confirmed on any instance of a fleet.

A device's pending code lives in the supervisor of the instance that answered its OTA request
(vixio/transports/xiaozhi/http/activation.py). An operator may confirm it on any instance (the load
balancer picks one): a code this instance did not give out is asked of every other instance's
supervisor over the fleet's bus, and the one that gave it out admits the device in the shared
store, where every instance's next OTA answer finds it.

    supervisor "b/supervisor"                                    supervisor "a/supervisor"
    confirm("123456"): not here ─ POST /internal/activation ─►  confirm(code, ask_elsewhere=False)
                                 ◄─ 200 {"result": device id} ─  admitted (404: not this one's)

An activation v2 proof (a challenge signed with the device's eFuse key) that names a challenge
this instance did not issue is asked of the others the same way ("prove"): the one that issued it
checks it, admits the device and uses the challenge up, or says why not (403 with the reason).
"""

from __future__ import annotations

import asyncio
from typing import Any

from vixio.fleet.bus import RedisBus
from vixio.fleet.peers import PeerReply, instance_of
from vixio.state.store import StoreWriteError
from vixio.transports.xiaozhi.http.activation import ActivationRegistry
from vixio.transports.xiaozhi.http.activation_proof import ActivationRefused, DeviceProof

PATH = "/internal/activation"
SUPERVISOR = "supervisor"
"""A supervisor's name on the bus: "<instance>/supervisor"."""


class FleetActivation:
    """Confirms codes across instances: asks the other supervisors, and answers them."""

    def __init__(self, registry: ActivationRegistry, bus: RedisBus, instance: str, timeout: float = 5.0) -> None:
        self.registry = registry
        self.bus = bus
        self.instance = instance
        self.timeout = timeout
        registry.elsewhere = self.elsewhere
        registry.prove_elsewhere = self.prove_elsewhere

    async def supervisors(self) -> list[str]:
        """The other instances' supervisors: those subscribed to the bus now (a supervisor is
        there from the moment it starts, before its workers have joined the members) and those
        of every instance with a live worker (when Redis cannot list the subscriptions)."""
        subscribed = await self.bus.subscribed("/" + SUPERVISOR)
        instances = {instance_of(holder) for holder in await self.bus.refresh_members()}
        instances |= {instance_of(name) for name in subscribed or []}
        return sorted(f"{instance}/{SUPERVISOR}" for instance in instances - {self.instance})

    async def elsewhere(self, code: str) -> str | None:
        """The device another instance gave `code` to, now admitted; None when none did."""
        body = {"call": "confirm", "args": {"code": code}}
        replies = await asyncio.gather(
            *(
                self.bus.request(name, "POST", PATH, json=body, timeout=self.timeout)
                for name in await self.supervisors()
            )
        )
        for reply in replies:
            if reply.ok and isinstance(reply.body, dict) and reply.body.get("result"):
                return str(reply.body["result"])
        if any(reply.status == 503 for reply in replies):
            raise StoreWriteError("another instance could not store the confirmation")
        return None

    async def prove_elsewhere(self, device_id: str, proof: DeviceProof) -> None:
        """Have the instance that issued `proof.challenge` check it; raises ActivationRefused with
        its reason, or "not issued" when no instance issued it."""
        body = {
            "call": "prove",
            "args": {
                "device_id": device_id,
                "serial_number": proof.serial_number,
                "challenge": proof.challenge,
                "hmac": proof.hmac,
            },
        }
        replies = await asyncio.gather(
            *(
                self.bus.request(name, "POST", PATH, json=body, timeout=self.timeout)
                for name in await self.supervisors()
            )
        )
        for reply in replies:
            if reply.ok:
                return
        for reply in replies:
            if reply.status == 503:
                raise StoreWriteError("another instance could not store the activation")
            if reply.status == 403 and isinstance(reply.body, dict):
                raise ActivationRefused(
                    str(reply.body.get("kind", "bad_hmac")),  # type: ignore[arg-type]
                    str(reply.body.get("error", "refused"))[:300],
                )
        raise ActivationRefused(
            "not_issued",
            "this challenge was not issued to this device (or has expired); "
            "the device gets a new one when it asks OTA again",
        )

    async def _serve_prove(self, args: Any) -> PeerReply:
        name = self.bus.name
        try:
            proof = DeviceProof.parse(args)
            if proof is None:
                raise ActivationRefused("malformed", "no proof", 400)
            await self.registry.prove(str(args["device_id"])[:128], proof, ask_elsewhere=False)
        except (KeyError, TypeError) as exc:
            return PeerReply(name, 400, {"error": f"bad call: {exc}"})
        except ActivationRefused as exc:
            status = 404 if exc.kind == "not_issued" else exc.status
            return PeerReply(name, status, {"error": exc.message, "kind": exc.kind})
        except StoreWriteError as exc:
            return PeerReply(name, 503, {"error": str(exc)})
        return PeerReply(name, 200, {"result": "activated"})

    async def serve(self, method: str, path: str, body: Any) -> PeerReply:
        """A call from another instance's supervisor (the bus's `serve`)."""
        name = self.bus.name
        try:
            if method == "POST" and path == PATH and body["call"] == "prove" and isinstance(body["args"], dict):
                return await self._serve_prove(body["args"])
            if method != "POST" or path != PATH or body["call"] != "confirm":
                return PeerReply(name, 404, {"error": f"no route {method} {path} here"})
            code = str(body["args"]["code"])[:16]
        except (KeyError, TypeError) as exc:
            return PeerReply(name, 400, {"error": f"bad call: {exc}"})
        try:
            device_id = await self.registry.confirm(code, ask_elsewhere=False)
        except StoreWriteError as exc:
            return PeerReply(name, 503, {"error": str(exc)})
        if device_id is None:
            return PeerReply(name, 404, {"error": "no device here shows that code"})
        return PeerReply(name, 200, {"result": device_id})
