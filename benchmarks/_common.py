"""What the benchmarks share: the MPI world, rank-0 printing, barrier-to-barrier timing, interleaved runs, the benchmark state.

Import after ``_warm.ensure`` (it may re-execute the process before MPI starts).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from _provenance import provenance
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


def rank_times(fn: Callable[[], Any]) -> list[float]:
    """Run ``fn`` from a barrier; return every rank's own seconds to its return (on every rank)."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    comm.Barrier()
    return [float(x) for x in comm.allgather(dt)]


def stats(xs: list[float]) -> dict[str, float]:
    """Median, minimum, maximum, quartiles and count of ``xs``."""
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "q1": q[0], "q3": q[2], "n": len(xs)}


def spread(s: Mapping[str, float], fmt: str = ".4f") -> str:
    """``median (min-max)`` of a :func:`stats` dict."""
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})"


def interleaved(
    ops: Mapping[str, Callable[[], Any]], reps: int, before: Callable[[str], None] | None = None
) -> dict[str, list[float]]:
    """Time ``ops`` interleaved: A B C, C B A, A B C, ...; ``reps`` rounds after one dropped warm-up round.

    ``before(name)`` runs untimed before each op (e.g. to delete the file a
    new-file write creates).  Each time is the slowest rank's (:func:`timed`).
    """
    names = list(ops)
    t: dict[str, list[float]] = {n: [] for n in names}
    for k in range(reps + 1):
        for n in names if k % 2 == 0 else names[::-1]:
            if before is not None:
                before(n)
            dt = timed(ops[n])
            if k:
                t[n].append(dt)
    return t


def machine() -> dict[str, Any]:
    """Where and when a result was measured, and with which MPI."""
    return provenance() | {"mpi": MPI.Get_library_version().splitlines()[0].strip()}


def write_json(path: str | None, default: str, result: dict[str, Any]) -> None:
    """Write ``result`` (rank 0) to ``path``, or ``default`` if it is None."""
    if rank != 0:
        return
    out = Path(path or default)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**result, "machine": machine()}, indent=1))
    print(f"\nwrote {out}", flush=True)


def local_mesh(n_total: int) -> tuple[ac.Forest, list[int], int, int]:
    """Return this rank's leaves of an ``n_total``-leaf 2D forest of 2 trees (uniform partition), all counts, ``lo``, ``hi``."""
    level = 1
    while 2 * 4**level < n_total:
        level += 1
    lv = sfc.uniform_leaves(level, num_trees=2, dim=2)
    counts = [n_total * (p + 1) // P - n_total * p // P for p in range(P)]
    lo = sum(counts[:rank])
    hi = lo + counts[rank]
    mesh = ac.Forest(lv.tree[lo:hi].copy(), lv.level[lo:hi].copy(), lv.x[lo:hi].copy(), lv.y[lo:hi].copy(), num_trees=2)
    return mesh, counts, lo, hi


def build(n_total: int) -> tuple[Bench, list[int], int]:
    """Return this rank's part of an ``n_total``-leaf state (uniform partition), the counts of all ranks, its first leaf."""
    mesh, counts, lo, hi = local_mesh(n_total)
    rng = np.random.default_rng(rank)
    hp_counts = rng.integers(1, 32, hi - lo)
    state = Bench(
        step=0,
        time=0.0,
        mesh=mesh,
        rho=rng.random(hi - lo),
        energy=rng.random(hi - lo),
        modes=ac.HpData(rng.standard_normal(int(hp_counts.sum())), hp_counts),
    )
    return state, counts, lo
