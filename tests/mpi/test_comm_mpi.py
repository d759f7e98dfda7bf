"""The communicator conformance suite (amrckpt.testing.CommTests) on MPI.COMM_WORLD, a duplicate and a wrapper of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from _support import world
from amrckpt.comm import Comm, MPIComm
from amrckpt.testing import CommTests, CountingComm

pytestmark = pytest.mark.mpi

T = TypeVar("T")


class TestWorld(CommTests):
    @pytest.fixture(autouse=True)
    def _size(self) -> None:
        self.size = world().Get_size()

    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        c = MPIComm(world())
        out: list[T] = [None] * c.size  # type: ignore[list-item]
        out[c.rank] = fn(c)  # each rank checks its own result
        return out


class TestCountingWorld(TestWorld):
    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        c = CountingComm(world())
        out: list[T] = [None] * c.size  # type: ignore[list-item]
        out[c.rank] = fn(c)
        return out


def test_what_the_mpi_library_and_job_are_comes_through_mpi_of() -> None:
    """What code outside amrckpt.comm asks of MPI (library, thread level, node, world ranks), through the one accessor."""
    from mpi4py import MPI

    from amrckpt.comm import SerialComm, mpi_of

    c = MPIComm(world())
    assert mpi_of(SerialComm()) is None and mpi_of(CountingComm(SerialComm())) is None
    m = mpi_of(CountingComm(c))
    assert m is c
    assert m.library_version() == MPI.Get_library_version().strip().splitlines()[0]
    assert m.thread_multiple() == (MPI.Query_thread() >= MPI.THREAD_MULTIPLE)
    assert 1 <= m.ranks_on_node() <= c.size  # one node here: every rank
    assert m.world_ranks() == tuple(range(c.size))
