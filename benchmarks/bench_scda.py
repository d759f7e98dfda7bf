#!/usr/bin/env python3
"""scda layer against raw MPI-IO, measured side by side in one run.

Run (P = 1 and 2 are the targets; any P works)::

    mpiexec -n 1 python -m mpi4py benchmarks/bench_scda.py --json benchmarks/results/scda-P1.json
    mpiexec -n 2 python -m mpi4py benchmarks/bench_scda.py --json benchmarks/results/scda-P2.json
    mpiexec -n 2 python -m mpi4py benchmarks/bench_scda.py --mib 256 --v-elems 1000000 --reps 7
    python benchmarks/bench_scda.py --quick          # small sizes, as CI runs it

(``python -m mpi4py`` aborts the whole job if one rank raises.)

What is timed (barrier before, barrier after, so the slowest rank counts),
every scda operation interleaved with its raw MPI-IO baseline (A B, B A, ...;
one warm-up round dropped; medians of ``--reps``, min-max and quartiles kept):

* ``A write`` / ``A read``, one A section of each ``--mib`` size (default 64,
  256 and 1024 MiB of float64): ``fopen_write`` + ``fwrite_array`` +
  ``fclose`` against ``MPI.File.Open`` + ``Write_at_all`` of the same bytes
  at the same offsets + ``Close``; ``fopen_read`` + ``fread_section_header``
  + ``fread_array_data`` into a preallocated array against ``Read_at_all``
  of the same bytes of the same file;
* ``V write`` / ``V read``, one V section of each ``--v-elems`` elements
  (global; sizes uniform in 0..300 bytes): ``fwrite_varray`` (formats the
  E_i entries) against ``Write_at_all`` of the already formatted entries and
  the data; ``fread_varray_sizes`` (parses them) + ``fread_varray_data``
  against ``Read_at_all`` of both;
* ``A read Q=`` / ``V read Q=`` (only at P >= 2): the largest sections read
  by Q = P - 1 ranks (a sub-communicator) -- a process count different from
  the writer's -- against raw ``Read_at_all`` on the same Q ranks;
* compressed sections (``--comp-mib`` MiB per rank of bytes 0..15, i.e.
  about 2:1 compressible): an A section of 64-byte and of 4 KiB elements and a
  V section of elements of 0..128 and 0..8192 bytes (the same means), zlib
  levels 1 and 9, write and read (decode), against a raw write / read of the
  uncompressed bytes; per-rank MiB/s of uncompressed data.

Two regimes, always labelled: ``new`` writes a new file each time (the
previous one is deleted first, untimed, so the page allocation of a fresh
tmpfs file is included; on virtual machines it swings up to tenfold between
runs) and ``warm`` overwrites the file in place (scda: ``fopen_write(...,
truncate=False)``; raw: ``Write_at_all`` then ``Set_size``), so that the
software's own cost shows.  Reads come from the page cache in both; the read
rows of the ``new`` regime follow new-file writes.  The process reuses freed
memory (``--memory warm``, see ``_warm.py``) unless ``--memory fresh``.
Files go to ``--dir`` (default /dev/shm, a tmpfs, where software overhead
shows rather than the disk).

Also, per rank (no I/O): the E_i entries of a V section formatted and parsed
(entries/s), and per-element compression of ``--elems`` 64-byte elements (and
the same bytes as 4 KiB elements) against a plain Python loop that calls
zlib-ng per element (elements/s).  Results are printed as tables and written
as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import P, comm, interleaved, rank, say, spread, stats, write_json
from mpi4py import MPI
from zlib_ng import zlib_ng

from amrckpt import __version__, scda
from amrckpt.scda import _codec, _entries

MiB = 1 << 20
A_DATA = scda.FILE_HEADER_NBYTES + 64 + 2 * 32  # file header, A section header, N and E entries
V_ENTRIES = scda.FILE_HEADER_NBYTES + 64 + 32  # file header, V section header, N entry


class Files:
    """The benchmark's files (names chosen on rank 0), deleted between new-file writes and at the end."""

    def __init__(self, directory: Path, *kinds: str) -> None:
        tag = comm.bcast(os.getpid() if rank == 0 else None)
        self.path = {k: directory / f"amrckpt-bench-{k}-{tag}.scda" for k in kinds}

    def remove(self, *kinds: str) -> None:
        comm.Barrier()
        if rank == 0:
            for k in kinds or tuple(self.path):
                self.path[k].unlink(missing_ok=True)
        comm.Barrier()

    def __getitem__(self, k: str) -> str:
        return str(self.path[k])


def raw_write(path: str, pieces: list[tuple[int, Any]], total: int, c: Any = comm) -> Callable[[], None]:
    """``Write_at_all`` of each (offset, buffer), then the file's size: the baseline of every write."""

    def run() -> None:
        fh = MPI.File.Open(c, path, MPI.MODE_WRONLY | MPI.MODE_CREATE)
        for off, buf in pieces:
            fh.Write_at_all(off, buf)
        fh.Set_size(total)
        fh.Close()

    return run


def raw_read(path: str, pieces: list[tuple[int, Any]], c: Any = comm) -> Callable[[], None]:
    """``Read_at_all`` into each (offset, buffer): the baseline of every read."""

    def run() -> None:
        fh = MPI.File.Open(c, path, MPI.MODE_RDONLY)
        for off, buf in pieces:
            fh.Read_at_all(off, buf)
        fh.Close()

    return run


def row(
    case: str, regime: str, size: str, nbytes: int, t: dict[str, list[float]], ours: str, base: str, **kw: Any
) -> dict[str, Any]:
    s, r = stats(t[ours]), stats(t[base])
    return {
        "case": case,
        "regime": regime,
        "P": P,
        "size": size,
        "bytes": nbytes,
        "MiB": nbytes / MiB,
        "scda_s": s,
        "raw_s": r,
        "scda_MiBps": nbytes / MiB / s["median"],
        "raw_MiBps": nbytes / MiB / r["median"],
        "ratio": r["median"] / s["median"],
        **kw,
    }


def split_counts(n: int, parts: int) -> list[int]:
    return [n * (p + 1) // parts - n * p // parts for p in range(parts)]


def sub_comm() -> tuple[Any, int]:
    """A communicator of Q = P - 1 ranks (None on the others), or (None, 0) at P = 1."""
    if P < 2:
        return None, 0
    sub = comm.Split(0 if rank < P - 1 else MPI.UNDEFINED, rank)
    return (None if sub == MPI.COMM_NULL else sub), P - 1


# -- A section ---------------------------------------------------------------


def a_section(files: Files, mib: int, reps: int, q_read: bool) -> list[dict[str, Any]]:
    nbytes = mib * MiB
    N = nbytes // 8
    counts = split_counts(N, P)
    start = sum(counts[:rank])
    local = np.arange(start, start + counts[rank], dtype="<f8")
    out = np.empty_like(local)
    total = A_DATA + nbytes + scda.data_padding_nbytes(nbytes)
    warm = {"on": False}

    def scda_write() -> None:
        with scda.fopen_write(files["scda"], b"bench", comm=comm, truncate=not warm["on"]) as f:
            f.fwrite_array(local, counts, 8, b"doubles")

    def scda_read() -> None:
        with scda.fopen_read(files["scda"], comm=comm) as f:
            f.fread_section_header()
            f.fread_array_data(counts, 8, out=out)

    ops = {
        "scda write": scda_write,
        "raw write": raw_write(files["raw"], [(A_DATA + 8 * start, local)], total),
        "scda read": scda_read,
        "raw read": raw_read(files["scda"], [(A_DATA + 8 * start, out)]),
    }
    rows = []
    for regime in ("new", "warm"):
        warm["on"] = regime == "warm"
        t = interleaved(
            ops, reps, before=(lambda n: files.remove(n.split()[0]) if n.endswith("write") else None) if regime == "new" else None
        )
        assert out[0] == start and out[-1] == start + out.size - 1
        for op in ("write", "read"):
            rows.append(row(f"A {op}", regime, f"{mib} MiB", nbytes, t, f"scda {op}", f"raw {op}"))
    if q_read and P > 1:
        rows.append(read_on_q(files, "A", nbytes, reps, lambda sub: a_read_q(files, N, sub)))
    return rows


def a_read_q(files: Files, N: int, sub: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    r = sub.rank
    cq = split_counts(N, sub.size)
    out = np.empty(cq[r], dtype="<f8")

    def scda_read() -> None:
        with scda.fopen_read(files["scda"], comm=sub) as f:
            f.fread_section_header()
            f.fread_array_data(cq, 8, out=out)

    return scda_read, raw_read(files["scda"], [(A_DATA + 8 * sum(cq[:r]), out)], sub)


def read_on_q(
    files: Files, kind: str, nbytes: int, reps: int, make: Callable[[Any], tuple[Callable[[], None], Callable[[], None]]]
) -> dict[str, Any]:
    """Read the last written scda file on Q = P - 1 ranks, against raw MPI-IO on the same ranks."""
    sub, Q = sub_comm()
    ours: Callable[[], None] = lambda: None  # noqa: E731
    base: Callable[[], None] = lambda: None  # noqa: E731
    if sub is not None:
        ours, base = make(sub)
    t = interleaved({"scda read": ours, "raw read": base}, reps)
    if sub is not None:
        sub.Free()
    return row(f"{kind} read Q={Q}", "warm", "", nbytes, t, "scda read", "raw read", Q=Q)


# -- V section ---------------------------------------------------------------


def v_layout(n_total: int) -> tuple[list[int], int, np.ndarray, list[int]]:
    counts = split_counts(n_total, P)
    lo = sum(counts[:rank])
    sizes = np.random.default_rng(rank).integers(0, 301, counts[rank]).astype(np.uint64)
    proc = [int(x) for x in comm.allgather(int(sizes.sum()))]
    return counts, lo, sizes, proc


def v_section(files: Files, n_total: int, reps: int, q_read: bool) -> list[dict[str, Any]]:
    counts, lo, sizes, proc = v_layout(n_total)
    data = np.random.default_rng(100 + rank).integers(0, 256, proc[rank], dtype=np.uint8)
    out = np.empty_like(data)
    ents = _entries.format_entries(b"E", sizes, "unix")
    ents_out = np.empty_like(ents)
    S = sum(proc)
    data_off = V_ENTRIES + 32 * n_total
    total = data_off + S + scda.data_padding_nbytes(S)
    nbytes = 32 * n_total + S
    warm = {"on": False}

    def scda_write() -> None:
        with scda.fopen_write(files["scda"], b"bench", comm=comm, truncate=not warm["on"]) as f:
            f.fwrite_varray(data, counts, sizes, proc, b"bytes")

    def scda_read() -> None:
        with scda.fopen_read(files["scda"], comm=comm) as f:
            f.fread_section_header()
            s = f.fread_varray_sizes(counts)
            f.fread_varray_data(counts, s, f.proc_sizes(), out=out)

    mine = [(V_ENTRIES + 32 * lo, ents), (data_off + sum(proc[:rank]), data)]
    ops = {
        "scda write": scda_write,
        "raw write": raw_write(files["raw"], mine, total),
        "scda read": scda_read,
        "raw read": raw_read(files["scda"], [(mine[0][0], ents_out), (mine[1][0], out)]),
    }
    rows = []
    label = f"{n_total:.0e} elements".replace("e+0", "e")
    for regime in ("new", "warm"):
        warm["on"] = regime == "warm"
        t = interleaved(
            ops, reps, before=(lambda n: files.remove(n.split()[0]) if n.endswith("write") else None) if regime == "new" else None
        )
        assert np.array_equal(out, data) and np.array_equal(ents_out, ents)
        for op in ("write", "read"):
            rows.append(row(f"V {op}", regime, label, nbytes, t, f"scda {op}", f"raw {op}", elements=n_total))
    if q_read and P > 1:
        rows.append(read_on_q(files, "V", nbytes, reps, lambda sub: v_read_q(files, n_total, sub)))
    return rows


def v_read_q(files: Files, n_total: int, sub: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    """Readers on Q ranks: scda parses the E_i entries itself; raw MPI-IO is given the byte ranges (found untimed)."""
    Q, r = sub.size, sub.rank
    cq = split_counts(n_total, Q)
    with scda.fopen_read(files["scda"], comm=sub) as f:
        f.fread_section_header()
        s = f.fread_varray_sizes(cq)
        qproc = f.proc_sizes()
    assert s is not None
    lo = sum(cq[:r])
    out = np.empty(qproc[r], np.uint8)
    ents = np.empty((cq[r], 32), np.uint8)
    data_off = V_ENTRIES + 32 * n_total

    def scda_read() -> None:
        with scda.fopen_read(files["scda"], comm=sub) as f:
            f.fread_section_header()
            sz = f.fread_varray_sizes(cq)
            f.fread_varray_data(cq, sz, f.proc_sizes(), out=out)

    return scda_read, raw_read(files["scda"], [(V_ENTRIES + 32 * lo, ents), (data_off + sum(qproc[:r]), out)], sub)


# -- compressed sections -----------------------------------------------------


def compressed_sections(files: Files, mib: float, reps: int) -> list[dict[str, Any]]:
    nbytes = int(mib * MiB)
    data = np.random.default_rng(rank).integers(0, 16, nbytes, dtype=np.uint8)
    out = np.empty_like(data)
    return [r for E in (64, 4096) for level in (1, 9) for r in compressed_case(files, data, out, E, level, reps)]


def compressed_case(files: Files, data: np.ndarray, out: np.ndarray, E: int, level: int, reps: int) -> list[dict[str, Any]]:
    """A compressed A section of E-byte elements and a V section of 0..2E-byte ones, against raw MPI-IO of the bytes."""
    n = data.size // E
    counts = [int(x) for x in comm.allgather(n)]
    local = data[: n * E]
    vsizes = np.random.default_rng(rank).integers(0, 2 * E + 1, n).astype(np.uint64)
    vsizes = vsizes[: int(np.searchsorted(np.cumsum(vsizes), n * E, side="right"))]  # as many as fit in the bytes
    vcounts = [int(x) for x in comm.allgather(vsizes.size)]
    vproc = [int(x) for x in comm.allgather(int(vsizes.sum()))]
    vdata = data[: vproc[rank]]
    start = sum(counts[:rank]) * E
    total_bytes = sum(counts) * E

    def a_write() -> None:
        with scda.fopen_write(files["scda"], b"bench", comm=comm) as f:
            f.fwrite_array(local, counts, E, b"compressed A", encode=True, level=level)

    def v_write() -> None:
        with scda.fopen_write(files["v"], b"bench", comm=comm) as f:
            f.fwrite_varray(vdata, vcounts, vsizes, vproc, b"compressed V", encode=True, level=level)

    def a_read() -> None:
        with scda.fopen_read(files["scda"], comm=comm) as f:
            f.fread_section_header(decode=True)
            f.fread_array_data(counts, E, out=out[: n * E])

    def v_read() -> None:
        with scda.fopen_read(files["v"], comm=comm) as f:
            f.fread_section_header(decode=True)
            s = f.fread_varray_sizes(vcounts)
            f.fread_varray_data(vcounts, s, f.proc_sizes(), out=out[: vproc[rank]])

    ops = {
        "A write": a_write,
        "V write": v_write,
        "raw write": raw_write(files["raw"], [(A_DATA + start, local)], A_DATA + total_bytes),
        "A read": a_read,
        "V read": v_read,
        "raw read": raw_read(files["raw"], [(A_DATA + start, out[: n * E])]),
    }
    which = {"A": "scda", "V": "v", "raw": "raw"}
    t = interleaved(ops, reps, before=lambda k: files.remove(which[k.split()[0]]) if k.endswith("write") else None)
    fsize = {k: int(comm.bcast(os.path.getsize(files[which[k]]) if rank == 0 else None)) for k in ("A", "V")}
    rows = []
    for op in ("write", "read"):
        for kind, size_total in (("A", total_bytes), ("V", sum(vproc))):
            r = row(
                f"{kind} {op} compressed",
                "new",
                f"{E} B, level {level}",
                size_total,
                t,
                f"{kind} {op}",
                f"raw {op}",
                elem_size=E,
                level=level,
                file_over_data=fsize[kind] / size_total,
                per_rank_MiBps=size_total / P / MiB / stats(t[f"{kind} {op}"])["median"],
            )
            r["ratio"] *= size_total / total_bytes  # throughput ratio: V holds slightly fewer bytes than raw wrote
            rows.append(r)
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
    return {
        "entries": n,
        "format_per_s_by_rank": comm.gather(n / statistics.median(fmt), root=0),
        "parse_per_s_by_rank": comm.gather(n / statistics.median(par), root=0),
        "format_s_by_rank": comm.gather(stats(fmt), root=0),
        "parse_s_by_rank": comm.gather(stats(par), root=0),
    }


def python_loop_encode(data: memoryview, n: int, e: int, level: int) -> bytes:
    """The honest baseline: a plain Python loop, zlib-ng per element, encoding as the paper says."""
    parts = []
    for i in range(n):
        elem = data[i * e : (i + 1) * e]
        stage1 = struct.pack(">Q", e) + b"z" + zlib_ng.compress(elem, level)
        b64 = base64.b64encode(stage1)
        parts.append(b"".join(b64[j : j + 76] + b"=\n" for j in range(0, len(b64), 76)))
    return b"".join(parts)


def compression(n64: int, reps: int) -> list[dict[str, Any]]:
    """Encode the same bytes as ``n64`` 64-byte elements and as 4 KiB elements, levels 1 and 9.

    Interleaved per repetition: ours and the Python loop on all ranks at once
    (between barriers), and ours on rank 0 alone while the others wait
    (``solo``): the per-rank rate with all ranks busy over the solo rate is
    how per-rank throughput scales with ranks, measured in one run.  Also the
    zlib-ng calls alone (a ``map`` of ``zlib_ng.compress`` over the
    elements, nothing else): loop time / zlib time bounds what any encoder
    that makes one zlib call per element can gain over the loop.
    """
    rng = np.random.default_rng(rank)
    data = memoryview(rng.integers(0, 16, n64 * 64, dtype=np.uint8).tobytes())
    rows = []
    for e in (64, 4096):
        n = n64 * 64 // e
        offsets = np.arange(n + 1, dtype=np.int64) * e
        for level in (1, 9):
            t: dict[str, list[float]] = {"ours": [], "loop": [], "solo": [], "zlib": [], "decode": []}
            elems = [data[i * e : (i + 1) * e] for i in range(n)]
            cases = [
                ("ours", lambda o=offsets, lv=level: _codec.encode_elements(data, o, level=lv)),
                ("loop", lambda n=n, e=e, lv=level: python_loop_encode(data, n, e, lv)),
                ("solo", lambda o=offsets, lv=level: _codec.encode_elements(data, o, level=lv)),
                ("zlib", lambda el=elems, lv=level: list(map(zlib_ng.compress, el, itertools.repeat(lv)))),
            ]
            for k in range(reps):
                got: dict[str, Any] = {}
                for name, fn in cases if k % 2 == 0 else cases[::-1]:
                    comm.Barrier()
                    if name != "solo" or rank == 0:
                        t0 = time.perf_counter()
                        got[name] = fn()
                        t[name].append(time.perf_counter() - t0)
                    comm.Barrier()
                enc, sizes = got["ours"]
                t0 = time.perf_counter()
                back = _codec.decode_elements(enc, sizes, np.full(n, e, np.uint64))
                t["decode"].append(time.perf_counter() - t0)
                if k == 0:
                    assert enc.tobytes() == got["loop"] and back.tobytes() == data.tobytes()
            med = {k: statistics.median(v) if v else float("nan") for k, v in t.items()}
            ratio = med["loop"] / med["ours"]
            rows.append(
                {
                    "level": level,
                    "elements": n,
                    "elem_size": e,
                    "encode_per_s_by_rank": comm.gather(n / med["ours"], root=0),
                    "python_loop_per_s_by_rank": comm.gather(n / med["loop"], root=0),
                    "decode_per_s_by_rank": comm.gather(n / med["decode"], root=0),
                    "encode_s": stats(t["ours"]),
                    "python_loop_s": stats(t["loop"]),
                    "solo_encode_per_s": comm.bcast(n / med["solo"] if rank == 0 else None),
                    "per_rank_scaling": comm.bcast(med["solo"] / med["ours"] if rank == 0 else None),
                    "ratio_vs_loop_by_rank": comm.gather(ratio, root=0),
                    "zlib_only_per_s_by_rank": comm.gather(n / med["zlib"], root=0),
                    "bound_vs_loop_by_rank": comm.gather(med["loop"] / med["zlib"], root=0),
                    "ratio_vs_loop": min(comm.allgather(ratio)),
                }
            )
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    say(
        f"\n{'case':<20} {'size':<16} {'regime':<6} {'scda MiB/s':>10} {'raw MiB/s':>10} {'ratio':>6}   "
        "scda s median (min-max)      raw s median (min-max)"
    )
    for r in rows:
        speed = f"{r['scda_MiBps']:>10.0f} {r['raw_MiBps']:>10.0f} {r['ratio']:>6.3f}"
        say(f"{r['case']:<20} {r['size']:<16} {r['regime']:<6} {speed}   {spread(r['scda_s']):<28} {spread(r['raw_s'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, nargs="+", default=[64, 256, 1024], help="sizes of the A section (MiB)")
    ap.add_argument(
        "--v-elems", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000], help="elements of the V section (0: none)"
    )
    ap.add_argument("--comp-mib", type=float, default=16, help="uncompressed MiB per rank of the compressed sections (0: none)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--entries", type=int, default=10_000_000, help="E_i entries per rank (0: skip)")
    ap.add_argument("--elems", type=int, default=1_000_000, help="64-byte elements compressed per rank (0: skip)")
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output file (default bench-results/scda-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true", help="small sizes, few repetitions (CI)")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.v_elems, a.comp_mib, a.reps, a.entries, a.elems = [2, 8], [20_000], 0.25, 3, 200_000, 4_096
    say(
        f"amrckpt {__version__} scda benchmark: P={P}, A sections {a.mib} MiB, V sections {a.v_elems} elements, "
        f"in {a.dir}, {a.reps} repetitions (medians)"
    )
    files = Files(Path(a.dir), "scda", "raw", "v")
    try:
        rows: list[dict[str, Any]] = []
        for mib in a.mib:
            rows += a_section(files, mib, a.reps, q_read=mib == max(a.mib))
        for n in a.v_elems:
            if n:
                rows += v_section(files, n, a.reps, q_read=n == max(a.v_elems))
        print_rows(rows)
        comp = compressed_sections(files, a.comp_mib, max(3, a.reps - 2)) if a.comp_mib else []
        print_rows(comp)
        say("  (compressed: MiB/s of uncompressed data; ratio = raw time / scda time for the same uncompressed bytes)")
    finally:
        files.remove()
    ent = entries(a.entries, a.reps) if a.entries else None
    kern = compression(a.elems, max(3, a.reps // 2)) if a.elems else []
    if rank == 0 and ent is not None:
        say(
            f"\nV-section E_i entries, per rank (M entries/s): format {[round(x / 1e6, 1) for x in ent['format_per_s_by_rank']]}, "
            f"parse {[round(x / 1e6, 1) for x in ent['parse_per_s_by_rank']]}"
        )
        for c in kern:
            say(
                f"compress {c['elements']} x {c['elem_size']} B, level {c['level']}: "
                f"{[round(x / 1e3, 1) for x in c['encode_per_s_by_rank']]} k elements/s per rank "
                f"(plain Python loop: {[round(x / 1e3, 1) for x in c['python_loop_per_s_by_rank']]} k/s; "
                f"ratio by rank {[round(x, 2) for x in c['ratio_vs_loop_by_rank']]}); "
                f"zlib calls alone {[round(x / 1e3, 1) for x in c['zlib_only_per_s_by_rank']]} k/s "
                f"(bound {[round(x, 2) for x in c['bound_vs_loop_by_rank']]}); "
                f"rank 0 alone {c['solo_encode_per_s'] / 1e3:.1f} k/s (all ranks busy / alone: {c['per_rank_scaling']:.2f}); "
                f"decode {[round(x / 1e3, 1) for x in c['decode_per_s_by_rank']]} k/s"
            )
    result = {
        "benchmark": "scda",
        "amrckpt": __version__,
        "P": P,
        "dir": a.dir,
        "reps": a.reps,
        "memory": a.memory,
        "a_section": [r for r in rows if r["case"].startswith("A")],
        "v_section": [r for r in rows if r["case"].startswith("V")],
        "compressed": comp,
        "entries": ent,
        "compression": kern,
    }
    write_json(a.json, f"bench-results/scda-P{P}.json", result)


if __name__ == "__main__":
    main()
