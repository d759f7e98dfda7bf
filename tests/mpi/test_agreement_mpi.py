"""Agreement under real MPI: every entry point and every subset of failing ranks; bad values on rank 0 alone; mismatched
calls; ``comm=None`` inside an MPI job.  Run at 1, 2, 3 and 4 processes by tests/run_all.py (MPICH) and
tests/run_openmpi.py (Open MPI).  A watchdog aborts the job if a rank is left waiting, so a hang fails the run.
"""

from __future__ import annotations

import faulthandler
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agreement import CASES, _state, run_all, subsets
from checkpoint_cases import Advection

import amrckpt as ac
from _support import world
from amrckpt.comm import MPIComm
from amrckpt.errors import CollectiveMismatchError, CommRequiredError, SchemaError

pytestmark = pytest.mark.mpi

WATCHDOG = 300  # seconds for one test; far more than any takes


@pytest.fixture(autouse=True)
def watchdog() -> Any:
    faulthandler.dump_traceback_later(WATCHDOG, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_subset_of_failing_ranks_raises_one_error_on_every_rank(mpi_tmp: Path, case: Any) -> None:
    bad, hits = run_all(MPIComm(world()), mpi_tmp, [case])
    assert not bad, "\n".join(bad)
    assert hits


def _bad(state: Advection, how: str) -> Advection:
    """This rank's state, made wrong in one of the ways a user gets it wrong (not validated: ``save`` must catch it)."""
    values = dict(state)
    if how == "dtype":
        values["rho"] = state.rho.astype("<f4")
    elif how == "length":
        values["rho"] = np.append(state.rho, 0.0)
    elif how == "shape":
        values["vel"] = state.vel[:, :1]
    elif how == "unsorted":
        m = state.mesh
        order = np.arange(len(m))[::-1]
        values["mesh"] = ac.Forest(m.tree[order], m.level[order], m.x[order], m.y[order], num_trees=m.num_trees)
    return Advection.model_construct(**values)


@pytest.mark.parametrize("how", ["dtype", "length", "shape", "unsorted"])
def test_a_bad_value_on_any_subset_of_ranks_is_one_schema_error_everywhere_within_a_second(mpi_tmp: Path, how: str) -> None:
    """A wrong dtype, length or shape, or unsorted leaves, on rank 0 alone or on any other subset: one SchemaError."""
    w = world()
    path = mpi_tmp / "bad.scda"
    for ranks in subsets(w.size):
        state = _state(MPIComm(w))
        if len(state.mesh) < 2 and how == "unsorted":
            continue
        if w.rank in ranks:
            state = _bad(state, how)
        w.Barrier()
        t0 = time.monotonic()
        try:
            ac.save(state, path, comm=w)
            got: Any = None
        except SchemaError as exc:
            got = ("SchemaError", sorted(exc.rank_errors))
        except Exception as exc:  # noqa: BLE001 - reported below, on every rank
            got = (type(exc).__name__, str(exc))
        seconds = time.monotonic() - t0
        everyone = w.allgather((got, seconds))
        assert all(g == everyone[0][0] for g, _ in everyone), (how, ranks, everyone)
        assert everyone[0][0] == ("SchemaError", sorted(ranks)), (how, ranks, everyone[0][0])
        assert max(s for _, s in everyone) < 1.0, (how, ranks, everyone)
        assert not path.exists()


def test_ranks_in_different_calls_are_told_so(mpi_tmp: Path) -> None:
    """Rank 0 asks for the latest step while the others restore: every rank raises, naming both calls."""
    w = world()
    if w.size < 2:
        pytest.skip("needs two ranks or more: a call cannot differ from itself")
    with ac.CheckpointManager(mpi_tmp / "m", Advection, comm=w, save_policy=ac.EveryNSteps(1)) as mgr:
        mgr.save(1, _state(MPIComm(w)))
        with pytest.raises(CollectiveMismatchError) as info:
            if w.rank == 0:
                mgr.latest_step()
            else:
                mgr.restore(1)
        text = str(info.value)
        assert "CheckpointManager.latest_step" in text and "CheckpointManager.restore" in text, text
        # Every rank made one call: the calls line up again.
        assert mgr.latest_step() == 1
        assert mgr.restore(1).state.step == 1


def test_comm_none_inside_an_mpi_job_is_refused_before_anything_is_written(mpi_tmp: Path) -> None:
    w = world()
    if w.size < 2:
        pytest.skip("comm=None is serial when the job has one process")
    state = _state(MPIComm(w))
    for act in (
        lambda: ac.save(state, mpi_tmp / "none.scda"),
        lambda: ac.CheckpointManager(mpi_tmp / "none", Advection),
        lambda: ac.load(mpi_tmp / "none.scda", Advection),
        lambda: ac.verify(mpi_tmp / "none.scda"),
    ):
        with pytest.raises(CommRequiredError, match=r"comm=MPI\.COMM_WORLD"):
            act()
    w.Barrier()
    assert not (mpi_tmp / "none.scda").exists() and not (mpi_tmp / "none").exists()
