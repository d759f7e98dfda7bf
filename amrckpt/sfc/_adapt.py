"""Changing the leaves of a forest: refinement, coarsening and 2:1 balance, as p4est does them.

Pure numpy on the arrays of a :class:`~amrckpt.sfc.Forest` (tree, level,
integer coordinates, Morton order per tree), no Python loop over leaves
(the loops here run over levels, rounds of the balance ripple, the
``2**dim`` children or the directions of a neighbourhood, and, once per
connectivity, over trees).  Every change is a sequence of **one-level
steps** (:class:`AdaptStep`): a refinement step replaces marked leaves by
their ``2**dim`` children in Morton order (``p4est_refine``), a coarsening
step replaces complete families of siblings by their parent
(``p4est_coarsen``).  The steps are what field transfers replay
(:mod:`amrckpt.adapt`).

The functions are not collective: they see the leaves they are given.
Refinement is local to each leaf; coarsening needs each family whole in the
arrays given (:func:`amrckpt.partition.keep_families`); :func:`balance`
needs the whole forest (it runs on one rank's complete forest).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import AdaptError
from ._forest import Forest
from ._keys import MAXLEVEL, QMAXLEVEL, ROOT_LEN, morton_keys

__all__ = [
    "CONNECT_TYPES",
    "BalanceQueries",
    "AdaptStep",
    "Adapted",
    "apply_steps",
    "balance",
    "balance_answers",
    "balance_queries",
    "coarsen",
    "coarsen_step",
    "family_members",
    "family_starts",
    "refine",
    "refine_step",
]

Connect = Literal["face", "edge", "corner", "full"]
CONNECT_TYPES: dict[int, tuple[str, ...]] = {2: ("face", "corner", "full"), 3: ("face", "edge", "corner", "full")}
"""p4est's ``p4est_connect_type_t`` by dimension: ``P4EST_CONNECT_FACE``, ``P4EST_CONNECT_CORNER`` (= ``FULL``);
``P8EST_CONNECT_FACE``, ``P8EST_CONNECT_EDGE``, ``P8EST_CONNECT_CORNER`` (= ``FULL``)."""


@dataclass(frozen=True, slots=True)
class AdaptStep:
    """One level of change of a forest's leaves.

    Attributes
    ----------
    kind : {"refine", "coarsen"}
        ``"refine"``: each marked leaf is replaced by its ``2**dim`` children,
        in Morton order (``p4est_refine``).  ``"coarsen"``: each marked leaf
        is the first of a complete family of ``2**dim`` siblings, which is
        replaced by their parent (``p4est_coarsen``).
    mask : (n,) numpy.ndarray of bool
        Over the leaves before the step.
    """

    kind: Literal["refine", "coarsen"]
    mask: np.ndarray

    def counts(self, dim: int) -> np.ndarray:
        """Return the leaves after the step that each leaf before it becomes (refine), or is part of (coarsen).

        Refine: (n,) int64, ``2**dim`` or 1 per leaf before.  Coarsen:
        (m,) int64 over the leaves after, ``2**dim`` or 1: how many leaves
        before each one merges.
        """
        F = 1 << dim
        if self.kind == "refine":
            out: np.ndarray = np.where(self.mask, F, 1).astype(np.int64)
            return out
        keep = ~_members(self.mask, F)
        out = np.where(self.mask[keep], F, 1).astype(np.int64)
        return out


@dataclass(frozen=True, slots=True)
class Adapted:
    """A forest after an adaptation and the one-level steps that made it from the forest before.

    Attributes
    ----------
    forest : Forest
        The new leaves, Morton order.
    steps : tuple of AdaptStep
        In order; empty when nothing changed.
    """

    forest: Forest
    steps: tuple[AdaptStep, ...]


# ------------------------------------------------------------------ steps


def _check_forest(forest: Forest, what: str) -> None:
    if not isinstance(forest, Forest):
        raise AdaptError(f"{what}: expected a Forest, not {type(forest).__name__}")
    if forest.curve != "morton":
        raise AdaptError(f"{what}: the forest is ordered along the {forest.curve} curve; p4est's adaptation needs Morton order")


def _mask(mask: Any, n: int, what: str) -> np.ndarray:
    """``mask`` as an (n,) bool array, or AdaptError naming its length or dtype."""
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise AdaptError(f"{what}: the marker must be an array of bool, not {m.dtype}")
    if m.shape != (n,):
        raise AdaptError(f"{what}: the marker has shape {m.shape}; the forest has ({n},) leaves")
    return m


def _leaf_len(level: np.ndarray, dim: int) -> np.ndarray:
    """Side of each leaf in integer coordinates, ``2**(MAXLEVEL - level)``, int64."""
    out: np.ndarray = np.left_shift(np.int64(1), MAXLEVEL[dim] - level.astype(np.int64))
    return out


def refine_step(forest: Forest, mask: Any) -> Forest:
    """Replace each marked leaf by its ``2**dim`` children, in Morton order (one level of ``p4est_refine``).

    Not collective, vectorized.

    Parameters
    ----------
    forest : Forest
        Morton order.
    mask : (n,) array_like of bool
        The leaves to refine.

    Returns
    -------
    Forest
        ``n + (2**dim - 1) * mask.sum()`` leaves.

    Raises
    ------
    AdaptError
        A marker of the wrong length or dtype, or a marked leaf at ``QMAXLEVEL``.
    """
    _check_forest(forest, "refine")
    d, n = forest.dim, len(forest)
    m = _mask(mask, n, "refine")
    if m.any() and int(forest.level[m].max()) >= QMAXLEVEL[d]:
        i = int(np.flatnonzero(m & (forest.level >= QMAXLEVEL[d]))[0])
        raise AdaptError(f"refine: leaf {i} is at level {int(forest.level[i])}, p4est's QMAXLEVEL in {d}D: it has no children")
    F = 1 << d
    if n and m.all():  # every leaf: children by broadcasting, no index arrays
        half32 = np.left_shift(np.int32(1), (MAXLEVEL[d] - 1 - forest.level).astype(np.int32))
        bits = np.arange(F, dtype=np.int32)
        kids = [(c[:, None] + ((bits >> a) & 1)[None, :] * half32[:, None]).reshape(-1) for a, c in enumerate(forest.coords())]
        lev1 = np.repeat((forest.level + 1).astype(np.int8), F)
        return Forest(np.repeat(forest.tree, F), lev1, *kids, num_trees=forest.num_trees)
    counts = np.where(m, F, 1)
    src = np.repeat(np.arange(n), counts)
    start = np.cumsum(counts) - counts
    child = np.arange(src.shape[0]) - start[src]  # 0 for unrefined leaves
    lev = forest.level[src] + m[src].astype(np.int8)
    half = np.where(m, _leaf_len(forest.level, d) >> 1, 0)[src]
    coords = [(c[src] + ((child >> a) & 1) * half).astype(np.int32) for a, c in enumerate(forest.coords())]
    return Forest(forest.tree[src], lev, *coords, num_trees=forest.num_trees)


def family_starts(forest: Forest) -> np.ndarray:
    """Return where a complete family of siblings starts: ``2**dim`` consecutive leaves, the children of one parent.

    Not collective, vectorized (``2**dim`` passes over the leaves).  A family
    is counted only when all its members are among the leaves given
    (p4est's ``p4est_quadrant_is_familypv``).

    Returns
    -------
    (n,) numpy.ndarray of bool
        True at the first leaf (child 0) of each family.
    """
    _check_forest(forest, "coarsen")
    d, n = forest.dim, len(forest)
    F = 1 << d
    out = np.zeros(n, dtype=bool)
    if n < F:
        return out
    if n % F == 0 and _aligned_families(forest).all():
        # leaves F i .. F i + F - 1 are a family for every i: a leaf is in one family at most, so these are all
        out[::F] = True
        return out
    k = n - F + 1
    lev = forest.level[:k]
    # int32 side (2**30 at level 0 fits; anchors plus a side wrap only where level 0 is refused anyway)
    h = np.left_shift(np.int32(1), (MAXLEVEL[d] - lev).astype(np.int32))
    coords = forest.coords()
    ok = lev >= 1
    for c in coords:
        ok &= (c[:k] & h) == 0  # child 0: the parent's anchor
    for c_i in range(1, F):
        ok &= forest.level[c_i : c_i + k] == lev
        ok &= forest.tree[c_i : c_i + k] == forest.tree[:k]
        for a, c in enumerate(coords):
            ok &= (c[c_i : c_i + k] == c[:k] + h) if (c_i >> a) & 1 else (c[c_i : c_i + k] == c[:k])
    out[:k] = ok
    return out


def _aligned_families(forest: Forest) -> np.ndarray:
    """Return whether leaves ``F i .. F i + F - 1`` are a family, for each i (``n`` a multiple of ``F = 2**dim``).

    The test of :func:`family_starts` on the leaves reshaped to rows of
    ``F``: one pass over each column, ``n / F`` long.
    """
    d = forest.dim
    F = 1 << d
    # contiguous first (a forest read from a file holds views of its records, 13 or 17 bytes apart): one pass each
    lev = np.ascontiguousarray(forest.level).reshape(-1, F)
    tree = np.ascontiguousarray(forest.tree).reshape(-1, F)
    l0, t0 = lev[:, 0], tree[:, 0]
    h = np.left_shift(np.int32(1), (MAXLEVEL[d] - l0).astype(np.int32))
    ok = l0 >= 1
    cols = [np.ascontiguousarray(c).reshape(-1, F) for c in forest.coords()]
    for c in cols:
        ok &= (c[:, 0] & h) == 0  # child 0: the parent's anchor
    for c_i in range(1, F):
        ok &= lev[:, c_i] == l0
        ok &= tree[:, c_i] == t0
        for a, c in enumerate(cols):
            ok &= (c[:, c_i] == c[:, 0] + h) if (c_i >> a) & 1 else (c[:, c_i] == c[:, 0])
    return ok


def _tiles(first: np.ndarray, F: int) -> bool:
    """Whether the families whose first leaves are marked are all the leaves: marks at ``0, F, 2 F, ...`` and nowhere else.

    Then a family's members are a row of the leaves reshaped to rows of ``F``: no index array is needed.
    """
    n = first.shape[0]
    return n % F == 0 and bool(first[::F].all()) and int(np.count_nonzero(first)) * F == n


def family_members(first: np.ndarray, dim: int) -> np.ndarray:
    """Return the members ``1 .. 2**dim - 1`` of the families whose first leaves are marked (the leaves a coarsening drops).

    Not collective, vectorized.

    Parameters
    ----------
    first : (n,) numpy.ndarray of bool
        The first leaf of each family (e.g. an :class:`AdaptStep`'s coarsen mask).
    dim : {2, 3}

    Returns
    -------
    (n,) numpy.ndarray of bool
    """
    return _members(first, 1 << dim)


def _members(first: np.ndarray, F: int) -> np.ndarray:
    """Mark members 1 .. F - 1 of the families whose first leaves are marked."""
    if _tiles(first, F):
        every = np.ones(first.shape[0], dtype=bool)
        every[::F] = False
        return every
    out = np.zeros(first.shape[0], dtype=bool)
    idx = np.flatnonzero(first)
    for c in range(1, F):
        out[idx + c] = True
    return out


def coarsen_step(forest: Forest, first: Any, *, check: bool = True) -> Forest:
    """Replace each family whose first leaf is marked by its parent (one level of ``p4est_coarsen``).

    Not collective, vectorized.

    Parameters
    ----------
    forest : Forest
    first : (n,) array_like of bool
        True at the first leaf of each family to coarsen; every marked leaf
        must start a complete family (:func:`family_starts`).
    check : bool, optional
        Check that it does (default); False for marks taken from
        :func:`family_starts` itself.

    Raises
    ------
    AdaptError
        A marker of the wrong length or dtype, or a marked leaf that does
        not start a complete family.
    """
    _check_forest(forest, "coarsen")
    d, n = forest.dim, len(forest)
    m = _mask(first, n, "coarsen")
    bad = m & ~family_starts(forest) if check else np.zeros(0, dtype=bool)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AdaptError(f"coarsen: leaf {i} does not start a complete family of {1 << d} siblings among the leaves given")
    F = 1 << d
    if _tiles(m, F):  # every leaf in a family: the parents are the first leaves, by slicing
        coords = [c[::F] for c in forest.coords()]
        return Forest(forest.tree[::F], forest.level[::F] - np.int8(1), *coords, num_trees=forest.num_trees)
    keep = ~_members(m, 1 << d)
    lev = forest.level[keep] - m[keep].astype(np.int8)
    # child 0's anchor is its parent's
    return Forest(forest.tree[keep], lev, *[c[keep] for c in forest.coords()], num_trees=forest.num_trees)


def apply_steps(forest: Forest, steps: tuple[AdaptStep, ...]) -> Forest:
    """Replay one-level steps on a forest (what :func:`refine`, :func:`coarsen` and :func:`balance` recorded). Not collective."""
    for s in steps:
        forest = refine_step(forest, s.mask) if s.kind == "refine" else coarsen_step(forest, s.mask)
    return forest


# ------------------------------------------------------------------ refine, coarsen


def _levels(levels: Any, what: str) -> int:
    try:
        k = operator.index(levels)
    except TypeError as exc:
        raise AdaptError(f"{what}: levels must be an int, not {type(levels).__name__}") from exc
    if k < 0:
        raise AdaptError(f"{what}: levels must be >= 0, not {k}")
    return k


def refine(forest: Forest, levels: int = 1, marker: Any = None, *, maxlevel: int | None = None) -> Adapted:
    """Refine leaves by ``levels`` levels, all or where ``marker`` says, up to ``maxlevel`` (``p4est_refine_ext``).

    ``levels`` non-recursive calls of ``p4est_refine_ext(p4est, 0,
    maxlevel, refine_fn, ...)``: in each, a marked leaf below ``maxlevel``
    is replaced by its ``2**dim`` children (Morton order), which inherit its
    mark.  Not collective, vectorized (a loop over the ``levels`` steps).

    Parameters
    ----------
    forest : Forest
        Morton order.
    levels : int, optional
        Levels to refine (default 1).
    marker : (n,) array_like of bool, optional
        The leaves to refine (default all): p4est's ``refine_fn``.
    maxlevel : int, optional
        No leaf is refined beyond this level (inclusive, p4est's
        ``maxlevel``); default ``QMAXLEVEL[dim]``.

    Returns
    -------
    Adapted
        The refined forest and its steps.

    Raises
    ------
    AdaptError
        A marker of the wrong length or dtype, ``levels < 0``, ``maxlevel`` out of ``[0, QMAXLEVEL]``.
    """
    _check_forest(forest, "refine")
    k = _levels(levels, "refine")
    d = forest.dim
    top = _maxlevel(maxlevel, d)
    mark = np.ones(len(forest), dtype=bool) if marker is None else _mask(marker, len(forest), "refine").copy()
    steps: list[AdaptStep] = []
    for _ in range(k):
        m = mark & (forest.level < top)
        if not m.any():
            break
        steps.append(AdaptStep("refine", m))
        forest = refine_step(forest, m)
        mark = np.repeat(mark, 1 << d) if m.all() else np.repeat(mark, np.where(m, 1 << d, 1))
    return Adapted(forest, tuple(steps))


def _maxlevel(maxlevel: Any, d: int) -> int:
    if maxlevel is None:
        return QMAXLEVEL[d]
    top = operator.index(maxlevel)
    if not 0 <= top <= QMAXLEVEL[d]:
        raise AdaptError(f"refine: maxlevel must be in [0, {QMAXLEVEL[d]}] in {d}D, not {top}")
    return top


def coarsen(forest: Forest, levels: int = 1, marker: Any = None, *, minlevel: int = 0) -> Adapted:
    """Coarsen complete families by ``levels`` levels, all or where ``marker`` says, down to ``minlevel`` (``p4est_coarsen_ext``).

    ``levels`` non-recursive calls of ``p4est_coarsen_ext(p4est, 0, 0,
    coarsen_fn, ...)``: in each, ``2**dim`` consecutive leaves that are the
    children of one parent (all present as leaves), all marked and above
    ``minlevel``, are replaced by the parent, which is marked.  Not
    collective, vectorized.  A family is coarsened only if all of it is in
    the leaves given (each rank's range must hold whole families:
    :func:`amrckpt.partition.keep_families`).

    Parameters
    ----------
    forest : Forest
    levels : int, optional
        Passes (default 1).
    marker : (n,) array_like of bool, optional
        The leaves that may be coarsened (default all): p4est's ``coarsen_fn``
        is true for a family when all its members are marked.
    minlevel : int, optional
        No leaf is made coarser than this level (default 0).

    Returns
    -------
    Adapted

    Raises
    ------
    AdaptError
        A marker of the wrong length or dtype, ``levels < 0``, ``minlevel`` out of range.
    """
    _check_forest(forest, "coarsen")
    k = _levels(levels, "coarsen")
    d = forest.dim
    F = 1 << d
    lo = operator.index(minlevel)
    if not 0 <= lo <= QMAXLEVEL[d]:
        raise AdaptError(f"coarsen: minlevel must be in [0, {QMAXLEVEL[d]}] in {d}D, not {lo}")
    mark = np.ones(len(forest), dtype=bool) if marker is None else _mask(marker, len(forest), "coarsen").copy()
    steps: list[AdaptStep] = []
    for _ in range(k):
        first = family_starts(forest) & (forest.level > lo)
        if not first.any():
            break
        n = len(forest)
        if not mark.all():
            allm = mark[: n - F + 1].copy()
            for c in range(1, F):
                allm &= mark[c : n - F + 1 + c]
            first[: n - F + 1] &= allm
            if not first.any():
                break
        steps.append(AdaptStep("coarsen", first))
        forest = coarsen_step(forest, first, check=False)
        mark = mark[::F].copy() if _tiles(first, F) else mark[~_members(first, F)]
    return Adapted(forest, tuple(steps))


# ------------------------------------------------------------------ balance: p4est's tables

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
class _Transforms:
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


def _build_transforms(conn: Any) -> _Transforms:
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
    return _Transforms(face_tree, face_ft, edge, corner)


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
def _cached(key: _ById) -> _Transforms:
    return _build_transforms(key.conn)


# ------------------------------------------------------------------ balance: p4est's kernels


def _log2(x: np.ndarray) -> np.ndarray:
    """``SC_LOG2_32``: floor(log2(x)) of non-negative int64 (exact below 2**53), -1 for 0."""
    _, e = np.frexp(x.astype(np.float64))
    out: np.ndarray = np.where(x > 0, e.astype(np.int64) - 1, -1)
    return out


def _even(v: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``v >> shift`` rounded up to an even number (the kernels' first step)."""
    out: np.ndarray = ((v >> shift) + 1) & ~np.int64(1)
    return out


def _kernel_1d(dist: np.ndarray, level: np.ndarray, d: int) -> np.ndarray:
    """p4est_balance_kernel_1d: the coarsest level at ``dist`` in balance with a quadrant of ``level``."""
    out: np.ndarray = np.maximum(0, level - _log2((dist >> (MAXLEVEL[d] - level)) + 1))
    return out


def _kernel_2d(dx: np.ndarray, dy: np.ndarray, level: np.ndarray, d: int) -> np.ndarray:
    """p4est_balance_kernel_2d: face-only balance in two directions."""
    s = MAXLEVEL[d] - level
    out: np.ndarray = np.maximum(0, level - _log2(_even(dx, s) + _even(dy, s) + 1))
    return out


def _kernel_3d(dx: np.ndarray, dy: np.ndarray, dz: np.ndarray, level: np.ndarray, face: bool) -> np.ndarray:
    """p8est_balance_kernel_3d_edge (``face=False``) and p8est_balance_kernel_3d_face (``face=True``)."""
    s = MAXLEVEL[3] - level
    a, b, c = _even(dx, s), _even(dy, s), _even(dz, s)
    if face:  # dual to the edge kernel
        a, b, c = b + c, c + a, a + b
    maxbit = np.maximum(np.maximum(_log2(a), _log2(b)), _log2(c))
    ret = np.maximum(maxbit, _log2(a + b + c - (a | b | c)))
    zero = (dx == 0) & (dy == 0) & (dz == 0)
    out: np.ndarray = np.where(zero, level, np.maximum(0, level - ret))
    return out


def _splits(o: list[np.ndarray], olev: np.ndarray, p: list[np.ndarray], plev: np.ndarray, d: int, connect: str) -> np.ndarray:
    """Return whether leaf ``p`` must be split to balance quadrant ``o``: p4est_balance_seeds(q=o, p, balance) without the seeds.

    Vectorized over pairs; ``o`` may lie outside ``p``'s tree (an extended
    quadrant, transformed from a neighbour tree), in ``p``'s tree's coordinates.
    """
    L = MAXLEVEL[d]
    olen = np.left_shift(np.int64(1), L - olev)
    plen = np.left_shift(np.int64(1), L - plev)
    ok = olev > plev + 1
    out_n = np.zeros(olev.shape[0], dtype=np.int64)
    diffs = []
    outs = []
    for a in range(d):
        below = o[a] < p[a]
        diff = np.where(below, p[a] - o[a], (o[a] + olen) - (p[a] + plen))
        ok &= diff <= plen  # the insulation layer of p
        away = below | (diff > 0)
        out_n += away
        diffs.append(np.maximum(diff, 0))
        outs.append(away)
    blev = olev.copy()  # type 0: o inside p, always split
    # type 1: across a face (p4est_bal_face_con_internal)
    face_dist = np.zeros_like(olev)
    for a in range(d):
        face_dist = np.where(outs[a], diffs[a], face_dist)
    blev = np.where(out_n == 1, _kernel_1d(face_dist, olev, d), blev)
    if d == 3:  # type 2: across an edge (p8est_bal_edge_con_internal), the two distances in axis order
        first = np.where(~outs[0], diffs[1], diffs[0])
        second = np.where(outs[2], diffs[2], diffs[1])
        e = _kernel_2d(first, second, olev, d) if connect == "face" else _kernel_1d(np.maximum(first, second), olev, d)
        blev = np.where(out_n == 2, e, blev)
    # type dim: across a corner (p4est_bal_corner_con_internal)
    if d == 2:
        c = _kernel_2d(diffs[0], diffs[1], olev, d) if connect == "face" else _kernel_1d(np.maximum(diffs[0], diffs[1]), olev, d)
    elif connect in ("face", "edge"):
        c = _kernel_3d(diffs[0], diffs[1], diffs[2], olev, connect == "face")
    else:
        c = _kernel_1d(np.maximum(np.maximum(diffs[0], diffs[1]), diffs[2]), olev, d)
    blev = np.where(out_n == d, c, blev)
    out: np.ndarray = ok & (blev > plev)
    return out


# ------------------------------------------------------------------ balance: the ripple


def _directions(d: int) -> np.ndarray:
    """Return the offsets (-1, 0, 1)**d but zero: a quadrant's insulation layer (p4est's ``P4EST_INSUL - 1`` quadrants)."""
    grid = np.array(np.meshgrid(*[[-1, 0, 1]] * d, indexing="ij")).reshape(d, -1).T
    out: np.ndarray = grid[np.abs(grid).sum(axis=1) > 0].astype(np.int64)
    return out


class _Locator:
    """Find the leaf that holds a point of a tree, vectorized (``searchsorted`` on tree-major Morton keys)."""

    def __init__(self, forest: Forest) -> None:
        d = forest.dim
        self.d = d
        self.top = int(forest.level.max()) if len(forest) else 0
        self.shift = np.uint64(d * (MAXLEVEL[d] - self.top))
        self.bits = d * self.top
        keys = morton_keys(*forest.coords(), check=False) >> self.shift
        self.combined = self.bits + max(1, int(forest.num_trees - 1).bit_length()) <= 64
        self.tree = forest.tree.astype(np.int64)
        self.level = forest.level.astype(np.int64)
        self.local = keys
        if self.combined:
            self.keys = (forest.tree.astype(np.uint64) << np.uint64(self.bits)) | keys
        else:
            self.tree_start = np.searchsorted(self.tree, np.arange(forest.num_trees + 1))

    def find(self, tree: np.ndarray, coords: list[np.ndarray]) -> np.ndarray:
        """Return the index of the leaf that holds each point (integer coordinates inside the tree), or -1."""
        k = morton_keys(*[c.astype(np.int32) for c in coords], check=False) >> self.shift
        if self.combined:
            j = np.searchsorted(self.keys, (tree.astype(np.uint64) << np.uint64(self.bits)) | k, side="right") - 1
        else:
            j = np.empty(tree.shape[0], dtype=np.int64)
            for t in np.unique(tree):  # a loop over trees
                sel = tree == t
                s, e = int(self.tree_start[t]), int(self.tree_start[t + 1])
                j[sel] = s + np.searchsorted(self.local[s:e], k[sel], side="right") - 1
        j = np.asarray(j, dtype=np.int64)
        jj = np.maximum(j, 0)
        span = np.left_shift(np.int64(1), self.d * (self.top - self.level[jj])).astype(np.uint64)
        ok = (j >= 0) & (self.tree[jj] == tree) & (k >= self.local[jj]) & (k - self.local[jj] < span)
        out: np.ndarray = np.where(ok, jj, -1)
        return out


def _transformed(
    forest: Forest, idx: np.ndarray, tr: _Transforms, dirs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]:
    """Return the quadrants against which p4est balances the leaves of other trees, from leaves ``idx``.

    For each leaf q and each direction of its insulation layer that leaves
    q's tree: q transformed into each neighbour tree across that face, edge
    or corner (``p4est_quadrant_transform_face``, ``p8est_quadrant_transform_edge``
    with ``inside = 0``, ``p4est_quadrant_transform_corner`` with ``inside = 0``),
    as ``p4est_balance_ext`` sends it.  Returns (source leaf, target tree,
    coordinates of o in the target tree, level).
    """
    d = forest.dim
    R = ROOT_LEN[d]
    lev = forest.level[idx].astype(np.int64)
    h = _leaf_len(forest.level[idx], d)
    tree = forest.tree[idx].astype(np.int64)
    base = [c[idx].astype(np.int64) for c in forest.coords()]
    srcs: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    trees: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    cs: list[list[np.ndarray]] = [[np.zeros(0, dtype=np.int64)] * d]
    for delta in dirs:
        n = [base[a] + int(delta[a]) * h for a in range(d)]
        lo = [n[a] < 0 for a in range(d)]
        hi = [n[a] >= R for a in range(d)]
        outside = np.zeros(idx.size, dtype=np.int64)
        for a in range(d):
            outside += lo[a] | hi[a]
        one = np.flatnonzero(outside == 1)
        if one.size:
            f = np.zeros(one.size, dtype=np.int64)
            for a in range(d):
                f = np.where(lo[a][one], 2 * a, f)
                f = np.where(hi[a][one], 2 * a + 1, f)
            nt = tr.face_tree[tree[one], f]
            keep = nt >= 0
            one, f, nt = one[keep], f[keep], nt[keep]
            if one.size:
                ft = tr.face_ft[tree[one], f]
                my = np.stack([base[a][one] for a in range(d)] + [np.zeros(one.size, np.int64)] * (3 - d))
                hh = h[one]
                r = np.zeros((3, one.size), dtype=np.int64)
                cols = np.arange(one.size)
                for j in (0, 1) if d == 3 else (0,):
                    v = my[ft[:, j], cols]
                    r[ft[:, 3 + j], cols] = np.where(ft[:, 6 + j] != 0, R - hh - v, v)
                v = my[ft[:, 2], cols]
                case = ft[:, 8]
                r[ft[:, 5], cols] = np.select([case == 0, case == 1, case == 2], [-hh - v, v + R, v - R], 2 * R - hh - v)
                srcs.append(one)
                trees.append(nt)
                cs.append([r[a] for a in range(d)])
        if d == 3:
            two = np.flatnonzero(outside == 2)
            if two.size:
                par = np.zeros(two.size, dtype=np.int64)
                for a in range(3):
                    par = np.where(~(lo[a][two] | hi[a][two]), a, par)
                others = [(1, 2), (0, 2), (0, 1)]
                e = np.zeros(two.size, dtype=np.int64)
                for p_ax, (a1, a2) in enumerate(others):
                    e = np.where(par == p_ax, 4 * p_ax + hi[a1][two].astype(np.int64) + 2 * hi[a2][two].astype(np.int64), e)
                _listed(srcs, trees, cs, two, tree, e, tr.edge, base, h, d, R, "edge")
        allout = np.flatnonzero(outside == d)
        if allout.size:
            c = np.zeros(allout.size, dtype=np.int64)
            for a in range(d):
                c |= hi[a][allout].astype(np.int64) << a
            _listed(srcs, trees, cs, allout, tree, c, tr.corner, base, h, d, R, "corner")
    src = np.concatenate(srcs)
    return src, np.concatenate(trees), [np.concatenate([c[a] for c in cs]) for a in range(d)], lev[src]


def _listed(
    srcs: list[np.ndarray],
    trees: list[np.ndarray],
    cs: list[list[np.ndarray]],
    sel: np.ndarray,
    tree: np.ndarray,
    which: np.ndarray,
    table: list[list[np.ndarray]],
    base: list[np.ndarray],
    h: np.ndarray,
    d: int,
    R: int,
    kind: str,
) -> None:
    """Append q transformed through the diagonal edge or corner transforms of each (tree, edge or corner), outside."""
    t0 = tree[sel]
    pairs = np.unique(np.stack([t0, which]), axis=1)
    for t, w in pairs.T:  # a loop over the (tree, edge or corner) pairs that occur: at most 12 or 8 per tree
        rows = table[int(t)][int(w)]
        if rows.shape[0] == 0:
            continue
        s = sel[(t0 == t) & (which == w)]
        hh = h[s]
        for row in rows:
            coords = [np.zeros(s.size, dtype=np.int64) for _ in range(d)]
            if kind == "corner":  # p4est_quadrant_transform_corner (inside = 0)
                nt, nc = int(row[0]), int(row[1])
                for a in range(d):
                    coords[a] = np.where((nc >> a) & 1, R, -hh)
            else:  # p8est_quadrant_transform_edge (inside = 0)
                nt, ne, nflip = int(row[0]), int(row[1]), int(row[2])
                ax0, ax1, ax2 = ne // 4, (1 if ne < 4 else 0), (2 if ne < 8 else 1)
                along = base[int(w) // 4][s]
                coords[ax0] = R - hh - along if nflip else along
                coords[ax1] = np.full(s.size, R, np.int64) if (ne % 4) & 1 else -hh
                coords[ax2] = np.full(s.size, R, np.int64) if (ne % 4) & 2 else -hh
            srcs.append(s)
            trees.append(np.full(s.size, nt, dtype=np.int64))
            cs.append(coords)


def balance(forest: Forest, connectivity: Any, connect: str = "full") -> Adapted:
    """Refine the fewest leaves to balance the forest 2:1 as ``p4est_balance`` does; the same leaves as p4est gives.

    p4est's rule, followed here: every leaf q, and q transformed into each
    neighbour tree whose face, edge or corner its insulation layer crosses
    (``p4est_find_face_transform``, ``p8est_find_edge_transform``,
    ``p4est_find_corner_transform``: the diagonal trees of the
    connectivity's edges and corners that are not reached through a face or
    an edge), is balanced against each leaf p of the target tree that holds
    a quadrant of its insulation layer: p is split when
    ``p4est_balance_seeds(q, p, btype)`` says so (the distance kernels of
    p4est_balance.c, which see the ripple of a regular grid around q, also
    beyond an irregular corner such as the centre of the star).  The
    refinement ripples: a round refines every leaf that must be split by
    one level, and the next round checks the new leaves and the leaves that
    split something, until none is split.  Every split is forced, so the
    fixed point is the coarsest forest that satisfies the rule; p4est's
    ``p4est_balance`` gives the same leaves (tests/p4est).

    Not collective: the forest must be the whole forest (a partitioned
    forest is balanced by :mod:`amrckpt.adapt`, which runs the same rounds
    over the ranks with :func:`balance_queries` and :func:`balance_answers`).
    Vectorized: each round is a few passes over the checked leaves
    per direction of the insulation layer; the loops are over rounds,
    directions, and the (tree, edge or corner) pairs that occur.

    Parameters
    ----------
    forest : Forest
        A complete forest in Morton order.
    connectivity : amrckpt.sfc.Connectivity
        Its connectivity (dimension and number of trees must match).
    connect : {"face", "edge", "corner", "full"}, optional
        p4est's ``btype``: ``"face"`` (``P4EST_CONNECT_FACE``), ``"edge"``
        (3D only, ``P8EST_CONNECT_EDGE``), ``"corner"`` or ``"full"``
        (``P4EST_CONNECT_CORNER`` = ``P4EST_CONNECT_FULL``).  Default ``"full"``.

    Returns
    -------
    Adapted
        The balanced forest and one refinement step per round.

    Raises
    ------
    AdaptError
        A connect type the dimension does not have, a connectivity of
        another dimension or number of trees.
    """
    _check_forest(forest, "balance")
    d = forest.dim
    if connect not in CONNECT_TYPES[d]:
        raise AdaptError(f"balance: connect must be one of {CONNECT_TYPES[d]} in {d}D, not {connect!r}")
    if getattr(connectivity, "dim", None) != d or getattr(connectivity, "num_trees", None) != forest.num_trees:
        raise AdaptError(
            f"balance: the connectivity ({getattr(connectivity, 'dim', None)}D, "
            f"{getattr(connectivity, 'num_trees', None)} trees) does not fit the forest ({d}D, {forest.num_trees} trees)"
        )
    ctype = "full" if connect == "corner" else connect
    steps: list[AdaptStep] = []
    check = np.ones(len(forest), dtype=bool)
    while True:
        idx = np.flatnonzero(check & (forest.level >= 2))
        if idx.size == 0:
            break
        q = balance_queries(forest, idx, connectivity, ctype)
        j, split = balance_answers(forest, q, ctype)
        mark = np.zeros(len(forest), dtype=bool)
        mark[j[split]] = True
        if not mark.any():
            break
        violated = np.zeros(len(forest), dtype=bool)
        violated[q.source[split]] = True
        steps.append(AdaptStep("refine", mark))
        counts = np.where(mark, 1 << d, 1)
        forest = refine_step(forest, mark)
        check = np.repeat(mark | violated, counts)
    return Adapted(forest, tuple(steps))


@dataclass(frozen=True)
class BalanceQueries:
    """What balancing leaves asks of the leaves that hold given points (:func:`balance_queries`).

    Attributes
    ----------
    source : (m,) numpy.ndarray of int64
        The asking leaf (an index into the forest that asked).
    tree : (m,) numpy.ndarray of int64
        The tree of the point.
    point : (dim, m) numpy.ndarray of int64
        The point, inside the tree: the leaf that holds it answers.
    quad : (dim, m) numpy.ndarray of int64
        The quadrant o to balance against, in the point's tree's coordinates
        (outside that tree when transformed from a neighbour tree).
    level : (m,) numpy.ndarray of int64
        o's level.
    kernel : (m,) numpy.ndarray of bool
        False: o is a same-tree neighbour (the leaf must be at least
        ``level - 1``); True: p4est's kernel (:func:`balance_answers`).
    """

    source: np.ndarray
    tree: np.ndarray
    point: np.ndarray
    quad: np.ndarray
    level: np.ndarray
    kernel: np.ndarray

    def take(self, sel: Any) -> BalanceQueries:
        """Return the queries ``sel`` (an index or a mask)."""
        return BalanceQueries(
            self.source[sel], self.tree[sel], self.point[:, sel], self.quad[:, sel], self.level[sel], self.kernel[sel]
        )

    @classmethod
    def concat(cls, parts: list[BalanceQueries], dim: int) -> BalanceQueries:
        """Return the queries of ``parts``, in order."""
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            return cls(z, z, np.zeros((dim, 0), np.int64), np.zeros((dim, 0), np.int64), z, np.zeros(0, dtype=bool))
        return cls(
            np.concatenate([p.source for p in parts]),
            np.concatenate([p.tree for p in parts]),
            np.concatenate([p.point for p in parts], axis=1),
            np.concatenate([p.quad for p in parts], axis=1),
            np.concatenate([p.level for p in parts]),
            np.concatenate([p.kernel for p in parts]),
        )


def balance_queries(forest: Forest, idx: np.ndarray, connectivity: Any, connect: str) -> BalanceQueries:
    """Return what leaves ``idx`` ask of the leaves around them to be balanced (one round of :func:`balance`).

    Not collective, vectorized.  Inside a tree: the same-size neighbour
    positions of the connect type (the coarsest balanced forest of a tree,
    ``p4est_complete_or_balance``, by the ripple of direct neighbours).
    Across trees: each leaf transformed into the neighbour trees that its
    insulation layer reaches, and the points of that quadrant's insulation
    layer inside the neighbour tree (``p4est_balance_ext``, ``p4est_tree_compute_overlap``).
    ``connect`` is ``"face"``, ``"edge"`` or ``"full"``.
    """
    d = forest.dim
    R = ROOT_LEN[d]
    tr = _cached(_ById(connectivity))
    dirs = _directions(d)
    near = dirs[np.abs(dirs).sum(axis=1) <= {"face": 1, "edge": 2, "full": d}[connect]]
    lev = forest.level[idx].astype(np.int64)
    hq = _leaf_len(forest.level[idx], d)
    base = [c[idx].astype(np.int64) for c in forest.coords()]
    tq = forest.tree[idx].astype(np.int64)
    parts: list[BalanceQueries] = []
    for delta in near:
        pt = [base[a] + int(delta[a]) * hq for a in range(d)]
        inside = np.ones(idx.size, dtype=bool)
        for a in range(d):
            inside &= (pt[a] >= 0) & (pt[a] < R)
        w = np.flatnonzero(inside)
        parts.append(
            BalanceQueries(
                idx[w], tq[w], np.stack([c[w] for c in pt]), np.stack([c[w] for c in base]), lev[w], np.zeros(w.size, dtype=bool)
            )
        )
    src, t, o, olev = _transformed(forest, idx, tr, dirs)
    if src.size:
        h = np.left_shift(np.int64(1), MAXLEVEL[d] - olev)
        oo = np.stack(o)
        for delta in dirs:  # the insulation layer of each o, inside the target tree
            pt = [o[a] + int(delta[a]) * h for a in range(d)]
            inside = np.ones(src.size, dtype=bool)
            for a in range(d):
                inside &= (pt[a] >= 0) & (pt[a] < R)
            w = np.flatnonzero(inside)
            if w.size:
                parts.append(
                    BalanceQueries(idx[src[w]], t[w], np.stack([c[w] for c in pt]), oo[:, w], olev[w], np.ones(w.size, dtype=bool))
                )
    return BalanceQueries.concat(parts, d)


def balance_answers(forest: Forest, q: BalanceQueries, connect: str) -> tuple[np.ndarray, np.ndarray]:
    """Return, for each query, the leaf of ``forest`` that holds its point (-1: none here) and whether it must be split.

    Not collective, vectorized: ``searchsorted`` on the leaves' keys, then
    the level test or p4est's kernel (``p4est_balance_seeds``).
    """
    d = forest.dim
    if q.source.size == 0 or len(forest) == 0:
        return np.full(q.source.size, -1, dtype=np.int64), np.zeros(q.source.size, dtype=bool)
    loc = _Locator(forest)
    j = loc.find(q.tree, [q.point[a] for a in range(d)])
    ok = j >= 0
    jj = np.maximum(j, 0)
    plev = loc.level[jj]
    split = ok & (plev < q.level - 1)
    k = np.flatnonzero(split & q.kernel)
    if k.size:
        p = [forest.coords()[a][jj[k]].astype(np.int64) for a in range(d)]
        split[k] = _splits([q.quad[a][k] for a in range(d)], q.level[k], p, plev[k], d, connect)
    return j, split
