"""The agent station and its helpers (a preemptive turn's held reply, the time limits of a streamed reply)."""
