"""Transports: how devices reach vixio. Each depends on vixio.core only."""
