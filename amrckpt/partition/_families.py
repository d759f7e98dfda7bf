"""Families of siblings kept on one rank: p4est's partition for coarsening (``allow_for_coarsening``).

A partition that splits a family of ``2**dim`` sibling leaves between two
ranks stops p4est from ever coarsening it; :func:`keep_families` moves each
such cut to the family's first leaf, as ``p4est_partition_ext`` does with
``allow_for_coarsening = 1`` (p4est_algorithms.c, ``p4est_partition_correction``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..comm import Comm, as_comm, collective
from ..errors import PartitionError
from ._partition import Partition

__all__ = ["family_window", "keep_families"]


def family_window(partition: Partition, rank: int, dim: int) -> tuple[int, int]:
    """Return ``(start, count)``: the leaves that :func:`keep_families` needs from ``rank``, around its first leaf.

    The ``2 * 2**dim - 2`` leaves around the cut ``C_rank`` (fewer at the
    ends of ``[0, N)``; none on rank 0): every family of siblings that the
    cut splits lies inside.  Not collective.
    """
    F = 1 << dim
    if rank == 0:
        return 0, 0
    c = int(partition.global_first_quadrant[rank])
    lo, hi = max(0, c - F + 1), min(partition.N, c + F - 1)
    return lo, max(0, hi - lo)


def _family_start(start: int, tree: np.ndarray, level: np.ndarray, coords: list[np.ndarray], cut: int, maxlevel: int) -> int:
    """Return the first leaf of the family of siblings that the cut splits, or -1 (vectorized over the few candidates)."""
    dim = len(coords)
    F = 1 << dim
    n = tree.shape[0]
    if n < F:
        return -1
    first = np.arange(max(start, cut - F + 1), cut) - start  # candidate first members, window-relative
    first = first[(first >= 0) & (first + F <= n)]
    if first.size == 0:
        return -1
    members = first[:, None] + np.arange(F)[None, :]  # (candidates, F)
    lev = level.astype(np.int64)[members]
    ok = (lev == lev[:, :1]).all(axis=1) & (lev[:, 0] >= 1) & (tree[members] == tree[members][:, :1]).all(axis=1)
    shift = (maxlevel - lev[:, 0] + 1).clip(0, 62)  # the parent's side: 2**(maxlevel - level + 1)
    for c in coords:
        parent = c.astype(np.int64)[members] >> shift[:, None]
        ok &= (parent == parent[:, :1]).all(axis=1)
        ok &= (c.astype(np.int64)[first] & ((np.int64(1) << shift) - 1)) == 0  # the first member is child 0
    hit = np.flatnonzero(ok)
    return int(start + first[hit[0]]) if hit.size else -1


def keep_families(
    partition: Partition,
    tree: Any,
    level: Any,
    coords: Any,
    *,
    maxlevel: int,
    comm: Any = None,
) -> Partition:
    """Move the cuts of a partition that split a family of siblings, as p4est's ``partition_for_coarsening`` does.

    A family is ``2**dim`` consecutive leaves that are the children of one
    parent (the same tree and level, one parent anchor, the first the
    parent's child 0): p4est coarsens a family only when one process holds
    it.  A cut ``C_q`` that falls inside a family moves to the family's
    start or end, so that the family goes whole to the rank that held most
    of it under ``partition`` (on a tie, the lowest such rank;
    ``p4est_partition_correction``); the ranks between become empty.  Every
    other cut stays.

    Collective: each rank q passes the leaves around its own cut
    (:func:`family_window`: at most ``2 * 2**dim - 2`` of them) and looks
    for a family there, vectorized; one ``MPI_Allgather`` of one int64 per
    rank (the new cut, which also agrees on errors) gives the result.
    Nothing of size P is sent or built but the result.

    Parameters
    ----------
    partition : Partition
        The partition to correct (e.g. :meth:`Partition.uniform` or
        :meth:`Partition.weighted` of the new job), the same on every rank.
    tree, level : (w,) array_like of int
        The window of leaves of this rank (:func:`family_window`), in curve order.
    coords : sequence of (w,) array_like of int
        Their anchor coordinates ``x, y[, z]`` at maximum level (p4est's).
    maxlevel : int
        p4est's ``MAXLEVEL`` of the coordinates (30 in 2D, 19 in 3D).
    comm : None, mpi4py.MPI.Comm or Comm, optional
        The communicator of ``partition.size`` ranks.  Inside a collective
        call of amrckpt (a load), an earlier failure of this rank (reading
        its window) is agreed on in the same allgather.

    Returns
    -------
    Partition
        Of the same N over the same ranks, on every rank.

    Raises
    ------
    PartitionError
        On every rank: a window of the wrong size, a partition of another size than ``comm``.
    """

    def cut_of(c: Comm) -> int:
        if partition.size != c.size:
            raise PartitionError(f"keep_families: a partition of {partition.size} ranks on {c.size}")
        crd = [np.asarray(x) for x in coords]
        t, lev = np.asarray(tree), np.asarray(level)
        start, count = family_window(partition, c.rank, len(crd))
        if t.shape != (count,) or lev.shape != (count,) or any(x.shape != (count,) for x in crd) or len(crd) not in (2, 3):
            raise PartitionError(f"keep_families: rank {c.rank} needs the {count} leaves from {start} (family_window)")
        cut = int(partition.global_first_quadrant[c.rank])
        s = _family_start(start, t, lev, crd, cut, maxlevel) if c.rank else -1
        if s >= 0:
            F = 1 << len(crd)
            g = partition.global_first_quadrant
            ranks = np.arange(int(np.searchsorted(g, s, side="right")) - 1, int(np.searchsorted(g, s + F - 1, side="right")))
            held = np.minimum(g[ranks + 1], s + F) - np.maximum(g[ranks], s)
            winner = int(ranks[int(np.argmax(held))])  # argmax: the first (lowest) rank of the largest share
            cut = s + F if winner < c.rank else s
        return cut

    with collective(as_comm(comm), "keep_families") as call:
        cuts = call.allgather_int(call.run(cut_of, call.comm) or 0, what="keep_families")
    cuts[0] = 0
    return Partition.from_offsets(np.concatenate([cuts, [partition.N]]).astype(np.int64))
