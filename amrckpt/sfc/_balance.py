"""2:1 balance of a forest, as ``p4est_balance`` does it: the same leaves as p4est gives.

Pure numpy, no Python loop over leaves: the loops run over rounds of the
ripple, the directions of a leaf's insulation layer, and the (tree, edge or
corner) pairs that occur.  :func:`balance` runs on one rank's complete
forest; :func:`balance_queries` and :func:`balance_answers` are one round of
it split between the ranks that ask and the ranks that hold the leaves
(:mod:`amrckpt.adapt` runs the rounds over a partitioned forest).  Every
round is a refinement step (:class:`~amrckpt.sfc.AdaptStep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AdaptError
from ._adapt import Adapted, AdaptStep, _check_forest, _leaf_len, refine_step
from ._forest import Forest
from ._keys import MAXLEVEL, ROOT_LEN, morton_keys
from ._transforms import Transforms, transforms

__all__ = ["CONNECT_TYPES", "BalanceQueries", "balance", "balance_answers", "balance_queries"]

CONNECT_TYPES: dict[int, tuple[str, ...]] = {2: ("face", "corner", "full"), 3: ("face", "edge", "corner", "full")}
"""p4est's ``p4est_connect_type_t`` by dimension: ``P4EST_CONNECT_FACE``, ``P4EST_CONNECT_CORNER`` (= ``FULL``);
``P8EST_CONNECT_FACE``, ``P8EST_CONNECT_EDGE``, ``P8EST_CONNECT_CORNER`` (= ``FULL``)."""


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
    forest: Forest, idx: np.ndarray, tr: Transforms, dirs: np.ndarray
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
    tr = transforms(connectivity)
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
