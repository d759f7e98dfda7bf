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


def _field_digest(loaded: ac.Loaded[Advection], comm: Any) -> str:
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
        except ac.SchemaError as exc:
            got = type(exc).__name__
        steps = [r.step for r in mgr.history()]
    assert w.allgather((got, steps)) == [("SchemaError", [1])] * w.size  # nothing of step 2 remains
    assert not list(mpi_tmp.glob(".ckpt-*"))
