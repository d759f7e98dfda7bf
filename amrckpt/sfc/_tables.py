"""The tables of the sfc package: p4est's connectivity numbers, the mesh record, a connectivity's arrays.

Not collective.  Shared by the modules that use them, and kept apart so that the modules that build, read, write and
check forests and connectivities import these and never each other back.
"""

from __future__ import annotations

import abc
from typing import Any, TypeVar

import numpy as np

__all__ = ["P4EST_ONDISK_FORMAT", "ConnectivityTables", "mesh_record_dtype"]

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


class ConnectivityTables(abc.ABC):
    """A connectivity's arrays and counts: what the builders, the geometry and p4est's byte format use of it.

    The base of :class:`~amrckpt.sfc.Connectivity` (see its attributes),
    which implements :meth:`map_points` and :meth:`check`; the modules it
    is built from take this type, never the class, so that they never
    import it back.  Not collective.
    """

    __slots__ = ()

    dim: int
    vertices: np.ndarray
    tree_to_vertex: np.ndarray | None
    tree_to_tree: np.ndarray
    tree_to_face: np.ndarray
    tree_to_edge: np.ndarray | None
    ett_offset: np.ndarray
    edge_to_tree: np.ndarray
    edge_to_edge: np.ndarray
    tree_to_corner: np.ndarray | None
    ctt_offset: np.ndarray
    corner_to_tree: np.ndarray
    corner_to_corner: np.ndarray
    tree_to_attr: np.ndarray | None

    @property
    def num_trees(self) -> int:
        """The number of trees (p4est ``num_trees``)."""
        return int(self.tree_to_tree.shape[0])

    @property
    def num_vertices(self) -> int:
        """The number of vertices (p4est ``num_vertices``)."""
        return int(self.vertices.shape[0])

    @property
    def num_edges(self) -> int:
        """The number of edges shared beyond face neighbours (p8est ``num_edges``; 0 in 2D)."""
        return int(self.ett_offset.shape[0]) - 1

    @property
    def num_corners(self) -> int:
        """The number of corners shared beyond face and edge neighbours (p4est ``num_corners``)."""
        return int(self.ctt_offset.shape[0]) - 1

    @property
    def tree_attr_bytes(self) -> int:
        """Bytes of attribute per tree (p4est ``tree_attr_bytes``; 0 without)."""
        return 0 if self.tree_to_attr is None else int(self.tree_to_attr.shape[1])

    @abc.abstractmethod
    def map_points(self, tree: Any, ref: Any) -> np.ndarray:
        """:meth:`Connectivity.map_points`."""

    @abc.abstractmethod
    def check(self) -> None:
        """:meth:`Connectivity.check`."""


ConnT = TypeVar("ConnT", bound=ConnectivityTables)
"""A connectivity class's instances (built by the class the caller passes)."""
