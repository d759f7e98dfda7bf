#!/usr/bin/env python3
"""Per-operation constants of the cost model in docs/scaling.md: one MPI or MPI-IO operation at P ranks.

Run (one process count per run)::

    for p in 2 4 8 16 32 64; do
        mpiexec -n $p python -m mpi4py benchmarks/bench_constants.py --json benchmarks/results/constants-P$p.json
    done

Medians of ``--reps`` (after one warm-up) of the slowest rank's time, from a
barrier, of: ``MPI_Barrier``; ``MPI_Allreduce`` of 8 int64 (what ``agree``
sends); a pickle-based ``MPI_Allreduce`` and ``MPI_Exscan`` of a short list of
Python ints (the save's report); ``MPI_Bcast`` of 4 kB of pickle (the
metadata of a load); ``MPI_Allgather`` of one int64; ``MPI_File_open`` +
``MPI_File_close``; ``MPI_File_set_view`` + ``MPI_File_write_all`` of 1 kB per
rank; ``MPI_File_read_at_all`` of 1 kB per rank.  Oversubscribed here (2
cores): these measure this machine, not a cluster; docs/scaling.md says how
they are extrapolated.
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
from _common import P, comm, rank, say, write_json
from mpi4py import MPI

from amrckpt.comm import Columns, MPIComm


def slowest(fn: Any, reps: int) -> float:
    """Median over ``reps`` of the slowest rank's seconds for ``fn`` (one warm-up dropped)."""
    out = []
    for k in range(reps + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if k:
            out.append(dt)
    return float(statistics.median(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="3 repetitions")
    a = ap.parse_args()
    if a.quick:
        a.reps = 3
    c = MPIComm(comm)
    tag = comm.bcast(os.getpid() if rank == 0 else None)
    path = str(Path(a.dir) / f"amrckpt-bench-constants-{tag}")
    buf8 = np.zeros(8, np.int64)
    payload = bytes(4096)
    kb = np.full(1024, rank % 251, np.uint8)
    fh = MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_CREATE)
    ftype = MPI.BYTE.Create_hindexed([1024], [rank * 1024]).Commit()

    def write_all() -> None:
        fh.Set_view(0, MPI.BYTE, ftype)
        fh.Write_all(kb)

    def open_close() -> None:
        MPI.File.Open(comm, path, MPI.MODE_RDONLY).Close()

    ops = {
        "barrier": comm.Barrier,
        "allreduce_8xint64": lambda: comm.Allreduce(MPI.IN_PLACE, buf8, op=MPI.MAX),
        "allreduce_obj_20_ints": lambda: c.allreduce_columns(Columns([], list(range(20)), [])),
        "exscan_obj_10_ints": lambda: c.exscan_columns(Columns(list(range(6)), [1, 2, 3, 4], [])),
        "bcast_4kB_pickle": lambda: comm.bcast(payload if rank == 0 else None),
        "allgather_int64": lambda: c.allgather_array(np.array([rank], dtype=np.int64)),
        "file_open_close": open_close,
        "set_view_write_all_1kB": write_all,
        "read_at_all_1kB": lambda: fh.Read_at_all(rank * 1024, np.empty(1024, np.uint8)),
    }
    res = {k: slowest(fn, a.reps) for k, fn in ops.items()}
    ftype.Free()
    fh.Close()
    comm.Barrier()
    if rank == 0:
        os.unlink(path)
    say(f"P={P}: " + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in res.items()))
    write_json(a.json, f"bench-results/constants-P{P}.json", {"benchmark": "constants", "P": P, "reps": a.reps, "seconds": res})


if __name__ == "__main__":
    main()
