"""A conformance suite for communicators: one body of tests for every implementation of :class:`~amrckpt.comm.Comm`.

zarr's ``StoreTests`` and mpi4py's test mixins are the models.  A subclass
says how to run a function on every rank (:meth:`CommTests.run`); each test
then runs its body on every rank and checks what each rank got against
MPI's semantics.  The suite is what would have caught a thread communicator
that padded an ``MPI_Exscan`` result where MPI hands rank 0's payload on as
it is.

Usage, in a test module::

    from amrckpt.testing import CommTests

    class TestThreads(CommTests):
        size = 3

        def run(self, fn):
            return run_threads(self.size, fn)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..comm import NONE, Columns, Comm

__all__ = ["CommTests"]

T = TypeVar("T")


class CommTests(abc.ABC):
    """The tests every :class:`~amrckpt.comm.Comm` must pass (collect them with pytest by subclassing).

    Attributes
    ----------
    size : int
        The number of ranks :meth:`run` runs on (P).
    """

    size: int = 1

    @abc.abstractmethod
    def run(self, fn: Callable[[Comm], T]) -> list[T]:
        """Run ``fn(comm)`` on every rank of the communicator under test; return each rank's result, by rank.

        Subclasses implement it: threads return every rank's result; MPI
        returns this rank's at its rank and None elsewhere (each rank
        checks its own).
        """

    # -- helpers ------------------------------------------------------------------------------------------

    def _each(self, fn: Callable[[Comm], tuple[int, Any, Any]]) -> None:
        """Run ``fn`` on every rank; each returns ``(rank, got, want)``; assert ``got == want`` on every rank."""
        outs: list[Any] = list(self.run(fn))
        for out in outs:
            if out is None:  # another process's rank (MPI): it checked itself
                continue
            rank, got, want = out
            assert _equal(got, want), f"rank {rank}: got {got!r}, want {want!r}"

    # -- the tests ----------------------------------------------------------------------------------------

    def test_rank_and_size(self) -> None:
        self._each(lambda c: (c.rank, (c.size, 0 <= c.rank < c.size), (self.size, True)))

    def test_barrier(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            c.barrier()
            return c.rank, True, True

        self._each(body)

    def test_bcast_from_every_root(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            got = [c.bcast({"from": c.rank, "data": list(range(c.rank))}, root=r) for r in range(c.size)]
            return c.rank, got, [{"from": r, "data": list(range(r))} for r in range(c.size)]

        self._each(body)

    def test_allgather_is_by_rank(self) -> None:
        self._each(lambda c: (c.rank, c.allgather(("r", c.rank)), [("r", r) for r in range(c.size)]))

    def test_allgather_array(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            got = c.allgather_array(np.array([c.rank, -c.rank, 2**40], dtype=np.int64))
            want = np.array([[r, -r, 2**40] for r in range(c.size)], dtype=np.int64)
            return c.rank, (got.dtype.str, got.tolist()), (want.dtype.str, want.tolist())

        self._each(body)

    def test_allreduce_array_every_op(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            P, r = c.size, c.rank
            got = {
                "sum": c.allreduce_array(np.array([r, 1], dtype=np.int64), "sum").tolist(),
                "max": c.allreduce_array(np.array([r, -r], dtype=np.int64), "max").tolist(),
                "min": c.allreduce_array(np.array([r, -r], dtype=np.int64), "min").tolist(),
                "bxor": c.allreduce_array(np.array([1 << r, 0xFFFF], dtype=np.uint32), "bxor").tolist(),
                "bor": c.allreduce_array(np.array([1 << r], dtype=np.uint32), "bor").tolist(),
                "float": c.allreduce_array(np.array([0.5 * r]), "max").tolist(),
            }
            xor = 0
            for q in range(P):
                xor ^= 1 << q
            want = {
                "sum": [P * (P - 1) // 2, P],
                "max": [P - 1, 0],
                "min": [0, -(P - 1)],
                "bxor": [xor, 0xFFFF if P % 2 else 0],
                "bor": [(1 << P) - 1],
                "float": [0.5 * (P - 1)],
            }
            return r, got, want

        self._each(body)

    def test_allreduce_array_does_not_change_its_argument(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            a = np.array([c.rank], dtype=np.int64)
            c.allreduce_array(a, "sum")
            return c.rank, a.tolist(), [c.rank]

        self._each(body)

    def test_allreduce_columns_exact_and_padded(self) -> None:
        """Sums of Python ints beyond int64 are exact; lists of different lengths combine as if padded."""

        def body(c: Comm) -> tuple[int, Any, Any]:
            r, P = c.rank, c.size
            big = 2**100 + r
            got = c.allreduce_columns(Columns([big, 1] + [1] * r, [r, -r] + [7] * (r % 2), [1 << r], "v" if r == P - 1 else None))
            want = Columns(
                [P * 2**100 + P * (P - 1) // 2, P, *[P - 1 - k for k in range(P - 1)]],
                [P - 1, 0, *([7] if P > 1 else [])],
                [(1 << P) - 1],
                "v",
            )
            return r, tuple(got), tuple(want)

        self._each(body)

    def test_allreduce_columns_a_rank_with_empty_lists_takes_part(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            r = c.rank
            mine = Columns([], [], []) if r == 0 else Columns([r], [r], [r])
            got = c.allreduce_columns(mine)
            P = c.size
            if P == 1:
                return r, tuple(got), ([], [], [], None)
            xor = 0
            for q in range(1, P):
                xor ^= q
            return r, tuple(got), ([P * (P - 1) // 2], [P - 1], [xor], None)

        self._each(body)

    def test_exscan_columns_as_mpi_exscan(self) -> None:
        """``MPI_Exscan``: None on rank 0; rank 1 gets rank 0's payload as it is, even shorter lists (no padding)."""

        def body(c: Comm) -> tuple[int, Any, Any]:
            r = c.rank
            mine = Columns([r + 1] * (r + 1), [10 * r] * (r + 1), [1 << r])
            got = c.exscan_columns(mine)
            if got is None or r == 0:
                return r, got, None
            sums = [sum(q + 1 for q in range(r) if q >= k) for k in range(r)]
            maxima = [max(10 * q for q in range(r) if q >= k) for k in range(r)]
            xor = 0
            for q in range(r):
                xor ^= 1 << q
            return r, (list(got.sums), list(got.maxima), list(got.xors)), (sums, maxima, [xor])

        self._each(body)

    def test_sendrecv(self) -> None:
        """Each rank sends to the rank ``k`` above (cyclically) and receives from ``k`` below, for every shift ``k``."""

        def body(c: Comm) -> tuple[int, Any, Any]:
            r, P = c.rank, c.size
            got, want = [], []
            for k in range(P):
                got.append(c.sendrecv(bytes([r, k]) * (r + 1), (r + k) % P, (r - k) % P))
                want.append(bytes([(r - k) % P, k]) * ((r - k) % P + 1))
            return r, got, want

        self._each(body)

    def test_relay_down(self) -> None:
        """Each rank but the last receives what the chain of ranks above it sends; a forwarding rank passes its own on."""

        def body(c: Comm) -> tuple[int, Any, Any]:
            r, P = c.rank, c.size
            send, receive = r > 0, r < P - 1
            forward = send and receive and r % 2 == 1
            got = c.relay_down(bytes([r]), send=send, receive=receive, forward=forward)
            if not receive:
                return r, got, None
            want, q = b"", r + 1
            while True:
                want += bytes([q])
                if not (q < P - 1 and q % 2 == 1):  # q does not forward
                    break
                q += 1
            return r, got, want

        self._each(body)

    def test_dup_separates_and_frees(self) -> None:
        def body(c: Comm) -> tuple[int, Any, Any]:
            d = c.dup()
            a = d.allgather(c.rank)
            b = c.allgather(-c.rank)
            d.free()
            return c.rank, (d.size, d.rank, a, b), (c.size, c.rank, list(range(c.size)), [-q for q in range(c.size)])

        self._each(body)

    def test_neutral_none_is_below_every_maximum(self) -> None:
        self._each(lambda c: (c.rank, NONE < -(2**200), True))


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return bool(a == b)
