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
from typing import Any

import numpy as np

from ..errors import ConnectivityError
from ._builtin import new_brick, new_shell
from ._p4est_bytes import connectivity_sink, connectivity_source
from ._tables import _CHILDREN, _EDGES, _FACES, P4EST_ONDISK_FORMAT, ConnectivityTables

__all__ = ["P4EST_ONDISK_FORMAT", "Connectivity"]


def _int_table(value: Any, shape: tuple[int, ...], dtype: Any, name: str) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` and ``shape`` (-1: any length), or ConnectivityError.

    Raises
    ------
    ConnectivityError
        On this rank, for values that are not integers of that shape, or do not fit ``dtype``.
    """
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


class Connectivity(ConnectivityTables):
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
    num_trees, num_vertices, num_edges, num_corners, tree_attr_bytes : int
        p4est's counts of the same names, from the arrays' lengths
        (``num_edges`` is 0 in 2D, ``tree_attr_bytes`` 0 without attributes).

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
        for name in _ARRAYS[1:]:  # the vertices compared above
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
        pts = np.broadcast_to(_unit_vertices(self.dim), (self.num_trees, C, 3)).copy()
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
        return new_brick(n, per, cls)

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
        return new_shell(cls)

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
        return connectivity_sink(self, package_version)

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
        return connectivity_source(buf, cls, offset=offset, check=check)


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
