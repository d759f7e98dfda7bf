"""p4est's built-in connectivities that are computed rather than tabulated: the brick and the shell.

``p4est_connectivity_new_brick`` / ``p8est_connectivity_new_brick`` (trees
numbered along the Morton curve of the brick, p4est_connectivity.c) and
``p8est_connectivity_new_shell`` with its geometry ``p8est_geometry_new_shell``
(p8est_geometry.c).  Used by :meth:`Connectivity.brick`,
:meth:`Connectivity.shell` and :func:`shell_map`.  Not collective.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConnectivityError
from ._tables import _CHILDREN, _EDGES, _FACES, ConnectivityTables, ConnT

__all__ = ["new_brick", "new_shell", "shell_map"]


def _table(text: str, width: int) -> np.ndarray:
    return np.array(text.replace("|", " ").split(), dtype=np.int64).reshape(-1, width)


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


@dataclass(frozen=True)
class _Brick:
    """The trees of a brick, numbered along its Morton curve (as ``p4est_connectivity_new_brick``).

    Attributes
    ----------
    n : (d,) numpy.ndarray of int64
        Trees along each axis.
    per : list of bool
        Periodicity of each axis.
    coord : (d, K) numpy.ndarray of int64
        The lattice coordinates of each tree.
    tid : (K,) numpy.ndarray of int64
        The tree at each lattice point, in row-major order (``x * n1 (* n2) ...``).
    inner : tuple of d (K,) numpy.ndarray of bool
        Whether a tree's corners and edges beyond its upper side along each axis exist (not on a non-periodic boundary).
    """

    n: np.ndarray
    per: list[bool]
    coord: np.ndarray
    tid: np.ndarray
    inner: tuple[np.ndarray, ...]

    @property
    def d(self) -> int:
        """The dimension."""
        return int(self.n.shape[0])

    @property
    def K(self) -> int:
        """The number of trees."""
        return int(self.tid.shape[0])

    def tree_at(self, offsets: list[int] | np.ndarray) -> np.ndarray:
        """Return the tree at each tree's coordinates plus ``offsets`` (wrapped), (K,)."""
        c = [(self.coord[a] + int(offsets[a])) % self.n[a] for a in range(self.d)]
        flat = c[0]
        for a in range(1, self.d):
            flat = flat * self.n[a] + c[a]
        out: np.ndarray = self.tid[flat]
        return out

    def at_boundary(self, axis: int, upper: int | np.ndarray) -> np.ndarray:
        """Whether each tree's corner/edge on the ``upper`` side of ``axis`` is on a non-periodic boundary, (K,)."""
        if self.per[axis]:
            return np.zeros(self.K, dtype=bool)
        out: np.ndarray = np.where(upper, self.coord[axis] == self.n[axis] - 1, self.coord[axis] == 0)
        return out


def _brick_trees(n: list[int], per: list[bool]) -> _Brick:
    """Return the trees of an ``n[0] x n[1] (x n[2])`` brick, numbered along p4est's Morton curve of the brick."""
    d = len(n)
    K = math.prod(n)
    logx = [(m - 1).bit_length() for m in n]
    grid = np.indices(n, dtype=np.int64).reshape(d, -1)  # row-major lattice of trees
    lin = _brick_linear([grid[a] for a in range(d)], logx, _brick_ranks(logx))
    order = np.argsort(lin, kind="stable")  # tree j is the lattice point order[j]
    tid = np.empty(K, dtype=np.int64)
    tid[order] = np.arange(K)
    coord = grid[:, order]
    nn = np.array(n, dtype=np.int64)
    return _Brick(nn, per, coord, tid, tuple((coord[a] < nn[a] - 1) | per[a] for a in range(d)))


def _brick_faces(b: _Brick) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the face neighbours (wrapped), ``tree_to_tree`` and ``tree_to_face``, each (K, 2d).

    A face on a non-periodic boundary is its tree's own face.
    """
    d, K, F = b.d, b.K, _FACES[b.d]
    me = np.arange(K)
    tf = np.empty((K, F), dtype=np.int64)
    ttt = np.empty((K, F), dtype=np.int64)
    ttf = np.empty((K, F), dtype=np.int64)
    for i in range(d):
        for j in range(2):
            face = 2 * i + j
            off = [0] * d
            off[i] = 2 * j - 1
            tf[:, face] = b.tree_at(off)
            bound = np.zeros(K, dtype=bool) if b.per[i] else (b.coord[i] == 0) if j == 0 else (b.coord[i] == b.n[i] - 1)
            ttt[:, face] = np.where(bound, me, tf[:, face])
            ttf[:, face] = np.where(bound, face, 2 * i + (j ^ 1))
    return tf, ttt, ttf


def _brick_edges(b: _Brick, tf: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Return the edge neighbours (K, 12) (wrapped) and the edge arrays of a 3D brick's connectivity.

    An edge is numbered by the tree beyond it on both upper sides; one on a
    non-periodic boundary is in no edge's list.
    """
    K = b.K
    me = np.arange(K)
    inner = b.inner
    emask = np.stack([inner[1] & inner[2], inner[0] & inner[2], inner[0] & inner[1]], axis=1)
    te2 = np.where(emask, (np.cumsum(emask.ravel()) - 1).reshape(K, 3), -1)
    num_edges = int(emask.sum())
    te = np.empty((K, _EDGES), dtype=np.int64)
    for i in range(3):
        for j in range(4):
            off = [
                0 if i == 0 else 2 * (j & 1) - 1,
                0 if i == 1 else 2 * ((j & 1) if i == 0 else (j // 2)) - 1,
                0 if i == 2 else 2 * (j // 2) - 1,
            ]
            te[:, 4 * i + j] = b.tree_at(off)
    if not num_edges:
        return te, {"ett_offset": [0]}
    tte = np.full((K, _EDGES), -1, dtype=np.int64)
    ett = np.zeros(4 * num_edges, dtype=np.int64)
    ete = np.zeros(4 * num_edges, dtype=np.int64)
    for i in range(3):
        dir1, dir2 = (1 if i == 0 else 0), (1 if i == 2 else 2)
        for j in range(4):
            edge = 4 * i + j
            bound = b.at_boundary(dir1, j & 1) | b.at_boundary(dir2, j // 2)
            src = [te[:, edge], tf[:, 2 * dir2], tf[:, 2 * dir1], me][j]
            tmp = te2[src, i]
            keep = ~bound
            tte[keep, edge] = tmp[keep]
            ett[4 * tmp[keep] + (3 - j)] = me[keep]
            ete[4 * tmp[keep] + (3 - j)] = edge
    return te, {"tree_to_edge": tte, "ett_offset": 4 * np.arange(num_edges + 1), "edge_to_tree": ett, "edge_to_edge": ete}


def _brick_corners(b: _Brick, tf: np.ndarray, te: np.ndarray | None) -> dict[str, Any]:
    """Return the corner arrays of a brick's connectivity (none if no corner is inside or periodic).

    A corner is numbered by the tree beyond it on every upper side; one on
    a non-periodic boundary is in no corner's list.  ``te``: the edge
    neighbours (3D).
    """
    d, K, C = b.d, b.K, _CHILDREN[b.d]
    me = np.arange(K)
    all_inner = np.logical_and.reduce(b.inner)
    tc2 = np.where(all_inner, np.cumsum(all_inner) - 1, -1)
    num_corners = int(all_inner.sum())
    if not num_corners:
        return {}
    tc0 = b.tree_at([-1] * d)
    if te is None:
        sources = [tc0, tf[:, 2], tf[:, 0], me]
    else:
        sources = [tc0, te[:, 0], te[:, 4], tf[:, 4], te[:, 8], tf[:, 2], tf[:, 0], me]
    ttc = np.full((K, C), -1, dtype=np.int64)
    ctt = np.zeros(C * num_corners, dtype=np.int64)
    ctc = np.zeros(C * num_corners, dtype=np.int64)
    for i in range(C):
        bound = np.logical_or.reduce([b.at_boundary(a, (i >> a) & 1) for a in range(d)])
        keep = ~bound
        tmp = tc2[sources[i]]
        ttc[keep, i] = tmp[keep]
        ctt[C * tmp[keep] + (C - 1 - i)] = me[keep]
        ctc[C * tmp[keep] + (C - 1 - i)] = i
    return {"tree_to_corner": ttc, "ctt_offset": C * np.arange(num_corners + 1), "corner_to_tree": ctt, "corner_to_corner": ctc}


def _brick_vertices(b: _Brick) -> tuple[np.ndarray, np.ndarray]:
    """Return the vertices (V, 3) and ``tree_to_vertex`` (K, 2^d) of a brick.

    Lattice point X is made by the tree max(X - 1, 0) at its corner (X > 0)
    (the first tree along the curve to reach it); vertices are numbered in
    the order (tree, corner) in which p4est makes them.
    """
    d, C, nn = b.d, _CHILDREN[b.d], b.n
    lat = np.indices([int(m) + 1 for m in nn], dtype=np.int64).reshape(d, -1)
    maker = np.maximum(lat - 1, 0)
    flat = maker[0]
    for a in range(1, d):
        flat = flat * nn[a] + maker[a]
    corner = sum((lat[a] > 0).astype(np.int64) << a for a in range(d))
    vkey = b.tid[flat] * C + corner
    vorder = np.argsort(vkey, kind="stable")
    vid = np.empty_like(vorder)
    vid[vorder] = np.arange(vorder.shape[0])
    verts = np.zeros((vorder.shape[0], 3), dtype=np.float64)
    verts[:, :d] = lat[:, vorder].T
    ttv = np.empty((b.K, C), dtype=np.int64)
    for i in range(C):
        p = [b.coord[a] + ((i >> a) & 1) for a in range(d)]
        f = p[0]
        for a in range(1, d):
            f = f * (nn[a] + 1) + p[a]
        ttv[:, i] = vid[f]
    return verts, ttv


def new_brick(n: list[int], per: list[bool], cls: Callable[..., ConnT]) -> ConnT:
    """``p4est_connectivity_new_brick`` / ``p8est_connectivity_new_brick``, vectorized over trees."""
    b = _brick_trees(n, per)
    tf, ttt, ttf = _brick_faces(b)
    kw: dict[str, Any] = {}
    te = None
    if b.d == 3:
        te, kw = _brick_edges(b, tf)
    kw |= _brick_corners(b, tf, te)
    verts, ttv = _brick_vertices(b)
    return cls(b.d, verts, ttv, ttt, ttf, **kw)


# ---------------------------------------------------------------------------- the shell geometry


def shell_map(conn: ConnectivityTables, tree: Any, ref: Any, R1: float, R2: float) -> np.ndarray:
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


def new_shell(cls: Callable[..., ConnT]) -> ConnT:
    """Return p8est's 24-tree spherical shell (``p8est_connectivity_new_shell``); see :meth:`Connectivity.shell`."""
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
