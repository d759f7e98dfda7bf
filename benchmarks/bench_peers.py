#!/usr/bin/env python3
"""One array written and read by amrckpt's scda layer, raw MPI-IO, h5py, numpy and ADIOS2, interleaved in one run.

Run::

    pip install -e ".[bench]"                       # h5py and adios2 (PyPI wheels, both serial)
    mpiexec -n 1 python -m mpi4py benchmarks/bench_peers.py --json benchmarks/results/peers-P1.json
    mpiexec -n 2 python -m mpi4py benchmarks/bench_peers.py --json benchmarks/results/peers-P2.json
    python benchmarks/bench_peers.py --quick        # small, as CI runs it

The array: ``--mib`` MiB (default 256) of float64, a sine quantized to 2^-16
(so that gzip has something to find: h5py's gzip level 1 makes it 9:1).  Timed from a barrier to a
barrier (the slowest rank counts), all cases interleaved (A B C ..., ... C B
A, one warm-up round dropped), medians of ``--reps`` with min-max:

* ``scda``: :func:`amrckpt.scda.fopen_write` + ``fwrite_array`` (E = 8) on
  all ranks (MPI-IO); read with ``fread_array_data`` into a preallocated
  array;
* ``scda serial``: the same on rank 0 alone with ``comm=None`` (POSIX I/O);
* ``raw MPI-IO``: ``Write_at_all`` / ``Read_at_all`` of the same bytes on all
  ranks: the baseline every ratio is taken against;
* ``h5py``: one contiguous dataset, read with ``read_direct`` into a
  preallocated array;
* ``numpy``: ``numpy.save`` / ``numpy.load`` (the load allocates);
* ``adios2``: ``adios2.Stream`` write / ``adios2.FileReader`` read (the read
  allocates) of a BP5 directory;
* compressed, new-file regime only: ``scda gzip`` (``fwrite_array`` with
  ``encode=True`` of elements of ``--chunk-kib`` KiB, zlib level ``--level``,
  all ranks) against ``h5py gzip`` (chunks of the same size, the same level).

The PyPI wheels of h5py and adios2 are built without MPI: they run on rank 0
alone, with the whole array, while the other ranks wait.  At P = 1 every case
runs on one process; at P > 1 the table shows what a serial writer costs
against a parallel one.  A peer that is not installed is skipped with a
message.

Two regimes, always labelled: ``new`` deletes each file before it is written
(the page allocation of a new tmpfs file is timed; it swings between runs on
virtual machines), ``warm`` overwrites in place (scda ``truncate=False``; raw
without truncation; h5py ``r+`` into the existing dataset; numpy into the
open file).  ADIOS2 cannot overwrite in place: in the warm regime it
recreates its files.  Reads come from the page cache.  Files go to ``--dir``
(default /dev/shm, a tmpfs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import P, comm, interleaved, rank, say, spread, stats, write_json
from mpi4py import MPI

from amrckpt import __version__, scda

MiB = 1 << 20
A_DATA = scda.FILE_HEADER_NBYTES + 64 + 2 * 32


def peers() -> dict[str, Any]:
    """The optional peers that import, by name; a message for each that does not."""
    found: dict[str, Any] = {}
    for name in ("h5py", "adios2"):
        try:
            found[name] = __import__(name)
        except ImportError:
            say(f"{name} is not installed: skipped (pip install -e '.[bench]')")
    return found


def on_root(fn: Callable[[], Any]) -> Callable[[], None]:
    """``fn`` on rank 0 only (a serial peer)."""

    def run() -> None:
        if rank == 0:
            fn()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256, help="size of the array (MiB of float64)")
    ap.add_argument("--chunk-kib", type=int, default=64, help="compressed element / chunk size (KiB)")
    ap.add_argument("--level", type=int, default=1, help="zlib / gzip level of the compressed cases")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/peers-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.reps, a.chunk_kib = 4, 3, 16
    found = peers()
    nbytes = a.mib * MiB
    N = nbytes // 8
    counts = [N * (p + 1) // P - N * p // P for p in range(P)]
    lo = sum(counts[:rank])
    chunk = a.chunk_kib * 1024 // 8  # float64 per compressed element / chunk
    whole = np.round(np.sin(np.arange(N) * 1e-5) * 2**16) / 2**16 if rank == 0 else None
    local = np.empty(counts[rank], "<f8")
    comm.Scatterv([whole, counts, MPI.DOUBLE] if rank == 0 else None, local, root=0)
    out = np.empty_like(local)
    out0 = np.empty(N, "<f8") if rank == 0 else None
    ccounts = [c // chunk for c in counts]  # compressed elements per rank (whole chunks only)
    tag = comm.bcast(os.getpid() if rank == 0 else None)
    d = Path(a.dir)
    path = {
        k: d / f"amrckpt-bench-peers-{k}-{tag}{ext}"
        for k, ext in [
            ("scda", ".scda"),
            ("scda serial", ".scda"),
            ("raw MPI-IO", ".bin"),
            ("h5py", ".h5"),
            ("numpy", ".npy"),
            ("adios2", ".bp"),
            ("scda gzip", ".scda"),
            ("h5py gzip", ".h5"),
        ]
    }
    say(
        f"amrckpt {__version__} peers benchmark: P={P}, one array of {a.mib} MiB float64, {a.reps} repetitions, in {d}; "
        f"serial peers on rank 0: {', '.join(found) or 'none installed'}, numpy"
    )
    regime = {"warm": False}

    def scda_write(c: Any, arr: np.ndarray, cnt: list[int], key: str) -> Callable[[], None]:
        def run() -> None:
            with scda.fopen_write(path[key], b"peers", comm=c, truncate=not regime["warm"]) as f:
                f.fwrite_array(arr, cnt, 8, b"x")

        return run

    def scda_read(c: Any, dest: np.ndarray | None, cnt: list[int], key: str) -> Callable[[], None]:
        def run() -> None:
            with scda.fopen_read(path[key], comm=c) as f:
                f.fread_section_header()
                f.fread_array_data(cnt, 8, out=dest)

        return run

    def raw_w() -> None:
        fh = MPI.File.Open(comm, str(path["raw MPI-IO"]), MPI.MODE_WRONLY | MPI.MODE_CREATE)
        fh.Write_at_all(A_DATA + 8 * lo, local)
        fh.Close()

    def raw_r() -> None:
        fh = MPI.File.Open(comm, str(path["raw MPI-IO"]), MPI.MODE_RDONLY)
        fh.Read_at_all(A_DATA + 8 * lo, out)
        fh.Close()

    def np_w() -> None:
        if regime["warm"] and path["numpy"].exists():
            with open(path["numpy"], "r+b") as fh:
                np.save(fh, whole)
        else:
            np.save(path["numpy"], whole)

    def np_r() -> None:
        np.load(path["numpy"])

    writes: dict[str, Callable[[], None]] = {
        "scda": scda_write(comm, local, counts, "scda"),
        "scda serial": on_root(lambda: scda_write(None, whole, [N], "scda serial")()),  # type: ignore[arg-type]
        "raw MPI-IO": raw_w,
        "numpy": on_root(np_w),
    }
    reads: dict[str, Callable[[], None]] = {
        "scda": scda_read(comm, out, counts, "scda"),
        "scda serial": on_root(lambda: scda_read(None, out0, [N], "scda serial")()),  # type: ignore[arg-type]
        "raw MPI-IO": raw_r,
        "numpy": on_root(np_r),
    }
    if "h5py" in found:
        h5py = found["h5py"]

        def h5_w() -> None:
            if regime["warm"] and path["h5py"].exists():
                with h5py.File(path["h5py"], "r+") as f:
                    f["x"][...] = whole
            else:
                with h5py.File(path["h5py"], "w") as f:
                    f.create_dataset("x", data=whole)

        def h5_r() -> None:
            with h5py.File(path["h5py"], "r") as f:
                f["x"].read_direct(out0)

        writes["h5py"], reads["h5py"] = on_root(h5_w), on_root(h5_r)
    if "adios2" in found:
        adios2 = found["adios2"]

        def ad_w() -> None:
            with adios2.Stream(str(path["adios2"]), "w") as s:
                for _ in s.steps(1):
                    s.write("x", whole, [N], [0], [N])

        def ad_r() -> None:
            with adios2.FileReader(str(path["adios2"])) as r:
                r.read("x")

        writes["adios2"], reads["adios2"] = on_root(ad_w), on_root(ad_r)

    def remove(key: str) -> None:
        comm.Barrier()
        if rank == 0:
            p = path[key]
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        comm.Barrier()

    rows: list[dict[str, Any]] = []

    def record(t: dict[str, list[float]], reg: str, names: list[str], nb: int) -> None:
        sizes = comm.bcast({k: du(path[k]) for k in names} if rank == 0 else None)
        for op in ("write", "read"):
            base = stats(t[f"raw MPI-IO {op}"])
            for k in names:
                s = stats(t[f"{k} {op}"])
                rows.append(
                    {
                        "case": k,
                        "op": op,
                        "regime": reg,
                        "P": P,
                        "MiB": nb / MiB,
                        "s": s,
                        "MiBps": nb / MiB / s["median"],
                        "raw_s": base,
                        "raw_MiBps": nbytes / MiB / base["median"],
                        "ratio": (nb / s["median"]) / (nbytes / base["median"]),
                        "file_over_data": sizes[k] / nb,
                        "ranks": P if k in ("scda", "raw MPI-IO", "scda gzip") else 1,
                    }
                )

    try:
        for reg in ("new", "warm"):
            regime["warm"] = reg == "warm"
            ops = {f"{k} write": v for k, v in writes.items()} | {f"{k} read": v for k, v in reads.items()}
            t = interleaved(
                ops,
                a.reps,
                before=(lambda n: remove(n.rsplit(" ", 1)[0]) if n.endswith("write") else None) if reg == "new" else None,
            )
            assert out[0] == local[0] and out[-1] == local[-1]
            record(t, reg, list(writes), nbytes)
        # Compressed: whole chunks of every rank's part; serial h5py writes the same chunks.
        regime["warm"] = False
        cl = local[: ccounts[rank] * chunk]
        cout = np.empty_like(cl)
        cn = sum(ccounts) * chunk
        parts = comm.gather(cl, root=0)
        cwhole = np.concatenate(parts) if rank == 0 else None
        cops: dict[str, Callable[[], None]] = {}

        def sg_w() -> None:
            with scda.fopen_write(path["scda gzip"], b"peers", comm=comm) as f:
                f.fwrite_array(cl, ccounts, 8 * chunk, b"x", encode=True, level=a.level)

        def sg_r() -> None:
            with scda.fopen_read(path["scda gzip"], comm=comm) as f:
                f.fread_section_header(decode=True)
                f.fread_array_data(ccounts, 8 * chunk, out=cout)

        cops |= {"scda gzip write": sg_w, "raw MPI-IO write": raw_w, "scda gzip read": sg_r, "raw MPI-IO read": raw_r}
        if "h5py" in found:
            h5py = found["h5py"]
            cout0 = np.empty(cn, "<f8") if rank == 0 else None

            def hg_w() -> None:
                with h5py.File(path["h5py gzip"], "w") as f:
                    f.create_dataset("x", data=cwhole, chunks=(chunk,), compression="gzip", compression_opts=a.level)

            def hg_r() -> None:
                with h5py.File(path["h5py gzip"], "r") as f:
                    f["x"].read_direct(cout0)

            cops |= {"h5py gzip write": on_root(hg_w), "h5py gzip read": on_root(hg_r)}
        t = interleaved(cops, max(3, a.reps - 2), before=lambda n: remove(n.rsplit(" ", 1)[0]) if n.endswith("write") else None)
        assert np.array_equal(cout, cl)
        record(t, "new", [k for k in ("scda gzip", "h5py gzip") if f"{k} write" in t], cn * 8)
    finally:
        for k in path:
            remove(k)
    say(f"\n{'case':<12} {'op':<6} {'regime':<6} {'ranks':>5} {'MiB/s':>7} {'vs raw':>7} {'file/data':>9}   s median (min-max)")
    for r in rows:
        say(
            f"{r['case']:<12} {r['op']:<6} {r['regime']:<6} {r['ranks']:>5} {r['MiBps']:>7.0f} {r['ratio']:>7.3f} "
            f"{r['file_over_data']:>9.3f}   {spread(r['s'])}"
        )
    say("  (vs raw: throughput over raw MPI-IO's in the same run and regime; compressed rows: of the uncompressed bytes)")
    result = {
        "benchmark": "peers",
        "amrckpt": __version__,
        "P": P,
        "MiB": a.mib,
        "chunk_KiB": a.chunk_kib,
        "level": a.level,
        "reps": a.reps,
        "dir": a.dir,
        "memory": a.memory,
        "versions": {k: getattr(v, "__version__", "?") for k, v in found.items()} | {"numpy": np.__version__},
        "rows": rows,
    }
    write_json(a.json, f"bench-results/peers-P{P}.json", result)


def du(p: Path) -> int:
    """Bytes of a file or of the files of a directory (ADIOS2's BP)."""
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size if p.exists() else 0


if __name__ == "__main__":
    main()
