"""The communicator protocol and the serial communicator.

Nothing here imports mpi4py: serial checkpoints work on machines without MPI.
The protocol is small on purpose: the collectives that amrckpt needs, each
with MPI's semantics, so that every implementation (serial, threads, MPI)
behaves the same and one conformance suite (:mod:`amrckpt.testing`) checks
them all.  amrckpt's own code does not call these directly: it goes through
:class:`~amrckpt.comm.Call`, which agrees on every rank's errors.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np

__all__ = ["NONE", "Columns", "Comm", "ReduceOp", "Reduced", "SerialComm", "combine_columns", "digest_of", "relayed"]

T = TypeVar("T")

ReduceOp = Literal["sum", "max", "min", "bxor", "bor"]
"""The element-wise reductions of :meth:`Comm.allreduce_array`: ``MPI_SUM``, ``MPI_MAX``, ``MPI_MIN``, ``MPI_BXOR``, ``MPI_BOR``."""

NONE = -(2**255)
"""Stands for "no value" among maxima: below every value a maximum is taken of (what a shorter list is padded with)."""


class Columns(NamedTuple):
    """Python integers of any size combined element-wise over ranks, and one value of one rank.

    The payload of :meth:`Comm.allreduce_columns` and :meth:`Comm.exscan_columns`.
    Lists of different lengths combine as if the shorter ones were padded
    with the neutral element (0 for sums and XORs, :data:`NONE` for maxima),
    so that a rank that failed early can take part with empty lists.

    Attributes
    ----------
    sums : list of int
        Summed, exactly.
    maxima : list of int
        Maximized.
    xors : list of int
        Combined by bitwise XOR (e.g. the terms of combined CRC32s).
    value : object or None
        Given by at most one rank (None elsewhere): that rank's value, on
        every rank (a broadcast riding on the reduction).
    """

    sums: list[int]
    maxima: list[int]
    xors: list[int]
    value: Any = None


def combine_columns(a: Columns, b: Columns) -> Columns:
    """Combine two :class:`Columns` element-wise (commutative and associative: an MPI user operation)."""
    zl = itertools.zip_longest
    return Columns(
        [x + y for x, y in zl(a.sums, b.sums, fillvalue=0)],
        [max(x, y) for x, y in zl(a.maxima, b.maxima, fillvalue=NONE)],
        [x ^ y for x, y in zl(a.xors, b.xors, fillvalue=0)],
        a.value if a.value is not None else b.value,
    )


@runtime_checkable
class Comm(Protocol):
    """What amrckpt needs of a communicator.

    Every method except :attr:`rank` and :attr:`size` is collective: all
    ranks call it, in the same order, as MPI requires of its collectives,
    and each has the semantics of the MPI call it names (in particular
    :meth:`exscan_columns` returns None on rank 0 and, on rank 1, rank 0's
    payload as it is).  Implementations: :class:`SerialComm` (no MPI),
    :class:`~amrckpt.comm.MPIComm` (mpi4py) and
    :class:`~amrckpt.comm.ThreadComm` (threads of one process, for tests);
    :class:`amrckpt.testing.CommTests` checks any other.
    """

    @property
    def rank(self) -> int:
        """Return this process's rank, ``0 <= rank < size``."""
        ...

    @property
    def size(self) -> int:
        """The number of ranks, P."""
        ...

    def barrier(self) -> None:
        """``MPI_Barrier``: wait until every rank has called it. Collective."""
        ...

    def bcast(self, obj: T, root: int = 0) -> T:
        """``MPI_Bcast`` of a pickled object: ``obj`` of rank ``root`` on every rank. Collective."""
        ...

    def allgather(self, obj: T) -> list[T]:
        """``MPI_Allgather`` of pickled objects: every rank's ``obj``, by rank. Collective."""
        ...

    def allgather_array(self, values: np.ndarray) -> np.ndarray:
        """``MPI_Allgather`` of a numeric array of the same shape and dtype on every rank: ``(P, *values.shape)``. Collective."""
        ...

    def allreduce_array(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """``MPI_Allreduce`` of a numeric array of the same shape and dtype on every rank; a new array. Collective."""
        ...

    def allreduce_columns(self, columns: Columns) -> Columns:
        """``MPI_Allreduce`` of :class:`Columns` by :func:`combine_columns` (pickled; lists of any lengths). Collective."""
        ...

    def exscan_columns(self, columns: Columns) -> Columns | None:
        """``MPI_Exscan`` of :class:`Columns` by :func:`combine_columns`: the ranks below this one; None on rank 0. Collective."""
        ...

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Pass byte strings to the rank below (see :meth:`amrckpt.comm.MPIComm.relay_down`). Collective."""
        ...

    def meet(self, values: np.ndarray, timeout: float, poll: Callable[[], None] | None = None) -> np.ndarray | None:
        """``MPI_Iallreduce`` (``MPI_MAX``) of int64 ``values``, waited for at most ``timeout`` seconds. Collective.

        The wait is Python's, against the clock (``MPI_Test`` polled), so
        that a rank whose peers never come is not held inside MPI.
        ``poll`` is called while waiting (it may raise, e.g. on a peer's exit
        notice).  Returns the element-wise maxima, or None if the other ranks
        did not all come in time (the communicator must then not be used for
        collectives again: the reduction is still pending).
        """
        ...

    def sendrecv(self, data: bytes | memoryview | None, dest: int | None, source: int | None) -> bytes | None:
        """``MPI_Sendrecv`` of byte strings: send ``data`` to ``dest``, receive from ``source``; called by every rank.

        Point-to-point: each rank sends to at most one rank and receives from
        at most one (None: not at all; the sends and receives of all ranks
        must pair up).  Returns what was received (None if ``source`` is None).
        """
        ...

    def dup(self) -> Comm:
        """``MPI_Comm_dup``: the same ranks, whose collectives never mix with this one's. Collective."""
        ...

    def free(self) -> None:
        """``MPI_Comm_free`` of a communicator made by :meth:`dup`. Collective."""
        ...


_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "bxor": np.bitwise_xor, "bor": np.bitwise_or}


def reduce_arrays(arrays: Sequence[np.ndarray], op: ReduceOp) -> np.ndarray:
    """Reduce arrays of one shape element-wise by ``op`` into a new array (what ``MPI_Allreduce`` computes)."""
    out: np.ndarray = np.array(arrays[0], copy=True)
    for a in arrays[1:]:
        _REDUCE[op](out, a, out=out)
    return out


class SerialComm:
    """The communicator of a single process; every collective is trivial.

    This is what ``comm=None`` means outside an MPI job.
    """

    __slots__ = ()

    @property
    def rank(self) -> int:
        """Always 0."""
        return 0

    @property
    def size(self) -> int:
        """Always 1."""
        return 1

    def barrier(self) -> None:
        """Return at once."""

    def bcast(self, obj: T, root: int = 0) -> T:
        """Return ``obj``."""
        return obj

    def allgather(self, obj: T) -> list[T]:
        """Return ``[obj]``."""
        return [obj]

    def allgather_array(self, values: np.ndarray) -> np.ndarray:
        """Return a copy of ``values`` with a leading axis of 1."""
        return np.array(values, copy=True)[np.newaxis]

    def allreduce_array(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """Return a copy of ``values``."""
        return np.array(values, copy=True)

    def allreduce_columns(self, columns: Columns) -> Columns:
        """Return ``columns``."""
        return Columns(list(columns.sums), list(columns.maxima), list(columns.xors), columns.value)

    def exscan_columns(self, columns: Columns) -> Columns | None:
        """Return None (nothing below rank 0)."""
        return None

    def meet(self, values: np.ndarray, timeout: float, poll: Callable[[], None] | None = None) -> np.ndarray | None:
        """Return a copy of ``values`` (int64)."""
        return np.array(values, dtype=np.int64, copy=True)

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Return None (there is no rank above or below rank 0)."""  # noqa: DOC501 (a guard against a caller's bug)
        if send or receive:
            raise AssertionError("relay_down: a single rank has no neighbour to send to or receive from")
        return None

    def sendrecv(self, data: bytes | memoryview | None, dest: int | None, source: int | None) -> bytes | None:
        """Return ``data`` (rank 0 sends to itself) or None."""  # noqa: DOC501 (a guard against a caller's bug)
        if (dest is None) != (source is None) or dest not in (None, 0) or source not in (None, 0):
            raise AssertionError(f"sendrecv: a single rank sends only to itself (dest={dest}, source={source})")
        return None if source is None or data is None else bytes(data)

    def dup(self) -> SerialComm:
        """Return a new serial communicator."""
        return SerialComm()

    def free(self) -> None:
        """Nothing to free."""

    def __repr__(self) -> str:
        return "SerialComm()"


def digest_of(*args: Any) -> int:
    """Return a 62-bit digest of collective arguments, to check that all ranks agree.

    Parameters
    ----------
    *args
        Values with a deterministic ``repr`` (ints, bytes, strings, tuples) or
        numpy arrays (hashed by dtype, shape and bytes).

    Returns
    -------
    int
        A non-negative integer below 2**62.  Not collective.
    """
    h = hashlib.blake2b(digest_size=8)
    for a in args:
        if isinstance(a, np.ndarray):
            h.update(repr((a.dtype.str, a.shape)).encode())
            h.update(np.ascontiguousarray(a).view(np.uint8).reshape(-1).data)
        else:
            h.update(repr(a).encode())
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "little") >> 2


def relayed(posted: Sequence[tuple[bytes | None, bool, bool, bool]], rank: int) -> bytes | None:
    """Return what ``rank`` receives in a relay, given every rank's ``(data, send, receive, forward)`` (for emulations).

    Raises
    ------
    RuntimeError
        On this rank, if ``rank`` receives but the rank above it sends nothing (a relay that would hang under MPI).
    """
    q, parts = rank + 1, []
    while True:
        d, s, _, fwd = posted[q]
        if not s:
            raise RuntimeError(f"relay_down: rank {rank} receives but rank {q} sends nothing (it would hang under MPI)")
        if d is None:
            return None
        parts.append(d)
        if not fwd:
            return b"".join(parts)
        q += 1


class Reduced(NamedTuple):
    """What :meth:`Call.allreduce` returns, the same on every rank.

    Attributes
    ----------
    sums, maxima, xors : list of int
        The element-wise sums, maxima and XORs over ranks, as long as this
        rank's lists.
    value : object
        The value the root gave (``root_value``), or None.
    equal : list of bool
        For each of ``equal``: whether every rank passed the same number.
    """

    sums: list[int]
    maxima: list[int]
    xors: list[int]
    value: Any
    equal: list[bool]


def _fit(values: Sequence[int], n: int, pad: int) -> list[int]:
    """``values`` cut or padded to ``n`` entries (what a rank gets back is as long as what it sent)."""
    return [int(v) for v in values[:n]] + [pad] * (n - len(values))
