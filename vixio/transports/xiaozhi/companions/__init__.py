"""Companions (registerTools clients) paired with a device: who may pair, approvals kept, relays between workers, their tools."""
