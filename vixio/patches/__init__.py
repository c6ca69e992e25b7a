"""Every patch of a third-party library's private internals, one module per library, each gated on the versions checked."""
