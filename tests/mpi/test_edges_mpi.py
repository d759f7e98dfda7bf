"""Local steps of collective calls that fail on some ranks only, under real MPI at 1, 2, 3 and 4 processes (issue 33).

Every non-empty subset of ranks, rank 0 included: a failing ``close(2)`` of
the descriptors a load reads through, a partner copy whose ``close(2)`` fails,
a background save or a flush whose thread cannot start.  Every rank must
raise the same error of amrckpt's tree (an ``ScdaIOError`` with the errno
for an I/O error), within a bounded time, and the checkpoints must stay
where they are and restore afterwards.
"""

from __future__ import annotations

import errno
import faulthandler
import itertools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, GlobalState, assert_state_equal, global_state

import amrckpt as ac
from _support import world
from amrckpt import _threads, errors, sfc
from amrckpt.manager import EveryNSteps

pytestmark = pytest.mark.mpi

LIMIT = 120  # seconds a case may take before the job is killed (a hang fails the run)


def subsets(P: int) -> list[tuple[int, ...]]:
    """Every non-empty subset of the ranks (rank 0 included; all of them too)."""
    return [s for n in range(1, P + 1) for s in itertools.combinations(range(P), n)]


@contextmanager
def bounded() -> Iterator[None]:
    faulthandler.dump_traceback_later(LIMIT, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextmanager
def failing_close(active: bool, monkeypatch: pytest.MonkeyPatch, only_read: bool = True) -> Iterator[list[int]]:
    """Make ``os.close`` of read-only descriptors fail with EIO (after closing them) on this rank if ``active``."""
    real = os.close
    hits: list[int] = []

    def close(fd: int) -> None:
        import fcntl

        try:
            mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
        except OSError:
            mode = -1
        real(fd)
        if active and (mode == os.O_RDONLY or not only_read):
            hits.append(fd)
            raise OSError(errno.EIO, "Input/output error (injected at close)")

    with monkeypatch.context() as m:
        m.setattr(os, "close", close)
        yield hits


def _state(comm: Any, step: int) -> Advection:
    g = global_state(seed=step % 3, max_level=3)
    g.step, g.time = step, 0.5 * step
    return g.for_rank(comm)


def _big_state(comm: Any) -> Advection:
    """A uniform forest of 2 x 4^8 leaves: every rank's payloads are above the size CRC'd inline (a helper thread's)."""
    leaves = sfc.uniform_leaves(8, num_trees=2, dim=2)
    N = leaves.num_leaves
    rng = np.random.default_rng(5)
    counts = (rng.integers(0, 4, N) + 1) ** 2
    g = GlobalState(leaves, rng.random(N), rng.standard_normal((N, 2)), counts, rng.standard_normal(int(counts.sum())))
    return g.for_rank(comm)


def test_close_errors_during_a_load_on_every_subset(mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world()
    path = mpi_tmp / "base.scda"
    ac.save(_state(w, 3), path, comm=w, access=ac.FileAccess(backend="posix"))
    want = ac.load(path, Advection, comm=w).state
    for backend in ("posix", "mpiio"):
        for ranks in subsets(w.size):
            with bounded(), failing_close(w.rank in ranks, monkeypatch) as hits:
                try:
                    ac.load(path, Advection, comm=w, access=ac.FileAccess(backend=backend))
                    outcome: Any = "loaded"
                except errors.AmrckptError as exc:
                    outcome = (type(exc).__name__, getattr(exc, "errno", None), sorted(exc.rank_errors))
            everyone = w.allgather((outcome, bool(hits)))
            closed = [r for r, (_, h) in enumerate(everyone) if h]
            assert all(o == everyone[0][0] for o, _ in everyone), (backend, ranks, everyone)
            if closed:  # a rank whose read descriptor failed to close: an agreed ScdaIOError with its errno, never a hang
                assert everyone[0][0] == ("ScdaIOError", errno.EIO, closed), (backend, ranks, everyone)
            else:
                assert everyone[0][0] == "loaded"
    assert_state_equal(ac.load(path, Advection, comm=w).state, want)  # the file is untouched


def test_close_errors_during_restore_latest_leave_the_checkpoint(mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed close(2) fails the restore with ScdaIOError on every rank; the checkpoint is not set aside."""
    w = world()
    with ac.CheckpointManager(mpi_tmp / "d", Advection, comm=w) as m:
        m.save(10, _state(w, 10), force=True)
    for ranks in subsets(w.size)[: 2 * w.size]:
        with bounded(), ac.CheckpointManager(mpi_tmp / "d", Advection, comm=w) as m:
            with failing_close(w.rank in ranks, monkeypatch) as hits:
                try:
                    got = m.restore_latest()
                    outcome: Any = got.step if got is not None else None
                except errors.AmrckptError as exc:
                    outcome = type(exc).__name__
        everyone = w.allgather((outcome, bool(hits)))
        assert all(o == everyone[0][0] for o, _ in everyone), everyone
        assert everyone[0][0] in (10, "ScdaIOError"), everyone
        names = sorted(p.name for p in (mpi_tmp / "d").glob("ckpt-*"))
        assert "ckpt-000000000010.scda" in names and not [n for n in names if "damaged" in n or "unreadable" in n], names
    with ac.CheckpointManager(mpi_tmp / "d", Advection, comm=w) as m:
        got = m.restore_latest()
        assert got is not None and got.step == 10
        assert_state_equal(got.state, _state(w, 10))


@pytest.mark.parametrize("what", ["background", "flush"])
def test_a_thread_that_cannot_start_is_an_agreed_error(mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """A background save's (or a flush's) thread that cannot start on some ranks: ThreadStartError on every rank."""
    from mpi4py import MPI

    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        pytest.skip("background saves need MPI_THREAD_MULTIPLE")
    w = world()
    for ranks in subsets(w.size)[: 2 * w.size]:
        d = mpi_tmp / f"{what}-{'-'.join(map(str, ranks))}"
        kw: dict[str, Any] = {"background": True} if what == "background" else {
            "cache": ac.manager.NodeCache(str(d / "cache" / "{node}"), partners=0, node_size=w.size),
            "flush_policy": EveryNSteps(1),
        }  # fmt: skip
        with bounded(), ac.CheckpointManager(d, Advection, comm=w, save_policy=EveryNSteps(1), **kw) as m:
            m.save(1, _state(w, 1))
            m.wait()
            real = _threads._start_new_thread

            def refuse(fn: Any, args: Any) -> Any:
                raise RuntimeError("can't start new thread")

            with monkeypatch.context() as mp:
                if w.rank in ranks:
                    mp.setattr(_threads, "_start_new_thread", refuse)
                try:
                    m.save(2, _state(w, 2))
                    m.wait()
                    outcome: Any = "saved"
                except errors.AmrckptError as exc:
                    outcome = (type(exc).__name__, sorted(exc.rank_errors))
            assert _threads._start_new_thread is real
            everyone = w.allgather(outcome)
            assert all(o == everyone[0] for o in everyone), everyone
            assert everyone[0] == ("ThreadStartError", list(ranks)), everyone
            m.save(3, _state(w, 3))  # the manager goes on
        with ac.CheckpointManager(d, Advection, comm=w) as m:
            assert m.latest_step() == 3


def test_a_pool_worker_that_cannot_start_leaves_its_work_to_the_caller(mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper threads of a save and a load (CRC32s, packing) cannot start on some ranks: the work runs in the caller."""
    from amrckpt import _crc

    w = world()
    path = mpi_tmp / "pool.scda"
    seen: set[str] = set()
    refused: list[int] = []

    def refuse(fn: Any, args: Any) -> Any:
        refused.append(1)
        raise RuntimeError("can't start new thread")

    ac.save(_big_state(w), path, comm=w)
    for ranks in subsets(w.size)[: 2 * w.size]:
        for what in ("save", "load"):
            with bounded(), monkeypatch.context() as mp:
                mp.setattr(_threads, "_POOL", None)  # new pools: their workers start on first use
                mp.setattr(_crc, "_POOL", None)
                if w.rank in ranks:
                    mp.setattr(_threads, "_start_new_thread", refuse)
                try:
                    if what == "save":
                        ac.save(_big_state(w), mpi_tmp / "new.scda", comm=w)  # large enough for the CRC32 thread
                    else:
                        ac.load(path, Advection, comm=w)
                    outcome: Any = "ok"
                except errors.AmrckptError as exc:
                    outcome = (type(exc).__name__, sorted(exc.rank_errors))
            everyone = w.allgather(outcome)
            assert all(o == everyone[0] for o in everyone), (what, ranks, everyone)
            assert everyone[0] == "ok", (what, ranks, everyone)
            seen.add(what)
    assert seen == {"save", "load"}, seen
    assert sum(w.allgather(len(refused))) > 0  # the helper threads were needed, and refused
