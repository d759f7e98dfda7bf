"""What the benchmarks share: the MPI world, rank-0 printing, barrier-to-barrier timing, the benchmark state.

Import after ``_warm.ensure`` (it may re-execute the process before MPI starts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

import amrckpt as ac
from amrckpt import sfc

comm = MPI.COMM_WORLD
P, rank = comm.size, comm.rank


class Bench(ac.CheckpointSchema, name="bench", version=1):
    """A 2D forest, two float64 cell fields and an hp field of 1 to 31 float64 per leaf (about 157 bytes per leaf)."""

    step: int = ac.Inline()
    time: float = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")
    energy: ac.CellData = ac.Cells("<f8")
    modes: ac.HpData = ac.HpCells("<f8")


def say(*a: Any) -> None:
    """Print on rank 0."""
    if rank == 0:
        print(*a, flush=True)


def timed(fn: Callable[[], Any]) -> float:
    """Run ``fn`` from a barrier to a barrier; return the slowest rank's seconds."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    comm.Barrier()
    return float(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))


def build(n_total: int) -> tuple[Bench, list[int], int]:
    """Return this rank's part of an ``n_total``-leaf state (uniform partition), the counts of all ranks, its first leaf."""
    level = 1
    while 2 * 4**level < n_total:
        level += 1
    lv = sfc.uniform_leaves(level, num_trees=2, dim=2)
    counts = [n_total * (p + 1) // P - n_total * p // P for p in range(P)]
    lo = sum(counts[:rank])
    hi = lo + counts[rank]
    rng = np.random.default_rng(rank)
    hp_counts = rng.integers(1, 32, hi - lo)
    mesh = ac.Forest(lv.tree[lo:hi].copy(), lv.level[lo:hi].copy(), lv.x[lo:hi].copy(), lv.y[lo:hi].copy(), num_trees=2)
    state = Bench(
        step=0,
        time=0.0,
        mesh=mesh,
        rho=rng.random(hi - lo),
        energy=rng.random(hi - lo),
        modes=ac.HpData(rng.standard_normal(int(hp_counts.sum())), hp_counts),
    )
    return state, counts, lo
