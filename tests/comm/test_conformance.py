"""The communicator conformance suite (amrckpt.testing.CommTests) on the serial and thread communicators, and wrappers.

The same suite runs on MPI.COMM_WORLD under mpiexec in tests/mpi/test_comm_mpi.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from amrckpt.comm import Comm, SerialComm, run_threads
from amrckpt.testing import CommTests, CountingComm, FaultyComm

T = TypeVar("T")


class TestSerial(CommTests):
    size = 1

    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        return [fn(SerialComm())]


@pytest.mark.parametrize("P", [1, 2, 3, 4])
class TestThreads(CommTests):
    @pytest.fixture(autouse=True)
    def _size(self, P: int) -> None:
        self.size = P

    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        return run_threads(self.size, fn, timeout=30)


class TestCountingWrapper(CommTests):
    size = 3

    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        return run_threads(self.size, lambda c: fn(CountingComm(c)), timeout=30)


class TestFaultyWrapperWithoutFaults(CommTests):
    size = 2

    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        return run_threads(self.size, lambda c: fn(FaultyComm(c)), timeout=30)


def test_the_suite_fails_a_communicator_that_pads_an_exscan() -> None:
    """A thread communicator whose exscan pads rank 0's payload (what hid a hang of real MPI) fails the suite."""
    from amrckpt.comm import Columns, combine_columns

    class Padding:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.rank, self.size = inner.rank, inner.size

        def exscan_columns(self, columns: Columns) -> Columns | None:
            got = self.inner.allgather(columns)
            if self.rank == 0:
                return None
            acc = Columns([0] * 8, [-1] * 8, [0] * 8)  # padded to 8: not what MPI returns
            for g in got[: self.rank]:
                acc = combine_columns(acc, g)
            return acc

    class Suite(CommTests):
        size = 2

        def run(self, fn: Callable[[Comm], T]) -> list[T]:
            return run_threads(2, lambda c: fn(Padding(c)), timeout=30)  # type: ignore[arg-type]

    with pytest.raises(AssertionError, match="rank 1"):
        Suite().test_exscan_columns_as_mpi_exscan()
