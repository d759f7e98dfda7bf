#!/usr/bin/env python3
"""The same 3D forest and data saved and loaded by amrckpt and by p4est itself (p8est_save_ext / p8est_load_ext).

Run::

    apt-get install libp4est-dev libopenmpi-dev          # Debian's p4est 2.2 (tests/p4est builds a C tool against it)
    python benchmarks/bench_p4est.py --json benchmarks/results/p4est-P1.json
    python benchmarks/bench_p4est.py --quick             # small, as the tests run it
    python benchmarks/bench_p4est.py --ranks 2 --json benchmarks/results/p4est-P2.json   # the round trip on 2 ranks

The forest: p4est's own (``p8est_new_ext`` on a 2 x 2 x 1 brick, level
``--level``, refined at random two levels deeper: 1.26 million octants at
the default level 5), with ``--data`` bytes of quadrant data, made and
saved by the C tool of ``tests/p4est``.  Serial, on one process each, files
in ``--dir`` (default /dev/shm); both sides ``fsync`` (p4est's
``p4est_save_ext`` does; amrckpt's ``save(access=FileAccess(sync=True))``).

* ``p4est``: the C tool times ``p8est_save_ext`` (save) and
  ``p8est_load_ext`` (load) of the forest it loaded, in its own process
  (Open MPI);
* ``amrckpt``: this process times, from p4est's arrays (``quadrants``
  (n, 4) int32, ``global_first_quadrant``, ``pertree``, the data (n, data)
  bytes) as a C code holds them: save = ``Forest.from_p4est`` + ``save``
  (CRC32s computed, fsync); load = ``load`` (every byte checked against its
  CRC32) + ``Forest.to_p4est``; with every check of the leaves (ranges,
  curve order, completeness: ``check=True``, ``check_mesh=True``);
* ``trusted``: the same, CRC32s on, without the checks of the leaves that
  p4est does not make either (``from_p4est(check=False)``,
  ``save(check_mesh=False)``, ``to_p4est(check=False)``): a p4est code's
  forest is valid by construction.

Rounds alternate p4est, amrckpt / amrckpt, p4est, after one dropped warm-up
round; medians of ``--reps`` with min-max, and the ratios amrckpt / p4est
(below 1: amrckpt is faster).

Those rows time the arrays to the file and back.  The round trip as a p4est
code pays it (``--ranks``, default 1; ``--ranks 1 2`` also under Open MPI's
``mpiexec.openmpi -n 2``) runs in one process per rank on Open MPI, with
libp8est through ctypes (``_p8est.py``): the forest that
``p8est_load_ext`` gives (partition uniform) is saved and loaded by p4est
(``p8est_save_ext``, ``p8est_load_ext``) and by amrckpt, copy out and save
(each tree's quadrant array viewed by numpy, the user data gathered through
its pointers, ``Forest.from_p4est``, ``save``: CRC32s, fsync) and load and
rebuild (``load``, CRC32s checked, ``Forest.to_p4est``,
``p8est_connectivity_inflate``, ``p8est_inflate``), with the default checks
(``amrckpt``) and without the checks of the leaves (``trusted``),
interleaved, timed from a barrier to a barrier; every forest loaded is
compared with p4est's (``p8est_checksum``, ``p8est_is_equal`` with the
data).  See :func:`round_trip`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from _provenance import provenance
from p4est import build

import amrckpt as ac
from amrckpt.p4est import read_p4est


def schema(data_size: int) -> type[ac.CheckpointSchema]:
    """The checkpoint of a p8est forest on a 2 x 2 x 1 brick with ``data_size`` bytes per octant."""

    class Octants(ac.CheckpointSchema, name="bench p4est", version=1):
        step: int = ac.Inline()
        mesh: ac.Forest = ac.Mesh(dim=3, brick=(2, 2, 1))
        data: ac.CellData = ac.Cells("u1", shape=(data_size,))

    return Octants


def p4est_round(src: Path, out: Path, data_size: int) -> tuple[float, float]:
    """One p8est_save_ext and one p8est_load_ext, timed by the C tool."""
    line = build.run(3, "bench", src, str(data_size), "1", out).split("save ", 1)[1].split()
    return float(line[0]), float(line[2])


def round_trip(src: Path, data_size: int, reps: int) -> dict[str, Any] | None:
    """The round trip as a p4est code pays it, in this process (on Open MPI; under mpiexec for P > 1).

    libp8est through ctypes (:mod:`_p8est`): ``p8est_load_ext`` of ``src`` (data loaded, partition uniform) gives
    the forest a p4est code holds.  Then, interleaved, timed from a barrier to a barrier on every rank:

    * ``p4est save``: ``p8est_save_ext`` (data, no partition); ``p4est load``: ``p8est_load_ext`` of that file;
    * ``amrckpt save``: copy out and save: each local tree's ``sc_array_t quadrants`` viewed by numpy as
      ``p8est_quadrant_t`` records (no copy), the quadrants' user data gathered through their pointers,
      ``global_first_quadrant`` and ``p8est_comm_count_pertree``, ``Forest.from_p4est`` and ``save`` (CRC32s,
      fsync); ``amrckpt load``: ``load`` (CRC32s checked), the connectivity's bytes to
      ``p8est_connectivity_inflate``, ``Forest.to_p4est`` and ``p8est_inflate``; default checks;
    * ``trusted save`` / ``trusted load``: the same without the checks of the leaves (``check=False``,
      ``check_mesh=False``);
    * each save twice in a row: ``... save new`` to a new file (the last one deleted first, untimed: every page
      of the file allocated anew), then ``... save`` over that file, as each overwrites a file by default
      (p4est's ``fopen(.., "wb")`` empties it first; amrckpt overwrites it in place, ``FileAccess.truncate``).

    Every forest loaded is compared with the one p4est holds (``p8est_checksum``, ``p8est_is_equal`` with the
    data), untimed.  Returns rank 0's result (None on the other ranks).
    """
    import _p8est as p8
    from mpi4py import MPI

    from amrckpt.container import Geometry

    comm = MPI.COMM_WORLD
    lib = p8.Lib(comm)
    forest, conn = lib.load(src, data_size)
    reference = lib.checksum(forest)
    forest_n = forest.contents.global_num_quadrants
    Octants = schema(data_size)
    ck, pf = src.with_name("round-trip.scda"), src.with_name("round-trip.p8est")
    K = 4  # 2 x 2 x 1 brick

    def timed(fn: Any) -> tuple[float, Any]:
        comm.Barrier()
        t0 = time.perf_counter()
        out = fn()
        comm.Barrier()
        return time.perf_counter() - t0, out

    def ac_save(check: bool) -> None:
        trees = p8.tree_quadrants(forest)  # views of p4est's memory
        data = p8.user_data(trees, data_size)
        gfq, pertree = lib.global_first_quadrant(forest), lib.pertree(forest, K)
        mesh = ac.Forest.from_p4est(trees, pertree=pertree, global_first_quadrant=gfq, rank=comm.rank, check=check)
        ac.save(Octants(step=1, mesh=mesh, data=data), ck, comm=comm, access=ac.FileAccess(sync=True), check_mesh=check)

    def ac_load(check: bool) -> tuple[Any, Any]:
        loaded = ac.load(ck, Octants, comm=comm)  # CRC32s checked
        blob = Geometry.of(loaded.info.manifest.mesh).connectivity.to_p4est_bytes()
        c = lib.connectivity_inflate(blob)
        q = loaded.state.mesh.to_p4est(comm=comm, check=check)
        data = np.ascontiguousarray(loaded.state.data)
        return lib.inflate(c, q.global_first_quadrant, q.pertree, q.quadrants, data), c

    def unlink(path: Path) -> None:
        comm.Barrier()
        if comm.rank == 0:
            path.unlink(missing_ok=True)

    who_all = ("p4est", "amrckpt", "trusted")
    times: dict[str, list[float]] = {f"{w} {op}": [] for w in who_all for op in ("save", "save new", "load")}
    same: dict[str, bool] = {}
    for k in range(reps + 1):
        for who in who_all if k % 2 == 0 else who_all[::-1]:
            check = who == "amrckpt"
            save: Any = (lambda: lib.save(pf, forest)) if who == "p4est" else (lambda check=check: ac_save(check))
            unlink(pf if who == "p4est" else ck)  # untimed: the next save writes a new file, every page anew
            new_s, _ = timed(save)
            save_s, _ = timed(save)  # over the file of the same forest: each overwrites a file as it does by default
            if who == "p4est":
                load_s, (back, c) = timed(lambda: lib.load(pf, data_size))
            else:
                load_s, (back, c) = timed(lambda check=check: ac_load(check))
            ok = lib.checksum(back) == reference and lib.is_equal(forest, back)
            same[who] = same.get(who, True) and bool(comm.allreduce(ok, op=MPI.LAND))
            lib.destroy(back, c)
            if k:
                times[f"{who} save new"].append(new_s)
                times[f"{who} save"].append(save_s)
                times[f"{who} load"].append(load_s)
    lib.destroy(forest, conn)
    if comm.rank:
        return None
    return {"ranks": comm.size, "octants": int(forest_n), "seconds": times, "same_forest": same}


def run_round_trip(src: Path, data_size: int, reps: int, ranks: int) -> dict[str, Any]:
    """Run :func:`round_trip` in a process of its own on Open MPI (``mpiexec.openmpi -n ranks`` for ranks > 1)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--round-trip", str(src), "--data", str(data_size), "--reps", str(reps)]
    if ranks > 1:
        launcher = shutil.which("mpiexec.openmpi", path="/usr/bin:/usr/local/bin")
        if launcher is None:
            sys.exit("bench_p4est: the round trip on several ranks needs Open MPI's mpiexec.openmpi")
        cmd = [launcher, "-n", str(ranks), *cmd]
    # The system's Open MPI (libp4est's) in the worker, mpi4py's wheel told so; the repository on the path.
    env = build.tool_env() | {"MPI4PY_MPIABI": "openmpi", "PYTHONPATH": str(HERE.parent)}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=3600)
    lines = [x for x in res.stdout.splitlines() if x.startswith("round-trip ")]
    if res.returncode != 0 or len(lines) != 1:
        sys.exit(
            f"bench_p4est: the round trip on {ranks} ranks failed (exit {res.returncode}):\n"
            f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        )
    trip: dict[str, Any] = json.loads(lines[0].split(" ", 1)[1])
    trip["median"] = {k: statistics.median(v) for k, v in trip["seconds"].items()}
    trip["ratio"] = {
        f"{w} {op}": trip["median"][f"{w} {op}"] / trip["median"][f"p4est {op}"]
        for w in ("amrckpt", "trusted")
        for op in ("save", "save new", "load")
    }
    return trip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", type=int, default=5, help="level of the uniform forest before refinement (default 5: 1.26M octants)")
    ap.add_argument("--data", type=int, default=16, help="bytes of data per octant (default 16)")
    ap.add_argument("--reps", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None, help="where the files go")
    ap.add_argument("--json", default=None, help="write the result here")
    ap.add_argument("--quick", action="store_true", help="level 2, 1 round (seconds)")
    ap.add_argument("--ranks", type=int, nargs="*", default=[1], help="process counts of the round trip (default 1; none: skip it)")
    ap.add_argument("--round-trip", default=None, help=argparse.SUPPRESS)  # the worker: run the round trip on this file
    args = ap.parse_args()
    if args.round_trip is not None:
        got = round_trip(Path(args.round_trip), args.data, args.reps)
        if got is not None:
            print("round-trip " + json.dumps(got), flush=True)
        return
    if args.quick:
        args.level, args.reps = 2, 1
    reason = build.why_not()
    if reason is not None:
        sys.exit(f"bench_p4est: {reason}")
    load_start = list(os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="amrckpt-bench-p4est-", dir=args.dir))
    try:
        src = work / "forest.p8est"
        build.run(3, "save", "brick:2,2,1:000", str(args.level), str(args.data), "7", "0", src)
        pf = read_p4est(src)  # the arrays a C code holds (not timed)
        q = pf.forest.to_p4est()
        quadrants, gfq, pertree = q.quadrants, q.global_first_quadrant, q.pertree
        data = pf.data if pf.data is not None else np.zeros((len(pf.forest), 0), np.uint8)
        N = len(pf.forest)
        Octants = schema(args.data)
        ck = work / "forest.scda"

        def ac_round(check: bool) -> tuple[float, float]:
            t0 = time.perf_counter()
            mesh = ac.Forest.from_p4est(quadrants, pertree=pertree, global_first_quadrant=gfq, check=check)
            ac.save(Octants(step=1, mesh=mesh, data=data), ck, access=ac.FileAccess(sync=True), check_mesh=check)
            t1 = time.perf_counter()
            st = ac.load(ck, Octants).state  # CRC32s checked
            back = st.mesh.to_p4est(check=check)
            t2 = time.perf_counter()
            assert back.quadrants.shape == quadrants.shape and st.data.shape == data.shape
            return t1 - t0, t2 - t1

        who_all = ("p4est", "amrckpt", "trusted")
        times: dict[str, list[float]] = {f"{w} {op}": [] for w in who_all for op in ("save", "load")}
        for k in range(args.reps + 1):
            for who in who_all if k % 2 == 0 else who_all[::-1]:
                if who == "p4est":
                    save_s, load_s = p4est_round(src, work / "again.p8est", args.data)
                else:
                    save_s, load_s = ac_round(who == "amrckpt")
                if k:
                    times[f"{who} save"].append(save_s)
                    times[f"{who} load"].append(load_s)
        trips = {P: run_round_trip(src, args.data, args.reps, P) for P in args.ranks}
        # Same forest, same data: the checkpoint holds p4est's octants, and p4est's file is what amrckpt writes.
        ac.p4est.checkpoint_to_p4est(ck, work / "from-amrckpt.p8est", package_version=pf.header.package_version)
        same = (work / "from-amrckpt.p8est").read_bytes() == src.read_bytes()
        med = {k: statistics.median(v) for k, v in times.items()}
        sizes = {"p4est": src.stat().st_size, "amrckpt": ck.stat().st_size}
        print(f"bench_p4est: {N} octants (3D, 2 x 2 x 1 brick), {args.data} bytes of data each, serial, {args.reps} rounds")
        print(f"files: p4est {sizes['p4est'] / 2**20:.1f} MiB, amrckpt {sizes['amrckpt'] / 2**20:.1f} MiB; converted back: {same}")
        for k, v in times.items():
            print(f"  {k:13s} {med[k]:8.4f} s  ({min(v):.4f}-{max(v):.4f})")
        ratios = {f"{w} {op}": med[f"{w} {op}"] / med[f"p4est {op}"] for w in ("amrckpt", "trusted") for op in ("save", "load")}
        for w in ("amrckpt", "trusted"):
            print(f"ratio {w} / p4est: save {ratios[w + ' save']:.2f}, load {ratios[w + ' load']:.2f} (below 1: amrckpt is faster)")
        for P, trip in trips.items():
            print(f"round trip as a p4est code pays it, P = {P}, in one process per rank (same forest: {trip['same_forest']}):")
            for k, v in trip["seconds"].items():
                print(f"  {k:13s} {trip['median'][k]:8.4f} s  ({min(v):.4f}-{max(v):.4f})")
            for w in ("amrckpt", "trusted"):
                r = trip["ratio"]
                print(
                    f"ratio {w} / p4est, round trip P = {P}: save {r[w + ' save']:.2f} "
                    f"(to a new file {r[w + ' save new']:.2f}), load {r[w + ' load']:.2f}"
                )
        if args.json:
            out = Path(args.json)
            out.parent.mkdir(parents=True, exist_ok=True)
            result = {
                "octants": N,
                "data_bytes": args.data,
                "reps": args.reps,
                "seconds": times,
                "median": med,
                "ratio": ratios,
                "file_bytes": sizes,
                "byte_identical_back": same,
                "round_trip": {f"P{P}": trip for P, trip in trips.items()},
                # The machine is shared: the load averages at the start and at the end say how much it was.
                "machine": provenance() | {"load_avg_start": load_start, "load_avg_end": list(os.getloadavg())},
            }
            out.write_text(json.dumps(result, indent=1))
            print(f"wrote {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
