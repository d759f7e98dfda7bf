"""2:1 balance of a forest partitioned over the ranks: the rounds of :func:`amrckpt.sfc.balance`, exchanged."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..comm import Call
from ..errors import AdaptError
from ..sfc import AdaptStep, BalanceQueries, Forest, balance_answers, balance_queries, morton_keys, refine_step
from ._exchange import alltoall

__all__ = ["balance_parallel"]


def balance_parallel(call: Call, forest: Forest, conn: Any, connect: str) -> tuple[tuple[AdaptStep, ...], Forest]:
    """p4est_balance of a forest partitioned over the ranks: the rounds of :func:`amrckpt.sfc.balance`, exchanged. Collective.

    In each round every rank asks, for each of its leaves of level 2 or
    more, the leaf that holds each neighbour point (:func:`~amrckpt.sfc.balance_queries`);
    the questions go to the ranks that own the points (found from every
    rank's first leaf, one allgather of P positions), which answer them on
    their leaves (:func:`~amrckpt.sfc.balance_answers`) and refine what must
    be split by one level; an allreduce says whether anything changed.  The
    rounds and their leaves are those of the serial ripple, so the result is
    the same forest on any number of ranks.

    Raises
    ------
    AdaptError
        On every rank alike (before any exchange), if ``conn`` is not a connectivity of the forest's dimension and
        number of trees.
    """
    d = forest.dim
    if getattr(conn, "dim", None) != d or getattr(conn, "num_trees", None) != forest.num_trees:
        raise AdaptError(f"Balance: the connectivity {conn!r} does not fit the forest ({d}D, {forest.num_trees} trees)")
    ctype = "full" if connect == "corner" else connect
    steps: list[AdaptStep] = []
    while True:
        n = len(forest)
        first = [n, int(forest.tree[0]) if n else -1] + ([int(c[0]) for c in forest.coords()] if n else [0] * d)
        firsts = call.allgather_ints(first, what="adapt: balance firsts")
        nonempty = np.flatnonzero(firsts[:, 0] > 0)
        fkeys = morton_keys(*[firsts[nonempty, 2 + a].astype(np.int32) for a in range(d)], check=False)
        ftree = firsts[nonempty, 1]
        idx = np.flatnonzero(forest.level >= 2)
        q = balance_queries(forest, idx, conn, ctype)
        qkeys = morton_keys(*[q.point[a].astype(np.int32) for a in range(d)], check=False)
        # the owner: the last non-empty rank whose first leaf is at or before the point (tree, then key)
        owner = np.zeros(q.source.size, dtype=np.int64)
        for t in np.unique(q.tree):  # a loop over trees
            sel = q.tree == t
            before = int(np.searchsorted(ftree, t, side="left"))  # ranks starting in an earlier tree
            same = np.flatnonzero(ftree == t)
            k = np.searchsorted(fkeys[same], qkeys[sel], side="right") if same.size else np.zeros(int(sel.sum()), np.int64)
            owner[sel] = np.maximum(before + k - 1, 0)
        owner = nonempty[owner] if nonempty.size else owner
        mark = np.zeros(n, dtype=bool)
        outgoing: dict[int, bytes] = {}
        for o in np.unique(owner):  # a loop over the ranks asked
            sel = np.flatnonzero(owner == o)
            part = q.take(sel)
            if int(o) == call.comm.rank:
                j, split = balance_answers(forest, part, ctype)
                mark[j[split]] = True
            else:
                packed = np.concatenate(
                    [part.tree[:, None], part.point.T, part.quad.T, part.level[:, None], part.kernel[:, None].astype(np.int64)],
                    axis=1,
                )
                outgoing[int(o)] = np.ascontiguousarray(packed, dtype="<i8").tobytes()
        for src, data in alltoall(call, outgoing).items():
            if src == call.comm.rank:
                continue
            a = np.frombuffer(data, dtype="<i8").reshape(-1, 2 * d + 3)
            z = np.zeros(a.shape[0], dtype=np.int64)
            theirs = BalanceQueries(z, a[:, 0], a[:, 1 : 1 + d].T, a[:, 1 + d : 1 + 2 * d].T, a[:, 1 + 2 * d], a[:, 2 + 2 * d] != 0)
            j, split = balance_answers(forest, theirs, ctype)
            mark[j[split & (j >= 0)]] = True
        changed = call.reduction("adapt: balance round").sum("marked", int(mark.sum())).run().sum("marked")
        if not changed:
            break
        steps.append(AdaptStep("refine", mark))
        forest = refine_step(forest, mark)
    return tuple(steps), forest
