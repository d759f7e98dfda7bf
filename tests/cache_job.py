#!/usr/bin/env python3
"""A job for the two-level kill tests: kill_job.py's simulation, saved into node caches (simulated nodes) and flushed.

Run under MPI::

    mpiexec -n P python -m mpi4py tests/cache_job.py DIR CACHE [--node-size 2] [--flush-every 0]
                                                            [--steps 60] [--every 2] [--partners 1]
    mpiexec -n Q python -m mpi4py tests/cache_job.py DIR CACHE --check-restore [--node-size 2 | --no-node-size]
                                                            [--then-save K]

The node caches are ``CACHE/<node>``; the shared directory is ``DIR``.  Rank 0
prints ``CACHED s`` once the cached save of step s has returned (committed in
every node's cache) and ``DONE`` at the end; ``--flush-every 0`` never
flushes (the job is killed before), N flushes every N steps in the
background.  ``--check-restore`` restores the nearest good copy on this
job's ranks, compares it bit for bit with the known state, and rank 0 prints
``RESTORED s equal|unequal cache|directory`` (or ``RESTORED none``); with
``--then-save K`` the job then saves K more (odd) steps into the caches
(their retention runs) and closes without a flush.  ``--no-node-size``: the
nodes are the hosts (one node here).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint_cases import Advection, assert_state_equal
from kill_job import state_at

import amrckpt as ac


def manager(a: Any, comm: Any) -> ac.CheckpointManager[Advection]:
    node_size = None if a.no_node_size else a.node_size if comm.size >= a.node_size else comm.size
    cache = ac.manager.NodeCache(str(Path(a.cache) / "{node}"), partners=a.partners, keep=2, node_size=node_size)
    flush = ac.EveryNSteps(a.flush_every) if a.flush_every else None
    return ac.CheckpointManager(
        a.directory, Advection, comm=comm, save_policy=ac.EveryNSteps(a.every), cache=cache, flush_policy=flush
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("directory")
    ap.add_argument("cache")
    ap.add_argument("--node-size", type=int, default=2)
    ap.add_argument("--flush-every", type=int, default=0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=2)
    ap.add_argument("--step-seconds", type=float, default=0.02)
    ap.add_argument("--level", type=int, default=6)
    ap.add_argument("--check-restore", action="store_true")
    ap.add_argument("--partners", type=int, default=1)
    ap.add_argument("--no-node-size", action="store_true")
    ap.add_argument("--then-save", type=int, default=0)
    a = ap.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if a.check_restore:
        return check_restore(a, comm)
    with manager(a, comm) as mgr:
        for step in range(a.steps + 1):
            time.sleep(a.step_seconds)
            saved = mgr.save(step, state_at(step, comm, a.every, a.level))
            if saved and comm.rank == 0:
                print(f"CACHED {step}", flush=True)
    print("DONE", flush=True)
    return 0


def check_restore(a: Any, comm: Any) -> int:
    """Restore the nearest good copy on ``comm`` and compare it with the known state, bit for bit."""
    from mpi4py import MPI

    with manager(a, comm) as mgr:
        loaded = mgr.restore_latest()
        step, source = mgr.restored_step, mgr.restored_from
        for k in range(a.then_save):  # odd steps: none of them replaces a step the killed job cached
            s = (step if step is not None else -1) + 1 + 2 * k
            mgr.save(s, state_at(s, comm, a.every, a.level), force=True)
        mgr.close(flush=False)
    equal = True
    if loaded is not None:
        assert step is not None
        try:
            assert_state_equal(loaded.state, state_at(step, comm, a.every, a.level))
        except AssertionError:
            equal = False
    equal = bool(comm.allreduce(equal, op=MPI.LAND))
    if comm.rank == 0:
        print("RESTORED none" if step is None else f"RESTORED {step} {'equal' if equal else 'unequal'} {source}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
