"""The communicator protocol, the serial communicator, and error agreement.

Nothing here imports mpi4py: serial checkpoints work on machines without MPI.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from .. import _faults, errors

__all__ = [
    "Comm",
    "SerialComm",
    "agree",
    "agree_gather",
    "agree_gather_int",
    "agree_max",
    "agree_sum_max",
    "allgather_int",
    "allreduce_max_array",
    "digest_of",
    "exscan_sum_max",
    "relay_down",
    "run_on_root",
]

T = TypeVar("T")

_I64_MIN = -(2**63)


@runtime_checkable
class Comm(Protocol):
    """What amrckpt needs of a communicator.

    Every method except :attr:`rank` and :attr:`size` is collective: all
    ranks call it, in the same order.  Implementations: :class:`SerialComm`
    (no MPI), :class:`~amrckpt.comm.MPIComm` (mpi4py), and
    :class:`~amrckpt.comm.ThreadComm` (threads of one process, for tests).
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
        """Wait until every rank has called it. Collective."""
        ...

    def bcast(self, obj: T, root: int = 0) -> T:
        """Return ``obj`` of rank ``root`` on every rank (pickled). Collective."""
        ...

    def allgather(self, obj: T) -> list[T]:
        """Return the list of every rank's ``obj``, by rank (pickled). Collective."""
        ...

    def allreduce_max(self, values: Sequence[int]) -> list[int]:
        """Element-wise maximum over ranks of int64 ``values``. Collective."""
        ...

    def allreduce_sum(self, value: int) -> int:
        """Exact sum over ranks of Python ints (any size). Collective."""
        ...

    def allreduce_xor(self, values: Sequence[int]) -> list[int]:
        """Element-wise bitwise XOR over ranks of uint32 ``values`` (combined CRCs). Collective."""
        ...

    def exscan_sum(self, value: int) -> int:
        """Exact sum of ``value`` over the ranks below this one (0 on rank 0). Collective."""
        ...

    def dup(self) -> Comm:
        """Return a new communicator of the same ranks whose collectives never mix with this one's. Collective."""
        ...


class SerialComm:
    """The communicator of a single process; every collective is trivial.

    This is what ``comm=None`` means everywhere in amrckpt.
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

    # Each collective ends with the fault-injection hook (amrckpt._faults): a no-op unless a test injects faults.

    def barrier(self) -> None:
        """Return at once."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "barrier")

    def bcast(self, obj: T, root: int = 0) -> T:
        """Return ``obj``."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "bcast")
        return obj

    def allgather(self, obj: T) -> list[T]:
        """Return ``[obj]``."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allgather")
        return [obj]

    def allreduce_max(self, values: Sequence[int]) -> list[int]:
        """Return ``values`` as a list."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allreduce")
        return [int(v) for v in values]

    def allreduce_sum(self, value: int) -> int:
        """Return ``value``."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allreduce")
        return int(value)

    def allreduce_xor(self, values: Sequence[int]) -> list[int]:
        """Return ``values`` as a list."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allreduce")
        return [int(v) for v in values]

    def exscan_sum(self, value: int) -> int:
        """Return 0."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "exscan")
        return 0

    def exscan_sum_max(self, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
        """Return zeros and -1s (nothing below rank 0)."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "exscan")
        return [0] * len(sums), [-1] * len(maxima)

    def allreduce_max_obj(self, values: Sequence[int]) -> list[int]:
        """Return ``values`` as a list."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allreduce")
        return [int(v) for v in values]

    def allgather_int(self, value: int) -> np.ndarray:
        """Return ``[value]`` as an int64 array."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allgather")
        return np.array([value], dtype=np.int64)

    def allreduce_sum_max(self, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
        """Return ``sums`` and ``maxima`` as lists."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allreduce")
        return [int(v) for v in sums], [int(v) for v in maxima]

    def allreduce_max_array(self, values: np.ndarray) -> np.ndarray:
        """Return a copy of ``values`` as int64."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "allreduce")
        return np.array(values, dtype=np.int64)

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Return None (there is no rank above or below rank 0)."""
        if send or receive:
            raise AssertionError("relay_down: a single rank has no neighbour to send to or receive from")
        if _faults.ACTIVE is not None:
            _faults.collective(self, "relay")
        return None

    def dup(self) -> SerialComm:
        """Return a new serial communicator."""
        if _faults.ACTIVE is not None:
            _faults.collective(self, "dup")
        return SerialComm()

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


def agree(
    comm: Comm,
    error: BaseException | None,
    *,
    digest: int = 0,
    root: int | None = None,
    root_values: Sequence[int] = (),
    nvalues: int = 0,
    values: Sequence[int] = (),
    what: str = "",
) -> list[int]:
    """Make all ranks agree on success or failure of a step; one allreduce.

    Collective.  If any rank passes an ``error``, every rank raises: an error
    of amrckpt's tree is re-raised as the same class on every rank (with
    :attr:`~amrckpt.errors.AmrckptError.rank_errors` filled in and, on the
    failing ranks, the original chained as ``__cause__``); any other
    exception becomes :class:`~amrckpt.errors.CollectiveError`.  If the
    ``digest`` of the collective arguments differs between ranks, every rank
    raises :class:`~amrckpt.errors.ScdaArgumentError`.

    Parameters
    ----------
    comm : Comm
        The communicator.
    error : BaseException or None
        This rank's failure, or None.
    digest : int, optional
        A digest (:func:`digest_of`) of this call's collective arguments,
        ``0 <= digest < 2**62``.
    root : int, optional
        The rank whose ``root_values`` are returned to all ranks.
    root_values : sequence of int, optional
        On ``root``: ``nvalues`` integers in ``[0, 2**62)`` to broadcast
        with the agreement, e.g. a block size known only on the root.
    nvalues : int, optional
        The number of root values (collective).
    values : sequence of int, optional
        Integers in ``[-2**62, 2**62)`` of every rank (the same number on
        every rank) whose maxima over ranks are returned after the root's
        values, in the same allreduce.
    what : str, optional
        Names the call in error messages.

    Returns
    -------
    list of int
        ``root``'s ``root_values`` (empty when ``nvalues == 0``), then the
        element-wise maxima of ``values``.

    Raises
    ------
    AmrckptError
        On every rank, if any rank passed an error or the digests differ.
    """
    vals = [1 if error is not None else 0, digest, -digest]
    if nvalues:
        if comm.rank == root and error is None:
            if len(root_values) != nvalues:
                raise AssertionError("root_values must have nvalues entries")
            vals.extend(int(v) for v in root_values)
        else:
            vals.extend([_I64_MIN + 1] * nvalues)
    vals.extend(int(v) for v in values)
    res = comm.allreduce_max(vals)
    if res[0]:
        _raise_agreed(comm, error)
    if res[1] != -res[2]:
        raise errors.ScdaArgumentError(
            f"{what or 'a collective call'}: collective arguments differ between ranks "
            "(every rank must pass the same user string, counts and sizes)"
        )
    return [int(v) for v in res[3:]]


def agree_gather(comm: Comm, error: BaseException | None, value: T) -> list[T]:
    """Allgather ``value`` and agree on errors in the same collective call.

    Collective.  Like :func:`agree`, but also returns every rank's
    ``value`` (an O(1)-sized object: a count, a sum).

    Raises
    ------
    AmrckptError
        On every rank, if any rank passed an error.
    """
    gathered = comm.allgather((_describe(error), value))
    descs = [g[0] for g in gathered]
    if any(d is not None for d in descs):
        _raise_from(comm, error, descs)
    return [g[1] for g in gathered]


_PAD = -(2**256)
"""What a shorter list of values is padded with in a maximum (ranks that disagree on the schema)."""


def max_columns(lists: Sequence[Sequence[int]]) -> list[int]:
    """Element-wise maximum of lists of Python ints of any lengths (shorter lists padded with a very negative number)."""
    return [max(col) for col in itertools.zip_longest(*lists, fillvalue=_PAD)]


def sum_max_columns(a: tuple[Sequence[int], Sequence[int]], b: tuple[Sequence[int], Sequence[int]]) -> tuple[list[int], list[int]]:
    """Combine two ``(sums, maxima)`` pairs: element-wise sums and maxima (lists of any lengths)."""
    sums = [x + y for x, y in itertools.zip_longest(a[0], b[0], fillvalue=0)]
    return sums, [max(x, y) for x, y in itertools.zip_longest(a[1], b[1], fillvalue=-1)]


def exscan_sum_max(comm: Comm, sums: Sequence[int], maxima: Sequence[int]) -> tuple[list[int], list[int]]:
    """Exclusive prefix sums of ``sums`` and prefix maxima of ``maxima`` over the ranks below this one, in one collective.

    Collective.  ``sums`` and ``maxima`` are Python ints of any size
    (``maxima`` at least -1); rank 0 gets zeros and -1s.  Uses the
    communicator's ``exscan_sum_max`` (one ``MPI_Exscan`` of O(1) numbers per
    rank, O(log P) steps) if it has one, else one allgather.

    Returns
    -------
    sums : list of int
        ``sum(sums of rank q for q < rank)``, element-wise.
    maxima : list of int
        ``max(maxima of rank q for q < rank)``, element-wise (-1 on rank 0).
    """
    fn = getattr(comm, "exscan_sum_max", None)
    if fn is not None:
        out: tuple[list[int], list[int]] = fn(sums, maxima)
        return out
    g = comm.allgather((list(sums), list(maxima)))[: comm.rank]
    acc: tuple[list[int], list[int]] = ([0] * len(sums), [-1] * len(maxima))
    for x in g:
        acc = sum_max_columns(acc, x)
    return acc


def agree_max(comm: Comm, error: BaseException | None, values: Sequence[int]) -> list[int]:
    """Agree on errors and return the element-wise maxima of ``values`` over ranks, in one collective.

    Collective.  Like :func:`agree` (every rank raises the agreed error if
    any rank passes one), but ``values`` are Python ints of any size, and
    ranks may pass lists of different lengths (shorter ones are padded with
    a very negative number): a rank that failed early, or that saves another
    schema, cannot make the others wait or misread.  Uses the communicator's
    ``allreduce_max_obj`` if it has one, else one allgather.

    Returns
    -------
    list of int
        The maxima, as long as the longest list.

    Raises
    ------
    AmrckptError
        On every rank, if any rank passed an error.
    """
    vals = [1 if error is not None else 0, *(int(v) for v in values)]
    fn = getattr(comm, "allreduce_max_obj", None)
    res: list[int] = fn(vals) if fn is not None else max_columns(comm.allgather(vals))
    if res[0] > 0:
        _raise_agreed(comm, error)
    return res[1:]


def agree_sum_max(
    comm: Comm, error: BaseException | None, sums: Sequence[int], maxima: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Agree on errors and return the sums and the maxima over ranks of Python ints, in one collective.

    Collective: one allreduce of O(len(sums) + len(maxima)) numbers (the
    communicator's ``allreduce_sum_max``: for MPI one pickle-based
    ``MPI_Allreduce`` with a user operation; else one allgather).  Every
    rank must pass as many ``sums`` and ``maxima`` (a rank that failed may
    pass zeros).  Like :func:`agree`, an error on any rank is raised on
    every rank (and only then, one more allgather collects the errors'
    descriptions).

    Parameters
    ----------
    comm : Comm
    error : BaseException or None
        This rank's failure, or None.
    sums : sequence of int
        Summed over ranks, element-wise (exact, any size).
    maxima : sequence of int
        Maximized over ranks, element-wise (any size, at least -1).

    Returns
    -------
    sums : list of int
    maxima : list of int

    Raises
    ------
    AmrckptError
        On every rank, if any rank passed an error.
    """
    mx = [1 if error is not None else 0, *(int(v) for v in maxima)]
    fn = getattr(comm, "allreduce_sum_max", None)
    if fn is not None:
        s, m = fn([int(v) for v in sums], mx)
    else:
        acc: tuple[list[int], list[int]] = ([0] * len(sums), [-1] * len(mx))
        for x in comm.allgather(([int(v) for v in sums], mx)):
            acc = sum_max_columns(acc, x)
        s, m = acc
    if m[0] > 0:
        _raise_agreed(comm, error)
    return [int(v) for v in s], [int(v) for v in m[1:]]


def allreduce_max_array(comm: Comm, values: np.ndarray) -> np.ndarray:
    """Element-wise maximum over ranks of an int64 array, as an int64 array (one ``MPI_Allreduce``, no Python list). Collective."""
    fn = getattr(comm, "allreduce_max_array", None)
    if fn is not None:
        out: np.ndarray = fn(np.ascontiguousarray(values, dtype=np.int64))
        return out
    return np.array(comm.allreduce_max([int(v) for v in values]), dtype=np.int64)


def agree_gather_int(comm: Comm, error: BaseException | None, value: int) -> np.ndarray:
    """Gather every rank's non-negative int64 ``value`` and agree on errors, in one ``MPI_Allgather`` of 8 bytes per rank.

    Collective.  A failed rank sends -1: then every rank raises the agreed
    error as :func:`agree` does (one more allgather collects the errors'
    descriptions).  A value that does not fit int64 is sent as -2; then
    one more (pickled) allgather collects every rank's exact value, and
    the result is a numpy object array of Python ints.

    Returns
    -------
    numpy.ndarray
        (P,) int64 (object dtype if a value does not fit int64), by rank.

    Raises
    ------
    AmrckptError
        On every rank, if any rank passed an error.
    """
    v = int(value) if error is None else 0
    big = not 0 <= v < 2**63
    arr = allgather_int(comm, -1 if error is not None else -2 if big else v)
    if (arr == -1).any():
        _raise_agreed(comm, error)
    if (arr == -2).any():
        return np.array(comm.allgather(v), dtype=object)
    return arr


def relay_down(comm: Comm, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
    """Pass byte strings to the rank below: the communicator's ``relay_down`` (point-to-point under MPI), else one allgather.

    Collective (every rank calls it).  See :meth:`amrckpt.comm.MPIComm.relay_down`:
    rank r receives from rank r + 1 if ``receive``; sends to rank r - 1 if
    ``send``, ``data`` or (``forward``) ``data`` then what it received.

    Returns
    -------
    bytes or None
        What this rank received (None if not ``receive`` or a sender passed None).
    """
    fn = getattr(comm, "relay_down", None)
    if fn is not None:
        got: bytes | None = fn(data, send=send, receive=receive, forward=forward)
        return got
    posted = comm.allgather((None if data is None else bytes(data), send, receive, forward))
    return relayed(posted, comm.rank) if receive else None


def relayed(posted: Sequence[tuple[bytes | None, bool, bool, bool]], rank: int) -> bytes | None:
    """Return what ``rank`` receives in a relay, given every rank's ``(data, send, receive, forward)`` (for emulations)."""
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


def allgather_int(comm: Comm, value: int) -> np.ndarray:
    """Return every rank's int64 ``value``, by rank: a (P,) int64 array (``MPI_Allgather`` of 8 bytes per rank). Collective."""
    fn = getattr(comm, "allgather_int", None)
    if fn is not None:
        out: np.ndarray = fn(value)
        return out
    return np.array(comm.allgather(int(value)), dtype=np.int64)


def run_on_root(comm: Comm, fn: Callable[[], T], root: int = 0) -> T:
    """Run ``fn()`` on ``root`` only; return its result on every rank.

    Collective (one broadcast).  If ``fn`` raises, every rank raises the
    agreed error (as :func:`agree` describes).
    """
    result: Any = None
    error: BaseException | None = None
    if comm.rank == root:
        try:
            result = (None, fn())
        except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
            error = exc
            result = (_describe(exc), None)
    desc, value = comm.bcast(result, root=root)
    if desc is not None:
        descs: list[Any] = [None] * comm.size
        descs[root] = desc
        _raise_from(comm, error, descs)
    return value  # type: ignore[no-any-return]


def _describe(error: BaseException | None) -> tuple[str | None, str, str, int | None] | None:
    """(class name if ours, "Class: message", message, errno) of an error, for gathering."""
    if error is None:
        return None
    ours = isinstance(error, errors.AmrckptError)
    code = error.errno if isinstance(error, OSError) else None
    message = error.strerror if isinstance(error, OSError) and error.strerror and code is not None else str(error)
    return (type(error).__name__ if ours else None, f"{type(error).__name__}: {error}", message, code)


def _raise_agreed(comm: Comm, error: BaseException | None) -> None:
    """Gather every rank's error description and raise the agreed exception."""
    _raise_from(comm, error, comm.allgather(_describe(error)))


def _tree_class(name: str) -> type[errors.AmrckptError]:
    """Return the class of amrckpt's error tree named ``name`` (CollectiveError if none)."""
    todo: list[type[errors.AmrckptError]] = [errors.AmrckptError]
    while todo:
        cls = todo.pop()
        if cls.__name__ == name:
            return cls
        todo.extend(cls.__subclasses__())
    return errors.CollectiveError


def _raise_from(comm: Comm, error: BaseException | None, descs: list[Any]) -> None:
    """Raise the agreed exception, given every rank's description (or None)."""
    failed = {r: d for r, d in enumerate(descs) if d is not None}
    first = min(failed)
    cls_name, _, message, code = failed[first]
    if comm.size == 1 and cls_name is not None and error is not None:
        if not error.rank_errors:  # type: ignore[attr-defined]
            error.rank_errors = {0: failed[0][1]}  # type: ignore[attr-defined]
        raise error
    cls = _tree_class(cls_name) if cls_name is not None else errors.CollectiveError
    if cls_name is None:
        message = f"rank {first} failed: {failed[first][1]}"
    elif comm.size > 1:
        message = f"{message} [rank {first}]"
    others = sorted(set(failed) - {first})
    if others:
        message += f" (ranks {', '.join(map(str, others))} failed as well; see rank_errors)"
    exc = cls(code, message) if code is not None and issubclass(cls, OSError) else cls(message)  # errno kept (ENOSPC...)
    exc.rank_errors = {r: d[1] for r, d in failed.items()}
    if error is not None:
        raise exc from error
    raise exc
