"""Changing the leaves of a forest: refinement and coarsening, as p4est does them, in one-level steps.

Pure numpy on the arrays of a :class:`~amrckpt.sfc.Forest` (tree, level,
integer coordinates, Morton order per tree), no Python loop over leaves
(the loops here run over levels and the ``2**dim`` children).  Every change
is a sequence of **one-level steps** (:class:`AdaptStep`): a refinement
step replaces marked leaves by their ``2**dim`` children in Morton order
(``p4est_refine``), a coarsening step replaces complete families of
siblings by their parent (``p4est_coarsen``).  The steps are what field
transfers replay (:mod:`amrckpt.adapt`); 2:1 balance
(:mod:`amrckpt.sfc._balance`) records refinement steps too.

The functions are not collective: they see the leaves they are given.
Refinement is local to each leaf; coarsening needs each family whole in the
arrays given (:func:`amrckpt.partition.keep_families`).
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import numpy as np

from .._threads import default_threads, map_shared
from ..errors import AdaptError
from ._forest import Forest
from ._keys import MAXLEVEL, QMAXLEVEL

try:  # the compiled loops (amrckpt/_kernels.c, an optional extension): without them, numpy's code below
    _kernels: ModuleType | None = importlib.import_module("amrckpt._kernels")
except ImportError:  # pragma: no cover - a build without a C compiler
    _kernels = None

__all__ = [
    "AdaptStep",
    "Adapted",
    "apply_steps",
    "coarsen",
    "coarsen_step",
    "family_members",
    "family_starts",
    "refine",
    "refine_step",
]


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
        keep = ~family_members(self.mask, dim)
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
    """``mask`` as an (n,) bool array, or AdaptError naming its length or dtype.

    Raises
    ------
    AdaptError
        On this rank, for a marker of another length than the leaves, or not of booleans.
    """
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
        kids = []
        for a, c in enumerate(forest.coords()):
            kid = np.empty((n, F), dtype=np.int32)
            kid[:] = c[:, None]
            # the children whose bit a is set (Morton order): the parent's anchor plus half its side along axis a
            kid.reshape(n, F >> (a + 1), 2, 1 << a)[:, :, 1, :] += half32[:, None, None]
            kids.append(kid.reshape(-1))
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
    if n % F == 0 and _tiled(forest):
        # leaves F i .. F i + F - 1 are a family for every i: a leaf is in one family at most, so these are all
        out[::F] = True
        return out
    k = n - F + 1
    out[:k] = _families(forest.tree, forest.level, forest.coords(), lambda a, c_i: a[c_i : c_i + k], d)
    return out


def _tiled(forest: Forest) -> bool:
    """Whether leaves ``F i .. F i + F - 1`` are a family for every ``i`` (``n`` a multiple of ``F = 2**dim``).

    The compiled loop (``amrckpt/_kernels.c``: one pass through the
    strides, no copies; ranges of rows on the threads there are) where it
    is built; else :func:`_families` on rows, made contiguous first (a
    forest read from a file holds views of its records, 13 or 17 bytes
    apart): one pass over each column.
    """
    F = 1 << forest.dim
    if _kernels is not None:
        threads = default_threads()
        cut = [F * (len(forest) // F * i // threads) for i in range(threads + 1)]

        def row_range(k: int) -> bool:
            a, b = cut[k], cut[k + 1]
            coords = tuple(c[a:b] for c in forest.coords())
            return bool(_kernels.tiled_families(forest.tree[a:b], forest.level[a:b], coords, MAXLEVEL[forest.dim]))

        return all(map_shared(row_range, range(threads), threads))
    rows = [np.ascontiguousarray(a).reshape(-1, F) for a in (forest.tree, forest.level, *forest.coords())]
    return bool(_families(rows[0], rows[1], rows[2:], lambda a, c_i: a[:, c_i], forest.dim).all())


def _families(
    tree: np.ndarray, level: np.ndarray, coords: list[np.ndarray], member: Callable[[np.ndarray, int], np.ndarray], d: int
) -> np.ndarray:
    """Return whether each candidate's ``2**dim`` leaves are a family: the children of one parent, in Morton order.

    ``member(a, c_i)`` is the ``c_i``-th leaf of every candidate in the
    array ``a`` (the trees, the levels or a coordinate): the leaves shifted
    by ``c_i`` (:func:`family_starts`' test at every leaf), or column
    ``c_i`` of the leaves reshaped to rows of ``2**dim`` (its test of the
    rows: one pass over each column, ``n / 2**dim`` long).
    """
    l0, t0 = member(level, 0), member(tree, 0)
    c0 = [member(c, 0) for c in coords]
    # int32 side (2**30 at level 0 fits; anchors plus a side wrap only where level 0 is refused anyway)
    h = np.left_shift(np.int32(1), (MAXLEVEL[d] - l0).astype(np.int32))
    ok = l0 >= 1
    for c in c0:
        ok &= (c & h) == 0  # child 0: the parent's anchor
    for c_i in range(1, 1 << d):
        ok &= member(level, c_i) == l0
        ok &= member(tree, c_i) == t0
        for a, c in enumerate(coords):
            ok &= (member(c, c_i) == c0[a] + h) if (c_i >> a) & 1 else (member(c, c_i) == c0[a])
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
    F = 1 << dim
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
    keep = ~family_members(m, d)
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
    top = QMAXLEVEL[d] if maxlevel is None else operator.index(maxlevel)
    if not 0 <= top <= QMAXLEVEL[d]:
        raise AdaptError(f"refine: maxlevel must be in [0, {QMAXLEVEL[d]}] in {d}D, not {top}")
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
        mark = mark[::F].copy() if _tiles(first, F) else mark[~family_members(first, d)]
    return Adapted(forest, tuple(steps))
