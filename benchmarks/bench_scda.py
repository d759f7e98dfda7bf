#!/usr/bin/env python3
"""scda layer against raw MPI-IO, measured side by side in one run.

Run (P = 1 and 2 are the targets; any P works)::

    mpiexec -n 1 python -m mpi4py benchmarks/bench_scda.py
    mpiexec -n 2 python -m mpi4py benchmarks/bench_scda.py --mib 256 --reps 7
    python benchmarks/bench_scda.py --quick          # small sizes, as CI runs it

(``python -m mpi4py`` aborts the whole job if one rank raises.)

What is timed (barrier before, barrier after, so the slowest rank counts):

* ``A write``: ``fopen_write`` + ``fwrite_array`` of ``--mib`` MiB + ``fclose``
  against ``MPI.File.Open`` + ``Write_at_all`` of the same bytes + ``Close``
  (both leave a file holding exactly these bytes);
* ``A read``: ``fopen_read`` + ``fread_section_header`` + ``fread_array_data``
  into a preallocated array against ``Open`` + ``Read_at_all`` of the same
  bytes of the same file into one.

Each pair runs interleaved (A B, then B A, ...), medians of ``--reps``, spread
printed.  Two regimes, always labelled: ``new`` writes a new file each time
(the page-allocation cost of a fresh tmpfs file is included, and it is noisy
on virtual machines: tenfold swings) and ``warm`` overwrites the file in place
(scda: ``fopen_write(..., truncate=False)``; raw: ``Write_at_all`` then
``Set_size``), so that the software's own cost shows.  Reads come from the
page cache in both.  The process reuses freed memory (``--memory warm``, see
``_warm.py``) unless ``--memory fresh``.
Files go to ``--dir`` (default /dev/shm, a tmpfs, where software overhead
shows rather than the disk).

Also, per rank: the E_i entries of a V section formatted and parsed
(entries/s), and per-element compression of ``--elems`` 64-byte elements
against a plain Python loop that calls zlib-ng per element (elements/s).
Results are printed as a table and written as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import P, comm, rank, say, timed
from mpi4py import MPI
from zlib_ng import zlib_ng

from amrckpt import __version__, scda
from amrckpt.scda import _codec, _entries


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


# -- A section against raw MPI-IO --------------------------------------------


def a_section(directory: Path, mib: int, reps: int) -> list[dict[str, Any]]:
    nbytes_total = mib << 20
    N = nbytes_total // 8
    counts = [N * (p + 1) // P - N * p // P for p in range(P)]
    start = sum(counts[:rank])
    local = np.arange(start, start + counts[rank], dtype="<f8")
    out = np.empty_like(local)
    header = scda.FILE_HEADER_NBYTES + 128  # file header + A section header
    paths = {k: directory / f"amrckpt-bench-{k}-{os.getpid() if rank == 0 else 0}.scda" for k in ("scda", "raw")}
    paths = {k: Path(comm.bcast(str(v) if rank == 0 else None)) for k, v in paths.items()}

    def remove(*which: str) -> None:
        comm.Barrier()
        if rank == 0:
            for k in which or tuple(paths):
                paths[k].unlink(missing_ok=True)
        comm.Barrier()

    warm = {"on": False}

    def scda_write() -> None:
        with scda.fopen_write(paths["scda"], b"bench", comm=comm, truncate=not warm["on"]) as f:
            f.fwrite_array(local, counts, 8, b"doubles")

    total = header + nbytes_total + scda.data_padding_nbytes(nbytes_total)

    def raw_write() -> None:
        fh = MPI.File.Open(comm, str(paths["raw"]), MPI.MODE_WRONLY | MPI.MODE_CREATE)
        fh.Write_at_all(header + 8 * start, local)
        fh.Set_size(total)
        fh.Close()

    def scda_read() -> None:
        with scda.fopen_read(paths["scda"], comm=comm) as f:
            f.fread_section_header()
            f.fread_array_data(counts, 8, out=out)

    def raw_read() -> None:
        fh = MPI.File.Open(comm, str(paths["scda"]), MPI.MODE_RDONLY)
        fh.Read_at_all(header + 8 * start, out)
        fh.Close()

    rows = []
    for regime in ("new", "warm"):
        warm["on"] = regime == "warm"
        t: dict[str, list[float]] = {"scda write": [], "raw write": [], "scda read": [], "raw read": []}
        for k in range(reps + 1):  # the first repetition warms up and is dropped
            pairs = [("scda write", scda_write), ("raw write", raw_write)]
            for name, fn in pairs if k % 2 == 0 else pairs[::-1]:
                if regime == "new":
                    remove(name.split()[0])
                dt = timed(fn)
                if k:
                    t[name].append(dt)
            pairs = [("scda read", scda_read), ("raw read", raw_read)]
            for name, fn in pairs if k % 2 == 0 else pairs[::-1]:
                dt = timed(fn)
                if k:
                    t[name].append(dt)
        assert out[0] == start and out[-1] == start + out.size - 1
        for op in ("write", "read"):
            s, r = stats(t[f"scda {op}"]), stats(t[f"raw {op}"])
            rows.append(
                {
                    "case": f"A {op}",
                    "regime": regime,
                    "P": P,
                    "MiB": mib,
                    "scda_s": s,
                    "raw_s": r,
                    "scda_MiBps": mib / s["median"],
                    "raw_MiBps": mib / r["median"],
                    "ratio": r["median"] / s["median"],
                }
            )
    remove()
    return rows


# -- per-rank kernels --------------------------------------------------------


def entries(n: int, reps: int) -> dict[str, Any]:
    v = np.random.default_rng(rank).integers(0, 301, n).astype(np.uint64)
    fmt, par = [], []
    raw = _entries.format_entries(b"E", v, "unix")  # warm-up
    for _ in range(reps):
        t0 = time.perf_counter()
        raw = _entries.format_entries(b"E", v, "unix")
        fmt.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        back = _entries.parse_entries(b"E", raw)
        par.append(time.perf_counter() - t0)
    assert np.array_equal(back, v)
    rf = comm.gather(n / statistics.median(fmt), root=0)
    rp = comm.gather(n / statistics.median(par), root=0)
    return {"entries": n, "format_per_s_by_rank": rf, "parse_per_s_by_rank": rp}


def python_loop_encode(data: memoryview, n: int, e: int, level: int) -> bytes:
    """The honest baseline: a plain Python loop, zlib-ng per element, encoding as the paper says."""
    parts = []
    for i in range(n):
        elem = data[i * e : (i + 1) * e]
        stage1 = struct.pack(">Q", e) + b"z" + zlib_ng.compress(elem, level)
        b64 = base64.b64encode(stage1)
        parts.append(b"".join(b64[j : j + 76] + b"=\n" for j in range(0, len(b64), 76)))
    return b"".join(parts)


def compression(n: int, e: int, reps: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(rank)
    data = memoryview(rng.integers(0, 16, n * e, dtype=np.uint8).tobytes())
    offsets = np.arange(n + 1, dtype=np.int64) * e
    rows = []
    for level in (1, 9):
        ours, loop, dec = [], [], []
        for k in range(reps):
            t0 = time.perf_counter()
            enc, sizes = _codec.encode_elements(data, offsets, level=level)
            t1 = time.perf_counter()
            ref = python_loop_encode(data, n, e, level)
            t2 = time.perf_counter()
            back = _codec.decode_elements(enc, sizes, np.full(n, e, np.uint64))
            t3 = time.perf_counter()
            ours.append(t1 - t0)
            loop.append(t2 - t1)
            dec.append(t3 - t2)
            if k == 0:
                assert enc.tobytes() == ref and back.tobytes() == data.tobytes()
        rows.append(
            {
                "level": level,
                "elements": n,
                "elem_size": e,
                "encode_per_s_by_rank": comm.gather(n / statistics.median(ours), root=0),
                "python_loop_per_s_by_rank": comm.gather(n / statistics.median(loop), root=0),
                "decode_per_s_by_rank": comm.gather(n / statistics.median(dec), root=0),
                "ratio_vs_loop": statistics.median(loop) / statistics.median(ours),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256, help="size of the A section (MiB)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--entries", type=int, default=10_000_000, help="E_i entries per rank")
    ap.add_argument("--elems", type=int, default=1_000_000, help="64-byte elements compressed per rank")
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output file (default bench-results/scda-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true", help="small sizes, few repetitions (CI)")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.reps, a.entries, a.elems = 8, 3, 200_000, 20_000
    say(f"amrckpt {__version__} scda benchmark: P={P}, A section {a.mib} MiB in {a.dir}, {a.reps} repetitions (medians)")
    rows = a_section(Path(a.dir), a.mib, a.reps)
    say(f"\n{'case':<9} {'regime':<6} {'scda MiB/s':>11} {'raw MiB/s':>10} {'ratio':>6}   scda s (min-max)        raw s (min-max)")
    for r in rows:
        s, w = r["scda_s"], r["raw_s"]
        say(
            f"{r['case']:<9} {r['regime']:<6} {r['scda_MiBps']:>11.0f} {r['raw_MiBps']:>10.0f} {r['ratio']:>6.3f}   "
            f"{s['median']:.4f} ({s['min']:.4f}-{s['max']:.4f})  {w['median']:.4f} ({w['min']:.4f}-{w['max']:.4f})"
        )
    ent = entries(a.entries, a.reps)
    comp = compression(a.elems, 64, max(3, a.reps // 2))
    if rank != 0:
        return
    say(
        f"\nV-section E_i entries, per rank (M entries/s): format {[round(x / 1e6, 1) for x in ent['format_per_s_by_rank']]}, "
        f"parse {[round(x / 1e6, 1) for x in ent['parse_per_s_by_rank']]}"
    )
    for c in comp:
        say(
            f"compress {c['elements']} x 64 B, level {c['level']}: "
            f"{[round(x / 1e3) for x in c['encode_per_s_by_rank']]} k elements/s per rank "
            f"(plain Python loop: {[round(x / 1e3) for x in c['python_loop_per_s_by_rank']]} k/s; "
            f"ratio {c['ratio_vs_loop']:.2f}); decode {[round(x / 1e3) for x in c['decode_per_s_by_rank']]} k/s"
        )
    result = {
        "benchmark": "scda",
        "amrckpt": __version__,
        "P": P,
        "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "dir": a.dir,
        "a_section": rows,
        "entries": ent,
        "compression": comp,
    }
    out = Path(a.json or f"bench-results/scda-P{P}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    say(f"\nwrote {out}")


if __name__ == "__main__":
    main()
