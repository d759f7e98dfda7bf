#!/usr/bin/env python3
"""Checkpoint cost against the number of leaves N and the number of ranks P, with per-rank times.

Run (one JSON per process count; the plot script joins them)::

    for p in 1 2 3 4; do
        mpiexec -n $p python -m mpi4py benchmarks/bench_scaling.py --json benchmarks/results/scaling-P$p.json
    done
    mpiexec -n 2 python -m mpi4py benchmarks/bench_scaling.py --leaves 100000000 --reps 3 \\
        --json benchmarks/results/scaling-large-P2.json    # 10^8 leaves: 2.1 GB of state, about 12 GB peak
    python benchmarks/bench_scaling.py --quick            # small, as CI runs it

The state: a 2D forest of N leaves (2 trees, uniform partition) and one
float64 cell field, 21 bytes per leaf (13 of mesh: tree, level, x, y).  For
every N of ``--leaves`` (default 10^4 to 10^7; 10^8 on request, it needs
about 12 GB of memory and /dev/shm), interleaved (A B C D, D C B A, ...; one
warm-up round dropped, medians of ``--reps``):

* ``save``: :func:`amrckpt.save` (validation, manifest, CRC32, index);
* ``raw write``: ``MPI.File.Write_at_all`` of the same five arrays, one call
  each, into one file;
* ``load``: :func:`amrckpt.load` on the same P (verifies every byte);
* ``raw read``: ``Read_at_all`` of the five arrays into new arrays.

Writes run in two regimes, labelled: ``new`` (the file is deleted first, so
its pages are allocated inside the timing; noisy on virtual machines) and
``warm`` (overwritten in place: ``truncate=False``; raw MPI-IO without
truncation).  Every rank's own time from the opening barrier to its return is
kept (``by_rank``), and its CPU time (``process_time``; MPICH polls while it
waits, so a waiting rank also burns CPU): a rank-0 hotspot would show as rank
0 taking longer than the others, or as time that stops falling with P at
fixed N.  With more ranks than cores (P = 3, 4 on a 2-core machine) the ranks
share cores; the per-rank times then measure the sharing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import P, comm, local_mesh, rank, say, stats, write_json
from mpi4py import MPI

import amrckpt as ac


class Scale(ac.CheckpointSchema, name="bench-scaling", version=1):
    """A 2D forest and one float64 cell field (21 bytes per leaf)."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")


def build(n_total: int) -> tuple[Scale, list[int], int]:
    mesh, counts, lo, hi = local_mesh(n_total)
    state = Scale(step=0, mesh=mesh, rho=np.random.default_rng(rank).random(hi - lo))
    return state, counts, lo


def per_rank(fn: Any) -> tuple[list[float], list[float]]:
    """Every rank's wall and CPU seconds from a barrier to its return."""
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    w, c = time.perf_counter() - t0, time.process_time() - c0
    comm.Barrier()
    return [float(x) for x in comm.allgather(w)], [float(x) for x in comm.allgather(c)]


def measure(n_total: int, directory: Path, reps: int) -> dict[str, Any]:
    state, counts, lo = build(n_total)
    m = state.mesh
    arrays = [m.tree, m.level, m.x, m.y, state.rho]
    itemsizes = [a.itemsize for a in arrays]
    base = np.concatenate([[0], np.cumsum([n_total * s for s in itemsizes])[:-1]])
    offsets = [int(b + lo * s) for b, s in zip(base, itemsizes, strict=True)]
    raw_total = int(n_total * sum(itemsizes))
    tag = comm.bcast(os.getpid() if rank == 0 else None)
    path = {k: directory / f"amrckpt-bench-scaling-{k}-{tag}" for k in ("save", "raw")}
    regime = {"warm": False}

    def save() -> None:
        ac.save(state, path["save"], comm=comm, access=ac.FileAccess(truncate=not regime["warm"]))

    def load() -> None:
        ac.load(path["save"], Scale, comm=comm, partition=ac.Partition.from_counts(counts))

    def raw_write() -> None:
        fh = MPI.File.Open(comm, str(path["raw"]), MPI.MODE_WRONLY | MPI.MODE_CREATE)
        for off, a in zip(offsets, arrays, strict=True):
            fh.Write_at_all(off, a)
        fh.Close()

    def raw_read() -> None:
        fh = MPI.File.Open(comm, str(path["raw"]), MPI.MODE_RDONLY)
        for off, a in zip(offsets, arrays, strict=True):
            fh.Read_at_all(off, np.empty_like(a))
        fh.Close()

    def remove(k: str) -> None:
        comm.Barrier()
        if rank == 0:
            path[k].unlink(missing_ok=True)
        comm.Barrier()

    ops = {"save": save, "raw write": raw_write, "load": load, "raw read": raw_read}
    wall: dict[str, list[list[float]]] = {}
    cpu: dict[str, list[list[float]]] = {}
    try:
        for reg in ("new", "warm"):
            regime["warm"] = reg == "warm"
            names = list(ops) if reg == "warm" else ["save", "raw write"]  # reads: once, from the page cache
            for k in range(reps + 1):
                for n in names if k % 2 == 0 else names[::-1]:
                    if reg == "new" and n in ("save", "raw write"):
                        remove("save" if n == "save" else "raw")
                    w, c = per_rank(ops[n])
                    key = n if n in ("load", "raw read") else f"{n} {reg}"
                    if k:
                        wall.setdefault(key, []).append(w)
                        cpu.setdefault(key, []).append(c)
        file_nbytes = int(comm.bcast(os.path.getsize(path["save"]) if rank == 0 else None))
    finally:
        for k in path:
            remove(k)
    ops_out = {}
    for key in ("save new", "raw write new", "save warm", "raw write warm", "load", "raw read"):
        runs = wall[key]
        slowest = [max(r) for r in runs]
        ops_out[key] = {
            "s": stats(slowest),
            "by_rank_median_s": [statistics.median(r[p] for r in runs) for p in range(P)],
            "cpu_by_rank_median_s": [statistics.median(r[p] for r in cpu[key]) for p in range(P)],
        }
    pairs = {"save new": "raw write new", "save warm": "raw write warm", "load": "raw read"}
    return {
        "leaves": n_total,
        "P": P,
        "bytes": raw_total,
        "file_bytes": file_nbytes,
        "ops": ops_out,
        "over_raw": {k: ops_out[k]["s"]["median"] / ops_out[v]["s"]["median"] for k, v in pairs.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 10_000_000])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/scaling-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.leaves, a.reps = [10_000, 100_000], 3
    say(f"amrckpt {ac.__version__} scaling benchmark: P={P}, N={a.leaves} leaves (21 B/leaf), {a.reps} repetitions, in {a.dir}")
    results = []
    say(f"\n{'N':>10} {'op':<15} {'median s':>9} {'min-max s':>17} {'ns/leaf':>8} {'x raw':>6}   per-rank median s (cpu s)")
    for n in a.leaves:
        r = measure(n, Path(a.dir), a.reps)
        results.append(r)
        for key, o in r["ops"].items():
            s = o["s"]
            ratio = r["over_raw"].get(key)
            ranks = " ".join(f"{w:.4f}({c:.3f})" for w, c in zip(o["by_rank_median_s"], o["cpu_by_rank_median_s"], strict=True))
            say(
                f"{n:>10} {key:<15} {s['median']:>9.4f} {s['min']:>8.4f}-{s['max']:<8.4f} {s['median'] / n * 1e9:>8.1f} "
                f"{'' if ratio is None else f'{ratio:.3f}':>6}   {ranks}"
            )
    say("  (x raw: time over raw MPI-IO of the same arrays in the same run; ns/leaf: slowest rank's median / N)")
    write_json(
        a.json,
        f"bench-results/scaling-P{P}.json",
        {
            "benchmark": "scaling",
            "amrckpt": ac.__version__,
            "P": P,
            "reps": a.reps,
            "dir": a.dir,
            "memory": a.memory,
            "runs": results,
        },
    )


if __name__ == "__main__":
    main()
