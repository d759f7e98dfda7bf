"""Communicators that wrap another: one counts its collectives, one injects MPI faults (zarr's ``WrapperStore``).

The library's own communicators carry no test hooks.  A wrapper implements
:class:`~amrckpt.comm.Comm` by calling the wrapped communicator, and sets
``wrapped`` so that :func:`amrckpt.comm.collective` identifies the
communicator underneath (its call count) and the MPI-IO backend finds its
``mpi_comm``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from ..comm import Columns, Comm, ReduceOp, as_comm
from . import _faults

__all__ = ["CountingComm", "FaultyComm", "WrapperComm"]

T = TypeVar("T")

COLLECTIVES = (
    "barrier",
    "bcast",
    "allgather",
    "allgather_array",
    "allreduce_array",
    "allreduce_columns",
    "exscan_columns",
    "relay_down",
    "sendrecv",
    "meet",
    "dup",
    "free",
)
"""The collective methods of :class:`~amrckpt.comm.Comm`."""


class WrapperComm:
    """A :class:`~amrckpt.comm.Comm` that passes every call to ``wrapped``; subclasses hook :meth:`_after`.

    Parameters
    ----------
    wrapped : None, mpi4py.MPI.Comm or Comm
        The communicator to wrap (:func:`amrckpt.comm.as_comm` of it).
    """

    def __init__(self, wrapped: Any) -> None:
        self.wrapped: Comm = as_comm(wrapped)

    @property
    def rank(self) -> int:
        """The wrapped communicator's rank."""
        return self.wrapped.rank

    @property
    def size(self) -> int:
        """The wrapped communicator's size."""
        return self.wrapped.size

    @property
    def mpi_comm(self) -> Any:
        """The mpi4py communicator underneath (AttributeError if none): what the MPI-IO backend opens files on."""
        return getattr(self.wrapped, "mpi_comm")  # noqa: B009 - AttributeError is the answer for non-MPI communicators

    def _after(self, name: str) -> None:
        """Run after every collective of the wrapped communicator (a no-op here)."""

    def barrier(self) -> None:
        """As the wrapped communicator's."""
        self.wrapped.barrier()
        self._after("barrier")

    def bcast(self, obj: T, root: int = 0) -> T:
        """As the wrapped communicator's."""
        out = self.wrapped.bcast(obj, root)
        self._after("bcast")
        return out

    def allgather(self, obj: T) -> list[T]:
        """As the wrapped communicator's."""
        out = self.wrapped.allgather(obj)
        self._after("allgather")
        return out

    def allgather_array(self, values: np.ndarray) -> np.ndarray:
        """As the wrapped communicator's."""
        out = self.wrapped.allgather_array(values)
        self._after("allgather_array")
        return out

    def allreduce_array(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """As the wrapped communicator's."""
        out = self.wrapped.allreduce_array(values, op)
        self._after("allreduce_array")
        return out

    def allreduce_columns(self, columns: Columns) -> Columns:
        """As the wrapped communicator's."""
        out = self.wrapped.allreduce_columns(columns)
        self._after("allreduce_columns")
        return out

    def exscan_columns(self, columns: Columns) -> Columns | None:
        """As the wrapped communicator's."""
        out = self.wrapped.exscan_columns(columns)
        self._after("exscan_columns")
        return out

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """As the wrapped communicator's."""
        out = self.wrapped.relay_down(data, send=send, receive=receive, forward=forward)
        self._after("relay_down")
        return out

    def sendrecv(self, data: bytes | memoryview | None, dest: int | None, source: int | None) -> bytes | None:
        """As the wrapped communicator's."""
        out = self.wrapped.sendrecv(data, dest, source)
        self._after("sendrecv")
        return out

    def meet(self, values: np.ndarray, timeout: float, poll: Callable[[], None] | None = None) -> np.ndarray | None:
        """As the wrapped communicator's."""
        out = self.wrapped.meet(values, timeout, poll)
        self._after("meet")
        return out

    def dup(self) -> Comm:
        """Return a wrapper of the same kind around the wrapped communicator's duplicate."""
        return type(self)(self.wrapped.dup())

    def free(self) -> None:
        """Free the wrapped communicator."""
        self.wrapped.free()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r})"


class CountingComm(WrapperComm):
    """Counts the collective calls made on a communicator, by method name, in :attr:`counts`.

    Parameters
    ----------
    wrapped : None, mpi4py.MPI.Comm or Comm
        The communicator to count.
    counts : collections.Counter, optional
        Where to count (shared with duplicates of this communicator); a new one by default.

    Attributes
    ----------
    counts : collections.Counter of str to int
        Calls per method of :class:`~amrckpt.comm.Comm` on this rank.
    """

    def __init__(self, wrapped: Any, counts: Counter[str] | None = None) -> None:
        super().__init__(wrapped)
        self.counts: Counter[str] = Counter() if counts is None else counts

    @property
    def total(self) -> int:
        """All collective calls counted so far on this rank."""
        return sum(self.counts.values())

    def _after(self, name: str) -> None:
        self.counts[name] += 1

    def dup(self) -> Comm:
        """Return a counting wrapper (sharing :attr:`counts`) around the wrapped communicator's duplicate."""
        self.counts["dup"] += 1
        return CountingComm(self.wrapped.dup(), self.counts)


class FaultyComm(WrapperComm):
    """Makes collectives fail as :func:`amrckpt.testing.inject_faults` draws them (kind ``"mpi"``).

    After the wrapped communicator performed a collective, the active fault
    plan decides whether it failed; if so, every rank raises
    :class:`~amrckpt.errors.CommError` naming the failing ranks (a failure
    that MPI reports on every rank; see :mod:`amrckpt.testing`).  Outside
    an ``inject_faults`` block it changes nothing.
    """

    def _after(self, name: str) -> None:
        if _faults.ACTIVE is not None:
            _faults.collective(self, name)
