"""The field kinds of the convention: which handler owns each (filled by :mod:`amrckpt.container._handlers`).

zarr's codec registry is the model: the manifest's models name a kind, the
handler registered under that name owns everything about it on disk.  This
module imports nothing, so that the models can ask what a kind is without
importing the handlers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["of_mesh", "register", "registered"]

_HANDLERS: dict[str, Any] = {}


def register(cls: Any) -> Any:
    """Register an instance of handler class ``cls`` under its ``kind`` (replacing one registered before); return ``cls``."""
    _HANDLERS[cls.kind] = cls()
    return cls


def registered(kind: str) -> Any:
    """Return the handler registered for field kind ``kind`` (KeyError if none)."""
    return _HANDLERS[kind]


def of_mesh(kind: str) -> bool:
    """Tell whether fields of kind ``kind`` hold values per leaf of a mesh field (not a mesh itself, nor an unknown kind)."""
    h = _HANDLERS.get(kind)
    return bool(h is not None and h.per_leaf and not h.is_mesh)
