"""The HTTP port: OTA, activation (codes and v2 proofs), operator access, which host names are ours, connection limits."""
