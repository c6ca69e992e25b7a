"""The Xiaozhi wire, shared by every Xiaozhi transport: JSON message types and builders, binary frame versions, the Opus codec."""
