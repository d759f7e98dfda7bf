"""An I/O error on some ranks during a restart: the same ScdaIOError on every rank, the checkpoint left where it is (MPI-IO).

Run at 2, 3 and 4 processes (1 works too).  Before: the checkpoint was
renamed ``.unreadable-`` and the restart went on from the previous step; no
later restart tried it again.  Every assertion is agreed (an allreduce), and
a watchdog aborts the job if a rank is left waiting.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from checkpoint_cases import Advection, assert_state_equal
from fault_trials import _global, state

import amrckpt as ac
from _support import all_true, world
from amrckpt.errors import ScdaIOError
from amrckpt.manager import EveryNSteps
from amrckpt.scda import MPIIOBackend

pytestmark = pytest.mark.mpi

NEWEST = "ckpt-000000000002.scda"


def failing_ranks(subset: str, size: int) -> set[int]:
    return {"root": {0}, "root and last": {0, size - 1}, "all": set(range(size))}[subset]


@contextlib.contextmanager
def fault(where: str, on: bool) -> Iterator[None]:
    """On this rank (``on``): the collective data read fails (EIO) after taking part, or the open of the newest file (ENXIO)."""
    if not on:
        yield
        return
    if where == "read":
        real = MPIIOBackend.read_gathered

        def read_gathered(self: MPIIOBackend, *a: Any, **kw: Any) -> None:
            real(self, *a, **kw)  # every rank joins the collective calls; the error is this rank's alone
            raise ScdaIOError(errno.EIO, f"cannot read from {self.path!r}: Input/output error")

        with mock.patch.object(MPIIOBackend, "read_gathered", read_gathered):
            yield
        return
    real_open = os.open

    def open_(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if os.fspath(path).endswith(NEWEST) and not flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.ENXIO, os.strerror(errno.ENXIO), os.fspath(path))
        return real_open(path, flags, *a, **kw)

    with mock.patch.object(os, "open", open_):
        yield


@pytest.mark.parametrize(("where", "subset"), [("read", "root"), ("read", "root and last"), ("read", "all"), ("open", "root")])
def test_an_io_error_on_some_ranks_is_one_error_and_leaves_the_checkpoint(mpi_tmp: Path, where: str, subset: str) -> None:
    w = world()
    d = mpi_tmp / f"{where}-{subset.replace(' ', '-')}"
    faulthandler.dump_traceback_later(120, exit=True, file=sys.stderr)
    try:
        with ac.CheckpointManager(d, Advection, comm=w, save_policy=EveryNSteps(1)) as mgr:
            for s in (1, 2):
                mgr.save(s, state(s, w))
        before = sorted(os.listdir(d)) if w.rank == 0 else None
        code = errno.EIO if where == "read" else errno.ENXIO
        with ac.CheckpointManager(d, Advection, comm=w) as mgr:
            got: tuple[Any, ...] = ("restored",)
            with fault(where, w.rank in failing_ranks(subset, w.size)):
                try:
                    mgr.restore_latest()
                except ScdaIOError as exc:
                    got = (type(exc).__name__, exc.errno, str(exc))
        everywhere = w.allgather(got)
        assert all_true(everywhere == [everywhere[0]] * w.size), everywhere
        assert all_true(got[:2] == ("ScdaIOError", code) and "ckpt-00000000000" in got[2]), got
        kept = w.bcast(sorted(os.listdir(d)) == before if w.rank == 0 else None)
        assert kept  # nothing renamed aside, nothing written
        with ac.CheckpointManager(d, Advection, comm=w) as mgr:  # the next restart, without faults
            r = mgr.restore_latest()
            lo, hi = r.partition.local_range(w.rank)
            ok = True
            try:
                assert_state_equal(r.state, _global(2).local(lo, hi))
            except AssertionError:
                ok = False
            assert all_true(ok and r.step == 2 and r.skipped == ())
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_a_link_planted_as_the_file_is_refused_before_mpi_io_opens_it(mpi_tmp: Path, kind: str) -> None:
    """Before: ROMIO's MPI_File_open waited forever on a FIFO, and followed a link."""
    w = world()
    path = mpi_tmp / f"planted-{kind}.scda"
    if w.rank == 0:
        if kind == "fifo":
            os.mkfifo(path)
        else:
            from mpi4py import MPI

            ac.save(_global(1).local(0, _global(1).N), mpi_tmp / "target.scda", comm=MPI.COMM_SELF)
            path.symlink_to(mpi_tmp / "target.scda")
    w.Barrier()
    faulthandler.dump_traceback_later(60, exit=True, file=sys.stderr)
    try:
        got: tuple[Any, ...] = ("opened",)
        try:
            ac.scda.fopen_read(path, comm=w, access=ac.scda.FileAccess(backend="mpiio")).fclose()
        except ScdaIOError as exc:
            got = (exc.errno, str(path) in str(exc), "a FIFO" in str(exc) or "a symbolic link" in str(exc))
    finally:
        faulthandler.cancel_dump_traceback_later()
    code = errno.EINVAL if kind == "fifo" else errno.ELOOP
    assert all_true(got == (code, True, True)), got
