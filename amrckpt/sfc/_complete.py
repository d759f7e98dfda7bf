"""Whether a slice of a forest's leaves leaves a hole: p4est's completeness (``p4est_tree_is_complete``), vectorized."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._keys import MAXLEVEL, morton_keys
from ._tables import _CHECK_CHUNK as _CHUNK

__all__ = ["ForestGap", "forest_gap"]


@dataclass(frozen=True, slots=True)
class ForestGap:
    """The first place where leaves do not cover their forest (what :func:`forest_gap` finds).

    Attributes
    ----------
    index : int
        The global index of the quadrant (leaf) concerned, in curve order.
    tree : int
        Its tree.
    message : str
        A sentence naming both, and what p4est would say is wrong.
    """

    index: int
    tree: int
    message: str

    def __str__(self) -> str:
        return self.message


def _pair(i: int, t0: int, e0: int, t1: int, k1: int, full: int, num_trees: int) -> ForestGap | None:
    """Return the gap between quadrant ``i`` (tree ``t0``, ending at key ``e0``) and the next (tree ``t1``, key ``k1``), or None.

    Quadrant -1 of tree -1 ending at ``full`` stands before the forest;
    quadrant N of tree ``num_trees`` at key 0 after it.
    """
    if t1 == t0:
        if k1 == e0:
            return None
        what = "overlaps the end of" if k1 < e0 else "does not start where"
        tail = "" if k1 < e0 else " ends: a hole between them"
        return ForestGap(i + 1, t1, f"quadrant {i + 1} (tree {t1}) {what} quadrant {i} (tree {t0}){tail} (p4est_tree_is_complete)")
    if t1 < t0:
        return ForestGap(i + 1, t1, f"quadrant {i + 1} is in tree {t1}, after quadrant {i} in tree {t0}: trees must not decrease")
    if e0 != full:
        what = "does not end at the tree's last descendant: a hole (p4est_tree_is_complete)"
        return ForestGap(i, t0, f"quadrant {i}, the last of tree {t0}, {what}")
    if t1 > t0 + 1:
        first, last = t0 + 1, min(t1, num_trees) - 1
        trees = f"tree {first} has" if first == last else f"trees {first} to {last} have"
        where = f"before quadrant {i + 1}" if t1 < num_trees else f"after quadrant {i}, the last"
        return ForestGap(i + 1 if t1 < num_trees else i, first, f"{trees} no quadrants ({where}): a p4est forest covers every tree")
    if k1 != 0 and t1 < num_trees:
        return ForestGap(
            i + 1,
            t1,
            f"quadrant {i + 1}, the first of tree {t1}, does not start at the tree's first descendant: a hole "
            "(p4est_tree_is_complete)",
        )
    return None


def forest_gap(
    tree: Any,
    level: Any,
    x: Any,
    y: Any,
    z: Any = None,
    *,
    first_index: int,
    num_leaves: int,
    num_trees: int,
    before: tuple[int, int, int, int, int | None] | None = None,
) -> ForestGap | None:
    """Return the first hole that a slice of a forest's leaves shows, or None: p4est's completeness, checked locally.

    p4est's forests are complete (``p4est_is_valid``, ``p4est_tree_is_complete``):
    within each tree, each quadrant starts where the one before it ends
    along the Morton curve (``p4est_quadrant_is_next``), the first starts
    at the tree's first descendant and the last ends at its last
    descendant, and every tree holds quadrants.  This checks the leaves
    ``first_index .. first_index + n - 1`` of a forest of ``num_leaves``
    leaves: the pairs among them, the pair of ``before`` (the leaf
    ``first_index - 1``, read by this rank too) and the first, the start of
    the forest where ``first_index`` is 0 and its end where the slice is the
    last.  Ranks that check consecutive slices, each with the leaf before
    its own, check the whole forest, with no communication.

    Not collective, vectorized (one Morton key per leaf, no loop over leaves).

    Parameters
    ----------
    tree : (n,) array_like of int
        The leaves' trees.
    level : (n,) array_like of int
        Their levels.
    x, y : (n,) array_like of int
        Their anchors, in units of ``2**-MAXLEVEL[dim]`` of a tree (30 in
        2D, 19 in 3D), valid and aligned to the level (not checked here:
        :meth:`amrckpt.Forest.check`).
    z : (n,) array_like of int, optional
        The third coordinate: 3D.
    first_index : int
        The global index of the first leaf.
    num_leaves : int
        N, the leaves of the whole forest.
    num_trees : int
        K, its trees.
    before : tuple of (tree, level, x, y, z or None), optional
        Leaf ``first_index - 1``, where ``first_index > 0`` and the slice is
        not empty.

    Returns
    -------
    ForestGap or None
        The first gap, by global index (its quadrant and tree named), or
        None when the slice shows none.
    """
    lev = np.asarray(level)
    n = int(lev.shape[0])
    if n == 0:
        return None
    dim = 2 if z is None else 3
    L = MAXLEVEL[dim]
    full = 1 << (dim * L)
    t = np.asarray(tree)
    coords = [np.asarray(c) for c in ((x, y) if z is None else (x, y, z))]
    g0 = int(first_index)
    if g0 == 0:
        prev: tuple[int, int, int] | None = (-1, -1, full)
    elif before is not None:
        bt, bl, *bc = before
        bk = int(morton_keys(*([np.asarray([c]) for c in bc[:dim]]), check=False)[0])
        prev = (g0 - 1, int(bt), bk + (1 << (dim * (L - int(bl)))))
    else:
        prev = None
    span = np.left_shift(np.uint64(1), np.arange(dim * L, -1, -dim, dtype=np.uint64))  # 2**(dim (L - l)) by level l
    mask, top = np.uint64(full - 1), np.uint64(dim * L)
    last_end = 0
    for s in range(0, n, _CHUNK):  # cache-sized chunks, each with the first leaf of the next
        e = min(n, s + _CHUNK + 1)
        keys = morton_keys(*(c[s:e] for c in coords), check=False)
        ends = keys + span[lev[s:e].astype(np.intp)]
        if s == 0 and prev is not None:
            gap = _pair(prev[0], prev[1], prev[2], int(t[0]), int(keys[0]), full, num_trees)
            if gap is not None:
                return gap
        # The next leaf starts where this one ends, modulo the tree's end (key 0 of the next tree: one tree up).
        tc = t[s:e].astype(np.int64)
        ok = (keys[1:] == (ends[:-1] & mask)) & ((tc[1:] - tc[:-1]) == (ends[:-1] >> top).astype(np.int64))
        if not ok.all():
            j = int(np.flatnonzero(~ok)[0])
            gap = _pair(g0 + s + j, int(tc[j]), int(ends[j]), int(tc[j + 1]), int(keys[j + 1]), full, num_trees)
            assert gap is not None
            return gap
        last_end = int(ends[-1])
    if g0 + n == num_leaves:
        return _pair(g0 + n - 1, int(t[-1]), last_end, num_trees, 0, full, num_trees)
    return None
