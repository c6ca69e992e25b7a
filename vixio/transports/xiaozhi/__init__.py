"""The Xiaozhi ESP32 transport: WebSocket protocol, Opus codec, OTA, auth, device tools."""
