#!/usr/bin/env python3
"""How long a simulation is held up by a background checkpoint, against a blocking one and raw MPI-IO.

Run::

    mpiexec -n 1 python -m mpi4py benchmarks/bench_manager.py              # 4 million leaves
    mpiexec -n 2 python -m mpi4py benchmarks/bench_manager.py --saves 8
    python benchmarks/bench_manager.py --quick                            # small, as CI runs it

A toy simulation (a 2D forest of ``--leaves`` leaves, two float64 cell
fields and an hp field of 1 to 31 float64 per leaf, about 157 bytes per
leaf) takes ``--steps-between`` numpy steps between checkpoints; a
:class:`amrckpt.CheckpointManager` saves every that many steps, ``--saves``
times.  Four runs of the same simulation, each timed from a barrier to a
barrier (the slowest rank counts):

* ``none``: no checkpoints (the simulation's own time);
* ``blocking``: ``background=False``; the time in ``manager.save`` is the
  whole save: validation, write, fsync, commit, retention;
* ``background``: ``background=True``; the time in ``manager.save`` is what
  the simulation waits for: the decision, the in-memory copy, and the wait
  for the previous save if it has not finished;
* ``raw``: ``MPI.File`` ``Write_at_all`` of the same bytes into a new file,
  then ``Sync``, once per checkpoint, the file before the last deleted (as
  ``KeepLast(2)`` does): what the disk alone costs.

Every save is timed from a barrier, so that it does not count how far the
ranks' steps drifted apart since the last one.  The reference for a
background save: one copy of each rank's arrays into buffers reused
between copies, the least a snapshot of the state in memory can cost.

Printed: the time a step is blocked by a background save as a fraction of the
blocking save's time (issue 4's ratio), the run's slowdown with each mode
against ``none``, and the blocking save against raw MPI-IO.  Files go to
``--dir`` (default /dev/shm, a tmpfs, where the disk is the memory bus).  On
a machine with fewer cores than ranks plus writer threads, the background
writer competes with the simulation for cores: the slowdown column shows
that, the blocked fraction does not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import Bench, P, build, comm, rank, say, write_json
from mpi4py import MPI

import amrckpt as ac
from amrckpt.manager import EveryNSteps, KeepLast


def advance(st: Bench, dt: float) -> None:
    """One step of the toy simulation: numpy updates of every field, in place (releases the GIL)."""
    r, e, m = st.rho, st.energy, st.modes.values
    np.multiply(r, 0.999, out=r)
    r += 0.0005 * np.roll(r, 1)
    np.add(e, 0.001 * r, out=e)
    np.multiply(m, 0.9999, out=m)
    st.step += 1
    st.time += dt


def run(mode: str, st: Bench, directory: Path, a: argparse.Namespace) -> dict[str, Any]:
    """Run the simulation for ``saves * steps_between`` steps; time the whole and each save call."""
    n_steps = a.saves * a.steps_between
    in_save: list[float] = []
    mgr = None
    if mode in ("blocking", "background"):
        mgr = ac.CheckpointManager(
            directory,
            Bench,
            comm=comm,
            save_policy=EveryNSteps(a.steps_between),
            keep_policy=KeepLast(2),
            background=mode == "background",
        )
    raw = RawWriter(st, directory) if mode == "raw" else None
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(n_steps):
        advance(st, 1e-3)
        if st.step % a.steps_between == 0:
            comm.Barrier()  # the ranks start each save together: its time is the save's, not the ranks' drift apart
            s0 = time.perf_counter()
            if mgr is not None:
                mgr.save(st.step, st)
            elif raw is not None:
                raw.write()
            in_save.append(time.perf_counter() - s0)
    w0 = time.perf_counter()
    if mgr is not None:
        mgr.close()  # the end of the run waits for the last background save
    final_wait = time.perf_counter() - w0
    comm.Barrier()
    total = time.perf_counter() - t0
    # The slowest rank counts, save by save.
    in_save_max = np.zeros(len(in_save))
    comm.Allreduce(np.array(in_save, dtype=np.float64), in_save_max, op=MPI.MAX)
    return {
        "mode": mode,
        "total_s": float(comm.allreduce(total, op=MPI.MAX)),
        "save_call_s": [float(x) for x in in_save_max],
        "final_wait_s": float(comm.allreduce(final_wait, op=MPI.MAX)),
    }


class RawWriter:
    """The bytes of a checkpoint written with MPI-IO collectives and synced: the disk's cost alone."""

    def __init__(self, st: Bench, directory: Path) -> None:
        m = st.mesh
        self.arrays = [m.tree, m.level, m.x, m.y, st.rho, st.energy, st.modes.counts, st.modes.values]
        sizes = [a.nbytes for a in self.arrays]
        ends = np.cumsum(comm.allgather(sizes), axis=0)  # per array, prefix over ranks
        totals = ends[-1]
        base = np.concatenate([[0], np.cumsum(totals)[:-1]])
        self.offsets = [int(base[i] + ends[rank][i] - sizes[i]) for i in range(len(sizes))]
        self.path = directory / "raw.bin"
        self.k = 0

    def write(self) -> None:
        """Write a new file, as a checkpoint does, and delete the one before the last (as KeepLast(2))."""
        self.k += 1
        fh = MPI.File.Open(comm, str(self.path.with_suffix(f".{self.k}")), MPI.MODE_WRONLY | MPI.MODE_CREATE)
        for off, arr in zip(self.offsets, self.arrays, strict=True):
            fh.Write_at_all(off, arr)
        fh.Sync()
        fh.Close()
        if rank == 0:
            self.path.with_suffix(f".{self.k - 2}").unlink(missing_ok=True)


def one_copy(st: Bench) -> float:
    """The time one copy of this rank's arrays (mesh, cell fields, hp values and counts) takes into buffers reused
    between copies: the least a snapshot of the state in memory can cost (median of 9, the slowest rank's)."""
    arrays = [st.mesh.tree, st.mesh.level, st.mesh.x, st.mesh.y, st.rho, st.energy, st.modes.values, st.modes.counts]
    buffers = [np.empty_like(x) for x in arrays]
    times = []
    for _ in range(10):
        comm.Barrier()
        t0 = time.perf_counter()
        for x, b in zip(arrays, buffers, strict=True):
            np.copyto(b, x)
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return statistics.median(times[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--leaves", type=int, default=4_000_000)
    ap.add_argument("--saves", type=int, default=10, help="checkpoints per run")
    ap.add_argument("--steps-between", type=int, default=40, help="simulation steps between checkpoints")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of the four runs")
    ap.add_argument("--dir", default="/dev/shm" if Path("/dev/shm").is_dir() else "/tmp")
    ap.add_argument("--json", default=None, help="output (default bench-results/manager-P<P>.json)")
    ap.add_argument("--memory", choices=["warm", "fresh"], default="warm", help="reuse freed pages (see _warm.py) or not")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.leaves, a.saves, a.reps = 50_000, 3, 1
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise SystemExit("background saves need MPI_THREAD_MULTIPLE: run under python -m mpi4py (the default level)")
    st, _, _ = build(a.leaves)
    nbytes = comm.allreduce(len(st.mesh) * (13 + 16) + st.modes.values.nbytes + 8 * len(st.mesh))
    base = Path(comm.bcast(tempfile.mkdtemp(prefix="amrckpt-bench-manager-", dir=a.dir) if rank == 0 else None))
    say(
        f"amrckpt manager benchmark: P={P}, {a.leaves} leaves, {nbytes / 2**20:.0f} MiB per checkpoint, "
        f"{a.saves} checkpoints every {a.steps_between} steps, {a.reps} repetitions, in {a.dir}"
    )
    modes = ["none", "blocking", "background", "raw"]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    try:
        for k in range(a.reps + 1):  # the first repetition warms up and is dropped
            for mode in modes if k % 2 == 0 else modes[::-1]:
                d = base / mode
                if rank == 0:
                    shutil.rmtree(d, ignore_errors=True)
                    d.mkdir()
                comm.Barrier()
                r = run(mode, st, d, a)
                if k:
                    runs[mode].append(r)
    except BaseException:
        if rank == 0:  # no barrier: the exception ends the job (python -m mpi4py aborts every rank)
            shutil.rmtree(base, ignore_errors=True)
        raise
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(base, ignore_errors=True)

    def per_save(mode: str, first: int = 0) -> list[float]:
        return [x for r in runs[mode] for x in r["save_call_s"][first:]]

    # Means, not medians: on a virtual machine a save that lands on fresh pages takes several
    # times the usual, and a background save that overruns the next one shows as a wait there.
    # "Steady": from the 5th save of a run on, when the files retention deletes free the pages
    # the next save fills (KeepLast(2): the first three saves each need a new file's worth,
    # and the 4th may still wait for the 3rd in the background).
    total = {m: statistics.median(r["total_s"] for r in runs[m]) for m in modes}
    mean = {m: statistics.fmean(per_save(m)) for m in modes}
    steady = {m: statistics.fmean(per_save(m, 4)) for m in modes} if a.saves > 4 else mean
    final = statistics.fmean(r["final_wait_s"] for r in runs["background"])
    compute = total["none"] / a.saves
    say(f"\nsimulation between checkpoints: {compute:.3f} s (median run without checkpoints / {a.saves})")
    say(f"{'mode':<11} {'run s':>8} {'slowdown':>9} {'save() mean s':>14} {'median s':>9} {'max s':>7} {'steady s':>9}")
    for m in modes:
        xs = per_save(m)
        say(
            f"{m:<11} {total[m]:>8.3f} {total[m] / total['none']:>9.3f} {mean[m]:>14.4f} "
            f"{statistics.median(xs):>9.4f} {max(xs):>7.3f} {steady[m]:>9.4f}"
        )
    say(f"background: the end of the run waited {final:.3f} s (mean) for the last save")
    copy = one_copy(st)
    say(f"one copy of each rank's arrays into buffers reused between copies: {copy:.4f} s (median of 9, slowest rank)")
    ratios = {
        "background blocked / blocking save (means)": mean["background"] / mean["blocking"],
        "background blocked incl. end-of-run wait / blocking save": (mean["background"] + final / a.saves) / mean["blocking"],
        "background run overhead / blocking run overhead": (total["background"] - total["none"])
        / max(total["blocking"] - total["none"], 1e-9),
        "blocking save / raw MPI-IO (means)": mean["blocking"] / mean["raw"],
        "steady: background blocked / blocking save": steady["background"] / steady["blocking"],
        "steady: blocking save / raw MPI-IO": steady["blocking"] / steady["raw"],
        "steady: background blocked / one copy of the arrays": steady["background"] / copy,
    }
    say("\nratios:")
    for k, v in ratios.items():
        say(f"  {k:<60} {v:.3f}")
    result = {
        "benchmark": "manager",
        "P": P,
        "leaves": a.leaves,
        "bytes": nbytes,
        "cpus": os.cpu_count(),
        "steps_between": a.steps_between,
        "reps": a.reps,
        "compute_between_saves_s": compute,
        "runs": runs,
        "ratios": ratios,
    }
    write_json(a.json, f"bench-results/manager-P{P}.json", result)


if __name__ == "__main__":
    main()
