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
    """A connectivity's arrays and what the builders, the geometry and p4est's byte format use of it.

    The base of :class:`~amrckpt.sfc.Connectivity`, which implements the
    rest (see its attributes); the modules it is built from take this
    type, never the class, so that they never import it back.
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
    @abc.abstractmethod
    def num_trees(self) -> int:
        """:attr:`Connectivity.num_trees`."""

    @property
    @abc.abstractmethod
    def num_vertices(self) -> int:
        """:attr:`Connectivity.num_vertices`."""

    @property
    @abc.abstractmethod
    def num_edges(self) -> int:
        """:attr:`Connectivity.num_edges`."""

    @property
    @abc.abstractmethod
    def num_corners(self) -> int:
        """:attr:`Connectivity.num_corners`."""

    @property
    @abc.abstractmethod
    def tree_attr_bytes(self) -> int:
        """:attr:`Connectivity.tree_attr_bytes`."""

    @abc.abstractmethod
    def map_points(self, tree: Any, ref: Any) -> np.ndarray:
        """:meth:`Connectivity.map_points`."""

    @abc.abstractmethod
    def check(self) -> None:
        """:meth:`Connectivity.check`."""


ConnT = TypeVar("ConnT", bound=ConnectivityTables)
"""A connectivity class's instances (built by the class the caller passes)."""
