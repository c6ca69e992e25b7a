"""The TTS station and its helper (which voice speaks while a TTS fails)."""
