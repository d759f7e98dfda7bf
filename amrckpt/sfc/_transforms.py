"""p4est's tables of faces, edges and corners, and the neighbour transforms of a connectivity, for 2:1 balance.

The transforms across faces (``p4est_find_face_transform``), edges
(``p8est_find_edge_transform``) and corners (``p4est_find_corner_transform``)
of each tree, built once per connectivity (loops over trees, faces, edges
and corners, never over leaves) and cached by the connectivity's identity.
Used by :mod:`amrckpt.sfc._balance`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Transforms", "transforms"]


_FACE_PERMUTATIONS = np.array(
    [[0, 1, 2, 3], [0, 2, 1, 3], [1, 0, 3, 2], [1, 3, 0, 2], [2, 0, 3, 1], [2, 3, 0, 1], [3, 1, 2, 0], [3, 2, 1, 0]]
)  # p8est_face_permutations
_FACE_PERMUTATION_SETS = np.array([[1, 2, 5, 6], [0, 3, 4, 7], [0, 4, 3, 7]])  # p8est_face_permutation_sets
_FACE_PERMUTATION_REFS = np.array(
    [[0, 1, 1, 0, 0, 1], [2, 0, 0, 1, 1, 0], [2, 0, 0, 1, 1, 0], [0, 2, 2, 0, 0, 1], [0, 2, 2, 0, 0, 1], [2, 0, 0, 2, 2, 0]]
)  # p8est_face_permutation_refs
_FACE_CORNERS = {
    2: np.array([[0, 2], [1, 3], [0, 1], [2, 3]]),
    3: np.array([[0, 2, 4, 6], [1, 3, 5, 7], [0, 1, 4, 5], [2, 3, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7]]),
}  # p4est_face_corners, p8est_face_corners
_CORNER_FACES = {
    2: np.array([[0, 2], [1, 2], [0, 3], [1, 3]]),
    3: np.array([[0, 2, 4], [1, 2, 4], [0, 3, 4], [1, 3, 4], [0, 2, 5], [1, 2, 5], [0, 3, 5], [1, 3, 5]]),
}
_CORNER_FACE_CORNERS = {
    2: np.array([[0, -1, 0, -1], [-1, 0, 1, -1], [1, -1, -1, 0], [-1, 1, -1, 1]]),
    3: np.array(
        [
            [0, -1, 0, -1, 0, -1],
            [-1, 0, 1, -1, 1, -1],
            [1, -1, -1, 0, 2, -1],
            [-1, 1, -1, 1, 3, -1],
            [2, -1, 2, -1, -1, 0],
            [-1, 2, 3, -1, -1, 1],
            [3, -1, -1, 2, -1, 2],
            [-1, 3, -1, 3, -1, 3],
        ]
    ),
}
_EDGE_FACES = np.array([[2, 4], [3, 4], [2, 5], [3, 5], [0, 4], [1, 4], [0, 5], [1, 5], [0, 2], [1, 2], [0, 3], [1, 3]])
_EDGE_CORNERS = np.array([[0, 1], [2, 3], [4, 5], [6, 7], [0, 2], [1, 3], [4, 6], [5, 7], [0, 4], [1, 5], [2, 6], [3, 7]])
_CORNER_EDGES = np.array([[0, 4, 8], [0, 5, 9], [1, 4, 10], [1, 5, 11], [2, 6, 8], [2, 7, 9], [3, 6, 10], [3, 7, 11]])
_CHILD_CORNER_EDGES = np.array(
    [
        [-1, 0, 4, -1, 8, -1, -1, -1],
        [0, -1, -1, 5, -1, 9, -1, -1],
        [4, -1, -1, 1, -1, -1, 10, -1],
        [-1, 5, 1, -1, -1, -1, -1, 11],
        [8, -1, -1, -1, -1, 2, 6, -1],
        [-1, 9, -1, -1, 2, -1, -1, 7],
        [-1, -1, 10, -1, 6, -1, -1, 3],
        [-1, -1, -1, 11, -1, 7, 3, -1],
    ]
)


def _edge_face_corners(e: int, f: int) -> tuple[int, int]:
    """p8est_edge_face_corners[e][f]: the face corners of edge e on face f."""
    c0, c1 = (int(c) for c in _EDGE_CORNERS[e])
    fc = list(_FACE_CORNERS[3][f])
    return fc.index(c0), fc.index(c1)


def _face_corner_image(d: int, f: int, nf: int, o: int, fc: int) -> int:
    """p4est_connectivity_face_neighbor_face_corner: face corner ``fc`` of face ``f`` seen from face ``nf``."""
    if d == 2:
        return fc ^ o
    pset = _FACE_PERMUTATION_SETS[_FACE_PERMUTATION_REFS[f][nf]][o]
    return int(_FACE_PERMUTATIONS[pset][fc])


def _expand_face_transform(d: int, iface: int, target_face: int, orientation: int) -> list[int]:
    """p4est_expand_face_transform_internal: the 9 integers of a face transform."""
    ft = [0] * 9
    if d == 3:
        ft[0] = 1 if iface < 2 else 0
        ft[1] = 2 if iface < 4 else 1
        ft[2] = iface // 2
        reverse = int(_FACE_PERMUTATION_REFS[0][iface]) ^ int(_FACE_PERMUTATION_REFS[0][target_face]) ^ int(orientation in (0, 3))
        ft[3 + reverse] = 1 if target_face < 2 else 0
        ft[3 + (1 - reverse)] = 2 if target_face < 4 else 1
        ft[5] = target_face // 2
        reverse = int(_FACE_PERMUTATION_REFS[iface][target_face] == 1)
        ft[6 + reverse] = orientation & 1
        ft[6 + (1 - reverse)] = orientation >> 1
    else:
        ft[2] = iface // 2
        ft[0] = 1 - ft[2]
        ft[5] = target_face // 2
        ft[3] = 1 - ft[5]
        ft[6] = orientation
    ft[8] = 2 * (iface & 1) + (target_face & 1)
    return ft


@dataclass(frozen=True)
class Transforms:
    """A connectivity's neighbour transforms, per tree (built once per connectivity, loops over trees)."""

    face_tree: np.ndarray  # (K, F) int64: the neighbour tree, -1 at the domain boundary
    face_ft: np.ndarray  # (K, F, 9) int64: p4est's ftransform
    edge: list[list[np.ndarray]]  # [t][e] -> (m, 3) int64 rows (ntree, nedge, nflip): diagonal edge neighbours (3D)
    corner: list[list[np.ndarray]]  # [t][c] -> (m, 2) int64 rows (ntree, ncorner): diagonal corner neighbours


def _face_neighbors(conn: Any, t: int, f: int) -> tuple[int, int, int] | None:
    F = 2 * conn.dim
    nt, code = int(conn.tree_to_tree[t, f]), int(conn.tree_to_face[t, f])
    if nt == t and code == f:
        return None
    return nt, code % F, code // F


def _edge_transforms(conn: Any, t: int, e: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """p8est_find_edge_transform(_internal): (distinct edges from self and faces, diagonal edge transforms)."""
    distinct = [(t, e, 0)]
    for f in _EDGE_FACES[e]:
        got = _face_neighbors(conn, t, int(f))
        if got is None:
            continue
        nt, nf, o = got
        fcs = _edge_face_corners(e, int(f))
        fc = [_face_corner_image(3, int(f), nf, o, c) for c in fcs]
        nc = [int(_FACE_CORNERS[3][nf][c]) for c in fc]
        ne = int(_CHILD_CORNER_EDGES[nc[0]][nc[1]])
        eo = int(_EDGE_CORNERS[ne][1] == nc[0])
        if (nt, ne, eo) not in distinct:
            distinct.append((nt, ne, eo))
    diag: list[tuple[int, int, int]] = []
    if conn.tree_to_edge is None or int(conn.tree_to_edge[t, e]) < 0:
        return distinct, diag
    a = int(conn.tree_to_edge[t, e])
    lo, hi = int(conn.ett_offset[a]), int(conn.ett_offset[a + 1])
    ett, ete = conn.edge_to_tree[lo:hi], conn.edge_to_edge[lo:hi]
    iflip = next(int(r) // 12 for nt, r in zip(ett, ete, strict=True) if int(nt) == t and int(r) % 12 == e)
    seen_self = False
    for nt, r in zip(ett, ete, strict=True):
        ntree, nedge = int(nt), int(r) % 12
        if ntree == t and nedge == e and not seen_self:
            seen_self = True
            continue
        nflip = (int(r) // 12) ^ iflip
        if (ntree, nedge, nflip) in distinct:
            continue
        diag.append((ntree, nedge, nflip))
    return distinct, diag


def _corner_transforms(conn: Any, t: int, c: int) -> list[tuple[int, int]]:
    """p4est_find_corner_transform(_internal): the diagonal corner neighbours of corner ``c`` of tree ``t``."""
    d = conn.dim
    if conn.tree_to_corner is None or int(conn.tree_to_corner[t, c]) < 0:
        return []
    distinct = [(t, c)]
    for f in _CORNER_FACES[d][c]:
        got = _face_neighbors(conn, t, int(f))
        if got is None:
            continue
        nt, nf, o = got
        fc = _face_corner_image(d, int(f), nf, o, int(_CORNER_FACE_CORNERS[d][c][f]))
        nc = int(_FACE_CORNERS[d][nf][fc])
        if (nt, nc) not in distinct:
            distinct.append((nt, nc))
    if d == 3 and conn.tree_to_edge is not None:
        for e in _CORNER_EDGES[c]:
            e = int(e)
            if int(conn.tree_to_edge[t, e]) < 0:
                continue
            iwhich = int(_EDGE_CORNERS[e][1] == c)
            for nt, ne, nflip in _edge_transforms(conn, t, e)[1]:
                nc = int(_EDGE_CORNERS[ne][nflip ^ iwhich])
                if (nt, nc) not in distinct:
                    distinct.append((nt, nc))
    a = int(conn.tree_to_corner[t, c])
    lo, hi = int(conn.ctt_offset[a]), int(conn.ctt_offset[a + 1])
    out = []
    for nt, nc in zip(conn.corner_to_tree[lo:hi], conn.corner_to_corner[lo:hi], strict=True):
        if (int(nt), int(nc)) not in distinct:
            out.append((int(nt), int(nc)))
    return out


def _build_transforms(conn: Any) -> Transforms:
    d, K = conn.dim, conn.num_trees
    F, C = 2 * d, 1 << d
    face_tree = np.full((K, F), -1, dtype=np.int64)
    face_ft = np.zeros((K, F, 9), dtype=np.int64)
    for t in range(K):
        for f in range(F):
            got = _face_neighbors(conn, t, f)
            if got is not None:
                face_tree[t, f] = got[0]
                face_ft[t, f] = _expand_face_transform(d, f, got[1], got[2])
    edge = (
        [[np.array(_edge_transforms(conn, t, e)[1], dtype=np.int64).reshape(-1, 3) for e in range(12)] for t in range(K)]
        if d == 3
        else []
    )
    corner = [[np.array(_corner_transforms(conn, t, c), dtype=np.int64).reshape(-1, 2) for c in range(C)] for t in range(K)]
    return Transforms(face_tree, face_ft, edge, corner)


class _ById:
    """A connectivity hashed by identity, for the cache (connectivities are immutable values)."""

    __slots__ = ("conn",)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __hash__(self) -> int:
        return id(self.conn)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ById) and other.conn is self.conn


@functools.lru_cache(maxsize=16)
def _cached(key: _ById) -> Transforms:
    return _build_transforms(key.conn)


def transforms(conn: Any) -> Transforms:
    """Return the neighbour transforms of a connectivity (built once, cached by its identity: connectivities are immutable)."""
    return _cached(_ById(conn))
