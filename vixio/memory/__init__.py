"""What a device remembers between sessions: the conversation kept per device, its long-term summary, and forgetting."""
