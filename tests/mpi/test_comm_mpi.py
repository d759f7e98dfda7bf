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
