#!/usr/bin/env python3
"""A job for the kill tests: a deterministic simulation checkpointed by a CheckpointManager.

Run under MPI::

    mpiexec -n P python -m mpi4py tests/kill_job.py DIR [--steps 60] [--every 2] [--background]
                                                       [--signal] [--restart] [--pids PIDDIR]
    mpiexec -n Q python -m mpi4py tests/kill_job.py DIR --check-restore [--every 2]

The state at step s is a known function of s (:func:`state_at`), so a test can
check a restored checkpoint bit for bit.  Rank 0 prints ``COMMITTED s`` once
the checkpoint of step s is on disk under its final name (with blocking
saves when its save returns; in the background when the next save or the end
has waited for it); every rank writes ``PIDDIR/halt-<rank>`` holding s when a
policy stopped the job, and prints ``DONE`` at the end.  ``--check-restore``
restores the newest checkpoint on this job's ranks, compares it bit for bit
with the known state, and rank 0 prints ``RESTORED s equal`` (or ``unequal``,
or ``RESTORED none``).
With ``--signal``, SIGTERM or SIGUSR1 to any rank makes all ranks checkpoint
at the same step and stop; ``--pids`` writes each rank's pid there first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint_cases import Advection, global_state

import amrckpt as ac

_CACHE: dict[tuple[int, int], Any] = {}


def state_at(step: int, comm: Any = None, every: int = 2, level: int = 7) -> Advection:
    """The state at ``step``: the mesh changes with the step (a new random forest of ``level`` levels every 3 saves)."""
    seed = (step // (3 * every)) % 11
    g = _CACHE.get((seed, level))
    if g is None:
        g = _CACHE[seed, level] = global_state(seed=seed, max_level=level)
    st = g.local(0, g.N) if comm is None else g.for_rank(comm)
    st.step = step
    st.time = step * 0.125
    st.rho = st.rho + step  # the data changes at every step
    return st


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--step-seconds", type=float, default=0.02)
    ap.add_argument("--background", action="store_true")
    ap.add_argument("--signal", action="store_true")
    ap.add_argument("--restart", action="store_true")
    ap.add_argument("--pids", default=None)
    ap.add_argument("--check-restore", action="store_true")
    ap.add_argument("--level", type=int, default=7, help="the forests' deepest level (the checkpoints' size)")
    a = ap.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if a.check_restore:
        return check_restore(a.directory, comm, a.every, a.level)
    policy: Any = ac.EveryNSteps(a.every)
    if a.signal:
        policy = policy | ac.OnSignal()
    start = 0
    with ac.CheckpointManager(a.directory, Advection, comm=comm, save_policy=policy, background=a.background) as mgr:
        if a.pids:
            Path(a.pids).mkdir(parents=True, exist_ok=True)
            (Path(a.pids) / f"rank-{comm.rank}").write_text(str(os.getpid()))
        if a.restart:
            loaded = mgr.restore_latest()
            if loaded is not None:
                start = mgr.restored_step + 1  # type: ignore[operator]
        pending = None  # a background save not known to be committed yet
        for step in range(start, a.steps + 1):
            time.sleep(a.step_seconds)  # the "computation"
            saved = mgr.save(step, state_at(step, comm, a.every, a.level))
            if saved and comm.rank == 0:
                if a.background:  # save() waited for the previous background save: it is committed
                    if pending is not None:
                        print(f"COMMITTED {pending}", flush=True)
                    pending = step
                else:
                    print(f"COMMITTED {step}", flush=True)
            if mgr.halt_requested:
                mgr.wait()
                if a.pids:  # one file per rank: lines of several ranks can interleave on stdout
                    (Path(a.pids) / f"halt-{comm.rank}").write_text(str(step))
                break
    if pending is not None and comm.rank == 0:
        print(f"COMMITTED {pending}", flush=True)  # closing the manager waited for it
    print("DONE", flush=True)
    return 0


def check_restore(directory: str, comm: Any, every: int, level: int = 7) -> int:
    """Restore the newest valid checkpoint on ``comm`` and compare it with the known state, bit for bit."""
    from checkpoint_cases import assert_state_equal

    with ac.CheckpointManager(directory, Advection, comm=comm) as mgr:
        loaded = mgr.restore_latest()  # the default partition is uniform, as state_at's slices are
        step = mgr.restored_step
    equal = True
    if loaded is not None:
        assert step is not None
        try:
            assert_state_equal(loaded.state, state_at(step, comm, every, level))
        except AssertionError:
            equal = False
    from mpi4py import MPI

    equal = bool(comm.allreduce(equal, op=MPI.LAND))
    if comm.rank == 0:
        print("RESTORED none" if step is None else f"RESTORED {step} {'equal' if equal else 'unequal'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
