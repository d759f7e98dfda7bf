"""Leaves in curve order: sorting, linearity checks (p4est ``p4est_tree_is_linear``) and uniform forests."""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from ..errors import PartitionError
from ._follow import _copied
from ._keys import (
    _U64,
    MAXLEVEL,
    QMAXLEVEL,
    Curve,
    _check_curve,
    _coords,
    _first,
    _hilbert_unchecked,
    _int_array,
    _keys,
    _volumes,
    morton_decode,
)
from ._tables import _CHECK_CHUNK as _CHUNK


class Leaves(NamedTuple):
    """The leaves of a forest as parallel arrays, in the argument order of :func:`sfc_order`.

    Unpack it (``tree, level, x, y, z = leaves``) or pass it on as
    ``sfc_order(*leaves)``.

    Attributes
    ----------
    tree : (N,) numpy.ndarray of numpy.int32
        Tree index of each leaf.
    level : (N,) numpy.ndarray of numpy.int8
        Level of each leaf.
    x, y : (N,) numpy.ndarray of numpy.int32
        Anchor coordinates at maximum level.
    z : (N,) numpy.ndarray of numpy.int32 or None
        Third coordinate in 3D; None in 2D.

    """

    tree: np.ndarray
    level: np.ndarray
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray | None = None

    @property
    def dim(self) -> int:
        """The dimension, 2 or 3."""
        return 2 if self.z is None else 3

    @property
    def num_leaves(self) -> int:
        """The number of leaves, N."""
        return int(self.tree.shape[0])


# --------------------------------------------------------------------------- order and linearity


def _leaves(tree: Any, level: Any, x: Any, y: Any, z: Any, check: bool) -> tuple[int, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Validate whole leaves; return ``(dim, tree, level, coords)``.

    Raises
    ------
    PartitionError
        On this rank, for arrays of different lengths or leaves out of range.
    """
    if level is None:
        raise PartitionError("level is required")
    dim, coords, lev = _coords(x, y, z, level, check)
    assert lev is not None
    t = _int_array(tree, "tree")
    if t.shape[0] != coords[0].shape[0]:
        raise PartitionError(f"tree has {t.shape[0]} entries but x has {coords[0].shape[0]}")
    if check and t.size and (t < 0).any():
        i = _first(t < 0)
        raise PartitionError(f"leaf {i}: tree {int(t[i])} is negative")
    return dim, t, lev, coords


def sfc_order(tree: Any, level: Any, x: Any, y: Any, z: Any = None, *, curve: Curve = "morton", check: bool = True) -> np.ndarray:
    """Return the permutation that puts leaves in forest order along ``curve``.

    Forest order is tree major, then key, then level: an ancestor comes
    right before its descendants, as p4est's ``p4est_quadrant_compare``
    orders quadrants of a tree (for ``curve="morton"``).  The sort is
    stable: equal leaves keep their input order.

    Parameters
    ----------
    tree : (N,) array_like of int
        Tree of each leaf, non-negative.
    level : (N,) array_like of int
        Level of each leaf, ``0 <= level <= QMAXLEVEL[dim]``.
    x, y, z : (N,) array_like of int
        Anchor coordinates at maximum level (``z`` only in 3D).
    curve : {"morton", "hilbert"}, optional
        The space-filling curve inside each tree.
    check : bool, optional
        Validate the inputs (default).

    Returns
    -------
    (N,) numpy.ndarray of numpy.intp
        ``order`` such that ``tree[order]``, ``level[order]``, ... are in
        forest order.  Not collective.

    Raises
    ------
    PartitionError
        As :func:`sfc_keys`, or if a tree index is negative.

    """
    _check_curve(curve)
    dim, t, lev, coords = _leaves(tree, level, x, y, z, check)
    keys = _keys(coords, lev, curve)
    # Keys of leaves (level <= QMAXLEVEL) have their low `dim` bits clear, which
    # leaves room for the 5-bit level: (key >> dim) << 5 | level < 2**63.
    keys >>= _U64(dim)
    keys <<= _U64(5)
    keys |= lev.astype(np.uint64)
    order = np.argsort(keys, kind="stable")
    if t.size == 0 or t.min() == t.max():
        return order
    # Tree major: stable LSD radix passes over 16-bit digits of the tree index
    # (numpy sorts uint16 stably by radix sort, in linear time).
    tmin = int(t.min())
    span = int(t.max()) - tmin
    rel = t.astype(np.int64) - tmin
    shift = 0
    while span >> shift:
        digit = ((rel[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


def check_linear_forest(
    tree: Any,
    level: Any,
    x: Any,
    y: Any,
    z: Any = None,
    *,
    curve: Curve = "morton",
    num_trees: int | None = None,
    complete: bool = False,
) -> None:
    """Raise unless the leaves form a linear (optionally complete) forest.

    Linear (p4est ``p4est_tree_is_linear`` in every tree, trees in order):
    the trees are non-decreasing and, inside a tree, each leaf's key range
    ``[key, key + 2**(dim*(L - level)))`` starts at or after the end of the
    previous leaf's range, which means the leaves are in forest order along
    ``curve`` and do not overlap.  Complete (``p4est_tree_is_complete``):
    moreover every tree ``0 .. num_trees - 1`` is covered without gaps.

    Parameters
    ----------
    tree, level, x, y, z : (N,) array_like of int
        The leaves, as for :func:`sfc_order`.
    curve : {"morton", "hilbert"}, optional
        The order the leaves should be in.
    num_trees : int, optional
        The number of trees of the forest; every ``tree`` must be below it.
        With ``complete=True`` and no ``num_trees``, ``max(tree) + 1``.
    complete : bool, optional
        Also require that the leaves cover every tree exactly.

    Returns
    -------
    None
        Not collective.

    Raises
    ------
    PartitionError
        Naming the first offending leaf index: invalid leaves (as
        :func:`sfc_keys`), a tree out of range or smaller than the previous
        one, a leaf out of order or overlapping its predecessor, or, with
        ``complete``, a gap or a tree without leaves.

    """
    _check_curve(curve)
    if curve == "morton" and not complete and num_trees is None and _morton_linear(tree, level, x, y, z):
        return  # valid and linear; any doubt, and the exact check below names the first offending leaf
    dim, t, lev, coords = _leaves(tree, level, x, y, z, True)
    n = t.shape[0]
    if num_trees is not None:
        num_trees = operator.index(num_trees)
        if num_trees < 0:
            raise PartitionError(f"num_trees must be non-negative, not {num_trees}")
        if n and (t >= num_trees).any():
            i = _first(t >= num_trees)
            raise PartitionError(f"leaf {i}: tree {int(t[i])} is not below num_trees = {num_trees}")
    first = _keys(coords, lev, curve)
    stop = first + _volumes(lev, dim)
    if n > 1:
        t64 = t.astype(np.int64, copy=False)
        tree_down = t64[1:] < t64[:-1]
        same = t64[1:] == t64[:-1]
        k0, k1 = first[:-1], first[1:]
        out_of_order = same & ((k1 < k0) | ((k1 == k0) & (lev[1:] < lev[:-1])))
        overlap = same & ~out_of_order & (k1 < stop[:-1])
        bad = tree_down | out_of_order | overlap
        if bad.any():
            j = _first(bad)
            i = j + 1
            if tree_down[j]:
                why = f"tree {int(t[i])} is below tree {int(t[j])} of leaf {j} (trees must be non-decreasing)"
            elif out_of_order[j]:
                why = f"comes before leaf {j} in {curve} order"
            elif lev[i] == lev[j]:
                why = f"duplicates leaf {j}"
            else:
                why = f"lies inside leaf {j}"
            raise PartitionError(
                f"not a linear forest: leaf {i} (tree {int(t[i])}, level {int(lev[i])}, key {int(first[i])}) {why}"
            )
    if not complete:
        return
    if num_trees is None:
        num_trees = int(t.max()) + 1 if n else 0
    if n == 0:
        if num_trees:
            raise PartitionError(f"not a complete forest: tree 0 of {num_trees} has no leaves")
        return
    root = _U64(1 << (dim * MAXLEVEL[dim]))
    starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])  # first leaf of each tree
    present = t[starts]
    if present.shape[0] != num_trees or (present != np.arange(num_trees)).any():
        missing = np.setdiff1d(np.arange(num_trees), present)
        raise PartitionError(f"not a complete forest: tree {int(missing[0])} of {num_trees} has no leaves")
    ends = np.r_[starts[1:], n] - 1  # last leaf of each tree
    gap_before = np.zeros(n, dtype=bool)
    gap_before[1:] = (t[1:] == t[:-1]) & (first[1:] != stop[:-1])
    gap_before[starts] = first[starts] != 0
    gap_after = np.zeros(n, dtype=bool)
    gap_after[ends] = stop[ends] != root
    gap = gap_before | gap_after
    if gap.any():
        i = _first(gap)
        if gap_before[i]:
            prev = "the start of its tree" if i == 0 or t[i] != t[i - 1] else f"the end of leaf {i - 1} (key {int(stop[i - 1])})"
            raise PartitionError(f"not a complete forest: gap before leaf {i} (tree {int(t[i])}, key {int(first[i])}) after {prev}")
        raise PartitionError(f"not a complete forest: gap after leaf {i}, the last of tree {int(t[i])}")


def _morton_linear(tree: Any, level: Any, x: Any, y: Any, z: Any) -> bool:
    """Whether leaves are certainly valid and linear in Morton order (:func:`check_linear_forest`'s fast path).

    Not collective, vectorized, in cache-sized chunks, without curve keys:
    the leaves must be in range (trees non-negative, levels in
    ``[0, QMAXLEVEL]``, coordinates inside the root and aligned to the level,
    checked with a few reductions over uint32), and each leaf ``j = i + 1``
    of the same tree must start at or after the end of leaf ``i``.  For
    aligned leaves that is ``key_j >> dim d > key_i >> dim d`` with
    ``d = MAXLEVEL - level_i``: the Morton order of the anchors shifted
    right by ``d``, which the axis with the highest differing bit decides
    (``z`` over ``y`` over ``x`` on a tie, as the keys interleave them).  About
    25 passes over uint32 and bool per leaf, against the ~70 of the keys
    (uint64) and the comparisons of the exact check.

    Parameters
    ----------
    tree, level, x, y, z : (N,) array_like of int
        As for :func:`check_linear_forest`.

    Returns
    -------
    bool
        True only if :func:`check_linear_forest` (``curve="morton"``, no
        ``num_trees``, not ``complete``) passes; False for leaves of other
        dtypes than int32 (tree, coordinates) and int8 or uint8 (level) and
        for any leaf it would name (the caller then runs the exact check).
    """
    arrays = [np.asarray(a) for a in (tree, x, y) + (() if z is None else (z,))]
    lev = np.asarray(level)
    n = arrays[0].shape[0] if arrays[0].ndim == 1 else -1
    if lev.dtype not in (np.int8, np.uint8) or any(a.dtype != np.int32 for a in arrays):
        return False
    if any(a.shape != (n,) for a in (*arrays, lev)):
        return False
    dim = len(arrays) - 1
    L = MAXLEVEL[dim]
    root = (1 << L) - 1
    m = min(n, _CHUNK + 1)
    # A chunk as contiguous uint32 (level uint8): the arrays themselves, or copies of strided views (of records).
    direct = [a.flags.c_contiguous and a.flags.aligned for a in (*arrays, lev)]
    buf = [None if ok else np.empty(m, dtype=np.uint32) for a, ok in zip(arrays, direct, strict=False)]
    lbuf = None if direct[-1] else np.empty(m, dtype=np.uint8)
    for s in range(0, n - 1 if n > 1 else n, _CHUNK):
        e = min(n, s + _CHUNK + 1)  # one leaf more: the pair that straddles two chunks
        t, *c = (a[s:e].view(np.uint32) if b is None else _copied(b[: e - s], a[s:e]) for a, b in zip(arrays, buf, strict=True))
        lv = lev[s:e].view(np.uint8) if lbuf is None else _copied(lbuf[: e - s], lev[s:e])
        # Ranges: unsigned views make a negative value huge.
        if int(t.max()) > 0x7FFFFFFF or int(lv.max()) > QMAXLEVEL[dim]:
            return False
        u = c[0] | c[1]
        for a in c[2:]:
            u |= a
        if int(np.bitwise_or.reduce(u)) & ~root:
            return False
        np.left_shift(u, lv, out=u)
        if int(np.bitwise_or.reduce(u)) & root:
            return False
        if e - s < 2:
            continue
        # Order of the pairs (i, i + 1): the differing bits of the anchors shifted to leaf i's level.
        d = np.subtract(np.uint32(L), lv[:-1], dtype=np.uint32)
        diff = []
        for a in c:
            v = a[1:] ^ a[:-1]
            np.right_shift(v, d, out=v)
            diff.append(v)
        high = diff[0] | diff[1]
        for v in diff[2:]:
            high |= v
        after = np.greater(c[0][1:], c[0][:-1])  # x decides, unless a later axis holds the highest bit
        for a, v in zip(c[1:], diff[1:], strict=True):
            # msb(v) >= msb(high), that is v >= high & ~v (= high ^ v: v's bits are high's): v holds it.
            np.copyto(after, np.greater(a[1:], a[:-1]), where=v >= (high ^ v))
        after &= high != 0  # no differing bit: leaf i + 1 lies inside leaf i (or is leaf i)
        if after.all():  # every pair in order: then the trees need only not decrease
            if (t[1:] >= t[:-1]).all():
                continue
            return False
        if not np.where(t[1:] == t[:-1], after, t[1:] > t[:-1]).all():
            return False
    return True


def is_linear_forest(
    tree: Any,
    level: Any,
    x: Any,
    y: Any,
    z: Any = None,
    *,
    curve: Curve = "morton",
    num_trees: int | None = None,
    complete: bool = False,
) -> bool:
    """Whether the leaves form a linear (optionally complete) forest.

    Parameters
    ----------
    tree, level, x, y, z, curve, num_trees, complete
        As :func:`check_linear_forest`.

    Returns
    -------
    bool
        False exactly when :func:`check_linear_forest` would raise
        :class:`~amrckpt.errors.PartitionError`.  Not collective.

    """
    try:
        check_linear_forest(tree, level, x, y, z, curve=curve, num_trees=num_trees, complete=complete)
    except PartitionError:
        return False
    return True


def uniform_leaves(level: int, num_trees: int = 1, dim: int = 2, *, curve: Curve = "morton") -> Leaves:
    """Build the complete uniform forest of one level, in forest order.

    Parameters
    ----------
    level : int
        The level of every leaf, ``0 <= level <= QMAXLEVEL[dim]``; each tree
        has ``2**(dim * level)`` leaves.
    num_trees : int, optional
        The number of trees (default 1).
    dim : {2, 3}, optional
        The dimension (default 2).
    curve : {"morton", "hilbert"}, optional
        The order of the leaves inside each tree (default Morton, p4est's).

    Returns
    -------
    Leaves
        ``num_trees * 2**(dim*level)`` leaves; ``tree`` int32, ``level``
        int8, coordinates int32.  Not collective.

    Raises
    ------
    PartitionError
        If an argument is out of range.

    """
    _check_curve(curve)
    if dim not in MAXLEVEL:
        raise PartitionError(f"dim must be 2 or 3, not {dim!r}")
    level = operator.index(level)
    num_trees = operator.index(num_trees)
    if not 0 <= level <= QMAXLEVEL[dim]:
        raise PartitionError(f"level must be in [0, {QMAXLEVEL[dim]}] in {dim}D, not {level}")
    if num_trees < 0:
        raise PartitionError(f"num_trees must be non-negative, not {num_trees}")
    L = MAXLEVEL[dim]
    per_tree = 1 << (dim * level)
    keys = np.arange(per_tree, dtype=np.uint64) << _U64(dim * (L - level))
    coords = list(morton_decode(keys, dim))
    lev = np.full(per_tree, level, dtype=np.int8)
    if curve == "hilbert":
        order = np.argsort(_hilbert_unchecked(coords, lev), kind="stable")
        coords = [c[order] for c in coords]
    tree = np.repeat(np.arange(num_trees, dtype=np.int32), per_tree)
    tiled = [np.tile(c, num_trees) for c in coords]
    return Leaves(tree, np.tile(lev, num_trees), *tiled) if dim == 3 else Leaves(tree, np.tile(lev, num_trees), tiled[0], tiled[1])
