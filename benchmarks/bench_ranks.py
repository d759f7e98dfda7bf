#!/usr/bin/env python3
"""Cost of a save and a load against the number of ranks P, with small data: collectives, MPI-IO calls, time over raw.

Run (one process count per run; oversubscribed beyond the cores)::

    for p in 1 2 4 8 16 32 64; do
        mpiexec -n $p python -m mpi4py benchmarks/bench_ranks.py --json benchmarks/results/ranks-P$p.json
    done
    python benchmarks/bench_ranks.py --quick          # serial, as CI runs it

The state: a 2D forest of ``--leaves`` leaves (default 20,000: about 420 kB
of file) and one float64 cell field (the schema of ``bench_scaling.py``: 3
fields).  Measured in the same run, interleaved (A B C D, D C B A, ...; one
warm-up round dropped; medians of ``--reps``):

* ``save``: :func:`amrckpt.save` onto a file overwritten in place
  (``truncate=False``: no page allocation in the timing);
* ``raw write``: ``MPI_File_open``, one ``MPI_File_write_at_all`` per array
  of the state (the same bytes, without the scda framing), ``MPI_File_close``;
* ``load``: :func:`amrckpt.load` under the writing partition (verifies every byte);
* ``raw read``: ``MPI_File_open``, one ``MPI_File_read_at_all`` per array, close.

Counted, on one save and one load outside the timing: the collective calls of
the :class:`amrckpt.comm.Comm` (a wrapper, :class:`amrckpt.testing.WrapperComm`,
that counts each method; an agreement is one ``allreduce_columns``), and every
MPI-IO call of the backend (open, write_at, write_at_all, read_at,
read_at_all, set_size, get_size, sync, close) per rank.  With ``--memory-per-rank
N``, the peak of Python allocations (``tracemalloc``) of one save and one load
at N leaves per rank: what grows with P at fixed local data is O(P) memory.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import P, comm, local_mesh, rank, say, stats, timed, write_json
from mpi4py import MPI

import amrckpt as ac
from amrckpt.scda import _mpiio
from amrckpt.testing import WrapperComm


class Ranks(ac.CheckpointSchema, name="bench-ranks", version=1):
    """A 2D forest and one float64 cell field (21 bytes per leaf)."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")


COUNTS: collections.Counter[str] = collections.Counter()
"""Calls since the last reset: ``comm.<method>`` and ``mpiio.<method>`` (this rank's)."""


class CountingComm(WrapperComm):
    """A communicator that counts its collective calls in :data:`COUNTS` (``comm.<method>``)."""

    def _after(self, name: str) -> None:
        COUNTS[f"comm.{name}"] += 1


class CountingFile:
    """Forwards to an ``MPI.File``, counting each method call in :data:`COUNTS`."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fh, name)
        if not callable(attr):
            return attr

        def counted(*a: Any, **k: Any) -> Any:
            COUNTS[f"mpiio.{name}"] += 1
            return attr(*a, **k)

        return counted


_orig_init = _mpiio.MPIIOBackend.__init__


def _counting_init(self: Any, *a: Any, **k: Any) -> None:
    COUNTS["mpiio.Open"] += 1
    _orig_init(self, *a, **k)
    if getattr(self, "_fh", None) is not None and not isinstance(self._fh, CountingFile):
        self._fh = CountingFile(self._fh)


def install_counters() -> None:
    """Count the MPI-IO calls of every backend opened from now on."""
    _mpiio.MPIIOBackend.__init__ = _counting_init  # type: ignore[method-assign]


COLLECTIVE_MPIIO = {
    "mpiio.Open",
    "mpiio.Write_at_all",
    "mpiio.Read_at_all",
    "mpiio.Set_size",
    "mpiio.Sync",
    "mpiio.Close",
    "mpiio.Write_all",
    "mpiio.Read_all",
    "mpiio.Set_view",
    "mpiio.Get_size",
}


INDEPENDENT_MPIIO = {"mpiio.Write_at", "mpiio.Read_at"}


def build(n_total: int) -> tuple[Ranks, list[int], int]:
    mesh, counts, lo, hi = local_mesh(n_total)
    state = Ranks(step=0, mesh=mesh, rho=np.random.default_rng(rank).random(hi - lo))
    return state, counts, lo


def counted(fn: Any) -> dict[str, Any]:
    """Run ``fn`` once; return this rank's counts and the maximum over ranks of each."""
    comm.Barrier()
    COUNTS.clear()
    fn()
    mine = dict(COUNTS)
    everyone = comm.allgather(mine)
    keys = sorted({k for d in everyone for k in d})
    mx = {k: max(d.get(k, 0) for d in everyone) for k in keys}
    return {
        "rank0": mine if rank == 0 else everyone[0],
        "max": mx,
        "comm_collectives": max(sum(v for k, v in d.items() if k.startswith("comm.")) for d in everyone),
        "mpiio_calls_max_rank": max(sum(v for k, v in d.items() if k.startswith("mpiio.")) for d in everyone),
        "mpiio_collective": max(sum(v for k, v in d.items() if k in COLLECTIVE_MPIIO) for d in everyone),
        "mpiio_independent_rank0": sum(v for k, v in everyone[0].items() if k in INDEPENDENT_MPIIO),
        "mpiio_independent_max": max(sum(v for k, v in d.items() if k in INDEPENDENT_MPIIO) for d in everyone),
    }


def memory(n_per_rank: int, directory: Path, tag: int, info: Any) -> dict[str, Any]:
    """Peak traced Python allocations of one save and one load at ``n_per_rank`` leaves per rank."""
    state, counts, _ = build(n_per_rank * P)
    cc = CountingComm(comm)
    path = directory / f"amrckpt-bench-ranks-mem-{tag}"
    out: dict[str, Any] = {}
    for name, fn in (
        ("save", lambda: ac.save(state, path, comm=cc, access=ac.FileAccess(truncate=False, info=info))),
        (
            "load",
            lambda: ac.load(path, Ranks, comm=cc, partition=ac.Partition.from_counts(counts), access=ac.FileAccess(info=info)),
        ),
    ):
        fn()  # warm caches (imports, schema digests)
        comm.Barrier()
        tracemalloc.start()
        fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peaks = comm.allgather(peak)
        out[name] = {"peak_rank0": peaks[0], "peak_max": max(peaks), "peak_median": statistics.median(peaks)}
    comm.Barrier()
    if rank == 0:
        path.unlink(missing_ok=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/ranks-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--memory-per-rank", type=int, default=200, help="leaves per rank of the tracemalloc pass (0: skip)")
    ap.add_argument("--hint", action="append", default=[], metavar="KEY=VALUE", help="an MPI-IO hint (repeatable)")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.reps = 3
    info = dict(h.split("=", 1) for h in a.hint) or None
    install_counters()
    n_total = a.leaves
    say(f"amrckpt {ac.__version__} ranks benchmark: P={P}, N={n_total} leaves (21 B/leaf), {a.reps} repetitions, in {a.dir}")
    state, counts, lo = build(n_total)
    m = state.mesh
    arrays = [m.tree, m.level, m.x, m.y, state.rho]
    itemsizes = [x.itemsize for x in arrays]
    base = np.concatenate([[0], np.cumsum([n_total * s for s in itemsizes])[:-1]])
    offsets = [int(b + lo * s) for b, s in zip(base, itemsizes, strict=True)]
    tag = comm.bcast(os.getpid() if rank == 0 else None)
    directory = Path(a.dir)
    path = {k: directory / f"amrckpt-bench-ranks-{k}-{tag}" for k in ("save", "raw")}
    cc = CountingComm(comm)
    part = ac.Partition.from_counts(counts)
    mpi_info = MPI.INFO_NULL
    if info:
        mpi_info = MPI.Info.Create()
        for k, v in info.items():
            mpi_info.Set(k, v)

    def save() -> None:
        ac.save(state, path["save"], comm=cc, access=ac.FileAccess(truncate=False, info=info))

    def load() -> None:
        ac.load(path["save"], Ranks, comm=cc, partition=part, access=ac.FileAccess(info=info))

    def raw_write() -> None:
        fh = MPI.File.Open(comm, str(path["raw"]), MPI.MODE_WRONLY | MPI.MODE_CREATE, mpi_info)
        for off, x in zip(offsets, arrays, strict=True):
            fh.Write_at_all(off, x)
        fh.Close()

    def raw_read() -> None:
        fh = MPI.File.Open(comm, str(path["raw"]), MPI.MODE_RDONLY, mpi_info)
        for off, x in zip(offsets, arrays, strict=True):
            fh.Read_at_all(off, np.empty_like(x))
        fh.Close()

    try:
        save()
        raw_write()
        counts_save = counted(save)
        counts_load = counted(load)
        ops = {"save": save, "raw write": raw_write, "load": load, "raw read": raw_read}
        names = list(ops)
        t: dict[str, list[float]] = {n: [] for n in names}
        for k in range(a.reps + 1):
            for n in names if k % 2 == 0 else names[::-1]:
                dt = timed(ops[n])
                if k:
                    t[n].append(dt)
        file_nbytes = int(comm.bcast(os.path.getsize(path["save"]) if rank == 0 else None))
    finally:
        comm.Barrier()
        if rank == 0:
            for p in path.values():
                p.unlink(missing_ok=True)
    st = {n: stats(v) for n, v in t.items()}
    over = {"save": st["save"]["median"] / st["raw write"]["median"], "load": st["load"]["median"] / st["raw read"]["median"]}
    mem = memory(a.memory_per_rank, directory, tag, info) if a.memory_per_rank else None
    say(f"file: {file_nbytes} bytes; {len(Ranks.__amrckpt_fields__)} fields")
    for n in names:
        s = st[n]
        say(f"  {n:<10} median {s['median'] * 1e3:8.2f} ms  ({s['min'] * 1e3:.2f}-{s['max'] * 1e3:.2f})")
    say(f"  save / raw write = {over['save']:.2f}x   load / raw read = {over['load']:.2f}x")
    for what, c in (("save", counts_save), ("load", counts_load)):
        say(
            f"  {what}: {c['comm_collectives']} Comm collectives, {c['mpiio_collective']} collective MPI-IO calls, "
            f"{c['mpiio_calls_max_rank']} MPI-IO calls on the busiest rank ({c['mpiio_independent_max']} independent)"
        )
        say(f"        rank 0: {dict(sorted(c['rank0'].items()))}")
    if mem:
        say(
            f"  tracemalloc peak at {a.memory_per_rank} leaves/rank: save {mem['save']['peak_max'] / 1e3:.1f} kB, "
            f"load {mem['load']['peak_max'] / 1e3:.1f} kB (max over ranks)"
        )
    write_json(
        a.json,
        f"bench-results/ranks-P{P}.json",
        {
            "benchmark": "ranks",
            "amrckpt": ac.__version__,
            "P": P,
            "leaves": n_total,
            "reps": a.reps,
            "dir": a.dir,
            "hints": info,
            "file_bytes": file_nbytes,
            "fields": len(Ranks.__amrckpt_fields__),
            "ops": st,
            "over_raw": over,
            "counts": {"save": counts_save, "load": counts_load},
            "memory_per_rank_leaves": a.memory_per_rank,
            "tracemalloc": mem,
        },
    )


if __name__ == "__main__":
    main()
