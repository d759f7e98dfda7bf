#!/usr/bin/env python3
"""An hp field's two layouts in one run (issue 18): one V section (a 32-byte size entry per leaf) against counts + values.

Run::

    python benchmarks/bench_hp_layout.py [--leaves 2097152] [--reps 7] [--json out.json]

2.1 M leaves of 1, 4 or 9 float64 values, written and read on one process
through the scda layer (the bytes that the hp handler writes in each
layout), interleaved A B, B A, medians; also the file sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from amrckpt import scda


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, default=2_097_152)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    counts = np.array([1, 4, 9])[rng.integers(0, 3, a.leaves)]
    values = rng.standard_normal(int(counts.sum()))
    sizes = (counts * 8).astype(np.uint64)
    N, M = a.leaves, values.size
    paths = {k: Path(a.dir) / f"amrckpt-hp-layout-{k}-{os.getpid()}.scda" for k in ("V", "counts")}

    def write_v() -> None:
        with scda.fopen_write(paths["V"], b"hp") as f:
            f.fwrite_varray(values, [N], sizes, [values.nbytes], b"modes")

    def write_counts() -> None:
        with scda.fopen_write(paths["counts"], b"hp") as f:
            f.fwrite_array(counts.astype(np.uint8), [N], 1, b"modes")
            f.fwrite_array(values, [M], 8, b"modes")

    def read_v() -> None:
        with scda.fopen_read(paths["V"]) as f:
            f.fread_section_header()
            s = f.fread_varray_sizes([N])
            assert s is not None
            f.fread_varray_data([N], s, f.proc_sizes())

    def read_counts() -> None:
        with scda.fopen_read(paths["counts"]) as f:
            f.fread_section_header()
            c = f.fread_array_data([N], 1)
            assert c is not None
            n = int(c.sum())
            f.fread_section_header()
            f.fread_array_data([n], 8)

    ops = {"write V": write_v, "write counts": write_counts, "read V": read_v, "read counts": read_counts}
    t: dict[str, list[float]] = {k: [] for k in ops}
    for r in range(a.reps + 1):
        for k in ops if r % 2 == 0 else list(ops)[::-1]:
            t0 = time.perf_counter()
            ops[k]()
            if r:
                t[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in t.items()}
    res = {
        "leaves": N,
        "values": M,
        "load": os.getloadavg(),
        "median_s": med,
        "file_bytes": {k: p.stat().st_size for k, p in paths.items()},
        "write_ratio": med["write V"] / med["write counts"],
        "read_ratio": med["read V"] / med["read counts"],
    }
    for p in paths.values():
        p.unlink()
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
