"""The numbers of p4est's connectivities shared by the modules that build, read and write them. Not collective."""

from __future__ import annotations

__all__ = ["P4EST_ONDISK_FORMAT"]

P4EST_ONDISK_FORMAT = {2: 0x2000009, 3: 0x3000009}
"""``P4EST_ONDISK_FORMAT`` and ``P8EST_ONDISK_FORMAT`` of p4est 2.x: the first word of its connectivity and forest headers."""
_FACES = {2: 4, 3: 6}
_CHILDREN = {2: 4, 3: 8}
_EDGES = 12
