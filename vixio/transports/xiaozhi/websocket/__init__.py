"""The WebSocket transport: the server, per-session socket I/O and the websockets library's log (its per-frame fast paths are vixio/patches/websockets.py)."""
