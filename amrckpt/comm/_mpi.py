"""A :class:`~amrckpt.comm.Comm` over an mpi4py communicator.

This is the only module of the communicator layer that imports mpi4py, and it
does so when an :class:`MPIComm` is built, never at ``import amrckpt``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..errors import CommError
from ._base import Columns, ReduceOp, combine_columns

__all__ = ["MPIComm", "is_mpi4py_comm", "world_comm"]

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

    __slots__ = ("_MPI", "__weakref__", "_ops", "_rank", "_size", "mpi_comm")

    def __init__(self, comm: Any) -> None:
        from mpi4py import MPI

        from ._launch import check_mpi_world

        check_mpi_world(MPI)  # a launch that did not form one MPI world is refused before anything is written
        self._MPI = MPI
        self.mpi_comm = comm
        self._rank: int = comm.Get_rank()
        self._size: int = comm.Get_size()
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "bxor": MPI.BXOR, "bor": MPI.BOR}

    @property
    def rank(self) -> int:
        """Return this process's rank in ``mpi_comm``."""
        return self._rank

    @property
    def size(self) -> int:
        """The size of ``mpi_comm``."""
        return self._size

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one MPI collective; an ``MPI.Exception`` becomes CommError (on this rank: MPI does not agree on it).

        Raises
        ------
        CommError
            On this rank, if MPI raises an ``MPI.Exception`` (MPI does not agree on it).
        """
        try:
            return fn(*args, **kwargs)
        except self._MPI.Exception as exc:
            raise CommError(f"{what} failed on rank {self._rank}: {exc.Get_error_string()}") from exc

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

    def allgather_array(self, values: np.ndarray) -> np.ndarray:
        """``MPI_Allgather`` of a numeric array: ``(P, *values.shape)``, no pickling. Collective."""
        send = np.ascontiguousarray(values)
        out = np.empty((self._size, *send.shape), dtype=send.dtype)
        self._call("MPI_Allgather", self.mpi_comm.Allgather, send, out)
        return out

    def allreduce_array(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """``MPI_Allreduce`` of a numeric array into a new array, no pickling. Collective."""
        buf = np.array(values, copy=True, order="C")
        self._call("MPI_Allreduce", self.mpi_comm.Allreduce, self._MPI.IN_PLACE, buf, op=self._ops[op])
        return buf

    def allreduce_columns(self, columns: Columns) -> Columns:
        """Pickle-based ``MPI_Allreduce`` of :class:`~amrckpt.comm.Columns` with a user operation. Collective."""
        out: Columns = self._call("MPI_Allreduce", self.mpi_comm.allreduce, columns, op=_columns_op(self._MPI))
        return out

    def exscan_columns(self, columns: Columns) -> Columns | None:
        """Pickle-based ``MPI_Exscan`` of :class:`~amrckpt.comm.Columns` (None on rank 0). Collective."""
        out: Columns | None = self._call("MPI_Exscan", self.mpi_comm.exscan, columns, op=_columns_op(self._MPI))
        return out

    def sendrecv(self, data: bytes | memoryview | None, dest: int | None, source: int | None) -> bytes | None:
        """``MPI_Isend``/``MPI_Recv`` of a length, then of the bytes (no pickling); called by every rank.

        None as ``data`` is sent as a length of -1 and received as None.
        Uses tags 0x5CDB and 0x5CDC of the wrapped communicator.
        """

        def run() -> bytes | None:
            comm, MPI = self.mpi_comm, self._MPI
            view = None if data is None else memoryview(data).cast("B")
            head = np.array([-1 if view is None else view.nbytes], dtype=np.int64)
            reqs = [comm.Isend(head, dest=dest, tag=_SIZE_TAG)] if dest is not None else []
            if view is not None and dest is not None and view.nbytes:
                reqs.append(comm.Isend([view, MPI.BYTE], dest=dest, tag=_DATA_TAG))
            got: bytes | None = None
            if source is not None:
                n = np.empty(1, dtype=np.int64)
                comm.Recv(n, source=source, tag=_SIZE_TAG)
                if n[0] >= 0:
                    buf = bytearray(int(n[0]))
                    if n[0]:
                        comm.Recv([buf, MPI.BYTE], source=source, tag=_DATA_TAG)
                    got = bytes(buf)
            MPI.Request.Waitall(reqs)
            return got

        result: bytes | None = self._call("MPI_Isend/MPI_Recv", run)
        return result

    def meet(self, values: np.ndarray, timeout: float, poll: Callable[[], None] | None = None) -> np.ndarray | None:
        """``MPI_Iallreduce`` (``MPI_MAX``) of int64 ``values``, ``MPI_Test`` polled for at most ``timeout`` s. Collective.

        Spins for the first 10 ms (ranks that meet arrive together), then
        sleeps between tests (1 ms, then 10 ms after a second), calling
        ``poll`` every few milliseconds.  On a timeout the reduction stays
        pending (MPI cannot cancel a collective): its buffers are kept
        alive, and None is returned.
        """
        send = np.array(values, dtype=np.int64, copy=True)
        out = np.empty_like(send)
        req = self._call("MPI_Iallreduce", self.mpi_comm.Iallreduce, send, out, op=self._MPI.MAX)
        t0 = time.monotonic()
        deadline = t0 + timeout
        next_poll = t0
        while not self._call("MPI_Test", req.Test):
            now = time.monotonic()
            if now >= deadline:
                _PENDING.append((req, send, out))
                return None
            if poll is not None and now >= next_poll:
                poll()
                next_poll = now + 0.005
            if now - t0 > 1.0:
                time.sleep(0.01)
            elif now - t0 > 0.01:
                time.sleep(0.001)
            else:
                time.sleep(0)  # a yield: ranks sharing a core with this one (oversubscribed) get to arrive
        return out

    def dup(self) -> MPIComm:
        """``MPI_Comm_dup``: the same ranks, separate messages (free it with :meth:`free`). Collective."""
        return MPIComm(self._call("MPI_Comm_dup", self.mpi_comm.Dup))

    def free(self) -> None:
        """``MPI_Comm_free`` of a communicator made by :meth:`dup`. Collective."""
        self.mpi_comm.Free()

    # -- what the MPI library and job are (so that mpi4py is imported here and in the MPI-IO backend only) ------

    def library_version(self) -> str:
        """Return the first line of ``MPI_Get_library_version`` (e.g. ``"MPICH Version: 4.2.0"``). Not collective."""
        text: str = self._MPI.Get_library_version()
        return text.strip().splitlines()[0] if text.strip() else ""

    def thread_multiple(self) -> bool:
        """Return whether MPI was initialised with ``MPI_THREAD_MULTIPLE`` (``MPI_Query_thread``). Not collective."""
        return bool(self._MPI.Query_thread() >= self._MPI.THREAD_MULTIPLE)

    def ranks_on_node(self) -> int:
        """Return how many ranks of this communicator share this rank's node (``MPI_Comm_split_type`` shared). Collective."""
        node = self._call("MPI_Comm_split_type", self.mpi_comm.Split_type, self._MPI.COMM_TYPE_SHARED)
        try:
            return int(node.Get_size())
        finally:
            node.Free()

    def world_ranks(self) -> tuple[int, ...]:
        """Return the ``MPI_COMM_WORLD`` rank of each rank of this communicator (``MPI_Group_translate_ranks``). Not collective."""
        MPI = self._MPI
        group, world = self.mpi_comm.Get_group(), MPI.COMM_WORLD.Get_group()
        try:
            return tuple(int(r) for r in MPI.Group.Translate_ranks(group, list(range(self._size)), world))
        finally:
            group.Free()
            world.Free()

    def abort(self, code: int = 1) -> None:
        """``MPI_Abort`` of every process of this communicator's job. Not collective; does not return under a working MPI."""
        self.mpi_comm.Abort(code)

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
        """  # noqa: DOC501 (a guard against a caller's bug)

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


_RELAY_TAG = 0x5CDA
"""The tag of :meth:`MPIComm.relay_down`'s messages."""
_SIZE_TAG = 0x5CDB
_DATA_TAG = 0x5CDC
"""The tags of :meth:`MPIComm.sendrecv`'s messages."""

_COLUMNS_OP: list[Any] = []
_PENDING: list[Any] = []
"""Meetings that timed out: their requests and buffers, kept alive while MPI may still write into them."""


def _columns_op(MPI: Any) -> Any:
    """Return (once) the commutative ``MPI.Op`` of :func:`combine_columns` for mpi4py's pickle-based reductions."""
    if not _COLUMNS_OP:
        _COLUMNS_OP.append(MPI.Op.Create(lambda a, b, dt=None: combine_columns(a, b), commute=True))
    return _COLUMNS_OP[0]


def world_comm() -> MPIComm | None:
    """Return ``MPI_COMM_WORLD`` of a job that a launcher started on several processes, else None. Collective (``MPI_Init``).

    mpi4py (and so MPI) is imported only when a launcher's variables
    (``PMI_SIZE``, ``OMPI_COMM_WORLD_SIZE``, ``MPI_LOCALNRANKS``) say that
    there is more than one process: a serial command never starts MPI.
    """
    size = 1
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        with contextlib.suppress(ValueError):
            size = max(size, int(os.environ.get(var, "1")))
    if size <= 1:
        return None
    from mpi4py import MPI

    return MPIComm(MPI.COMM_WORLD) if MPI.COMM_WORLD.Get_size() > 1 else None
