#!/usr/bin/env python3
"""A job for the kill tests: a deterministic simulation checkpointed by a CheckpointManager.

Run under MPI::

    mpiexec -n P python -m mpi4py tests/kill_job.py DIR [--steps 60] [--every 2] [--background]
                                                       [--signal] [--restart] [--pids PIDDIR]

The state at step s is a known function of s (:func:`state_at`), so a test can
check a restored checkpoint bit for bit.  Rank 0 prints ``COMMITTED s`` after
the save of step s returned (it is then on disk under its final name); every
rank writes ``PIDDIR/halt-<rank>`` holding s when a policy stopped the job, and
prints ``DONE`` at the end.
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

_CACHE: dict[int, Any] = {}


def state_at(step: int, comm: Any = None, every: int = 2) -> Advection:
    """The state at ``step``: the mesh changes with the step (a new random forest every 3 saves)."""
    seed = (step // (3 * every)) % 11
    g = _CACHE.get(seed)
    if g is None:
        g = _CACHE[seed] = global_state(seed=seed, max_level=7)
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
    a = ap.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
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
        for step in range(start, a.steps + 1):
            time.sleep(a.step_seconds)  # the "computation"
            saved = mgr.save(step, state_at(step, comm, a.every))
            if saved and not a.background and comm.rank == 0:
                print(f"COMMITTED {step}", flush=True)
            if mgr.halt_requested:
                mgr.wait()
                if a.pids:  # one file per rank: lines of several ranks can interleave on stdout
                    (Path(a.pids) / f"halt-{comm.rank}").write_text(str(step))
                break
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
