"""Ranks as threads of one process: a communicator for tests and tools.

:func:`run_threads` runs a function on P threads, each with its own
:class:`ThreadComm`; collectives meet at a shared barrier.  Together with the
POSIX backend this exercises every partition-dependent code path of amrckpt
(who writes which bytes, prefix sums, error agreement) without MPI, fast
enough for property-based tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .. import _faults

__all__ = ["ThreadComm", "run_threads"]

T = TypeVar("T")


class _Group:
    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self.slots: list[Any] = [None] * size
        self.barrier = threading.Barrier(size, timeout=timeout)


class ThreadComm:
    """One rank of a group of threads that act as an MPI communicator.

    Built by :func:`run_threads`; do not share one instance between threads.
    """

    __slots__ = ("_group", "_rank")

    def __init__(self, group: _Group, rank: int) -> None:
        self._group = group
        self._rank = rank

    @property
    def rank(self) -> int:
        """Return this thread's rank."""
        return self._rank

    @property
    def size(self) -> int:
        """The number of threads in the group."""
        return self._group.size

    def _gather(self, obj: Any, what: str) -> list[Any]:
        """Every rank's ``obj``; then the fault-injection hook (amrckpt._faults), a no-op unless a test injects faults."""
        g = self._group
        g.slots[self._rank] = obj
        g.barrier.wait()
        result = list(g.slots)
        g.barrier.wait()
        if _faults.ACTIVE is not None:
            _faults.collective(self, what)
        return result

    def barrier(self) -> None:
        """Wait for every thread of the group. Collective."""
        self._group.barrier.wait()
        if _faults.ACTIVE is not None:
            _faults.collective(self, "barrier")

    def allgather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, by rank. Collective."""
        return self._gather(obj, "allgather")

    def bcast(self, obj: T, root: int = 0) -> T:
        """``obj`` of rank ``root``. Collective."""
        result: T = self._gather(obj, "bcast")[root]
        return result

    def allreduce_max(self, values: Sequence[int]) -> list[int]:
        """Element-wise maximum over ranks. Collective."""
        return [max(col) for col in zip(*self._gather([int(v) for v in values], "allreduce"), strict=True)]

    def allreduce_sum(self, value: int) -> int:
        """Exact sum over ranks. Collective."""
        return sum(self._gather(int(value), "allreduce"))

    def allreduce_xor(self, values: Sequence[int]) -> list[int]:
        """Element-wise XOR over ranks. Collective."""
        out = [0] * len(values)
        for vals in self._gather([int(v) for v in values], "allreduce"):
            out = [a ^ b for a, b in zip(out, vals, strict=True)]
        return out

    def dup(self) -> ThreadComm:
        """Return a new group of the same thread ranks (rank 0 creates it). Collective."""
        group = _Group(self.size, self._group.timeout) if self._rank == 0 else None
        return ThreadComm(self._gather(group, "dup")[0], self._rank)

    def exscan_sum(self, value: int) -> int:
        """Exact sum over the ranks below this one. Collective."""
        return sum(self._gather(int(value), "exscan")[: self._rank])

    def exscan_sum_max(self, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
        """Exclusive prefix sums and maxima over the ranks below this one (rank 0: zeros, -1s). Collective."""
        from ._base import sum_max_columns

        acc: tuple[list[int], list[int]] = ([0] * len(sums), [-1] * len(maxima))
        for x in self._gather(([int(v) for v in sums], [int(v) for v in maxima]), "exscan")[: self._rank]:
            acc = sum_max_columns(acc, x)
        return acc

    def allreduce_max_obj(self, values: Sequence[int]) -> list[int]:
        """Element-wise maximum of lists of Python ints of any lengths. Collective."""
        from ._base import max_columns

        return max_columns(self._gather([int(v) for v in values], "allreduce"))

    def allgather_int(self, value: int) -> np.ndarray:
        """Every rank's int64 ``value``, by rank. Collective."""
        return np.array(self._gather(int(value), "allgather"), dtype=np.int64)

    def allreduce_sum_max(self, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
        """Element-wise sums and maxima over ranks of Python ints. Collective."""
        from ._base import sum_max_columns

        acc: tuple[list[int], list[int]] = ([0] * len(sums), [-1] * len(maxima))
        for x in self._gather(([int(v) for v in sums], [int(v) for v in maxima]), "allreduce"):
            acc = sum_max_columns(acc, x)
        return acc

    def allreduce_max_array(self, values: np.ndarray) -> np.ndarray:
        """Element-wise maximum over ranks of an int64 array (a new array). Collective."""
        arrays = self._gather(np.array(values, dtype=np.int64), "allreduce")
        out: np.ndarray = np.maximum.reduce(arrays) if len(arrays) > 1 else arrays[0].copy()
        return out

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Emulate :meth:`amrckpt.comm.MPIComm.relay_down` (each rank passes bytes to the rank below). Collective here."""
        if (send and self._rank == 0) or (receive and self._rank == self.size - 1) or (forward and not (send and receive)):
            raise AssertionError(f"relay_down on rank {self._rank}: send={send} receive={receive} forward={forward}")
        from ._base import relayed

        posted = self._gather((None if data is None else bytes(data), send, receive, forward), "relay")
        return relayed(posted, self._rank) if receive else None

    def __repr__(self) -> str:
        return f"ThreadComm(rank={self._rank}, size={self.size})"


def run_threads(size: int, fn: Callable[..., T], *args: Any, timeout: float = 60.0, **kwargs: Any) -> list[T]:
    """Run ``fn(comm, *args, **kwargs)`` on ``size`` threads, one per rank.

    Parameters
    ----------
    size : int
        The number of ranks, P >= 1.
    fn : callable
        Called as ``fn(comm, *args, **kwargs)`` with a :class:`ThreadComm`.
    timeout : float, optional
        Seconds a collective may wait for the other ranks; a rank that never
        arrives (a bug: an exception outside a collective agreement) breaks
        the barrier instead of hanging the test.

    Returns
    -------
    list
        The return value of each rank, by rank.

    Raises
    ------
    BaseException
        The exception of the lowest rank that raised, if any did; the others
        are attached as ``rank_exceptions`` (dict of rank to exception).
    """
    group = _Group(size, timeout)
    results: list[Any] = [None] * size
    failures: dict[int, BaseException] = {}

    def target(rank: int) -> None:
        _faults.set_thread_rank(rank)  # injected faults select thread ranks as MPI ranks
        try:
            results[rank] = fn(ThreadComm(group, rank), *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller below
            failures[rank] = exc

    threads = [threading.Thread(target=target, args=(r,), name=f"rank{r}") for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        first = failures[min(failures)]
        try:
            first.rank_exceptions = dict(failures)  # type: ignore[attr-defined]
        except AttributeError:
            pass
        raise first
    return results
