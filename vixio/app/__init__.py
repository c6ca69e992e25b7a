"""The application layer: what one vixio process serves (the server wiring, startup, task results, vision, logging, switching a live session's profile)."""
