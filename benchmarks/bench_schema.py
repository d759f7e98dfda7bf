#!/usr/bin/env python3
"""The schema layer against the scda layer alone and raw MPI-IO, in one run.

Run::

    mpiexec -n 1 python -m mpi4py benchmarks/bench_schema.py              # 10 million leaves
    mpiexec -n 2 python -m mpi4py benchmarks/bench_schema.py --reps 5
    python benchmarks/bench_schema.py --quick                            # small, as CI runs it

The state: a 2D forest of ``--leaves`` leaves (2 trees), two float64 cell
fields and an hp field of 1 to 31 float64 per leaf (16 on average): about
157 bytes per leaf.  Three ways to write and read the same data, interleaved
(A B C, C B A, ...), timed from a barrier to a barrier (the slowest rank
counts), medians and spread printed:

* ``schema``: :func:`amrckpt.save` / :func:`amrckpt.load` (validation,
  manifest, provenance, CRC32 of every byte, index, footer; load verifies
  every byte read; ``schema-noverify`` skips that check);
* ``scda``: the same arrays written as plain scda sections by hand (mesh as
  four arrays tree, level, x, y, no packing), read back likewise;
* ``raw``: ``MPI.File`` ``Write_at_all`` / ``Read_at_all`` of the same bytes
  at the same offsets, one call per array.

Two regimes, always labelled.  ``new``: every write creates a new file (the
previous one is deleted), so the file system allocates its pages; on this kind
of virtual machine that alone swings tenfold between repetitions.  ``warm``:
every write overwrites the existing file in place (``truncate=False``; raw
MPI-IO writes then sets the size), so the software's cost shows.  Every read
allocates its arrays, as a restart does.  Files go to ``--dir`` (default
/dev/shm, a tmpfs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import Bench, P, build, comm, rank, say, timed, write_json
from mpi4py import MPI

import amrckpt as ac
from amrckpt import scda


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/schema-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.leaves, a.reps = 100_000, 3
    state, counts, lo = build(a.leaves)
    mesh = state.mesh
    hp = state.modes
    sizes = hp.counts.astype(np.uint64) * np.uint64(8)
    proc = comm.allgather(int(sizes.sum()))
    nbytes = comm.allreduce(len(mesh) * (13 + 16) + int(sizes.sum()))
    d = Path(a.dir)
    tag = comm.bcast(os.getpid() if rank == 0 else None)
    paths = {k: d / f"amrckpt-bench-{k}-{tag}.scda" for k in ("schema", "scda", "scda+crc", "raw")}
    say(f"amrckpt schema benchmark: P={P}, {a.leaves} leaves, {nbytes / 2**20:.0f} MiB of data, {a.reps} repetitions, in {d}")

    def remove(k: str) -> None:
        comm.Barrier()
        if rank == 0:
            paths[k].unlink(missing_ok=True)
        comm.Barrier()

    regime = {"warm": False}  # truncate=False in the warm regime

    def schema_write() -> None:
        ac.save(state, paths["schema"], comm=comm, access=ac.FileAccess(truncate=not regime["warm"]))

    def scda_write(checksum: bool = False) -> None:
        with scda.fopen_write(
            paths["scda+crc" if checksum else "scda"], b"bench", comm=comm, truncate=not regime["warm"], checksum=checksum
        ) as f:
            f.fwrite_inline(b"1".ljust(31) + b"\n", b"step")
            f.fwrite_inline(b"0.5".ljust(31) + b"\n", b"time")
            for name, arr in (("tree", mesh.tree), ("level", mesh.level), ("x", mesh.x), ("y", mesh.y)):
                f.fwrite_array(arr, counts, arr.itemsize, name.encode())
            f.fwrite_array(state.rho, counts, 8, b"rho")
            f.fwrite_array(state.energy, counts, 8, b"energy")
            f.fwrite_varray(hp.values, counts, sizes, proc, b"modes")
            if checksum:
                f.section_crcs()

    # Raw MPI-IO writes the same bytes at the offsets the scda file has them.
    layout: dict[str, int] = {}

    def plan() -> None:
        with scda.fopen_read(paths["scda"], comm=comm) as f:
            while (h := f.fread_section_header()) is not None:
                if h.type == "A":
                    layout[h.user_string.decode()] = h.offset + 128
                elif h.type == "V":
                    layout["modes.E"] = h.offset + 96
                    layout["modes"] = h.offset + 96 + 32 * h.elem_count
            layout["end"] = f.file_size

    arrays = [(nm, getattr(mesh, nm)) for nm in ("tree", "level", "x", "y")] + [("rho", state.rho), ("energy", state.energy)]
    entries = scda.format_entries(b"E", sizes, "unix")
    hp_off = sum(proc[:rank])

    def raw_write() -> None:
        fh = MPI.File.Open(comm, str(paths["raw"]), MPI.MODE_WRONLY | MPI.MODE_CREATE)
        if not regime["warm"]:
            fh.Set_size(0)
        for name, arr in arrays:
            fh.Write_at_all(layout[name] + lo * arr.itemsize, arr)
        fh.Write_at_all(layout["modes.E"] + 32 * lo, entries)
        fh.Write_at_all(layout["modes"] + hp_off, hp.values)
        if regime["warm"]:
            fh.Set_size(layout["end"])
        fh.Close()

    def scda_read(checksum: bool = False) -> None:
        outs = {name: np.empty_like(arr) for name, arr in arrays}
        out_hp = np.empty_like(hp.values)
        with scda.fopen_read(paths["scda"], comm=comm, checksum=checksum) as f:
            f.fread_section_header()
            f.fread_inline_data()
            f.fread_section_header()
            f.fread_inline_data()
            for name, _ in arrays:
                f.fread_section_header()
                f.fread_array_data(counts, out=outs[name])
            f.fread_section_header()
            s = f.fread_varray_sizes(counts)
            f.fread_varray_data(counts, s, f.proc_sizes(), out=out_hp)
            if checksum:
                f.section_crcs()

    def raw_read() -> None:
        outs = {name: np.empty_like(arr) for name, arr in arrays}
        out_hp = np.empty_like(hp.values)
        out_entries = np.empty_like(entries)
        fh = MPI.File.Open(comm, str(paths["scda"]), MPI.MODE_RDONLY)
        for name, _ in arrays:
            fh.Read_at_all(layout[name] + lo * outs[name].itemsize, outs[name])
        fh.Read_at_all(layout["modes.E"] + 32 * lo, out_entries)
        fh.Read_at_all(layout["modes"] + hp_off, out_hp)
        fh.Close()

    def schema_read() -> None:
        ac.load(paths["schema"], Bench, comm=comm, partition=ac.Partition.from_counts(counts))

    def schema_read_noverify() -> None:
        ac.load(paths["schema"], Bench, comm=comm, partition=ac.Partition.from_counts(counts), verify=False)

    scda_write()
    plan()
    writes = [("schema", schema_write), ("scda", scda_write), ("scda+crc", lambda: scda_write(True)), ("raw", raw_write)]
    reads = [
        ("schema", schema_read),
        ("schema-noverify", schema_read_noverify),
        ("scda", scda_read),
        ("scda+crc", lambda: scda_read(True)),
        ("raw", raw_read),
    ]
    t: dict[str, list[float]] = {}
    for mode in ("new", "warm"):
        regime["warm"] = mode == "warm"
        for k in range(a.reps + 1):  # the first repetition warms up and is dropped
            for name, fn in writes if k % 2 == 0 else writes[::-1]:
                if mode == "new":
                    remove(name)
                dt = timed(fn)
                if k:
                    t.setdefault(f"{name} write {mode}", []).append(dt)
            if mode == "new":
                continue  # reads are the same in both regimes: the files are in the page cache
            for name, fn in reads if k % 2 == 0 else reads[::-1]:
                dt = timed(fn)
                if k:
                    t.setdefault(f"{name} read", []).append(dt)
    got = ac.load(paths["schema"], Bench, comm=comm, partition=ac.Partition.from_counts(counts)).state
    assert np.array_equal(got.rho, state.rho) and got.modes == state.modes and got.mesh == mesh
    for k in paths:
        remove(k)
    med = {k: statistics.median(v) for k, v in t.items()}
    low = {k: min(v) for k, v in t.items()}
    rows = []
    say(f"\n{'case':<26} {'median s':>9} {'min-max s':>17} {'MiB/s':>7}")
    for k, v in t.items():
        rows.append({"case": k, "median_s": med[k], "min_s": min(v), "max_s": max(v), "MiBps": nbytes / 2**20 / med[k]})
        say(f"{k:<26} {med[k]:>9.3f} {min(v):>8.3f}-{max(v):<8.3f} {nbytes / 2**20 / med[k]:>7.0f}")
    pairs = {
        "write warm schema/scda": ("schema write warm", "scda write warm"),
        "write warm schema/scda+crc": ("schema write warm", "scda+crc write warm"),
        "write warm scda+crc/scda": ("scda+crc write warm", "scda write warm"),
        "write warm scda/raw": ("scda write warm", "raw write warm"),
        "write new schema/scda": ("schema write new", "scda write new"),
        "write new scda/raw": ("scda write new", "raw write new"),
        "read schema/scda": ("schema read", "scda read"),
        "read schema/scda+crc": ("schema read", "scda+crc read"),
        "read scda+crc/scda": ("scda+crc read", "scda read"),
        "read schema-noverify/scda": ("schema-noverify read", "scda read"),
        "read scda/raw": ("scda read", "raw read"),
    }
    ratios = {k: {"median": med[x] / med[y], "min": low[x] / low[y]} for k, (x, y) in pairs.items()}
    say("\ntime ratios (1.00 = as fast; the schema layer's target is <= 1.10 over scda), of medians and of minima:")
    for k, v in ratios.items():
        say(f"  {k:<28} {v['median']:.3f}   {v['min']:.3f}")
    result = {"benchmark": "schema", "P": P, "leaves": a.leaves, "bytes": nbytes, "reps": a.reps, "rows": rows, "ratios": ratios}
    write_json(a.json, f"bench-results/schema-P{P}.json", result)


if __name__ == "__main__":
    sys.exit(main())
