"""What a device remembers between sessions: the conversation kept per device, its long-term summary, forgetting, and who is speaking (voiceprints: speakers.py, `vixio speakers`: speakers_cli.py)."""
