"""Shared pydantic base for spec models: unknown fields are errors, models are immutable."""
from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base for every spec model: unknown fields rejected, instances frozen.

    Derived values may be cached with ``functools.cached_property``; ``model_copy`` drops those caches so
    that a copy with updated fields never carries values derived from the old ones.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        copy = super().model_copy(update=update, deep=deep)
        for name in dir(type(copy)):
            if isinstance(getattr(type(copy), name, None), cached_property):
                copy.__dict__.pop(name, None)
        return copy
