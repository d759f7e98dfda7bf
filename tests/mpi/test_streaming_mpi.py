"""A streaming save under real mpiexec (run at 1, 2, 3 and 4 processes): the bytes of a serial save, and errors agreed.

The threshold of a streaming write (``amrckpt.container._writer.STREAM_NBYTES``)
is lowered in every process, so that a small state streams through the
POSIX backend: the bytes that exist are written while the helper thread
CRCs them and packs the mesh, then the records, the index and the footer.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection, global_state
from conftest import shared_tmpdir

from _support import world
from amrckpt import CheckpointManager, FileAccess, save
from amrckpt.container import _writer
from amrckpt.errors import AmrckptError, ScdaIOError
from amrckpt.scda import _backend, _mpiio

pytestmark = pytest.mark.mpi

G = global_state(seed=11, max_level=5)
POSIX = FileAccess(backend="posix")


def test_a_streaming_save_has_the_bytes_of_a_serial_one(monkeypatch: pytest.MonkeyPatch) -> None:
    comm = world()
    with shared_tmpdir() as d:
        if comm.rank == 0:
            from mpi4py import MPI

            save(G.local(0, G.N), d / "serial.scda", comm=MPI.COMM_SELF)  # one rank's save of the whole state
        monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
        save(G.for_rank(comm), d / "streamed.scda", comm=comm, access=POSIX)
        comm.Barrier()
        same = [hashlib.sha256((d / n).read_bytes()).hexdigest() for n in ("serial.scda", "streamed.scda")]
        assert comm.allreduce(int(same[0] == same[1]), op=_min()) == 1


def _min() -> Any:
    from mpi4py import MPI

    return MPI.MIN


@pytest.mark.parametrize("backend", ["posix", "mpiio"])
@pytest.mark.parametrize("who", ["rank 0", "last rank", "every rank"])
@pytest.mark.parametrize("which", [1, 2])
def test_a_failed_streaming_write_is_every_ranks_error_and_commits_nothing(
    monkeypatch: pytest.MonkeyPatch, backend: str, who: str, which: int
) -> None:
    """The first or the second gathered write fails on rank 0, the last rank or every rank: every rank raises the same
    error, and the manager's newest step stays the one before.  Through MPI-IO the failing ranks fail after the
    collective call (a rank that left it would leave the others waiting in it)."""
    comm = world()
    bad = {"rank 0": {0}, "last rank": {comm.size - 1}, "every rank": set(range(comm.size))}[who]
    monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
    cls = _backend.PosixBackend if backend == "posix" else _mpiio.MPIIOBackend
    orig = cls.write_gathered
    calls = [0]
    failing = [False]

    def write_gathered(self: Any, pieces: Any, *args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if backend == "mpiio":
            orig(self, pieces, *args, **kwargs)
        if failing[0] and comm.rank in bad and calls[0] == which:
            raise ScdaIOError(5, f"{self.path!r}: cannot write (injected on rank {comm.rank})")
        if backend == "posix":
            orig(self, pieces, *args, **kwargs)

    monkeypatch.setattr(cls, "write_gathered", write_gathered)
    with shared_tmpdir() as d:
        with CheckpointManager(d, Advection, comm=comm.Dup(), access=FileAccess(backend=backend)) as mgr:
            mgr.save(1, G.for_rank(comm), force=True)
            calls[0] = 0
            failing[0] = True
            try:
                mgr.save(2, G.for_rank(comm), force=True)
                got = "ok"
            except AmrckptError as exc:
                got = f"{type(exc).__name__} {getattr(exc, 'errno', None)}"
            failing[0] = False
        everyone = comm.allgather(got)
        assert len(set(everyone)) == 1 and everyone[0] == "ScdaIOError 5", everyone
        names = sorted(p.name for p in Path(d).glob("ckpt-*.scda"))
        assert comm.allgather(names) == [["ckpt-000000000001.scda"]] * comm.size
