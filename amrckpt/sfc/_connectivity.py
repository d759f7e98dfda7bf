"""p4est's connectivity: how the trees of a forest touch and where they lie (``p4est_connectivity_t``).

Pure numpy (layer 3).  The arrays, their shapes and meanings are p4est's
(``p4est_connectivity.h``, ``p8est_connectivity.h``); the checks are
``p4est_connectivity_is_valid``'s, vectorized; the built-in connectivities
(:meth:`Connectivity.brick` and the others) are the arrays of p4est's
``p4est_connectivity_new_*`` functions, number for number; the bytes of
:meth:`Connectivity.to_p4est_bytes` are ``p4est_connectivity_sink``'s.
"""

from __future__ import annotations

import math
import operator
import struct
from typing import Any

import numpy as np

from ..errors import ConnectivityError, P4estFormatError

__all__ = ["P4EST_ONDISK_FORMAT", "Connectivity", "shell_map"]

P4EST_ONDISK_FORMAT = {2: 0x2000009, 3: 0x3000009}
"""``P4EST_ONDISK_FORMAT`` and ``P8EST_ONDISK_FORMAT`` of p4est 2.x: the first word of its connectivity and forest headers."""
_MAGIC = {2: b"p4est", 3: b"p8est"}
_FACES = {2: 4, 3: 6}
_CHILDREN = {2: 4, 3: 8}
_EDGES = 12
_TOPIDX = np.dtype("<i4")  # p4est_topidx_t (int32_t)


def _int_table(value: Any, shape: tuple[int, ...], dtype: Any, name: str) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` and ``shape`` (-1: any length), or ConnectivityError."""
    a = np.asarray(value)
    if a.size == 0 and a.dtype.kind not in "iub":
        a = a.astype(np.int64)
    if a.dtype.kind not in "iub":
        raise ConnectivityError(f"connectivity: {name} must hold integers, not {a.dtype}")
    want = tuple(a.shape[k] if s == -1 and k < a.ndim else s for k, s in enumerate(shape))
    if a.shape != want:
        raise ConnectivityError(f"connectivity: {name} has shape {a.shape}, not {tuple('n' if s == -1 else s for s in shape)}")
    info = np.iinfo(dtype)
    if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
        raise ConnectivityError(f"connectivity: {name} holds values beyond {np.dtype(dtype)}")
    out = np.ascontiguousarray(a, dtype=dtype)
    out.setflags(write=False)
    return out


class Connectivity:
    """A p4est connectivity: the trees of a forest, their corners in space and their neighbours.

    An immutable value (the arrays are read-only); ``==`` is
    :meth:`is_equal` (p4est ``p4est_connectivity_is_equal``).  Build one
    with a constructor of p4est's (:meth:`brick`, :meth:`unit`,
    :meth:`periodic`, :meth:`star`, :meth:`shell`), from a p4est file
    (:meth:`from_p4est_bytes`) or from its arrays; :meth:`check` is
    p4est's ``p4est_connectivity_is_valid``.

    Attributes
    ----------
    dim : {2, 3}
        p4est (quadtrees) or p8est (octrees).
    vertices : (num_vertices, 3) numpy.ndarray of numpy.float64
        The corners of the trees in space (z = 0 in most 2D connectivities),
        in the mesh's length units.
    tree_to_vertex : (num_trees, 2**dim) numpy.ndarray of numpy.int32 or None
        The vertex of each tree corner, corners in p4est's z-order (corner
        ``c`` has bit ``a`` of ``c`` set where it is at the upper end of axis
        ``a``); None when there are no vertices.
    tree_to_tree : (num_trees, 2 * dim) numpy.ndarray of numpy.int32
        The neighbour across each face (faces -x, +x, -y, +y[, -z, +z]);
        the tree itself on the boundary.
    tree_to_face : (num_trees, 2 * dim) numpy.ndarray of numpy.int8
        The neighbour's face and the orientation: ``face + 2 * dim * orientation``.
    tree_to_edge : (num_trees, 12) numpy.ndarray of numpy.int32 or None
        3D: the edge of each tree edge that is shared beyond face neighbours
        (-1: none); None without such edges (2D, or ``num_edges == 0``).
    ett_offset : (num_edges + 1,) numpy.ndarray of numpy.int32
        3D: where each edge's entries start in ``edge_to_tree``; ``[0]`` in 2D.
    edge_to_tree, edge_to_edge : (num_ett,) numpy.ndarray of int32 and int8
        3D: the trees at each edge and their edges (``edge + 12 * flip``).
    tree_to_corner : (num_trees, 2**dim) numpy.ndarray of numpy.int32 or None
        The corner of each tree corner that is shared beyond face (and
        edge) neighbours (-1: none); None when ``num_corners == 0``.
    ctt_offset : (num_corners + 1,) numpy.ndarray of numpy.int32
        Where each corner's entries start in ``corner_to_tree``.
    corner_to_tree, corner_to_corner : (num_ctt,) numpy.ndarray of int32 and int8
        The trees at each corner and their corners.
    tree_to_attr : (num_trees, tree_attr_bytes) numpy.ndarray of numpy.uint8 or None
        p4est's per-tree attribute bytes (``p4est_connectivity_set_attr``), or None.

    Raises
    ------
    ConnectivityError
        If an array has the wrong shape or holds values beyond its type
        (:meth:`check` checks what p4est checks).
    """

    __slots__ = (
        "corner_to_corner",
        "corner_to_tree",
        "ctt_offset",
        "dim",
        "edge_to_edge",
        "edge_to_tree",
        "ett_offset",
        "tree_to_attr",
        "tree_to_corner",
        "tree_to_edge",
        "tree_to_face",
        "tree_to_tree",
        "tree_to_vertex",
        "vertices",
    )

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

    def __init__(
        self,
        dim: int,
        vertices: Any,
        tree_to_vertex: Any,
        tree_to_tree: Any,
        tree_to_face: Any,
        tree_to_edge: Any = None,
        ett_offset: Any = None,
        edge_to_tree: Any = None,
        edge_to_edge: Any = None,
        tree_to_corner: Any = None,
        ctt_offset: Any = None,
        corner_to_tree: Any = None,
        corner_to_corner: Any = None,
        tree_to_attr: Any = None,
    ) -> None:
        if dim not in (2, 3):
            raise ConnectivityError(f"connectivity: dim must be 2 or 3, not {dim!r}")
        d, F, C = int(dim), _FACES[dim], _CHILDREN[dim]
        ttt = _int_table(tree_to_tree, (-1, F), np.int32, "tree_to_tree")
        K = ttt.shape[0]
        if K < 1:
            raise ConnectivityError("connectivity: it has no trees")
        v = np.asarray(vertices if vertices is not None else np.zeros((0, 3)), dtype=np.float64)
        if v.size == 0:
            v = v.reshape(0, 3)
        if v.ndim != 2 or v.shape[1] != 3:
            raise ConnectivityError(f"connectivity: vertices has shape {v.shape}, not (num_vertices, 3)")
        v = np.ascontiguousarray(v)
        v.setflags(write=False)
        sets: dict[str, Any] = {"dim": d, "vertices": v, "tree_to_tree": ttt}
        sets["tree_to_face"] = _int_table(tree_to_face, (K, F), np.int8, "tree_to_face")
        sets["tree_to_vertex"] = None if tree_to_vertex is None else _int_table(tree_to_vertex, (K, C), np.int32, "tree_to_vertex")
        if d == 2:
            for name, val in (("tree_to_edge", tree_to_edge), ("edge_to_tree", edge_to_tree), ("edge_to_edge", edge_to_edge)):
                if val is not None and np.asarray(val).size:
                    raise ConnectivityError(f"connectivity: a 2D connectivity has no {name}")
            if ett_offset is not None and np.asarray(ett_offset).tolist() not in ([0], []):
                raise ConnectivityError("connectivity: a 2D connectivity has no edges (ett_offset must be [0])")
            ett_offset = [0]
        sets["ett_offset"] = _int_table([0] if ett_offset is None else ett_offset, (-1,), np.int32, "ett_offset")
        E = sets["ett_offset"].shape[0] - 1
        if E < 0:
            raise ConnectivityError("connectivity: ett_offset needs num_edges + 1 >= 1 entries")
        num_ett = int(sets["ett_offset"][-1])
        sets["edge_to_tree"] = _int_table([] if edge_to_tree is None else edge_to_tree, (-1,), np.int32, "edge_to_tree")
        sets["edge_to_edge"] = _int_table([] if edge_to_edge is None else edge_to_edge, (-1,), np.int8, "edge_to_edge")
        sets["tree_to_edge"] = None
        if d == 3:
            if (tree_to_edge is None) != (E == 0):
                raise ConnectivityError(f"connectivity: tree_to_edge must be given exactly when there are edges ({E})")
            if E:
                sets["tree_to_edge"] = _int_table(tree_to_edge, (K, _EDGES), np.int32, "tree_to_edge")
        for name in ("edge_to_tree", "edge_to_edge"):
            if sets[name].shape[0] != max(num_ett, 0):
                raise ConnectivityError(f"connectivity: {name} has {sets[name].shape[0]} entries; ett_offset[-1] is {num_ett}")
        sets["ctt_offset"] = _int_table([0] if ctt_offset is None else ctt_offset, (-1,), np.int32, "ctt_offset")
        NC = sets["ctt_offset"].shape[0] - 1
        if NC < 0:
            raise ConnectivityError("connectivity: ctt_offset needs num_corners + 1 >= 1 entries")
        num_ctt = int(sets["ctt_offset"][-1])
        if (tree_to_corner is None) != (NC == 0):
            raise ConnectivityError(f"connectivity: tree_to_corner must be given exactly when there are corners ({NC})")
        sets["tree_to_corner"] = None if NC == 0 else _int_table(tree_to_corner, (K, C), np.int32, "tree_to_corner")
        sets["corner_to_tree"] = _int_table([] if corner_to_tree is None else corner_to_tree, (-1,), np.int32, "corner_to_tree")
        sets["corner_to_corner"] = _int_table(
            [] if corner_to_corner is None else corner_to_corner, (-1,), np.int8, "corner_to_corner"
        )
        for name in ("corner_to_tree", "corner_to_corner"):
            if sets[name].shape[0] != max(num_ctt, 0):
                raise ConnectivityError(f"connectivity: {name} has {sets[name].shape[0]} entries; ctt_offset[-1] is {num_ctt}")
        sets["tree_to_attr"] = None
        if tree_to_attr is not None:
            at = np.asarray(tree_to_attr)
            if at.dtype != np.uint8 or at.ndim != 2 or at.shape[0] != K or at.shape[1] < 1:
                raise ConnectivityError(
                    f"connectivity: tree_to_attr must be (num_trees, tree_attr_bytes >= 1) uint8, not {at.shape} {at.dtype}"
                )
            at = np.ascontiguousarray(at)
            at.setflags(write=False)
            sets["tree_to_attr"] = at
        for k, val in sets.items():
            object.__setattr__(self, k, val)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Connectivity is immutable: cannot set {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Connectivity, (self.dim, *(getattr(self, n) for n in _ARRAYS)))

    # ------------------------------------------------------------------ sizes

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

    def __repr__(self) -> str:
        return (
            f"Connectivity(dim={self.dim}, num_trees={self.num_trees}, num_vertices={self.num_vertices}, "
            f"num_edges={self.num_edges}, num_corners={self.num_corners})"
        )

    # ------------------------------------------------------------------ p4est_connectivity_is_valid

    def check(self) -> None:
        """Check the connectivity as p4est's ``p4est_connectivity_is_valid`` does, vectorized.

        Not collective.  Ranges of every entry; each face connection
        reciprocal (``tree_to_tree`` and ``tree_to_face`` of the neighbour
        point back, with the same orientation; a tree that is its own
        neighbour across the same face has orientation 0); for every shared
        edge and corner, offsets that do not decrease and stay inside the
        entries, entries whose tree points back at the edge (corner), and
        the tree's own edge (corner) among them: an edge at least once with
        no two consecutive matches of equal flip, a corner exactly once.

        Raises
        ------
        ConnectivityError
            Naming the first failing check (p4est's ``P4EST_NOTICE`` text).
        """
        d, F, C, K = self.dim, _FACES[self.dim], _CHILDREN[self.dim], self.num_trees
        V = self.num_vertices
        if V > 0 and self.tree_to_vertex is None:
            raise ConnectivityError("connectivity: nonzero vertices missing arrays (tree_to_vertex)")
        if V == 0 and self.tree_to_vertex is not None:
            raise ConnectivityError("connectivity: zero vertices still with arrays (tree_to_vertex)")
        _first_bad("edge to tree out of range", (self.edge_to_tree < 0) | (self.edge_to_tree >= K))
        _first_bad("edge to edge out of range", (self.edge_to_edge < 0) | (self.edge_to_edge >= 2 * _EDGES))
        _first_bad("corner to tree out of range", (self.corner_to_tree < 0) | (self.corner_to_tree >= K))
        _first_bad("corner to corner out of range", (self.corner_to_corner < 0) | (self.corner_to_corner >= C))
        if self.tree_to_vertex is not None:
            _first_bad("tree to vertex out of range", ((self.tree_to_vertex < 0) | (self.tree_to_vertex >= V)).any(axis=1), "tree")
        ttt, ttf = self.tree_to_tree, self.tree_to_face.astype(np.int64)
        _first_bad("tree to tree out of range", ((ttt < 0) | (ttt >= K)).any(axis=1), "tree")
        _first_bad("tree to face out of range", ((ttf < 0) | (ttf >= F * (C // 2))).any(axis=1), "tree")
        nface, orient = ttf % F, ttf // F
        me = np.arange(K)[:, None]
        face = np.arange(F)[None, :]
        _first_bad("face invalid", ((ttt == me) & (nface == face) & (orient != 0)).any(axis=1), "tree")
        linked = (ttt != me) | (nface != face)
        back_tree = ttt[ttt, nface]
        back_face = ttf[ttt, nface]
        _first_bad("tree to tree reciprocity", (linked & (back_tree != me)).any(axis=1), "tree")
        _first_bad("tree to face reciprocity", (linked & (back_face != face + F * orient)).any(axis=1), "tree")
        if d == 3:
            assert self.ett_offset is not None
            _check_shared(
                "edge",
                self.tree_to_edge,
                self.ett_offset,
                self.edge_to_tree,
                self.edge_to_edge.astype(np.int64),
                _EDGES,
                K,
                flips=True,
            )
        assert self.ctt_offset is not None
        _check_shared(
            "corner", self.tree_to_corner, self.ctt_offset, self.corner_to_tree, self.corner_to_corner.astype(np.int64), C, K
        )

    def is_valid(self) -> bool:
        """Return whether :meth:`check` passes (p4est ``p4est_connectivity_is_valid``). Not collective."""
        try:
            self.check()
        except ConnectivityError:
            return False
        return True

    # ------------------------------------------------------------------ p4est_connectivity_is_equal

    def is_equal(self, other: Connectivity) -> bool:
        """Return whether two connectivities are equal as p4est's ``p4est_connectivity_is_equal`` says.

        Counts, then every array byte for byte (vertices as their bits, as
        ``memcmp`` compares them); ``tree_to_edge`` and ``tree_to_corner``
        only where there are edges and corners.  Not collective.
        """
        if not isinstance(other, Connectivity) or self.dim != other.dim:
            return False
        if (self.num_vertices, self.num_trees, self.num_edges, self.num_corners) != (
            other.num_vertices,
            other.num_trees,
            other.num_edges,
            other.num_corners,
        ):
            return False
        if not np.array_equal(self.vertices.view(np.uint64), other.vertices.view(np.uint64)):
            return False
        names = ["tree_to_vertex", "tree_to_edge", "tree_to_corner", "tree_to_tree", "tree_to_face", "tree_to_attr"]
        names += ["ett_offset", "edge_to_tree", "edge_to_edge", "ctt_offset", "corner_to_tree", "corner_to_corner"]
        for name in names:
            a, b = getattr(self, name), getattr(other, name)
            if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                return False
        return True

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Connectivity):
            return NotImplemented
        return self.is_equal(other)

    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ placing trees

    def tree_corners(self) -> np.ndarray:
        """Return the corner points of every tree, ((num_trees, 2**dim, 3) float64), corners in z-order.

        Without vertices (``num_vertices == 0``): unit trees in a row, tree
        ``k`` at ``[k, k + 1] x [0, 1]^(dim - 1)``.
        """
        C = _CHILDREN[self.dim]
        if self.tree_to_vertex is not None:
            out: np.ndarray = self.vertices[self.tree_to_vertex]
            return out
        c = np.arange(C)
        unit = np.stack([(c >> a) & 1 for a in range(3)], axis=1).astype(np.float64)
        if self.dim == 2:
            unit[:, 2] = 0.0
        pts = np.broadcast_to(unit, (self.num_trees, C, 3)).copy()
        pts[:, :, 0] += np.arange(self.num_trees)[:, None]
        return pts

    def map_points(self, tree: Any, ref: Any) -> np.ndarray:
        """Place points of trees in space by p4est's (bi/tri)linear vertex map (``p4est_geometry_connectivity_X``).

        Not collective, vectorized (one pass per tree corner).

        Parameters
        ----------
        tree : (n,) array_like of int
            The tree of each point.
        ref : (n, dim) array_like of float
            Reference coordinates in ``[0, 1]`` per axis (a quadrant's
            integer coordinate divided by ``2**maxlevel``).

        Returns
        -------
        (n, 3) numpy.ndarray of numpy.float64
            ``sum_c w_c(ref) * vertex(tree, c)``, ``w_c`` the product over axes
            of ``ref`` (bit set in c) or ``1 - ref`` (bit clear).
        """
        t = np.asarray(tree, dtype=np.intp)
        r = np.asarray(ref, dtype=np.float64)
        corners = self.tree_corners()
        out = np.zeros((t.shape[0], 3), dtype=np.float64)
        w = np.empty(t.shape[0], dtype=np.float64)
        for c in range(_CHILDREN[self.dim]):
            w.fill(1.0)
            for a in range(self.dim):
                w *= r[:, a] if (c >> a) & 1 else 1.0 - r[:, a]
            out += w[:, None] * corners[t, c]
        return out

    def bounding_boxes(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the lower and upper corner of each tree's box around its vertices, ((num_trees, dim) float64 each)."""
        pts = self.tree_corners()[:, :, : self.dim]
        return pts.min(axis=1), pts.max(axis=1)

    def scaled(self, lower: Any, upper: Any, extent: Any) -> Connectivity:
        """Return a copy whose vertices map the box ``[0, extent]`` onto ``[lower, upper]`` per axis (not collective)."""
        lo = np.zeros(3)
        scale = np.ones(3)
        lo[: self.dim] = np.asarray(lower, dtype=np.float64)
        scale[: self.dim] = (np.asarray(upper, dtype=np.float64) - lo[: self.dim]) / np.asarray(extent, dtype=np.float64)
        v = self.vertices * scale + lo
        if self.dim == 2:
            v[:, 2] = self.vertices[:, 2]
        return _replace(self, vertices=v)

    # ------------------------------------------------------------------ p4est's built-in connectivities

    @classmethod
    def unit(cls, dim: int = 2) -> Connectivity:
        """Return one unit tree, no periodicity (``p4est_connectivity_new_unitsquare``, ``p8est_connectivity_new_unitcube``)."""
        d = _dim(dim)
        C, F = _CHILDREN[d], _FACES[d]
        return cls(d, _unit_vertices(d), np.arange(C)[None], np.zeros((1, F), int), np.arange(F)[None])

    @classmethod
    def periodic(cls, dim: int = 2) -> Connectivity:
        """Return one unit tree, periodic along every axis (``p4est_connectivity_new_periodic``, p8est's too)."""
        d = _dim(dim)
        C, F = _CHILDREN[d], _FACES[d]
        ttf = (np.arange(F) ^ 1)[None]
        kw: dict[str, Any] = {}
        if d == 3:
            kw = {
                "tree_to_edge": np.repeat(np.arange(3), 4)[None],
                "ett_offset": [0, 4, 8, 12],
                "edge_to_tree": np.zeros(12, int),
                "edge_to_edge": np.arange(12),
            }
        return cls(
            d,
            _unit_vertices(d),
            np.arange(C)[None],
            np.zeros((1, F), int),
            ttf,
            tree_to_corner=np.zeros((1, C), int),
            ctt_offset=[0, C],
            corner_to_tree=np.zeros(C, int),
            corner_to_corner=np.arange(C),
            **kw,
        )

    @classmethod
    def brick(cls, shape: Any, periodic: Any = False) -> Connectivity:
        """Return a brick of unit trees, numbered along p4est's Morton curve of the brick (``p4est_connectivity_new_brick``).

        The arrays are those of ``p4est_connectivity_new_brick(mi, ni,
        periodic_a, periodic_b)`` and ``p8est_connectivity_new_brick(mi, ni,
        pi, periodic_a, periodic_b, periodic_c)``, number for number: trees
        in the order of a Morton curve over the brick (for sides that are not
        equal powers of two, p4est's curve over the enclosing power-of-two
        box, the shorter axes' bits exhausted first), vertices at the
        integer points ``0 .. shape[a]``, numbered as p4est numbers them.
        Vectorized: no Python loop over trees.

        Parameters
        ----------
        shape : (dim,) sequence of int
            Trees along each axis, ``(mi, ni)`` or ``(mi, ni, pi)``, each >= 1.
        periodic : bool or (dim,) sequence of bool, optional
            Periodicity along each axis.

        Raises
        ------
        ConnectivityError
            If ``shape`` does not have 2 or 3 positive entries, or the brick
            has more than ``2**31 - 1`` trees.
        """
        try:
            n = [operator.index(s) for s in shape]
        except TypeError as exc:
            raise ConnectivityError(f"brick: shape must be 2 or 3 ints, not {shape!r}") from exc
        d = len(n)
        if d not in (2, 3) or min(n) < 1 or math.prod(n) * (d + 1) ** d > 2**31 - 1:
            raise ConnectivityError(f"brick: shape must be 2 or 3 positive tree counts of at most 2**31 trees, not {tuple(n)}")
        per = [bool(periodic)] * d if isinstance(periodic, (bool, int, np.bool_)) else [bool(p) for p in periodic]
        if len(per) != d:
            raise ConnectivityError(f"brick: periodic must be a bool or {d} bools, not {periodic!r}")
        return _brick(n, per)

    @classmethod
    def star(cls) -> Connectivity:
        """Return p4est's six-tree star around one corner (``p4est_connectivity_new_star``), 2D."""
        ttv = [0, 1, 3, 2, 0, 3, 5, 4, 5, 6, 0, 7, 8, 7, 9, 0, 9, 0, 10, 11, 12, 1, 11, 0]
        ttt = [1, 0, 5, 0, 2, 1, 0, 1, 1, 2, 2, 3, 3, 2, 3, 4, 4, 5, 3, 4, 5, 0, 5, 4]
        ttf = [2, 1, 5, 3, 4, 1, 0, 3, 4, 1, 2, 5, 0, 7, 2, 2, 0, 7, 3, 3, 0, 6, 2, 5]
        ttc = [0, -1, -1, -1, 0, -1, -1, -1, -1, -1, 0, -1, -1, -1, -1, 0, -1, 0, -1, -1, -1, -1, -1, 0]
        v = np.zeros((13, 3))
        pi = 4.0 * math.atan(1.0)
        for i in range(6):  # six points each: the loop of p4est's function, in its arithmetic
            v[2 * i + 1, :2] = (1.0 * math.cos(i * pi / 3), 1.0 * math.sin(i * pi / 3))
            v[2 * i + 2, :2] = (1.5 * math.cos((i + 0.5) * pi / 3), 1.5 * math.sin((i + 0.5) * pi / 3))
        return cls(
            2,
            v,
            np.reshape(ttv, (6, 4)),
            np.reshape(ttt, (6, 4)),
            np.reshape(ttf, (6, 4)),
            tree_to_corner=np.reshape(ttc, (6, 4)),
            ctt_offset=[0, 6],
            corner_to_tree=np.arange(6),
            corner_to_corner=[0, 0, 2, 3, 1, 3],
        )

    @classmethod
    def shell(cls) -> Connectivity:
        """Return p8est's 24-tree spherical shell (``p8est_connectivity_new_shell``), 3D.

        Its vertices place the six caps of four trees each on top of each
        other; :func:`shell_map` (p8est ``p8est_geometry_new_shell``) places
        them on the shell.
        """
        xy = np.array([(x, y) for y in (-1, 0, 1) for x in (-1, 0, 1)], dtype=np.float64)
        v = np.concatenate([np.column_stack([xy, np.full(9, z)]) for z in (1.0, 2.0)])
        cap = np.array([[0, 1, 3, 4], [1, 2, 4, 5], [3, 4, 6, 7], [4, 5, 7, 8]])
        ttv = np.tile(np.concatenate([cap, cap + 9], axis=1), (6, 1))
        return cls(
            3,
            v,
            ttv,
            _table(_SHELL_TREE_TO_TREE, 6),
            _table(_SHELL_TREE_TO_FACE, 6),
            tree_to_edge=_table(_SHELL_TREE_TO_EDGE, 12),
            ett_offset=np.arange(19) * 4,
            edge_to_tree=_table(_SHELL_EDGE_TO_TREE, 4).ravel(),
            edge_to_edge=_table(_SHELL_EDGE_TO_EDGE, 4).ravel(),
        )

    # ------------------------------------------------------------------ p4est_connectivity_sink / _source

    def to_p4est_bytes(self, package_version: str = "") -> bytes:
        """Return the connectivity as ``p4est_connectivity_save`` writes it (``p4est_connectivity_sink``).

        Not collective.  Little-endian, ``p4est_topidx_t`` of 4 bytes: the
        magic ``p4est``/``p8est`` in 8 bytes, the package version in 24
        (NUL-padded), ten uint64 (``P4EST_ONDISK_FORMAT``, 4, num_vertices,
        num_trees, num_edges, num_ett, num_corners, num_ctt,
        tree_attr_bytes, 0), then the arrays in p4est's order.

        Parameters
        ----------
        package_version : str, optional
            p4est's ``P4EST_PACKAGE_VERSION`` of the writer, at most 24 bytes
            of Latin-1 (p4est does not read it back).

        Raises
        ------
        ConnectivityError
            If ``package_version`` is longer than 24 bytes.
        """
        ver = package_version.encode("latin-1", "replace")
        if len(ver) > 24:
            raise ConnectivityError(f"package_version {package_version!r} is longer than p4est's 24 bytes")
        head = [
            P4EST_ONDISK_FORMAT[self.dim],
            4,
            self.num_vertices,
            self.num_trees,
            self.num_edges,
            int(self.ett_offset[-1]),
            self.num_corners,
            int(self.ctt_offset[-1]),
            self.tree_attr_bytes,
            0,
        ]
        parts = [_MAGIC[self.dim].ljust(8, b"\0"), ver.ljust(24, b"\0"), struct.pack("<10Q", *head)]
        if self.num_vertices:
            parts.append(self.vertices.astype("<f8").tobytes())
        if self.dim == 3 and self.num_edges:
            parts.append(_le(self.tree_to_edge))
        if self.num_vertices:
            parts.append(_le(self.tree_to_vertex))
        if self.num_corners:
            parts.append(_le(self.tree_to_corner))
        parts += [_le(self.tree_to_tree), self.tree_to_face.tobytes()]
        if self.tree_to_attr is not None:
            parts.append(self.tree_to_attr.tobytes())
        if self.dim == 3:
            parts.append(_le(self.ett_offset))
            if self.num_edges:
                parts += [_le(self.edge_to_tree), self.edge_to_edge.tobytes()]
        parts.append(_le(self.ctt_offset))
        if self.num_corners:
            parts += [_le(self.corner_to_tree), self.corner_to_corner.tobytes()]
        return b"".join(parts)

    @classmethod
    def from_p4est_bytes(cls, buf: Any, *, offset: int = 0, check: bool = True) -> tuple[Connectivity, str, int]:
        """Read a connectivity as ``p4est_connectivity_load`` does (``p4est_connectivity_source``).

        Not collective.  Every count is checked against the bytes at hand
        before anything is allocated, so a damaged header gives an error,
        never an allocation larger than the buffer.

        Parameters
        ----------
        buf : bytes-like
            The bytes (e.g. a whole p4est file, or its beginning).
        offset : int, optional
            Where the connectivity starts in ``buf``.
        check : bool, optional
            Also run :meth:`check` (p4est runs ``p4est_connectivity_is_valid``).

        Returns
        -------
        connectivity : Connectivity
        package_version : str
            The writer's ``P4EST_PACKAGE_VERSION`` (Latin-1, NUL padding removed).
        nbytes : int
            The bytes the connectivity takes, from ``offset``.

        Raises
        ------
        P4estFormatError
            If the magic, the on-disk format, the ``p4est_topidx_t`` size or
            a count is wrong, the bytes end early, or (``check``) the
            connectivity is not valid; ``section`` and ``offset`` name where.
        """
        mv = memoryview(buf).cast("B")
        end = len(mv)

        def need(at: int, n: int, what: str) -> memoryview:
            if n < 0 or at + n > end:
                raise _format_error(f"the file ends inside the connectivity's {what} (bytes {at}..{at + n} of {end})", what, at)
            return mv[at : at + n]

        magic = bytes(need(offset, 8, "magic"))
        dim = 2 if magic == _MAGIC[2] + b"\0\0\0" else 3 if magic == _MAGIC[3] + b"\0\0\0" else 0
        if not dim:
            raise _format_error(
                f"no p4est connectivity here: magic {magic!r}, not b'p4est' or b'p8est'", "connectivity header", offset
            )
        raw_ver = bytes(need(offset + 8, 24, "package version"))
        version = raw_ver.split(b"\0", 1)[0].decode("latin-1")
        head = struct.unpack("<10Q", need(offset + 32, 80, "connectivity header"))
        at = offset + 112
        if head[0] != P4EST_ONDISK_FORMAT[dim]:
            hint = " (a big-endian file?)" if struct.unpack(">Q", struct.pack("<Q", head[0]))[0] == P4EST_ONDISK_FORMAT[dim] else ""
            raise _format_error(
                f"on-disk format {head[0]:#x}, not {P4EST_ONDISK_FORMAT[dim]:#x} (p4est 2.x, {_MAGIC[dim].decode()}){hint}",
                "connectivity header",
                offset + 32,
            )
        if head[1] != 4:
            raise _format_error(f"p4est_topidx_t of {head[1]} bytes, not 4", "connectivity header", offset + 40)
        V, K, E, nett, NC, nctt, attr, zero = head[2:]
        if any(x >= 2**31 for x in (V, K, E, nett, NC, nctt, attr)) or K < 1 or (dim == 2 and (E or nett)):
            raise _format_error(
                f"impossible counts: {V} vertices, {K} trees, {E} edges ({nett} entries), {NC} corners ({nctt} entries), "
                f"{attr} attribute bytes",
                "connectivity header",
                offset + 48,
            )
        if zero != 0:
            raise _format_error(f"the last header word is {zero}, not 0", "connectivity header", offset + 104)
        C, F = _CHILDREN[dim], _FACES[dim]
        total = 24 * V + 4 * C * K * (bool(V) + bool(NC)) + 5 * F * K + attr * K + 4 * (NC + 1) + 5 * nctt * bool(NC)
        if dim == 3:
            total += 4 * _EDGES * K * bool(E) + 4 * (E + 1) + 5 * nett * bool(E)
        need(at, total, "arrays")

        def take(n: int, dtype: str) -> np.ndarray:
            nonlocal at
            nb = n * np.dtype(dtype).itemsize
            a = np.frombuffer(mv[at : at + nb], dtype=dtype).astype(dtype[1:] if dtype[0] == "<" else dtype)
            at += nb
            return a

        verts = take(3 * V, "<f8").reshape(V, 3) if V else np.zeros((0, 3))
        tte = take(_EDGES * K, "<i4").reshape(K, _EDGES) if dim == 3 and E else None
        ttv = take(C * K, "<i4").reshape(K, C) if V else None
        ttc = take(C * K, "<i4").reshape(K, C) if NC else None
        ttt = take(F * K, "<i4").reshape(K, F)
        ttf = take(F * K, "i1").reshape(K, F)
        tta = take(attr * K, "u1").reshape(K, attr) if attr else None
        eoff = ett = ete = None
        if dim == 3:
            eoff = take(E + 1, "<i4")
            if int(eoff[-1]) != nett:
                raise _format_error(f"ett_offset ends at {int(eoff[-1])}, not at num_ett {nett}", "ett_offset", at - 4)
            if E:
                ett, ete = take(nett, "<i4"), take(nett, "i1")
        coff = take(NC + 1, "<i4")
        if int(coff[-1]) != nctt:
            raise _format_error(f"ctt_offset ends at {int(coff[-1])}, not at num_ctt {nctt}", "ctt_offset", at - 4)
        ctt = ctc = None
        if NC:
            ctt, ctc = take(nctt, "<i4"), take(nctt, "i1")
        try:
            conn = cls(dim, verts, ttv, ttt, ttf, tte, eoff, ett, ete, ttc, coff, ctt, ctc, tta)
            if check:
                conn.check()
        except ConnectivityError as exc:
            raise _format_error(f"the connectivity is not valid: {exc}", "connectivity", offset) from exc
        return conn, version, at - offset


# ---------------------------------------------------------------------------- helpers


def _dim(dim: Any) -> int:
    if dim not in (2, 3):
        raise ConnectivityError(f"dim must be 2 or 3, not {dim!r}")
    return int(dim)


_ARRAYS = (
    "vertices",
    "tree_to_vertex",
    "tree_to_tree",
    "tree_to_face",
    "tree_to_edge",
    "ett_offset",
    "edge_to_tree",
    "edge_to_edge",
    "tree_to_corner",
    "ctt_offset",
    "corner_to_tree",
    "corner_to_corner",
    "tree_to_attr",
)
"""The arrays of a connectivity, in the order of :class:`Connectivity`'s arguments."""


def _replace(conn: Connectivity, **changes: Any) -> Connectivity:
    kw = {n: getattr(conn, n) for n in _ARRAYS} | changes
    return Connectivity(conn.dim, **kw)


def _unit_vertices(d: int) -> np.ndarray:
    c = np.arange(_CHILDREN[d])
    return np.stack([c & 1, (c >> 1) & 1, (c >> 2) & 1], axis=1).astype(np.float64)


def _le(a: np.ndarray | None) -> bytes:
    assert a is not None
    return a.astype("<i4", copy=False).tobytes()


def _table(text: str, width: int) -> np.ndarray:
    return np.array(text.replace("|", " ").split(), dtype=np.int64).reshape(-1, width)


def _format_error(message: str, section: str, offset: int) -> P4estFormatError:
    err = P4estFormatError(f"{message} ({section}, byte {offset})")
    err.section, err.offset = section, offset
    return err


def _first_bad(what: str, bad: Any, unit: str = "entry") -> None:
    bad = np.asarray(bad)
    if bad.size and bad.any():
        raise ConnectivityError(f"connectivity: {what} in {unit} {int(np.flatnonzero(bad)[0])}")


def _check_shared(
    kind: str,
    tree_to_x: np.ndarray | None,
    offset: np.ndarray,
    x_to_tree: np.ndarray,
    x_to_x: np.ndarray,
    per_tree: int,
    num_trees: int,
    flips: bool = False,
) -> None:
    """Check the edges (corners) as ``p4est_connectivity_is_valid`` does, vectorized over trees and entries."""
    n = offset.shape[0] - 1
    if n == 0:
        return
    _first_bad(f"{kind} offset backwards", offset[1:] < offset[:-1], kind)
    assert tree_to_x is not None
    _first_bad(f"tree to {kind} out of range", ((tree_to_x < -1) | (tree_to_x >= n)).any(axis=1), "tree")
    nent = int(offset[-1])
    referenced = np.zeros(n, dtype=bool)
    used = tree_to_x[tree_to_x >= 0]
    referenced[used] = True
    begin, end = offset[:-1].astype(np.int64), offset[1:].astype(np.int64)
    _first_bad(f"invalid {kind} range", referenced & ((begin < 0) | (begin >= nent) | (end < 0) | (end > nent)), kind)
    # Each entry of a referenced edge (corner): its tree must point back at it.
    entries = np.arange(nent)
    owner = np.searchsorted(offset[1:], entries, side="right")  # the edge (corner) whose range holds the entry
    inside = (entries >= offset[0]) & (owner < n)
    owner = np.where(inside, owner, 0)
    checked = inside & referenced[owner]
    ntree = x_to_tree.astype(np.int64)
    nx = x_to_x % per_tree
    back = np.where(checked, tree_to_x[np.where(checked, ntree, 0), np.where(checked, nx, 0)], -2)
    _first_bad(f"{kind} to {kind} reciprocity", checked & (back != owner), "entry")
    # Every tree's own edge (corner) among the entries: a corner exactly once; an edge at least once, and no two
    # consecutive matches with the same flip.
    key = ntree[checked] * per_tree + nx[checked]
    count = np.bincount(key, minlength=num_trees * per_tree)
    refs = tree_to_x.reshape(-1) >= 0
    _first_bad(f"shared {kind} inconsistent count (the tree's own {kind} is missing)", refs & (count == 0), f"tree {kind}")
    if flips:
        flip = (x_to_x // per_tree)[checked]
        order = np.argsort(key, kind="stable")
        k, f = key[order], flip[order]
        _first_bad(f"shared {kind} inconsistency (equal flips)", (k[1:] == k[:-1]) & (f[1:] == f[:-1]), "entry")
    else:
        _first_bad(f"shared {kind} inconsistency (the tree's own {kind} twice)", refs & (count > 1), f"tree {kind}")


# ---------------------------------------------------------------------------- the brick


def _brick_ranks(logx: list[int]) -> list[int]:
    """p4est's ``rankx``: the axes in the order in which their bits run out (``p4est_connectivity_new_brick``)."""
    rankx = [0, 1] if logx[0] <= logx[1] else [1, 0]
    if len(logx) == 3:
        if logx[2] < logx[rankx[0]]:
            rankx = [2, rankx[0], rankx[1]]
        elif logx[rankx[1]] <= logx[2]:
            rankx = [rankx[0], rankx[1], 2]
        else:
            rankx = [rankx[0], 2, rankx[1]]
    return rankx


def _brick_linear(tx: list[np.ndarray], logx: list[int], rankx: list[int]) -> np.ndarray:
    """p4est's ``brick_xyz_to_linear``, vectorized over trees."""
    D = len(tx)
    lastlog = logx[rankx[D - 2]]
    ti = tx[rankx[D - 1]] >> lastlog
    for i in range(D - 2, -1, -1):
        logi = lastlog if i == 0 else lastlog - logx[rankx[i - 1]]
        idx = [-1, -1, -1]
        for k in range(D - i):
            idx[rankx[i + k]] = 0
        c = 0
        for k in range(D):
            if idx[k] == 0:
                idx[k] = c
                c += 1
        ti = ti << ((D - i) * logi)
        lastlog -= logi
        temp = [x >> lastlog for x in tx]
        for j in range(logi):
            shift = (D - i - 1) * j
            for k in range(D):
                if idx[k] >= 0:
                    ti = ti | ((temp[k] & (1 << j)) << (shift + idx[k]))
    return ti


def _brick(n: list[int], per: list[bool]) -> Connectivity:
    """``p4est_connectivity_new_brick`` / ``p8est_connectivity_new_brick``, vectorized over trees."""
    d = len(n)
    C, F = _CHILDREN[d], _FACES[d]
    K = math.prod(n)
    logx = [(m - 1).bit_length() for m in n]
    rankx = _brick_ranks(logx)
    grid = np.indices(n, dtype=np.int64).reshape(d, -1)  # row-major lattice of trees: flat = x * n1 (* n2) ...
    lin = _brick_linear([grid[a] for a in range(d)], logx, rankx)
    order = np.argsort(lin, kind="stable")  # tree j is the lattice point order[j]
    tid = np.empty(K, dtype=np.int64)
    tid[order] = np.arange(K)
    coord = grid[:, order]  # (d, K): the coordinates of each tree
    nn = np.array(n, dtype=np.int64)

    def tree_at(offsets: list[int] | np.ndarray) -> np.ndarray:
        """Return the tree at each tree's coordinates plus ``offsets`` (wrapped), (K,)."""
        c = [(coord[a] + int(offsets[a])) % nn[a] for a in range(d)]
        flat = c[0]
        for a in range(1, d):
            flat = flat * nn[a] + c[a]
        out: np.ndarray = tid[flat]
        return out

    ok = [(coord[a] < nn[a] - 1) | per[a] for a in range(d)]  # a corner/edge beyond the upper side along a
    all_ok = np.logical_and.reduce(ok)
    tc2 = np.where(all_ok, np.cumsum(all_ok) - 1, -1)
    if d == 3:
        emask = np.stack([ok[1] & ok[2], ok[0] & ok[2], ok[0] & ok[1]], axis=1)
        te2 = np.where(emask, (np.cumsum(emask.ravel()) - 1).reshape(K, 3), -1)
        num_edges = int(emask.sum())
    num_corners = int(all_ok.sum())
    tf = np.empty((K, F), dtype=np.int64)
    for i in range(d):
        for j in range(2):
            off = [0] * d
            off[i] = 2 * j - 1
            tf[:, 2 * i + j] = tree_at(off)
    if d == 3:
        te = np.empty((K, _EDGES), dtype=np.int64)
        for i in range(3):
            for j in range(4):
                off = [
                    0 if i == 0 else 2 * (j & 1) - 1,
                    0 if i == 1 else 2 * ((j & 1) if i == 0 else (j // 2)) - 1,
                    0 if i == 2 else 2 * (j // 2) - 1,
                ]
                te[:, 4 * i + j] = tree_at(off)
    tc = np.empty((K, C), dtype=np.int64)
    for i in range(C):
        tc[:, i] = tree_at([1 if (i >> a) & 1 else -1 for a in range(d)])
    me = np.arange(K)
    maxc = nn - 1
    ttt = np.empty((K, F), dtype=np.int64)
    ttf = np.empty((K, F), dtype=np.int64)
    for i in range(d):
        for j in range(2):
            face = 2 * i + j
            bound = np.zeros(K, dtype=bool) if per[i] else (coord[i] == 0) if j == 0 else (coord[i] == maxc[i])
            ttt[:, face] = np.where(bound, me, tf[:, face])
            ttf[:, face] = np.where(bound, face, 2 * i + (j ^ 1))

    def at_boundary(axis: int, upper: int | np.ndarray) -> np.ndarray:
        """Whether each tree's corner/edge on the ``upper`` side of ``axis`` is on a non-periodic boundary."""
        if per[axis]:
            return np.zeros(K, dtype=bool)
        out: np.ndarray = np.where(upper, coord[axis] == maxc[axis], coord[axis] == 0)
        return out

    kw: dict[str, Any] = {}
    if d == 3 and num_edges:
        tte = np.full((K, _EDGES), -1, dtype=np.int64)
        ett = np.zeros(4 * num_edges, dtype=np.int64)
        ete = np.zeros(4 * num_edges, dtype=np.int64)
        for i in range(3):
            dir1, dir2 = (1 if i == 0 else 0), (1 if i == 2 else 2)
            for j in range(4):
                edge = 4 * i + j
                bound = at_boundary(dir1, j & 1) | at_boundary(dir2, j // 2)
                src = [te[:, edge], tf[:, 2 * dir2], tf[:, 2 * dir1], me][j]
                tmp = te2[src, i]
                keep = ~bound
                tte[keep, edge] = tmp[keep]
                ett[4 * tmp[keep] + (3 - j)] = me[keep]
                ete[4 * tmp[keep] + (3 - j)] = edge
        kw |= {"tree_to_edge": tte, "ett_offset": 4 * np.arange(num_edges + 1), "edge_to_tree": ett, "edge_to_edge": ete}
    elif d == 3:
        kw |= {"ett_offset": [0]}
    if num_corners:
        ttc = np.full((K, C), -1, dtype=np.int64)
        ctt = np.zeros(C * num_corners, dtype=np.int64)
        ctc = np.zeros(C * num_corners, dtype=np.int64)
        if d == 2:
            sources = [tc[:, 0], tf[:, 2], tf[:, 0], me]
        else:
            sources = [tc[:, 0], te[:, 0], te[:, 4], tf[:, 4], te[:, 8], tf[:, 2], tf[:, 0], me]
        for i in range(C):
            bound = np.logical_or.reduce([at_boundary(a, (i >> a) & 1) for a in range(d)])
            keep = ~bound
            tmp = tc2[sources[i]]
            ttc[keep, i] = tmp[keep]
            ctt[C * tmp[keep] + (C - 1 - i)] = me[keep]
            ctc[C * tmp[keep] + (C - 1 - i)] = i
        kw |= {"tree_to_corner": ttc, "ctt_offset": C * np.arange(num_corners + 1), "corner_to_tree": ctt, "corner_to_corner": ctc}
    # Vertices: lattice point X is made by the tree max(X - 1, 0) at its corner (X > 0) (the first tree along the curve
    # to reach it); numbered in the order (tree, corner) in which p4est makes them.
    lat = np.indices([m + 1 for m in n], dtype=np.int64).reshape(d, -1)
    maker = np.maximum(lat - 1, 0)
    flat = maker[0]
    for a in range(1, d):
        flat = flat * nn[a] + maker[a]
    corner = sum((lat[a] > 0).astype(np.int64) << a for a in range(d))
    vkey = tid[flat] * C + corner
    vorder = np.argsort(vkey, kind="stable")
    vid = np.empty_like(vorder)
    vid[vorder] = np.arange(vorder.shape[0])
    verts = np.zeros((vorder.shape[0], 3), dtype=np.float64)
    verts[:, :d] = lat[:, vorder].T
    ttv = np.empty((K, C), dtype=np.int64)
    for i in range(C):
        p = [coord[a] + ((i >> a) & 1) for a in range(d)]
        f = p[0]
        for a in range(1, d):
            f = f * (nn[a] + 1) + p[a]
        ttv[:, i] = vid[f]
    return Connectivity(d, verts, ttv, ttt, ttf, **kw)


# ---------------------------------------------------------------------------- the shell geometry


def shell_map(conn: Connectivity, tree: Any, ref: Any, R1: float, R2: float) -> np.ndarray:
    """Place points of :meth:`Connectivity.shell` trees on the shell ``R1 <= r <= R2`` (``p8est_geometry_new_shell``).

    Not collective, vectorized.  The vertex map first (``abc`` in
    ``[-1, 1]^2 x [1, 2]``), then p8est's ``p8est_geometry_shell_X``: a
    tangent grading of ``abc[0]``, ``abc[1]`` and radius ``R1**2 / R2 *
    (R2 / R1)**abc[2]``, the cap chosen by ``tree // 4``.

    Parameters
    ----------
    conn : Connectivity
        The shell's connectivity (24 trees).
    tree : (n,) array_like of int
    ref : (n, 3) array_like of float
        Reference coordinates in ``[0, 1]^3``.
    R1, R2 : float
        Inner and outer radius, ``0 < R1 < R2``.

    Returns
    -------
    (n, 3) numpy.ndarray of numpy.float64

    Raises
    ------
    ConnectivityError
        If ``conn`` does not have 24 trees in 3D, or the radii are not ``0 < R1 < R2``.
    """
    if conn.dim != 3 or conn.num_trees != 24:
        raise ConnectivityError(f"shell_map: the shell has 24 trees in 3D; this connectivity has {conn.num_trees} in {conn.dim}D")
    if not 0 < R1 < R2:
        raise ConnectivityError(f"shell_map: the radii must satisfy 0 < R1 < R2, not R1={R1}, R2={R2}")
    t = np.asarray(tree, dtype=np.int64)
    abc = conn.map_points(t, ref)
    x = np.tan(abc[:, 0] * (np.pi / 4))
    y = np.tan(abc[:, 1] * (np.pi / 4))
    R = (R1 * R1 / R2) * np.power(R2 / R1, abc[:, 2])
    q = R / np.sqrt(x * x + y * y + 1.0)
    cap = t // 4
    out = np.empty_like(abc)
    # (x, y, z) per cap, as p8est_geometry_shell_X: right, bottom, left, top, back, front
    table = {
        0: (q, -q * x, -q * y),
        1: (-q * y, -q * x, -q),
        2: (-q, -q * x, q * y),
        3: (q * y, -q * x, q),
        4: (-q * x, q, q * y),
        5: (q * x, -q, q * y),
    }
    for c, (X, Y, Z) in table.items():
        sel = cap == c
        out[sel, 0], out[sel, 1], out[sel, 2] = X[sel], Y[sel], Z[sel]
    return out


_SHELL_TREE_TO_TREE = """
18 1 14 2 0 0 | 0 23 15 3 1 1 | 16 3 0 4 2 2 | 2 21 1 5 3 3 | 16 5 2 6 4 4 | 4 21 3 7 5 5 | 17 7 4 8 6 6
6 20 5 9 7 7 | 17 9 6 10 8 8 | 8 20 7 11 9 9 | 19 11 8 12 10 10 | 10 22 9 13 11 11 | 19 13 10 14 12 12
12 22 11 15 13 13 | 18 15 12 0 14 14 | 14 23 13 1 15 15 | 2 17 4 18 16 16 | 16 8 6 19 17 17 | 0 19 16 14 18 18
18 10 17 12 19 19 | 9 21 7 22 20 20 | 20 3 5 23 21 21 | 11 23 20 13 22 22 | 22 1 21 15 23 23
"""
_SHELL_TREE_TO_FACE = """
6 0 3 2 4 5 | 1 7 3 2 4 5 | 6 0 3 2 4 5 | 1 7 3 2 4 5 | 2 0 3 2 4 5 | 1 8 3 2 4 5 | 2 0 3 2 4 5 | 1 8 3 2 4 5
1 0 3 2 4 5 | 1 0 3 2 4 5 | 1 0 3 2 4 5 | 1 0 3 2 4 5 | 9 0 3 2 4 5 | 1 3 3 2 4 5 | 9 0 3 2 4 5 | 1 3 3 2 4 5
6 0 0 2 4 5 | 1 0 0 2 4 5 | 6 0 3 6 4 5 | 1 0 3 6 4 5 | 1 0 7 2 4 5 | 1 7 7 2 4 5 | 1 0 3 1 4 5 | 1 7 3 1 4 5
"""
_SHELL_TREE_TO_EDGE = """
-1 -1 -1 -1 -1 -1 -1 -1 -1 8 6 0 | -1 -1 -1 -1 -1 -1 -1 -1 8 -1 0 7 | -1 -1 -1 -1 -1 -1 -1 -1 6 0 -1 9
-1 -1 -1 -1 -1 -1 -1 -1 0 7 9 -1 | -1 -1 -1 -1 -1 -1 -1 -1 -1 9 10 1 | -1 -1 -1 -1 -1 -1 -1 -1 9 -1 1 11
-1 -1 -1 -1 -1 -1 -1 -1 10 1 -1 12 | -1 -1 -1 -1 -1 -1 -1 -1 1 11 12 -1 | -1 -1 -1 -1 -1 -1 -1 -1 -1 12 13 2
-1 -1 -1 -1 -1 -1 -1 -1 12 -1 2 14 | -1 -1 -1 -1 -1 -1 -1 -1 13 2 -1 15 | -1 -1 -1 -1 -1 -1 -1 -1 2 14 15 -1
-1 -1 -1 -1 -1 -1 -1 -1 -1 15 16 3 | -1 -1 -1 -1 -1 -1 -1 -1 15 -1 3 17 | -1 -1 -1 -1 -1 -1 -1 -1 16 3 -1 8
-1 -1 -1 -1 -1 -1 -1 -1 3 17 8 -1 | -1 -1 -1 -1 -1 -1 -1 -1 -1 10 6 4 | -1 -1 -1 -1 -1 -1 -1 -1 10 -1 4 13
-1 -1 -1 -1 -1 -1 -1 -1 6 4 -1 16 | -1 -1 -1 -1 -1 -1 -1 -1 4 13 16 -1 | -1 -1 -1 -1 -1 -1 -1 -1 -1 11 14 5
-1 -1 -1 -1 -1 -1 -1 -1 11 -1 5 7 | -1 -1 -1 -1 -1 -1 -1 -1 14 5 -1 17 | -1 -1 -1 -1 -1 -1 -1 -1 5 7 17 -1
"""
_SHELL_EDGE_TO_TREE = """
0 1 2 3 | 4 5 6 7 | 8 9 10 11 | 12 13 14 15 | 16 17 18 19 | 20 21 22 23 | 0 2 16 18 | 1 3 21 23 | 0 1 14 15
2 3 4 5 | 4 6 16 17 | 5 7 20 21 | 6 7 8 9 | 8 10 17 19 | 9 11 20 22 | 10 11 12 13 | 12 14 18 19 | 13 15 22 23
"""
_SHELL_EDGE_TO_EDGE = """
11 10 9 8 | 11 10 9 8 | 11 10 9 8 | 11 10 9 8 | 11 10 9 8 | 11 10 9 8 | 10 8 10 8 | 11 9 11 9 | 9 8 11 10
11 10 9 8 | 10 8 9 8 | 11 9 9 8 | 11 10 9 8 | 10 8 11 9 | 11 9 10 8 | 11 10 9 8 | 10 8 11 10 | 11 9 11 10
"""
