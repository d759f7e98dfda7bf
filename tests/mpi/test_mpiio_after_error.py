"""After an MPI-IO error on any rank, files move their data with independent calls only (run at 1, 2, 3 and 4 processes).

MPICH's ROMIO has delivered another save's pieces to a later collective write
after one collective write failed on some rank (libfiu trial 7000029;
``amrckpt.scda._mpiio._errors_seen`` says more).  Here the error is marked
on a subset of the ranks, rank 0 included, as :meth:`MPIIOBackend._error`
marks it: the next open agrees on it, every rank then writes and reads
through independent calls only, and the bytes are those of a one-rank save.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state
from conftest import shared_tmpdir

from _support import world
from amrckpt import FileAccess, load, save
from amrckpt.container import _writer
from amrckpt.scda import _mpiio

pytestmark = pytest.mark.mpi

G = global_state(seed=13, max_level=5)
MPIIO = FileAccess(backend="mpiio")


def _sum() -> Any:
    from mpi4py import MPI

    return MPI.SUM


@pytest.mark.parametrize("stream", [False, True], ids=["one write", "streaming"])
@pytest.mark.parametrize("who", ["no rank", "rank 0", "last rank", "every rank"])
def test_after_an_mpiio_error_every_rank_moves_its_bytes_by_independent_calls(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, who: str, stream: bool
) -> None:
    comm = world()
    monkeypatch.setattr(_mpiio, "_warned", False)
    seen = {"no rank": set(), "rank 0": {0}, "last rank": {comm.size - 1}, "every rank": set(range(comm.size))}[who]
    monkeypatch.setattr(_mpiio, "_errors_seen", comm.rank in seen)
    if stream:
        monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
    moved = [0]
    collective = [0]  # collective data calls: through a file view, or contiguous ones of large pieces or bulk runs
    orig = _mpiio.MPIIOBackend._independent
    orig_rounds = _mpiio._split_rounds
    orig_gathered = _mpiio.MPIIOBackend._gathered

    def independent(self: Any, runs: Any, write: bool) -> None:
        moved[0] += sum(b.nbytes for _, bufs in runs for b in bufs)
        orig(self, runs, write)

    def split_rounds(*args: Any) -> Any:
        collective[0] += 1
        return orig_rounds(*args)

    def gathered(self: Any, pieces: Any, nrounds: int, write: bool, ncontiguous: int = 0) -> None:
        collective[0] += ncontiguous
        orig_gathered(self, pieces, nrounds, write, ncontiguous)

    monkeypatch.setattr(_mpiio.MPIIOBackend, "_independent", independent)
    monkeypatch.setattr(_mpiio, "_split_rounds", split_rounds)
    monkeypatch.setattr(_mpiio.MPIIOBackend, "_gathered", gathered)
    with shared_tmpdir() as d:
        if comm.rank == 0:
            from mpi4py import MPI

            save(G.local(0, G.N), d / "serial.scda", comm=MPI.COMM_SELF, access=FileAccess(backend="posix"))
        save(G.for_rank(comm), d / "mpiio.scda", comm=comm, access=MPIIO)
        written = comm.allreduce(moved[0], op=_sum())
        size = (d / "mpiio.scda").stat().st_size
        comm.Barrier()
        same = hashlib.sha256((d / "serial.scda").read_bytes()).digest() == hashlib.sha256((d / "mpiio.scda").read_bytes()).digest()
        assert comm.allgather(same) == [True] * comm.size
        # Every rank knows now (sticky, agreed at the open), and every byte went through independent calls, or
        # (no rank) the large pieces went through collective ones.
        assert comm.allgather(_mpiio._errors_seen) == [bool(seen)] * comm.size
        said = [r.getMessage() for r in caplog.records if "independent calls only" in r.getMessage()]
        assert len(said) == (1 if seen and comm.rank == 0 else 0), said  # once, by rank 0
        if seen:
            assert (written, collective[0]) == (size, 0), (written, size, collective[0])
        else:
            assert written < size and collective[0] > 0, (written, size, collective[0])
        collective[0] = 0
        got = load(d / "mpiio.scda", Advection, comm=comm, access=MPIIO)
        assert_state_equal(got.state, G.for_rank(comm))
        if seen:
            assert collective[0] == 0
