"""A save over an existing file, under real mpiexec (run at 1, 2, 3 and 4 processes): overwritten in place by default.

``FileAccess.truncate`` is False by default: the file's pages are reused and
the file is cut to its new size when it is closed.  Whatever was there (a
larger checkpoint of another state, or bytes that are no checkpoint at all),
the file then holds the bytes of a one-rank save of a new file; through
MPI-IO a file new at the open is not cut (``MPI_File_set_size`` only where
bytes were there before), and ``truncate=True`` still empties the file at
the open.  A save that fails after some of its bytes are written over an
older checkpoint leaves a file that no load takes for a checkpoint.  And
``convert`` and ``scda.rewrite`` refuse, on every rank, a destination that is
their source (its name, a hard or a symbolic link).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state
from conftest import shared_tmpdir

from _support import world
from amrckpt import FileAccess, load, save
from amrckpt.container import _writer
from amrckpt.errors import AmrckptError, ScdaIOError
from amrckpt.scda import _backend, _mpiio

pytestmark = pytest.mark.mpi

G = global_state(seed=17, max_level=5)
BIG = global_state(seed=18, max_level=6)  # another state, whose file is larger


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("stream", [False, True], ids=["one write", "streaming"])
@pytest.mark.parametrize("before", ["larger checkpoint", "other bytes", "no file"])
@pytest.mark.parametrize("backend", ["posix", "mpiio"])
def test_a_save_over_an_existing_file_has_the_bytes_of_a_save_of_a_new_one(
    monkeypatch: pytest.MonkeyPatch, backend: str, before: str, stream: bool
) -> None:
    comm = world()
    if stream:
        monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
    cut: list[bool] = []  # MPI-IO: whether each close set the file's size
    orig_close = _mpiio.MPIIOBackend.close

    def close(self: Any, size: int | None = None) -> None:
        if self.mode == "w":
            cut.append(size is not None and self._cut)
        orig_close(self, size)

    monkeypatch.setattr(_mpiio.MPIIOBackend, "close", close)
    access = FileAccess(backend=backend)
    with shared_tmpdir() as d:
        path = d / "ckpt.scda"
        if comm.rank == 0:
            from mpi4py import MPI

            save(G.local(0, G.N), d / "serial.scda", comm=MPI.COMM_SELF, access=FileAccess(backend="posix"))
            if before == "other bytes":
                path.write_bytes(np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes())
        if before == "larger checkpoint":
            save(BIG.for_rank(comm), path, comm=comm, access=FileAccess(truncate=True, backend=backend))
        comm.Barrier()
        old_size = path.stat().st_size if path.exists() else 0
        cut.clear()
        save(G.for_rank(comm), path, comm=comm, access=access)
        comm.Barrier()
        assert old_size == 0 or old_size > path.stat().st_size
        same = _digest(path) == _digest(d / "serial.scda")
        assert comm.allgather(same) == [True] * comm.size
        if backend == "mpiio":
            assert cut == [before != "no file"], cut  # one MPI_File_set_size, at the close, only over old bytes
        assert_state_equal(load(path, Advection, comm=comm).state, G.for_rank(comm))


@pytest.mark.parametrize("backend", ["posix", "mpiio"])
def test_truncate_true_empties_the_file_at_the_open(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    comm = world()
    sizes: list[int] = []
    cls = _backend.PosixBackend if backend == "posix" else _mpiio.MPIIOBackend
    orig = cls.write_gathered

    def write_gathered(self: Any, *args: Any, **kwargs: Any) -> None:
        sizes.append(Path(self.path).stat().st_size)  # before the first byte: emptied
        orig(self, *args, **kwargs)

    monkeypatch.setattr(cls, "write_gathered", write_gathered)
    with shared_tmpdir() as d:
        path = d / "ckpt.scda"
        save(BIG.for_rank(comm), path, comm=comm, access=FileAccess(backend=backend))
        comm.Barrier()
        old_size = path.stat().st_size
        sizes.clear()
        save(G.for_rank(comm), path, comm=comm, access=FileAccess(truncate=True, backend=backend))
        comm.Barrier()
        new_size = path.stat().st_size
        # emptied at the open: when a rank first writes, the file holds at most the new file's bytes (other ranks' of
        # them, through POSIX), never the larger old file's
        assert comm.allgather(sizes[0] <= new_size < old_size) == [True] * comm.size, (sizes, new_size, old_size)
        assert_state_equal(load(path, Advection, comm=comm).state, G.for_rank(comm))


@pytest.mark.parametrize("backend", ["posix", "mpiio"])
def test_a_save_that_fails_over_an_older_checkpoint_leaves_no_checkpoint(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """The second of a streaming save's two writes fails on every rank after the first wrote over a larger
    checkpoint: every rank raises, and the file, part new and part old, is refused by every load."""
    comm = world()
    monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
    cls = _backend.PosixBackend if backend == "posix" else _mpiio.MPIIOBackend
    orig = cls.write_gathered
    calls = [0]

    def write_gathered(self: Any, *args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            if backend == "mpiio":
                orig(self, [], *args[1:], **kwargs)  # joins the collective call with nothing, then fails
            raise ScdaIOError(5, f"{self.path!r}: cannot write (injected on rank {comm.rank})")
        orig(self, *args, **kwargs)

    with shared_tmpdir() as d:
        path = d / "ckpt.scda"
        save(BIG.for_rank(comm), path, comm=comm, access=FileAccess(backend=backend))
        comm.Barrier()
        old = _digest(path)
        monkeypatch.setattr(cls, "write_gathered", write_gathered)
        with pytest.raises(ScdaIOError):
            save(G.for_rank(comm), path, comm=comm, access=FileAccess(backend=backend))
        monkeypatch.setattr(cls, "write_gathered", orig)
        comm.Barrier()
        assert _digest(path) != old  # the first write went over the old bytes
        for schema in (Advection, None):
            try:
                load(path, schema, comm=comm)
                got = "loaded"
            except AmrckptError as exc:
                got = type(exc).__name__
            everyone = comm.allgather(got)
            assert len(set(everyone)) == 1 and everyone[0] != "loaded", everyone


@pytest.mark.parametrize("name", ["the same name", "a hard link", "a symbolic link"])
def test_convert_and_rewrite_refuse_their_own_source_on_every_rank(name: str) -> None:
    """A file would be overwritten in place while it is read: rank 0 finds it, every rank raises the same error, and
    nothing is written (the source keeps its bytes)."""
    from amrckpt import scda
    from amrckpt.container import convert
    from amrckpt.errors import ScdaArgumentError

    comm = world()
    with shared_tmpdir() as d:
        src = d / "ckpt.scda"
        save(G.for_rank(comm), src, comm=comm)
        dst = {"the same name": src, "a hard link": d / "hard.scda", "a symbolic link": d / "soft.scda"}[name]
        if comm.rank == 0 and name == "a hard link":
            dst.hardlink_to(src)
        elif comm.rank == 0 and name == "a symbolic link":
            dst.symlink_to(src)
        comm.Barrier()
        before = _digest(src)
        for fn in (convert, scda.rewrite):
            try:
                fn(src, dst, comm=comm, compress="decode")
                got = "written"
            except ScdaArgumentError as exc:
                got = str(exc)
            everyone = comm.allgather(got)
            assert len(set(everyone)) == 1 and "itself; write to another name" in everyone[0], everyone
            comm.Barrier()
            assert comm.allgather(_digest(src) == before) == [True] * comm.size
        assert_state_equal(load(src, Advection, comm=comm).state, G.for_rank(comm))


def test_a_close_whose_set_size_fails_on_any_subset_of_ranks_raises_on_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MPI_File_set_size`` at the close of a save over a larger checkpoint (MPI-IO) reports an error on each subset of
    ranks in turn (all ``2**P - 1``, rank 0 included or not): every rank raises the same error, the file is still
    closed on every rank (a save after it writes the right bytes), and nothing waits."""
    comm = world()
    orig = _mpiio.MPIIOBackend._mpi_step
    failing = [False]

    def mpi_step(self: Any, fn: Any, what: str) -> None:
        orig(self, fn, what)  # the collective MPI call is made on every rank, as a real failure inside it is
        if fn.__name__ == "set_size" and failing[0]:
            raise ScdaIOError(28, f"{self.path!r}: cannot set the size of (injected on rank {comm.rank})")

    with shared_tmpdir() as d:
        path = d / "ckpt.scda"
        if comm.rank == 0:
            from mpi4py import MPI

            save(G.local(0, G.N), d / "serial.scda", comm=MPI.COMM_SELF, access=FileAccess(backend="posix"))
        for mask in range(1, 1 << comm.size):
            save(BIG.for_rank(comm), path, comm=comm, access=FileAccess(backend="mpiio"))
            failing[0] = bool(mask >> comm.rank & 1)
            monkeypatch.setattr(_mpiio.MPIIOBackend, "_mpi_step", mpi_step)
            try:
                save(G.for_rank(comm), path, comm=comm, access=FileAccess(backend="mpiio"))
                got = "saved"
            except ScdaIOError as exc:
                got = type(exc).__name__ + (" naming rank" if "injected on rank" in str(exc) else "")
            monkeypatch.setattr(_mpiio.MPIIOBackend, "_mpi_step", orig)
            everyone = comm.allgather(got)
            assert everyone == ["ScdaIOError naming rank"] * comm.size, (mask, everyone)
            save(G.for_rank(comm), path, comm=comm, access=FileAccess(backend="mpiio"))
            comm.Barrier()
            assert comm.allgather(_digest(path) == _digest(d / "serial.scda")) == [True] * comm.size, mask
        assert_state_equal(load(path, Advection, comm=comm).state, G.for_rank(comm))


@pytest.mark.parametrize("target", ["a checkpoint", "no file"])
@pytest.mark.parametrize("backend", ["posix", "mpiio"])
def test_a_save_never_writes_through_a_symbolic_link(backend: str, target: str) -> None:
    """A link planted under the name (to another checkpoint, or dangling): every rank raises ``ELOOP`` naming the link
    before the file is opened; the target keeps its bytes (or is not created), and the link stays a link.  The same for
    the scda layer's immediate writer."""
    import errno

    from amrckpt import scda

    comm = world()
    with shared_tmpdir() as d:
        other, path = d / "other.scda", d / "ckpt.scda"
        if target == "a checkpoint":
            save(BIG.for_rank(comm), other, comm=comm, access=FileAccess(backend=backend))
        if comm.rank == 0:
            path.symlink_to(other.name)
        comm.Barrier()
        before = _digest(other) if target == "a checkpoint" else None
        attempts = [
            lambda: save(G.for_rank(comm), path, comm=comm, access=FileAccess(backend=backend)),
            lambda: scda.fopen_write(path, b"x", comm=comm, access=FileAccess(backend=backend)).fclose(),
        ]
        for attempt in attempts:
            try:
                attempt()
                got = "written"
            except ScdaIOError as exc:
                got = f"{type(exc).__name__} {exc.errno} {'symbolic link' in str(exc)}"
            everyone = comm.allgather(got)
            assert everyone == [f"ScdaIOError {errno.ELOOP} True"] * comm.size, everyone
            comm.Barrier()
            kept = path.is_symlink() and (_digest(other) == before if before else not other.exists())
            assert comm.allgather(kept) == [True] * comm.size


@pytest.mark.parametrize("planted", ["a FIFO", "a directory"])
@pytest.mark.parametrize(("backend", "info"), [("posix", None), ("mpiio", None), ("mpiio", {"striping_factor": "2"})])
def test_a_save_over_a_fifo_or_a_directory_is_refused_on_every_rank_without_waiting(backend: str, info: Any, planted: str) -> None:
    """``open(O_WRONLY)`` of a FIFO waits for a reader: rank 0's open (POSIX, the MPI-IO create) and ``MPI_File_open``
    (where a hint leaves the create to ROMIO) must not wait.  Every rank raises the same ``ScdaIOError`` (``EINVAL`` for
    a FIFO, ``EISDIR`` for a directory) naming what is there and the fix."""
    import errno
    import faulthandler
    import os
    import sys

    from amrckpt import scda

    faulthandler.dump_traceback_later(120, exit=True, file=sys.stderr)  # a wait on the FIFO ends the job, with its stack
    comm = world()
    access = FileAccess(backend=backend, info=info)
    with shared_tmpdir() as d:
        path = d / "ckpt.scda"
        if comm.rank == 0:
            os.mkfifo(path) if planted == "a FIFO" else path.mkdir()
        comm.Barrier()
        attempts = [
            lambda: save(G.for_rank(comm), path, comm=comm, access=access),
            lambda: scda.fopen_write(path, b"x", comm=comm, access=access).fclose(),
        ]
        code = errno.EINVAL if planted == "a FIFO" else errno.EISDIR
        for attempt in attempts:
            try:
                attempt()
                got = "written"
            except ScdaIOError as exc:
                got = f"{exc.errno} {planted in str(exc) and 'regular files only' in str(exc)}"
            assert comm.allgather(got) == [f"{code} True"] * comm.size
    faulthandler.cancel_dump_traceback_later()
