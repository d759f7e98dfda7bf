"""The checkpoint manager over MPI: save on P ranks, restore on Q, signals to one rank, background saves.

Run at 1, 2, 3 and 4 processes.  Every assertion uses values agreed on by all
ranks (an allreduce of the local outcome), so a failure fails every rank
instead of leaving some waiting.
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from _support import all_true, sub_comm, world
from amrckpt.manager import EveryNSteps, KeepLast, OnSignal

pytestmark = pytest.mark.mpi

G = {s: global_state(seed=s // 10, max_level=5) for s in (0, 10, 20, 30)}


def state(step: int, comm: Any) -> Advection:
    st = G[step].for_rank(comm)
    st.step = step
    return st


def _field_digest(loaded: ac.restart.Loaded[Advection], comm: Any) -> str:
    """A hash of the restored fields in global order (gathered on every rank), independent of the partition."""
    parts = comm.allgather((loaded.state.rho.tobytes(), loaded.state.vel.tobytes(), loaded.state.modes.values.tobytes()))
    h = hashlib.sha256()
    for i in range(3):
        for p in parts:
            h.update(p[i])
    return h.hexdigest()


def test_save_on_every_P_restore_latest_on_the_world(mpi_tmp: Path) -> None:
    w = world()
    W = w.size
    for P in range(1, W + 1):
        sub = sub_comm(P)
        if sub is not None:
            with ac.CheckpointManager(mpi_tmp / f"P{P}", Advection, comm=sub, save_policy=EveryNSteps(10)) as mgr:
                for s in (0, 10, 20, 30):
                    mgr.save(s, state(s, sub))
            sub.Free()
        w.Barrier()
    digests = set()
    ok = True
    for P in range(1, W + 1):
        with ac.CheckpointManager(mpi_tmp / f"P{P}", Advection, comm=w) as mgr:
            hist = mgr.history()
            ok &= [r.step for r in hist] == [10, 20, 30]  # KeepLast(3)
            ok &= all(r.valid and r.writer_size == P and r.nbytes > 0 for r in hist)
            loaded = mgr.restore_latest()
            ok &= mgr.restored_step == 30
            lo, hi = loaded.partition.local_range(w.rank)
            want = G[30].local(lo, hi)
            want.step = 30
            try:
                assert_state_equal(loaded.state, want)
            except AssertionError:
                ok = False
            digests.add(_field_digest(loaded, w))
    assert all_true(ok)
    assert len(digests) == 1  # the same state whatever P wrote it


def test_sigterm_to_one_rank_checkpoints_every_rank_at_the_same_step(mpi_tmp: Path) -> None:
    w = world()
    policy = OnSignal(signals=(signal.SIGUSR1,))  # SIGUSR1: SIGTERM would also reach pytest's own handling
    saved: list[int] = []
    with ac.CheckpointManager(mpi_tmp, Advection, comm=w, save_policy=EveryNSteps(100) | policy) as mgr:
        for s in range(1, 30):
            if w.rank == w.size - 1 and s == 7:
                os.kill(os.getpid(), signal.SIGUSR1)  # a real signal, to the last rank only
            if mgr.save(s, state(0, w)):
                saved.append(s)
            if mgr.halt_requested:
                break
        reason = mgr.history()[0].reason if mgr.history() else None
    everyone = w.allgather((saved, mgr.halt_requested, reason))
    assert everyone == [([7], True, "received SIGUSR1")] * w.size
    assert signal.getsignal(signal.SIGUSR1) is not policy._handler  # handlers restored on close


def _thread_multiple() -> bool:
    from mpi4py import MPI

    return bool(MPI.Query_thread() >= MPI.THREAD_MULTIPLE)


def test_background_saves_hold_a_copy_and_restore_on_the_world(mpi_tmp: Path) -> None:
    if not _thread_multiple():
        pytest.skip("background saves need MPI_THREAD_MULTIPLE")
    w = world()
    sub = sub_comm(max(1, w.size - 1))  # write on one rank fewer than restore
    if sub is not None:
        with ac.CheckpointManager(
            mpi_tmp, Advection, comm=sub, save_policy=EveryNSteps(10), background=True, keep_policy=KeepLast(9)
        ) as mgr:
            for s in (0, 10, 20, 30):
                st = state(s, sub)
                st.rho = st.rho.copy()
                mgr.save(s, st)
                st.rho[:] = np.nan  # the simulation overwrites its data while the save goes on
        sub.Free()
    w.Barrier()
    with ac.CheckpointManager(mpi_tmp, Advection, comm=w) as mgr:
        steps = [r.step for r in mgr.history() if r.valid]
        loaded = mgr.restore_latest()
    lo, hi = loaded.partition.local_range(w.rank)
    want = G[30].local(lo, hi)
    want.step = 30
    ok = steps == [0, 10, 20, 30]
    try:
        assert_state_equal(loaded.state, want)
    except AssertionError:
        ok = False
    assert all_true(ok)


def test_background_error_on_one_rank_surfaces_on_every_rank(mpi_tmp: Path) -> None:
    if not _thread_multiple():
        pytest.skip("background saves need MPI_THREAD_MULTIPLE")
    w = world()
    with ac.CheckpointManager(mpi_tmp, Advection, comm=w, save_policy=EveryNSteps(1), background=True) as mgr:
        mgr.save(1, state(0, w))
        st = state(0, w)
        if w.rank == w.size - 1:
            st.vel = st.vel[:, :1]  # invalid on one rank: found by the background save
        mgr.save(2, st)
        try:
            mgr.wait()
            got = ""
        except ac.errors.SchemaError as exc:
            got = type(exc).__name__
        steps = [r.step for r in mgr.history()]
    assert w.allgather((got, steps)) == [("SchemaError", [1])] * w.size  # nothing of step 2 remains
    assert not list(mpi_tmp.glob(".ckpt-*"))


def test_manager_api_agreed_on_every_rank(mpi_tmp: Path) -> None:
    """all_steps, latest_step, metadata, restore(step), delete, metrics, KeepBest and StepAlreadyExistsError over MPI."""
    from amrckpt.manager import KeepBest

    w = world()
    out: list[Any] = []
    with ac.CheckpointManager(mpi_tmp, Advection, comm=w, save_policy=EveryNSteps(10), keep_policy=KeepBest("loss", 2)) as mgr:
        for s, loss in ((10, 0.3), (20, 0.1), (30, 0.2)):
            out.append(bool(mgr.save(s, state(s, w), metrics={"loss": loss}, metadata={"P": w.size})))
        # KeepBest keeps 20 and 30 (the best two; 30 is also the newest)
        out.append((mgr.all_steps(), mgr.latest_step()))
        md = mgr.metadata(20)
        out.append((md.metrics, md.metadata, md.info.writer_size))
        loaded = mgr.restore(20)
        lo, hi = loaded.partition.local_range(w.rank)
        want = G[20].local(lo, hi)
        want.step = 20
        try:
            assert_state_equal(loaded.state, want)
            out.append("restored")
        except AssertionError:
            out.append("differs")
        for call in (lambda: mgr.save(30, state(30, w), force=True), lambda: mgr.save(25, state(20, w), force=True)):
            try:
                call()
                out.append("no error")
            except ac.errors.StepAlreadyExistsError as exc:
                out.append(str(exc).split(":")[0])
        bad = {"rank": w.rank} if w.size > 1 else {"rank": "x", "y": object()}
        try:
            mgr.save(40, state(30, w), metadata=bad)
            out.append("no error")
        except ac.errors.ManagerError as exc:
            out.append(type(exc).__name__)
        mgr.delete(20)
        out.append(mgr.all_steps())
    gathered = w.allgather(repr(out))
    assert len(set(gathered)) == 1, gathered  # every rank saw the same
    assert out[:3] == [True, True, True]
    assert out[3] == ([20, 30], 30)
    assert out[4] == ({"loss": 0.1}, {"P": w.size}, w.size)
    assert out[5] == "restored"
    assert out[6] == "step 30 has a checkpoint (ckpt-000000000030.scda)" and out[7].startswith("step 25 is lower than the newest")
    assert out[8] == "ManagerError" and out[9] == [30]


def test_warnings_once_per_job(mpi_tmp: Path) -> None:
    """A checkpoint skipped by a restart is reported once per job (rank 0), as a warning and a log record."""
    import logging
    import warnings

    w = world()
    with ac.CheckpointManager(mpi_tmp, Advection, comm=w, save_policy=EveryNSteps(10)) as mgr:
        mgr.save(10, state(10, w))
    if w.rank == 0:
        (mpi_tmp / "ckpt-000000000020.scda").write_bytes(b"damaged")
    w.Barrier()
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.INFO)
    logger = logging.getLogger("amrckpt")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as seen, ac.CheckpointManager(mpi_tmp, Advection, comm=w) as mgr:
            warnings.simplefilter("always")
            restored = mgr.restore_latest()
            step = mgr.restored_step
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    warned = w.allgather(len([x for x in seen if issubclass(x.category, ac.errors.CheckpointSkippedWarning)]))
    logged = w.allgather(len([r for r in records if "skipped and kept aside" in r.getMessage()]))
    assert warned == logged == [1] + [0] * (w.size - 1) and step == 10  # one report per job: rank 0's
    assert [(s.step, s.unreadable) for s in restored.skipped] == [(20, False)]
    assert w.allgather(Path(restored.skipped[0].kept_as).name.startswith("ckpt-000000000020.scda.damaged-")) == [True] * w.size
