"""The tables of the sfc package: p4est's connectivity numbers and the mesh record, shared by the modules that use them.

Not collective.  Kept apart so that the modules that build, read, write and
check forests and connectivities import these and never each other back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["P4EST_ONDISK_FORMAT", "mesh_record_dtype"]

P4EST_ONDISK_FORMAT = {2: 0x2000009, 3: 0x3000009}
"""``P4EST_ONDISK_FORMAT`` and ``P8EST_ONDISK_FORMAT`` of p4est 2.x: the first word of its connectivity and forest headers."""
_FACES = {2: 4, 3: 6}
_CHILDREN = {2: 4, 3: 8}
_EDGES = 12

#: Leaves per chunk of the checks and the packing: 32K leaves' arrays stay in a core's L2 cache between
#: the passes over them (measured fastest, also on the strided views of records, by ~30% over 256K).
_CHECK_CHUNK = 1 << 15


def mesh_record_dtype(dim: int) -> np.dtype[Any]:
    """Return the packed record of one leaf in a mesh section: tree, x, y[, z] (``<i4``), level (``i1``).

    13 bytes in 2D, 17 in 3D, no padding; coordinates are p4est's integer
    quadrant coordinates in units of ``2**-maxlevel`` of a tree.
    """
    names = [*["tree", "x", "y", "z"][: dim + 1], "level"]
    return np.dtype({"names": names, "formats": ["<i4"] * (dim + 1) + ["i1"]})
