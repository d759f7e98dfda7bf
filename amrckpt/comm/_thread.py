"""Ranks as threads of one process: a communicator for tests and tools.

:func:`run_threads` runs a function on P threads, each with its own
:class:`ThreadComm`; collectives meet at a shared barrier.  Together with the
POSIX backend this exercises every partition-dependent code path of amrckpt
(who writes which bytes, prefix sums, error agreement) without MPI, fast
enough for property-based tests.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ._base import Columns, ReduceOp, combine_columns, reduce_arrays, relayed

__all__ = ["ThreadComm", "run_threads", "thread_rank"]

T = TypeVar("T")


class _Group:
    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self.slots: list[Any] = [None] * size
        self.barrier = threading.Barrier(size, timeout=timeout)
        self.calls = [0] * size  # each rank's count of amrckpt calls on the group (amrckpt.comm.Call's sequence numbers)


_RANK = threading.local()
"""The rank of a thread started by :func:`run_threads` (``_RANK.value``), for fault wrappers that select ranks."""


def thread_rank() -> int | None:
    """Return the rank of the calling thread if :func:`run_threads` started it, else None. Not collective."""
    return getattr(_RANK, "value", None)


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

    def _gather(self, obj: Any, timeout: float | None = None) -> list[Any]:
        """Every rank's ``obj``, by rank: the exchange behind every collective of the group (``timeout``: the group's if None)."""
        g = self._group
        g.slots[self._rank] = obj
        g.barrier.wait(timeout)
        result = list(g.slots)
        g.barrier.wait(timeout)
        return result

    def barrier(self) -> None:
        """Wait for every thread of the group. Collective."""
        self._group.barrier.wait()

    def allgather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, by rank (not copied: the ranks share memory). Collective."""
        return self._gather(obj)

    def bcast(self, obj: T, root: int = 0) -> T:
        """``obj`` of rank ``root``. Collective."""
        result: T = self._gather(obj)[root]
        return result

    def allgather_array(self, values: np.ndarray) -> np.ndarray:
        """Every rank's array, stacked by rank: ``(P, *values.shape)``. Collective."""
        return np.stack([np.array(a, copy=True) for a in self._gather(values)])

    def allreduce_array(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """Element-wise reduction over ranks, a new array. Collective."""
        return reduce_arrays(self._gather(values), op)

    def allreduce_columns(self, columns: Columns) -> Columns:
        """Element-wise sums, maxima, XORs over ranks, and the one value given. Collective."""
        out: Columns = functools.reduce(combine_columns, self._gather(columns))
        return out

    def exscan_columns(self, columns: Columns) -> Columns | None:
        """As ``MPI_Exscan``: None on rank 0; on rank r, ranks 0..r-1 combined (rank 0's payload as it is on rank 1). Collective."""
        below = self._gather(columns)[: self._rank]
        return functools.reduce(combine_columns, below) if below else None

    def sendrecv(self, data: bytes | memoryview | None, dest: int | None, source: int | None) -> bytes | None:
        """Emulate ``MPI_Sendrecv`` of byte strings (each rank posts, then takes what ``source`` sent it). Collective here.

        A ``source`` that did not send to this rank is a caller's bug (MPI would hang): an AssertionError.
        """  # noqa: DOC501 (a guard against a caller's bug)
        posted = self._gather((None if data is None else bytes(data), dest))
        if source is None:
            return None
        got, to = posted[source]
        if to != self._rank:
            raise AssertionError(f"sendrecv on rank {self._rank}: rank {source} sends to {to}")
        return None if got is None else bytes(got)

    def meet(self, values: np.ndarray, timeout: float, poll: Callable[[], None] | None = None) -> np.ndarray | None:
        """Element-wise maxima of every rank's int64 ``values``; None if not every thread came within ``timeout`` s. Collective.

        A timeout breaks the group's barrier: every later collective of the group fails.
        """
        try:
            return reduce_arrays(self._gather(np.array(values, dtype=np.int64, copy=True), timeout), "max")
        except threading.BrokenBarrierError:
            return None

    def dup(self) -> ThreadComm:
        """Return a new group of the same thread ranks (rank 0 creates it). Collective."""
        group = _Group(self.size, self._group.timeout) if self._rank == 0 else None
        return ThreadComm(self._gather(group)[0], self._rank)

    def free(self) -> None:
        """Nothing to free (the group is garbage-collected). Collective."""
        self._group.barrier.wait()

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Emulate :meth:`amrckpt.comm.MPIComm.relay_down` (each rank passes bytes to the rank below). Collective here.

        ``send`` on rank 0, ``receive`` on the last rank or ``forward`` without both is a caller's bug: an AssertionError.
        """  # noqa: DOC501 (a guard against a caller's bug)
        if (send and self._rank == 0) or (receive and self._rank == self.size - 1) or (forward and not (send and receive)):
            raise AssertionError(f"relay_down on rank {self._rank}: send={send} receive={receive} forward={forward}")
        posted = self._gather((None if data is None else bytes(data), send, receive, forward))
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
        _RANK.value = rank  # amrckpt.testing's fault wrappers select thread ranks as MPI ranks
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
