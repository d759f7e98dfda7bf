"""A :class:`~amrckpt.comm.Comm` over an mpi4py communicator.

This is the only module of the communicator layer that imports mpi4py, and it
does so when an :class:`MPIComm` is built, never at ``import amrckpt``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .. import _faults
from ..errors import CommError

__all__ = ["MPIComm", "is_mpi4py_comm"]

T = TypeVar("T")


def is_mpi4py_comm(obj: object) -> bool:
    """Whether ``obj`` is an mpi4py communicator, without importing mpi4py."""
    return any(c.__module__.startswith("mpi4py") and c.__name__ == "Comm" for c in type(obj).__mro__)


class MPIComm:
    """Wraps an ``mpi4py.MPI.Comm`` (intracommunicator) as a :class:`~amrckpt.comm.Comm`.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; it is used as is (not duplicated), so amrckpt's
        collective calls interleave with the caller's in program order.

    Attributes
    ----------
    mpi_comm : mpi4py.MPI.Comm
        The wrapped communicator, for the MPI-IO backend.
    """

    __slots__ = ("_MPI", "__weakref__", "_rank", "_size", "mpi_comm")

    def __init__(self, comm: Any) -> None:
        from mpi4py import MPI

        from ._launch import check_mpi_world

        check_mpi_world(MPI)  # a launch that did not form one MPI world is refused before anything is written
        self._MPI = MPI
        self.mpi_comm = comm
        self._rank: int = comm.Get_rank()
        self._size: int = comm.Get_size()

    @property
    def rank(self) -> int:
        """Return this process's rank in ``mpi_comm``."""
        return self._rank

    @property
    def size(self) -> int:
        """The size of ``mpi_comm``."""
        return self._size

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one MPI collective; an ``MPI.Exception`` becomes CommError (on this rank: MPI does not agree on it)."""
        try:
            result = fn(*args, **kwargs)
        except self._MPI.Exception as exc:
            raise CommError(f"{what} failed on rank {self._rank}: {exc.Get_error_string()}") from exc
        if _faults.ACTIVE is not None and what != "MPI_Comm_dup":
            _faults.collective(self, what)
        return result

    def barrier(self) -> None:
        """``MPI_Barrier``. Collective."""
        self._call("MPI_Barrier", self.mpi_comm.Barrier)

    def bcast(self, obj: T, root: int = 0) -> T:
        """Pickle-based ``MPI_Bcast``. Collective."""
        result: T = self._call("MPI_Bcast", self.mpi_comm.bcast, obj, root=root)
        return result

    def allgather(self, obj: T) -> list[T]:
        """Pickle-based ``MPI_Allgather``. Collective."""
        result: list[T] = self._call("MPI_Allgather", self.mpi_comm.allgather, obj)
        return result

    def allreduce_max(self, values: Sequence[int]) -> list[int]:
        """``MPI_Allreduce(MPI_MAX)`` of an int64 vector. Collective."""
        buf = np.array(values, dtype=np.int64)
        self._call("MPI_Allreduce", self.mpi_comm.Allreduce, self._MPI.IN_PLACE, buf, op=self._MPI.MAX)
        return [int(v) for v in buf]

    def allreduce_sum(self, value: int) -> int:
        """Exact sum of Python ints (int64 buffers when they cannot overflow). Collective."""
        v = int(value)
        if -(2**62) // self._size < v < 2**62 // self._size:
            flag = np.array([v, 0], dtype=np.int64)
        else:
            flag = np.array([0, 1], dtype=np.int64)
        self._call("MPI_Allreduce", self.mpi_comm.Allreduce, self._MPI.IN_PLACE, flag, op=self._MPI.SUM)
        if flag[1] == 0:
            return int(flag[0])
        return int(self._call("MPI_Allreduce", self.mpi_comm.allreduce, v, op=self._MPI.SUM))

    def allreduce_xor(self, values: Sequence[int]) -> list[int]:
        """``MPI_Allreduce(MPI_BXOR)`` of a uint32 vector. Collective."""
        buf = np.array(values, dtype=np.uint32)
        self._call("MPI_Allreduce", self.mpi_comm.Allreduce, self._MPI.IN_PLACE, buf, op=self._MPI.BXOR)
        return [int(v) for v in buf]

    def dup(self) -> MPIComm:
        """``MPI_Comm_dup``: the same ranks, separate messages (free it with :meth:`free`). Collective."""
        new = self._call("MPI_Comm_dup", self.mpi_comm.Dup)
        if _faults.ACTIVE is not None:
            try:
                _faults.collective(self, "MPI_Comm_dup")
            except CommError:  # raised on every rank: free the new communicator together
                new.Free()
                raise
        return MPIComm(new)

    def free(self) -> None:
        """``MPI_Comm_free`` of a communicator made by :meth:`dup`. Collective."""
        self.mpi_comm.Free()

    def exscan_sum(self, value: int) -> int:
        """Exact exclusive prefix sum of Python ints (pickle-based). Collective."""
        r = self._call("MPI_Exscan", self.mpi_comm.exscan, int(value), op=self._MPI.SUM)
        return 0 if r is None else int(r)

    def exscan_sum_max(self, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
        """Exclusive prefix sums and maxima of Python ints: one pickle-based ``MPI_Exscan`` (rank 0: zeros, -1s). Collective."""
        from ._base import sum_max_columns

        obj = ([int(v) for v in sums], [int(v) for v in maxima])
        r = self._call("MPI_Exscan", self.mpi_comm.exscan, obj, op=_user_op(self._MPI, sum_max_columns))
        if r is None:
            return [0] * len(sums), [-1] * len(maxima)
        return list(r[0]), list(r[1])

    def allreduce_max_obj(self, values: Sequence[int]) -> list[int]:
        """Element-wise maximum of lists of Python ints (any lengths): one pickle-based ``MPI_Allreduce``. Collective."""
        res = self._call("MPI_Allreduce", self.mpi_comm.allreduce, [int(v) for v in values], op=_user_op(self._MPI, _max2))
        return [int(v) for v in res]

    def allgather_int(self, value: int) -> np.ndarray:
        """``MPI_Allgather`` of one int64 per rank: a (P,) int64 array. Collective."""
        out = np.empty(self._size, dtype=np.int64)
        self._call("MPI_Allgather", self.mpi_comm.Allgather, np.array([value], dtype=np.int64), out)
        return out

    def allreduce_sum_max(self, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
        """Element-wise sums and maxima of Python ints over ranks: one pickle-based ``MPI_Allreduce``. Collective."""
        from ._base import sum_max_columns

        obj = ([int(v) for v in sums], [int(v) for v in maxima])
        r = self._call("MPI_Allreduce", self.mpi_comm.allreduce, obj, op=_user_op(self._MPI, sum_max_columns))
        return list(r[0]), list(r[1])

    def allreduce_max_array(self, values: np.ndarray) -> np.ndarray:
        """``MPI_Allreduce(MPI_MAX)`` of an int64 array, returned as a new int64 array. Collective."""
        buf = np.array(values, dtype=np.int64)
        self._call("MPI_Allreduce", self.mpi_comm.Allreduce, self._MPI.IN_PLACE, buf, op=self._MPI.MAX)
        return buf

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Pass byte strings from each rank to the rank below it; point-to-point, called by every rank.

        Every rank calls it (the fault-injection hook counts it as a
        collective), but only neighbours exchange messages: rank r receives
        one message from rank r + 1 if ``receive`` (rank r + 1 must
        ``send``), and sends one to rank r - 1 if ``send``: ``data``, or with
        ``forward`` ``data`` followed by what it received (after receiving
        it).  None stands for a failed rank and is passed on as None.  A
        chain of forwarding ranks costs one message latency per rank.
        Uses tag 0x5CDA of the wrapped communicator.

        Returns
        -------
        bytes or None
            What this rank received (None if ``receive`` is False or the
            sender passed None).
        """

        def run() -> bytes | None:
            comm, got, req = self.mpi_comm, None, None
            if send and not forward:
                req = comm.isend(data, dest=self._rank - 1, tag=_RELAY_TAG)
            if receive:
                got = comm.recv(source=self._rank + 1, tag=_RELAY_TAG)
            if send and forward:
                msg = None if data is None or got is None else bytes(data) + got
                req = comm.isend(msg, dest=self._rank - 1, tag=_RELAY_TAG)
            if req is not None:
                req.wait()
            return got

        if (send and self._rank == 0) or (receive and self._rank == self._size - 1) or (forward and not (send and receive)):
            raise AssertionError(f"relay_down on rank {self._rank}: send={send} receive={receive} forward={forward}")
        result: bytes | None = self._call("MPI_Isend/MPI_Recv", run)
        return result

    def __repr__(self) -> str:
        return f"MPIComm(rank={self._rank}, size={self._size})"


def _max2(a: list[int], b: list[int]) -> list[int]:
    from ._base import max_columns

    return max_columns([a, b])


_RELAY_TAG = 0x5CDA
"""The tag of :meth:`MPIComm.relay_down`'s messages."""

_OPS: dict[Any, Any] = {}


def _user_op(MPI: Any, fn: Callable[[Any, Any], Any]) -> Any:
    """Return (once) a commutative ``MPI.Op`` of ``fn`` for mpi4py's pickle-based reductions."""
    op = _OPS.get(fn)
    if op is None:
        op = _OPS[fn] = MPI.Op.Create(lambda a, b, dt=None: fn(a, b), commute=True)
    return op
