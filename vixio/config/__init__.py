"""Configuration: pydantic models behind config.yaml, the loader and the reference generator."""

from vixio.config.loader import ConfigError, load_config, parse_config
from vixio.config.models import VixioConfig

__all__ = ["ConfigError", "VixioConfig", "load_config", "parse_config"]
