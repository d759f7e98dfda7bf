#!/usr/bin/env python3
"""Opening a checkpoint in xarray and reducing it with dask.distributed, against ac.load (serial file, 2 workers).

Run::

    python benchmarks/bench_xarray.py                      # 10^7 leaves (2D), chunks of 16, 64 MiB
    python benchmarks/bench_xarray.py --leaves 1000000 --chunk-mib 4 16

The checkpoint: unit quadtrees in a row, uniformly refined to at least
``--leaves`` leaves, a float64 scalar ``rho`` and a float64 vector ``vel``
compressed in chunks of 16384 leaves.  Printed:

* ``open``: ``xr.open_dataset(path, engine="amrckpt", chunks={})``, its time
  and the bytes it read (counted through the backend's file opener);
* for each ``--chunk-mib``: the sum and mean of ``rho`` and the sum of
  ``vel`` on a ``LocalCluster(n_workers=2, threads_per_worker=1,
  processes=True)``, their time, and each worker's peak of allocations
  during the reductions (tracemalloc, started and read in each worker by
  ``client.run`` around them: Python objects and numpy buffers), against
  the chunk of ``vel``.  ``ru_maxrss`` would not do: it is the process's
  lifetime peak, not one reduction's;
* ``load``: ``ac.load`` of ``rho`` and ``vel`` and numpy's sums, the reference (equal to 1e-12).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import amrckpt as ac
from amrckpt import sfc
from amrckpt.scda import FileAccess
from amrckpt.testing import CountingLocalFile


class BenchXr(ac.CheckpointSchema, name="bench-xarray", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f8", shape=(2,), compress=True)


def build(leaves: int, path: Path) -> None:
    level = 1
    while 1 << (2 * (level + 1)) <= leaves:
        level += 1
    trees = -(-leaves // (1 << (2 * level)))
    lv = sfc.uniform_leaves(level, num_trees=trees, dim=2)
    N = lv.num_leaves
    x = np.linspace(0.0, 1.0, N)
    ac.save(
        BenchXr(step=1, mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=trees), rho=np.sin(7 * x),
                vel=np.stack([np.cos(3 * x), x], axis=1)),
        path,
    )  # fmt: skip


def trace_start() -> None:
    """In a worker: start tracing allocations (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    tracemalloc.reset_peak()


def trace_peak_mib() -> float:
    """In a worker: the peak of traced allocations since :func:`trace_start`, in MiB; stop tracing."""
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--leaves", type=int, default=10**7)
    ap.add_argument("--chunk-mib", type=float, nargs="+", default=[16, 64])
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args(argv)

    import xarray as xr
    from dask.distributed import Client, LocalCluster

    from amrckpt.xarray import AmrckptBackendEntrypoint

    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = Path(d) / "bench.scda"
        t = time.perf_counter()
        build(args.leaves, path)
        print(f"file: {path.stat().st_size / 2**20:.1f} MiB, written in {time.perf_counter() - t:.2f} s")
        counts: collections.Counter[str] = collections.Counter()
        t = time.perf_counter()
        access = FileAccess(local_file=CountingLocalFile.over(counts))
        ds = xr.open_dataset(path, engine=AmrckptBackendEntrypoint, chunks={}, access=access)
        print(f"open: {time.perf_counter() - t:.3f} s, {counts['bytes']} bytes read, N = {ds.sizes['leaf']}")
        ds.close()
        t = time.perf_counter()
        st = ac.load(path, BenchXr, fields=["mesh", "rho", "vel"]).state
        want = (float(st.rho.sum()), float(st.rho.mean()), st.vel.sum(0))
        print(f"load + numpy: {time.perf_counter() - t:.3f} s")
        del st
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, Client(cl) as client:
            for mib in args.chunk_mib:
                client.restart()
                with xr.open_dataset(path, engine=AmrckptBackendEntrypoint, chunks={}, chunk_nbytes=int(mib * 2**20)) as dc:
                    n = dc.rho.encoding["preferred_chunks"]["leaf"]
                    dc.rho.sum().compute()  # the workers import and open what they need, outside the measure
                    client.run(trace_start)
                    t = time.perf_counter()
                    s, m, v = (float(dc.rho.sum().compute()), float(dc.rho.mean().compute()), dc.vel.sum("leaf").compute().values)
                    dt = time.perf_counter() - t
                    peak = client.run(trace_peak_mib)
                ok = np.isclose(s, want[0], rtol=1e-12) and np.isclose(m, want[1], rtol=1e-12)
                ok = ok and np.allclose(v, want[2], rtol=1e-12)
                print(
                    f"chunk {mib:g} MiB ({n} leaves of vel, {n * 16 / 2**20:.0f} MiB): reduction {dt:.2f} s, equal {ok}; "
                    + ", ".join(f"worker peak {peak[w]:.1f} MiB" for w in sorted(peak))
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
