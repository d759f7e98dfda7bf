#!/usr/bin/env python3
"""End-to-end comparisons in one run: save/load against raw MPI-IO, chunked compression against h5py.

Run::

    mpiexec -n 1 python -m mpi4py benchmarks/bench_end_to_end.py --json benchmarks/results/end-to-end-P1.json
    mpiexec -n 2 python -m mpi4py benchmarks/bench_end_to_end.py --json benchmarks/results/end-to-end-P2.json
    python benchmarks/bench_end_to_end.py --quick

1. **End to end.**  A 3D forest of ``--leaves`` leaves (one tree, uniform),
   a float64 field, a 3-vector float64 field and an hp field of 1, 4 or 9
   float64 per leaf (``hp``); the same without the hp field (``nohp``).
   ``amrckpt.save`` / ``amrckpt.load`` (manifest, CRC32 of every byte,
   index, footer; load checks every CRC) against ``MPI.File``
   ``Write_at_all`` / ``Read_at_all`` of the same payload bytes at the same
   global offsets (one call per array), interleaved A B, B A, medians.  Two
   regimes: ``new`` (each write makes a new file, the previous one deleted)
   and ``warm`` (each write overwrites the file in place).  Throughput
   ratio = raw seconds / amrckpt seconds.
2. **Compression** (rank 0 alone, when h5py is installed): a uniform 3D
   mesh of ``--comp-leaves`` leaves and two smooth float64 cell fields
   (sums of sines along the curve), saved with ``compress=True`` (shuffled,
   deflated chunks of ``DEFAULT_CHUNK`` leaves, threads) and as an HDF5
   file of the same arrays (the mesh as its packed records) in chunked
   datasets with h5py's shuffle + gzip(1), chunks of the same size;
   interleaved, medians.  Also ``compress="element"`` (the scda paper's
   per-element convention) once, for its size.  MiB/s of uncompressed
   data, file sizes over the uncompressed bytes.  Then an hp field the
   same way (``hp``): the mesh and 1, 4 or 9 smooth float64 per leaf,
   ``HpCells(compress=True)`` (the counts and values of each chunk of
   leaves) against h5py's datasets of the counts (uint8) and the values
   in chunks of ``DEFAULT_CHUNK`` elements.
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

from _common import P, comm, interleaved, rank, say, stats, write_json
from mpi4py import MPI

import amrckpt as ac
from amrckpt import sfc
from amrckpt.container._chunks import DEFAULT_CHUNK, deflate_name, threads


class Hp(ac.CheckpointSchema, name="end-to-end", version=1):
    """Mesh, a float64 field, a 3-vector float64 field and an hp field of 1, 4 or 9 float64 per leaf."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=3)
    rho: ac.CellData = ac.Cells("<f8")
    vel: ac.CellData = ac.Cells("<f8", shape=(3,))
    modes: ac.HpData = ac.HpCells("<f8")


class NoHp(ac.CheckpointSchema, name="end-to-end-nohp", version=1):
    """The same without the hp field."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=3)
    rho: ac.CellData = ac.Cells("<f8")
    vel: ac.CellData = ac.Cells("<f8", shape=(3,))


def build(n_total: int) -> tuple[Hp, list[int]]:
    """Return this rank's part of an ``n_total``-leaf 3D state (uniform partition) and the counts of all ranks."""
    level = 1
    while 8**level < n_total:
        level += 1
    lv = sfc.uniform_leaves(level, num_trees=1, dim=3)
    n_total = lv.num_leaves
    counts = [n_total * (p + 1) // P - n_total * p // P for p in range(P)]
    lo = sum(counts[:rank])
    hi = lo + counts[rank]
    assert lv.z is not None
    mesh = ac.Forest(
        lv.tree[lo:hi].copy(), lv.level[lo:hi].copy(), lv.x[lo:hi].copy(), lv.y[lo:hi].copy(), lv.z[lo:hi].copy(), num_trees=1
    )
    rng = np.random.default_rng(rank)
    hp_counts = np.array([1, 4, 9])[rng.integers(0, 3, hi - lo)]
    st = Hp(
        step=1,
        mesh=mesh,
        rho=rng.random(hi - lo),
        vel=rng.random((hi - lo, 3)),
        modes=ac.HpData(rng.standard_normal(int(hp_counts.sum())), hp_counts),
    )
    return st, counts


def raw_pieces(arrays: list[np.ndarray]) -> tuple[list[tuple[int, np.ndarray]], int]:
    """Each array's bytes at its global offset: arrays one after another, each in rank order. Returns pieces and total."""
    pieces = []
    base = 0
    for a in arrays:
        b = a.reshape(-1).view(np.uint8)
        n = b.size
        sizes = comm.allgather(n)
        pieces.append((base + sum(sizes[:rank]), b))
        base += sum(sizes)
    return pieces, base


def end_to_end(a: argparse.Namespace, which: str) -> dict[str, Any]:
    st, counts = build(a.leaves)
    schema: type[ac.CheckpointSchema] = Hp
    if which == "nohp":
        st = NoHp(step=st.step, mesh=st.mesh, rho=st.rho, vel=st.vel)  # type: ignore[assignment]
        schema = NoHp
    rec = np.empty(len(st.mesh), dtype=ac.container.mesh_record_dtype(3))
    rec["tree"], rec["x"], rec["y"], rec["z"], rec["level"] = st.mesh.tree, st.mesh.x, st.mesh.y, st.mesh.z, st.mesh.level
    arrays = [rec, st.rho, st.vel]
    if which == "hp":
        arrays += [st.modes.counts.astype(np.uint8), st.modes.values]
    pieces, total = raw_pieces(arrays)
    d = Path(a.dir)
    tag = comm.bcast(os.getpid() if rank == 0 else None)
    paths = {k: str(d / f"amrckpt-end-to-end-{which}-{k}-{tag}") for k in ("amrckpt", "raw")}

    def raw_write(truncate: bool) -> None:
        mode = MPI.MODE_WRONLY | MPI.MODE_CREATE
        fh = MPI.File.Open(comm, paths["raw"], mode)
        for off, b in pieces:
            fh.Write_at_all(off, b)
        if truncate:
            fh.Set_size(total)
        fh.Close()

    def raw_read() -> None:
        fh = MPI.File.Open(comm, paths["raw"], MPI.MODE_RDONLY)
        for off, b in pieces:
            out = np.empty_like(b)
            fh.Read_at_all(off, out)
        fh.Close()

    def remove(k: str) -> None:
        comm.Barrier()
        if rank == 0:
            for p in paths.values():
                Path(p).unlink(missing_ok=True)
        comm.Barrier()

    out: dict[str, Any] = {"payload_bytes": total, "leaves": sum(counts)}
    save_new = {"amrckpt": lambda: ac.save(st, paths["amrckpt"], comm=comm), "raw": lambda: raw_write(False)}
    t_new = interleaved(save_new, a.reps, before=lambda name: remove(name))
    save_warm = {
        "amrckpt": lambda: ac.save(st, paths["amrckpt"], comm=comm, access=ac.FileAccess(truncate=False)),
        "raw": lambda: raw_write(True),
    }
    t_warm = interleaved(save_warm, a.reps)
    load = {"amrckpt": lambda: ac.load(paths["amrckpt"], schema, comm=comm), "raw": raw_read}
    t_load = interleaved(load, a.reps)
    out["file_bytes"] = os.path.getsize(paths["amrckpt"])
    remove("")
    for name, t in (("save new", t_new), ("save warm", t_warm), ("load", t_load)):
        med = {k: statistics.median(v) for k, v in t.items()}
        out[name] = {
            "amrckpt_s": stats(t["amrckpt"]),
            "raw_s": stats(t["raw"]),
            "ratio": med["raw"] / med["amrckpt"],
            "amrckpt_mib_s": total / 2**20 / med["amrckpt"],
            "raw_mib_s": total / 2**20 / med["raw"],
        }
    return out


def smooth_fields(n: int) -> dict[str, np.ndarray]:
    """Two smooth float64 fields of n values (along the curve: neighbours in the array are neighbours in space)."""
    s = np.linspace(0.0, 1.0, n)
    return {
        "rho": 1.0 + 0.2 * np.sin(6 * np.pi * s) + 0.05 * np.cos(40 * np.pi * s),
        "p": 1e5 * (1.0 + 0.01 * s**2) + np.cos(4 * np.pi * s) * np.exp(-s),
    }


class Compressed(ac.CheckpointSchema, name="compressed", version=1):
    """The mesh and two float64 cell fields, ``compress=True`` (shuffled, deflated chunks of leaves)."""

    mesh: ac.Forest = ac.Mesh(dim=3, compress=True)
    rho: ac.CellData = ac.Cells("<f8", compress=True)
    p: ac.CellData = ac.Cells("<f8", compress=True)


class HpCompressed(ac.CheckpointSchema, name="compressed-hp", version=1):
    """The mesh and an hp field of 1, 4 or 9 smooth float64 per leaf, ``compress=True`` (counts and values in chunks)."""

    mesh: ac.Forest = ac.Mesh(dim=3, compress=True)
    modes: ac.HpData = ac.HpCells("<f8", compress=True)


class HpPerElement(ac.CheckpointSchema, name="compressed-hp", version=1):
    """The same, ``compress="element"`` (the scda paper's convention: every leaf's values by themselves)."""

    mesh: ac.Forest = ac.Mesh(dim=3, compress="element", level=1)
    modes: ac.HpData = ac.HpCells("<f8", compress="element", level=1)


def smooth_modes(n: int) -> ac.HpData:
    """1, 4 or 9 modal coefficients per leaf (blocks of 64 leaves of one degree), decaying with the mode, smooth along the curve."""
    counts = np.array([1, 4, 9])[(np.arange(n) // 64) % 3]
    first = np.repeat(np.cumsum(counts) - counts, counts)
    mode = np.arange(int(counts.sum())) - first
    s = np.repeat(np.linspace(0.0, 1.0, n), counts)
    return ac.HpData((1.0 + 0.2 * np.sin(6 * np.pi * s + mode)) * 0.5**mode, counts)


class PerElement(ac.CheckpointSchema, name="compressed", version=1):
    """The same, ``compress="element"`` (the scda paper's convention: every leaf's value by itself)."""

    mesh: ac.Forest = ac.Mesh(dim=3, compress="element", level=1)
    rho: ac.CellData = ac.Cells("<f8", compress="element", level=1)
    p: ac.CellData = ac.Cells("<f8", compress="element", level=1)


def compression(a: argparse.Namespace) -> dict[str, Any]:
    """``compress=True`` on a 3D mesh and two smooth cell fields against h5py's chunked shuffle+gzip(1) of the same arrays."""
    import h5py

    level = 1
    while 8**level < a.comp_leaves:
        level += 1
    lv = sfc.uniform_leaves(level, num_trees=1, dim=3)
    n = lv.num_leaves
    assert lv.z is not None
    mesh = ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=1)
    f = smooth_fields(n)
    records = mesh.to_records()
    arrays = {"mesh": records, **f}
    out = against_h5py(a, "comp", arrays, Compressed(mesh=mesh, **f), Compressed, PerElement(mesh=mesh, **f))
    path = out.pop("path")
    back = ac.load(path, Compressed).state
    assert all(np.array_equal(getattr(back, k), x) for k, x in f.items())
    assert np.array_equal(back.mesh.to_records(), records)
    Path(path).unlink(missing_ok=True)
    modes = smooth_modes(n)
    hp_arrays = {"mesh": records, "counts": modes.counts.astype(np.uint8), "values": modes.values}
    hp = against_h5py(
        a, "comp-hp", hp_arrays, HpCompressed(mesh=mesh, modes=modes), HpCompressed, HpPerElement(mesh=mesh, modes=modes)
    )
    path = hp.pop("path")
    back_hp = ac.load(path, HpCompressed).state
    assert np.array_equal(back_hp.modes.values, modes.values) and np.array_equal(back_hp.modes.counts, modes.counts)
    Path(path).unlink(missing_ok=True)
    hp["values"] = int(modes.values.shape[0])
    hp.pop("per_element_write_s")
    return {
        "leaves": n,
        "chunk": DEFAULT_CHUNK,
        "deflate": deflate_name(),
        "threads": threads(),
        "h5py": h5py.__version__,
        "hdf5": h5py.version.hdf5_version,
        **out,
        "hp": hp,
    }


def against_h5py(
    a: argparse.Namespace,
    tag: str,
    arrays: dict[str, np.ndarray],
    st: ac.CheckpointSchema,
    schema: type[ac.CheckpointSchema],
    element: ac.CheckpointSchema,
) -> dict[str, Any]:
    """Save and load ``st`` (``compress=True``) against h5py's chunked shuffle+gzip(1) of ``arrays``, interleaved.

    Also saves ``element`` (``compress="element"``) once, for its size.  The
    returned ``path`` is amrckpt's file, left for the caller to check and remove.
    """
    import h5py

    K = DEFAULT_CHUNK
    nbytes = sum(x.nbytes for x in arrays.values())
    d = Path(a.dir)
    paths = {k: str(d / f"amrckpt-end-to-end-{tag}-{k}-{os.getpid()}") for k in ("amrckpt", "h5py", "element")}

    def h5_write() -> None:
        with h5py.File(paths["h5py"], "w") as h:
            for k, x in arrays.items():
                h.create_dataset(k, data=x, chunks=(min(K, len(x)),), shuffle=True, compression="gzip", compression_opts=1)

    def h5_read() -> None:
        with h5py.File(paths["h5py"], "r") as h:
            for k in arrays:
                h[k][...]

    def remove(name: str) -> None:
        Path(paths[name]).unlink(missing_ok=True)

    import _common

    saved = _common.comm
    _common.comm = MPI.COMM_SELF  # interleaved times on this rank alone
    try:
        t_w = interleaved({"amrckpt": lambda: ac.save(st, paths["amrckpt"]), "h5py": h5_write}, a.reps, before=remove)
        t_r = interleaved({"amrckpt": lambda: ac.load(paths["amrckpt"], schema), "h5py": h5_read}, a.reps)
        t0 = time.perf_counter()
        ac.save(element, paths["element"])
        per_elem_s = time.perf_counter() - t0
    finally:
        _common.comm = saved
    sizes = {k: os.path.getsize(p) for k, p in paths.items()}
    remove("h5py")
    remove("element")
    mw = {k: statistics.median(v) for k, v in t_w.items()}
    mr = {k: statistics.median(v) for k, v in t_r.items()}
    return {
        "path": paths["amrckpt"],
        "uncompressed_bytes": nbytes,
        "write_s": {k: stats(v) for k, v in t_w.items()},
        "read_s": {k: stats(v) for k, v in t_r.items()},
        "write_mib_s": {k: nbytes / 2**20 / v for k, v in mw.items()},
        "read_mib_s": {k: nbytes / 2**20 / v for k, v in mr.items()},
        "write_ratio": mw["h5py"] / mw["amrckpt"],
        "read_ratio": mr["h5py"] / mr["amrckpt"],
        "file_bytes": sizes,
        "file_ratio": {k: v / nbytes for k, v in sizes.items()},
        "per_element_write_s": per_elem_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, default=2_097_152)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--comp-leaves", type=int, default=262_144, help="leaves of the compression comparison")
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/end-to-end-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--skip", nargs="*", default=[], choices=["hp", "nohp", "compression"])
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.leaves, a.reps, a.comp_leaves = 32_768, 2, 4096
    say(f"end-to-end benchmark: P={P}, {a.leaves} leaves, {a.reps} repetitions, in {a.dir}, load {os.getloadavg()[0]:.2f}")
    result: dict[str, Any] = {"benchmark": "end-to-end", "P": P, "reps": a.reps, "load_before": os.getloadavg()}
    for which in ("hp", "nohp"):
        if which in a.skip:
            continue
        r = end_to_end(a, which)
        result[which] = r
        say(
            f"\n{which}: {r['leaves']} leaves, payload {r['payload_bytes'] / 2**20:.1f} MiB, file {r['file_bytes'] / 2**20:.1f} MiB"
        )
        for op in ("save new", "save warm", "load"):
            x = r[op]
            say(
                f"  {op:<10} amrckpt {x['amrckpt_s']['median']:.4f} s ({x['amrckpt_mib_s']:.0f} MiB/s)  "
                f"raw {x['raw_s']['median']:.4f} s ({x['raw_mib_s']:.0f} MiB/s)  ratio {x['ratio']:.2f}"
            )
    if "compression" not in a.skip and P == 1:
        try:
            import h5py  # noqa: F401
        except ImportError:
            say("h5py is not installed: no compression comparison")
        else:
            c = compression(a)
            result["compression"] = c
            say(
                f"\ncompression: a 3D mesh and two float64 cell fields, {c['leaves']} leaves "
                f"({c['uncompressed_bytes'] / 2**20:.1f} MiB), compress=True (chunks of {c['chunk']} leaves), "
                f"{c['deflate']}, {c['threads']} threads; h5py shuffle+gzip(1), the same chunks"
            )
            w, rd, fr = c["write_mib_s"], c["read_mib_s"], c["file_ratio"]
            say(f"  write MiB/s amrckpt {w['amrckpt']:.0f} h5py {w['h5py']:.0f} ratio {c['write_ratio']:.2f}")
            say(f"  read  MiB/s amrckpt {rd['amrckpt']:.0f} h5py {rd['h5py']:.0f} ratio {c['read_ratio']:.2f}")
            say(
                f"  file / uncompressed: amrckpt {fr['amrckpt']:.3f} h5py {fr['h5py']:.3f} "
                f"compress='element' {fr['element']:.3f} (its save {c['per_element_write_s']:.2f} s)"
            )
            h = c["hp"]
            w, rd, fr = h["write_mib_s"], h["read_mib_s"], h["file_ratio"]
            say(
                f"hp: the mesh and 1, 4 or 9 float64 per leaf ({h['uncompressed_bytes'] / 2**20:.1f} MiB), HpCells(compress=True); "
                "h5py: records, counts and values, shuffle+gzip(1)"
            )
            say(f"  write MiB/s amrckpt {w['amrckpt']:.0f} h5py {w['h5py']:.0f} ratio {h['write_ratio']:.2f}")
            say(f"  read  MiB/s amrckpt {rd['amrckpt']:.0f} h5py {rd['h5py']:.0f} ratio {h['read_ratio']:.2f}")
            say(f"  file / uncompressed: amrckpt {fr['amrckpt']:.3f} h5py {fr['h5py']:.3f} compress='element' {fr['element']:.3f}")
    result["load_after"] = os.getloadavg()
    write_json(a.json, f"bench-results/end-to-end-P{P}.json", result)


if __name__ == "__main__":
    main()
