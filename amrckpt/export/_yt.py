"""A checkpoint as a yt dataset (placeholder, filled below)."""

from __future__ import annotations

from typing import Any

__all__ = ["to_yt"]


def to_yt(path: Any, **kwargs: Any) -> Any:
    """Return a checkpoint as a yt dataset."""
    raise NotImplementedError
