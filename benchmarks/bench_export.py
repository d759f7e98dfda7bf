#!/usr/bin/env python3
"""Exporting a checkpoint to VTKHDF against loading it, in one run (serial).

Run::

    python benchmarks/bench_export.py                 # 10^6 leaves (2D), 3 repetitions
    python benchmarks/bench_export.py --dim 3         # 3D
    python benchmarks/bench_export.py --quick         # small, as the tests run it

The checkpoint: a forest of unit trees in a row, uniformly refined to at
least ``--leaves`` leaves (10^6 gives four quadtrees of 4**9 leaves,
1048576 in all, or four octrees of 8**6), a float64 scalar, a float64
vector of ``dim`` components and an hp field of 1 to 9 float64 per leaf.
Timed, interleaved (load, export, htg, htg, export, load, ...), medians printed:

* ``load``: :func:`amrckpt.load` of the whole state (every byte read checked
  against its CRC32), as a restart on one process does;
* ``export``: :func:`amrckpt.export.to_vtkhdf` of the same file (``--chunk``
  leaves at a time, default 131072): every byte read once and checked
  against its CRC32, the leaves' shared corner points (one per vertex of a
  block of 2**17 leaves), connectivity, offsets, types and every cell array
  written into the HDF5 file through h5py's public API;
* ``htg``: ``to_vtkhdf(..., format="htg")``, the VTKHDF HyperTreeGrid of the
  same file (the trees are unit boxes in a row): every byte read once and
  checked, the hyper trees' descriptors and every cell array on every node
  (leaves, and coarse nodes the mean of their children).

The targets: an unstructured export takes at most 2.0 times a
load, a HyperTreeGrid export at most 1.0 times.  Files go to
``--dir`` (default /dev/shm, a tmpfs), so the file system's page allocation
does not dominate; the export writes about as many bytes as the checkpoint
holds in 2D (float32 points shared by the leaves, 4 int32 point ids per
leaf) and reads all of it.  The 1-minute load average before and after the
run is recorded: the export runs on two threads (one reads and converts
while the other writes), so it gains from a second idle core that a load
does not use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _provenance import provenance

import amrckpt as ac
from amrckpt import sfc


class Bench2D(ac.CheckpointSchema, name="bench-export-2d", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f8", shape=(2,), units="m/s")
    modes: ac.HpData = ac.HpCells("<f8")


class Bench3D(ac.CheckpointSchema, name="bench-export-3d", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    mesh: ac.Forest = ac.Mesh(dim=3)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f8", shape=(3,), units="m/s")
    modes: ac.HpData = ac.HpCells("<f8")


def build(leaves: int, dim: int) -> tuple[ac.CheckpointSchema, type[ac.CheckpointSchema]]:
    level = 1
    while 1 << (dim * (level + 1)) <= leaves:
        level += 1
    trees = -(-leaves // (1 << (dim * level)))
    lv = sfc.uniform_leaves(level, num_trees=trees, dim=dim)
    N = lv.num_leaves
    rng = np.random.default_rng(0)
    counts = rng.integers(1, 10, N)
    schema = Bench2D if dim == 2 else Bench3D
    coords = (lv.x, lv.y) if dim == 2 else (lv.x, lv.y, lv.z)
    state = schema(
        step=1,
        time=0.5,
        mesh=ac.Forest(lv.tree, lv.level, *coords, num_trees=trees),
        rho=rng.random(N),
        vel=rng.standard_normal((N, dim)),
        modes=ac.HpData(rng.standard_normal(int(counts.sum())), counts),
    )
    return state, schema


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", type=int, default=1_000_000, help="at least this many leaves (default 10^6)")
    ap.add_argument("--dim", type=int, choices=(2, 3), default=2)
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each (default 3)")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None, help="where the files go")
    ap.add_argument("--json", default=None, help="result file (default benchmarks/results/export-<dim>d.json)")
    ap.add_argument("--chunk", type=int, default=ac.export.DEFAULT_CHUNK_LEAVES, help="leaves per export chunk (default 131072)")
    ap.add_argument("--quick", action="store_true", help="about 2000 leaves, one repetition")
    args = ap.parse_args(argv)
    if args.quick:
        args.leaves, args.reps = 2000, 1
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="amrckpt-bench-", dir=args.dir) as tmp:
        work = Path(tmp)
        state, schema = build(args.leaves, args.dim)
        path = work / "state.scda"
        ac.save(state, path)
        N = len(state.mesh)
        del state
        times: dict[str, list[float]] = {"load": [], "export": [], "htg": []}
        nbytes: dict[str, int] = {}

        def load() -> None:
            ac.load(path, schema)

        def export() -> None:
            ac.export.to_vtkhdf(path, work / "state.vtkhdf", chunk_leaves=args.chunk)

        def htg() -> None:
            ac.export.to_vtkhdf(path, work / "state.vtkhdf", chunk_leaves=args.chunk, format="htg")

        order = [("load", load), ("export", export), ("htg", htg)]
        for rep in range(args.reps):
            for name, fn in order if rep % 2 == 0 else order[::-1]:
                (work / "state.vtkhdf").unlink(missing_ok=True)  # a new file each time, as a load makes new arrays
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
                if name != "load":
                    nbytes[name] = (work / "state.vtkhdf").stat().st_size
        ckpt_nbytes, out_nbytes = path.stat().st_size, nbytes["export"]
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["export"] / med["load"]
    ratio_htg = med["htg"] / med["load"]
    sizes = (
        f"checkpoint {ckpt_nbytes / 2**20:.1f} MiB, VTKHDF {out_nbytes / 2**20:.1f} MiB, "
        f"HyperTreeGrid {nbytes['htg'] / 2**20:.1f} MiB"
    )
    print(f"{N} leaves ({args.dim}D), {sizes}, chunks of {args.chunk} leaves, {args.reps} rep(s)")
    for k, v in times.items():
        print(f"  {k:6s} median {med[k]:.3f} s  (min {min(v):.3f}, max {max(v):.3f})")
    print(f"  ratio export / load = {ratio:.2f} (target: at most 2.0)")
    print(f"  ratio htg / load = {ratio_htg:.2f} (target: at most 1.0)")
    print(f"  load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}")
    result: dict[str, Any] = {
        "leaves": N,
        "dim": args.dim,
        "reps": args.reps,
        "chunk_leaves": args.chunk,
        "checkpoint_nbytes": ckpt_nbytes,
        "vtkhdf_nbytes": out_nbytes,
        "seconds": times,
        "median_s": med,
        "htg_nbytes": nbytes["htg"],
        "ratio_export_over_load": ratio,
        "ratio_htg_over_load": ratio_htg,
        "load_before": list(load_before),
        "load_after": list(load_after),
        "machine": provenance(),
    }
    out = Path(args.json or Path(__file__).resolve().parent / "results" / f"export-{args.dim}d.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
