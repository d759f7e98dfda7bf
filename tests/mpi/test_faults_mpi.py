"""Fault injection under MPI (MPI-IO and POSIX backends), at 1, 2, 3 and 4 processes.

Each trial saves under seeded I/O and MPI faults on one rank or several
(tests/fault_trials.py) and checks that every rank raises the same exception
class of amrckpt's tree and that the previous checkpoint stays the newest
valid one, bit for bit.  A watchdog aborts the job if a trial hangs (a rank
left waiting in a collective), so a hang fails the run instead of blocking it.
"""

from __future__ import annotations

import faulthandler
import sys
from collections import Counter
from pathlib import Path

import pytest
from fault_trials import Trials, TrialSpec

from _support import world

pytestmark = pytest.mark.mpi

TRIAL_TIMEOUT = 120  # seconds; a trial takes well under one


@pytest.mark.parametrize("backend", ["mpiio", "posix"])
def test_random_faults_leave_the_previous_checkpoint(mpi_tmp: Path, backend: str) -> None:
    w = world()
    trials = Trials(mpi_tmp, w, backend=backend)
    outcomes = []
    try:
        first = 100 * w.size + (0 if backend == "mpiio" else 50)
        for seed in range(first, first + 20):
            faulthandler.dump_traceback_later(TRIAL_TIMEOUT, exit=True, file=sys.stderr)
            try:
                outcomes.append(trials.run(TrialSpec.draw(seed, w.size)))
            finally:
                faulthandler.cancel_dump_traceback_later()
    finally:
        trials.close()
    bad = [(o.spec, o.result, o.problems) for o in outcomes if o.problems]
    assert not bad
    everyone = w.allgather([o.result for o in outcomes])
    assert all(r == everyone[0] for r in everyone)
    results = Counter(everyone[0])
    assert sum(results.values()) - results["saved"] >= 8, results
