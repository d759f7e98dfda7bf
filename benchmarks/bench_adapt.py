#!/usr/bin/env python3
"""Adapting while loading (``ac.load(..., adapt=...)``) against the plain load of the same file.

Run::

    mpiexec -n 1 python -m mpi4py benchmarks/bench_adapt.py                # 2.5 million leaves refined to 10 million
    mpiexec -n 2 python -m mpi4py benchmarks/bench_adapt.py --leaves 1000000
    python benchmarks/bench_adapt.py --quick                              # small, as the tests run it

The state is :class:`_common.Bench`: a 2D forest of ``--leaves`` leaves, two
float64 cell fields and an hp field of 1 to 31 float64 per leaf (about 157
bytes per leaf).  Timed from a barrier to a barrier (the slowest rank),
interleaved, medians of ``--reps`` after a dropped warm-up round, every byte
read checked against its CRC32 (as a restart does).  The ratios are of the
medians and, for a machine shared with other jobs (whose noise only adds
time), of the fastest rounds:

* ``refine``: ``load(coarse, adapt=Refine(levels=1))``: N leaves read, 4 N
  built (children by injection, the hp values copied), moved to the uniform
  partition of the 4 N leaves; against ``load(coarse)`` (the goal: at most
  2x) and against ``load(fine)`` of a file that holds the 4 N leaves;
* ``coarsen``: ``load(fine, adapt=Coarsen(levels=1))``: 4 N leaves read
  with families kept whole, N built (pairwise volume averages), moved;
  against ``load(fine)``;
* ``degree``: ``load(coarse, adapt=Adapt(transfers={"modes": HpTransfer(convert=...)}))``
  is not timed; the degree change needs a tensor-product field (tests/test_adapt.py).

Files go to ``--dir`` (default /dev/shm, a tmpfs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import Bench, P, build, comm, interleaved, say, spread, stats, write_json

import amrckpt as ac
from amrckpt.adapt import Coarsen, Refine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, default=2_500_000, help="leaves of the coarse file (the fine one has 4 times as many)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/adapt-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.leaves, a.reps = 20_000, 2
    d = Path(a.dir)
    coarse, fine = d / f"bench-adapt-coarse-{P}.scda", d / f"bench-adapt-fine-{P}.scda"
    state, _, _ = build(a.leaves)
    ac.save(state, coarse, comm=comm)
    del state
    refined = ac.load(coarse, Bench, comm=comm, adapt=Refine(levels=1))
    ac.save(refined.state, fine, comm=comm)
    del refined
    say(f"bench_adapt: P={P}, {a.leaves:,} leaves refined to {4 * a.leaves:,} and back, {a.reps} reps, memory {a.memory}")

    ops = {
        "load coarse": lambda: ac.load(coarse, Bench, comm=comm),
        "refine": lambda: ac.load(coarse, Bench, comm=comm, adapt=Refine(levels=1)),
        "load fine": lambda: ac.load(fine, Bench, comm=comm),
        "coarsen": lambda: ac.load(fine, Bench, comm=comm, adapt=Coarsen(levels=1)),
    }
    t = interleaved(ops, a.reps)
    s = {k: stats(v) for k, v in t.items()}
    for k in ops:
        say(f"  {k:12s} {spread(s[k])} s")
    pairs = {"refine / load coarse": ("refine", "load coarse"), "refine / load fine": ("refine", "load fine")}
    pairs["coarsen / load fine"] = ("coarsen", "load fine")
    ratios = {k: s[a]["median"] / s[b]["median"] for k, (a, b) in pairs.items()}
    fastest = {k: s[a]["min"] / s[b]["min"] for k, (a, b) in pairs.items()}
    for k, v in ratios.items():
        say(f"  {k:22s} {v:.2f}x (fastest rounds {fastest[k]:.2f}x)")
    if comm.rank == 0:
        for f in (coarse, fine):
            f.unlink(missing_ok=True)
    result = {"P": P, "leaves": a.leaves, "reps": a.reps, "seconds": s, "ratios": ratios, "ratios_fastest": fastest}
    write_json(a.json, f"bench-results/adapt-P{P}.json", result)


if __name__ == "__main__":
    main()
