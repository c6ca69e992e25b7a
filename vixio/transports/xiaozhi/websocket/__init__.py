"""The WebSocket transport: the server, per-session socket I/O, the websockets library's log and its batched reads and writes."""
