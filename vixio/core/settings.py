"""Base for every configuration model in vixio."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Forbids unknown keys (a typo is an error with its path, never silently ignored) and takes
    each field's description from the docstring under it, so docs/config.md is generated."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)
