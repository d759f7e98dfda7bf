"""Fault injection for tests: a seeded fraction of I/O and MPI calls fails (libsc's ``fuzzy_everyn``).

libsc's ``sc_scda`` takes ``fuzzy_everyn`` and ``fuzzy_seed`` at
``sc_scda_fopen_*`` and makes each possible error origin return a random
error with probability ``1 / fuzzy_everyn``.  This module does the same for
amrckpt, one level lower: at the calls that really fail in production.

Where faults are injected (``kinds``)
-------------------------------------
``"open"``, ``"write"``, ``"read"``, ``"size"``, ``"sync"``, ``"close"``
    The calls of a byte backend wrapped in :class:`amrckpt.testing.FaultyBackend`
    (selected by ``backend=FaultyBackend``): opening the file, its writes and
    reads (``pwritev``/``MPI_File_write_all``..., ``preadv``/``MPI_File_read_all``...),
    ``fstat``/``MPI_File_get_size``, ``fsync``/``MPI_File_sync`` and closing.
``"rename"``, ``"fsync"``
    The file operations of a checkpoint directory, through
    :class:`amrckpt.testing.FaultyFileSystem` (``rename``, ``link`` and
    ``unlink``; ``fsync`` of the directory); its record writes and reads
    count as ``"write"``, ``"sync"`` and ``"read"``.
``"mpi"``
    The collectives of a communicator wrapped in :class:`amrckpt.testing.FaultyComm`
    (barrier, bcast, allgather, allreduce, exscan, dup).

The failure model
-----------------
An I/O fault is local to the rank it hits, as a real one is: a read or a
write fails *instead of* doing its work, still joining the collective MPI-IO
calls with nothing to move, and raises the
:class:`~amrckpt.errors.ScdaIOError` of an errno such as ``ENOSPC``;
opening, ``sync`` and closing take part in the call, then report the error
on that rank, as an MPI call that returns an error code does (the manager's
``rename`` raises an ``OSError`` instead of renaming).  It is then up to amrckpt's agreement
(:func:`amrckpt.comm.agree`) to turn that one rank's error into the same
exception on every rank.  This is what the fault tests check.

An MPI fault is different.  A real MPI error in a collective on one rank
cannot be agreed on without another collective on the same, possibly broken,
communicator (MPI itself offers no agreement; ULFM's ``MPIX_Comm_agree``
does), so amrckpt does not try.  An injected MPI fault therefore models a
failure that MPI reports on every rank of the call: the collective is
performed, and then every rank raises :class:`~amrckpt.errors.CommError`,
naming the failing rank(s) in ``rank_errors``.  No message is needed for this
agreement: which ranks fail at the k-th collective of a communicator is a
function of the seed, of k and of the ranks, which every rank knows.

Determinism
-----------
Whether a call fails is a hash of ``(seed, channel, world rank, k)``, where
k counts the rank's I/O calls (for I/O faults) or its collective calls over
the same group of ranks (for MPI faults; every rank of the group makes the
same calls in the same order, so all draw the same k).  The same seed on the same program gives
the same faults, whatever the timing.  Each rank counts from the moment it
enters :func:`inject_faults` (an MPI process is one rank; with
:func:`~amrckpt.comm.run_threads`, each thread is), so every rank must enter
and leave the block at the same point of its sequence of collective calls.  ``seed``, ``every_n``, ``ranks``,
``kinds`` and ``limit`` must be the same on every rank (as libsc requires of
``fuzzy_everyn`` and ``fuzzy_seed``).

Cost when off
-------------
None: the faults come only from the wrappers of :mod:`amrckpt.testing` that a
test selects (:class:`FaultyBackend`, :class:`FaultyFileSystem`,
:class:`FaultyComm`); the package below imports nothing of this module.

Usage
-----
In a test, on every rank::

    with inject_faults(every_n=20, seed=7, ranks=[1], kinds={"write", "mpi"}) as plan:
        ac.save(state, path, comm=FaultyComm(comm), access=ac.FileAccess(backend=FaultyBackend))
    plan.injected  # the faults injected on this process

For a whole process (a job under ``mpiexec``), the environment variable
``AMRCKPT_FAULTS="every_n=20,seed=7,ranks=1:3,kinds=write:mpi,limit=1"`` does
the same from ``import amrckpt.testing`` on, for the calls of the wrappers.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..comm import mpi_of, thread_rank
from ..errors import CommError

__all__ = ["ACTIVE", "KINDS", "Fault", "FaultPlan", "FaultSpec", "home_rank", "inject_faults", "io_error_at"]

KINDS = frozenset({"open", "write", "read", "size", "sync", "close", "rename", "fsync", "mpi"})
"""Every kind of call that can be made to fail."""

_ERRNOS: dict[str, tuple[int, ...]] = {
    "open": (errno_mod.EACCES, errno_mod.EMFILE, errno_mod.EIO),
    "write": (errno_mod.ENOSPC, errno_mod.EIO, errno_mod.EDQUOT),
    "read": (errno_mod.EIO,),
    "size": (errno_mod.EIO,),
    "sync": (errno_mod.EIO, errno_mod.ENOSPC),
    "close": (errno_mod.EIO, errno_mod.ENOSPC),
    "rename": (errno_mod.EIO, errno_mod.EACCES),
    "fsync": (errno_mod.EIO,),
}
"""The errors each kind of call fails with (drawn from the seed)."""

_CHANNEL_IO, _CHANNEL_MPI = 1, 2
_MASK = (1 << 64) - 1

ACTIVE: dict[int, FaultPlan] | None = None
"""The plans being injected, by the rank that entered them (-1: the whole process), or None.

Reading this is the hooks' only cost when no faults are injected.
"""
_ANY = -1
_registry_lock = threading.Lock()


def _mix(x: int) -> int:
    """SplitMix64 finaliser: a well-spread 64-bit hash of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """What to inject (the same on every rank).

    Attributes
    ----------
    every_n : int
        On average one call in ``every_n`` fails (libsc ``fuzzy_everyn``); 1: every call.
    seed : int
        Seeds the draws (libsc ``fuzzy_seed``).
    ranks : frozenset of int or None
        World ranks (MPI.COMM_WORLD, or thread ranks of
        :func:`~amrckpt.comm.run_threads`) on which calls fail; None: all.
    kinds : frozenset of str
        Which calls fail (a subset of :data:`KINDS`).
    limit : int or None
        At most this many I/O faults per rank, and MPI faults per group of
        ranks; None: no limit.
    errno : int or None
        Fail I/O calls with this errno (e.g. ``errno.ENOSPC`` for a full
        disk); None: drawn from the kind's usual errors.
    """

    every_n: int
    seed: int = 0
    ranks: frozenset[int] | None = None
    kinds: frozenset[str] = KINDS
    limit: int | None = None
    errno: int | None = None

    def __post_init__(self) -> None:
        if self.every_n < 1:
            raise ValueError(f"every_n must be >= 1, not {self.every_n}")
        unknown = set(self.kinds) - KINDS
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; choose from {sorted(KINDS)}")

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """Read ``"every_n=20,seed=7,ranks=1:3,kinds=write:mpi,limit=1,errno=ENOSPC"`` (``AMRCKPT_FAULTS``).

        Raises
        ------
        ValueError
            On this rank, for a key other than every_n, seed, ranks, kinds, limit and errno, or a value that is not a
            number or an errno name.
        """
        kw: dict[str, Any] = {}
        for item in filter(None, (t.strip() for t in text.replace(";", ",").split(","))):
            key, _, value = item.partition("=")
            key = key.strip()
            if key in ("every_n", "seed", "limit"):
                kw[key] = int(value)
            elif key == "ranks":
                kw[key] = frozenset(int(r) for r in value.split(":") if r)
            elif key == "kinds":
                kw[key] = frozenset(k for k in value.split(":") if k)
            elif key == "errno":
                kw[key] = int(value) if value.isdigit() else getattr(errno_mod, value)
            else:
                raise ValueError(f"AMRCKPT_FAULTS: unknown key {key!r} in {text!r}")
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault (as recorded in :attr:`FaultPlan.injected`)."""

    kind: str
    rank: int
    call: int
    what: str
    errno: int = 0


@dataclass
class FaultPlan:
    """The state of an injection: counters, and the faults injected so far on this process."""

    spec: FaultSpec
    injected: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _io_calls: dict[int, int] = field(default_factory=dict, repr=False)
    _io_faults: dict[int, int] = field(default_factory=dict, repr=False)
    _comm_calls: dict[tuple[tuple[int, ...], int], list[int]] = field(default_factory=dict, repr=False)
    """(world ranks of the group, this rank): [collective calls, faults] -- one count per group of ranks and rank."""

    def _draw(self, channel: int, rank: int, k: int) -> int:
        """Return a 64-bit hash of (seed, channel, rank, k); the call fails if it is 0 modulo every_n."""
        return _mix(_mix(_mix(_mix(self.spec.seed & _MASK) ^ channel) ^ (rank & _MASK)) ^ k)

    def _selected(self, rank: int) -> bool:
        return self.spec.ranks is None or rank in self.spec.ranks

    # -- I/O ----------------------------------------------------------------

    def io(self, kind: str, rank: int, what: str) -> int:
        """Count an I/O call of ``kind`` on world rank ``rank``; return the errno to fail it with, or 0."""
        if kind not in self.spec.kinds or not self._selected(rank):
            return 0
        with self._lock:
            k = self._io_calls.get(rank, 0)
            self._io_calls[rank] = k + 1
            h = self._draw(_CHANNEL_IO, rank, k)
            if h % self.spec.every_n:
                return 0
            if self.spec.limit is not None and self._io_faults.get(rank, 0) >= self.spec.limit:
                return 0
            self._io_faults[rank] = self._io_faults.get(rank, 0) + 1
            choices = _ERRNOS[kind]
            code = self.spec.errno or choices[(h >> 32) % len(choices)]
            self.injected.append(Fault(kind, rank, k, what, code))
        return code

    # -- collectives ----------------------------------------------------------

    def collective(self, comm: Any, world: tuple[int, ...], what: str) -> None:
        """Count a collective call of ``comm`` (after it was performed); raise CommError on every rank if it fails."""
        if "mpi" not in self.spec.kinds:
            return
        with self._lock:
            st = self._comm_calls.setdefault((world, world[comm.rank]), [0, 0])
            k = st[0]
            st[0] = k + 1
            if self.spec.limit is not None and st[1] >= self.spec.limit:
                return
            n = self.spec.every_n
            failing = [r for r, w in enumerate(world) if self._selected(w) and self._draw(_CHANNEL_MPI, w, k) % n == 0]
            if not failing:
                return
            st[1] += 1
            if comm.rank in failing:
                self.injected.append(Fault("mpi", world[comm.rank], k, what))
        note = f"MPI_ERR_OTHER (injected fault, seed {self.spec.seed}, call {k})"
        words = {r: f"CommError: {what} failed on rank {r}: {note}" for r in failing}
        first = failing[0]
        message = words[first].removeprefix("CommError: ")
        if len(failing) > 1:
            others = failing[1:]
            which = f"rank {others[0]}" if len(others) == 1 else "ranks " + ", ".join(map(str, others))
            message += f" ({which} failed as well; rank_errors has every rank's error)"
        exc = CommError(message)
        exc.rank_errors = words
        raise exc


def home_rank() -> int:
    """Return the world rank of this thread: a thread rank of run_threads, else the MPI world rank (if MPI is running), else 0."""
    r = thread_rank()
    if r is not None:
        return int(r)
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        return int(MPI.COMM_WORLD.Get_rank())
    return 0


_mpi_world_ranks: weakref.WeakKeyDictionary[Any, tuple[int, ...]] = weakref.WeakKeyDictionary()


def _world_ranks(comm: Any) -> tuple[int, ...]:
    """Return the world rank of each rank of ``comm`` (MPI: translated once per MPIComm)."""
    m = mpi_of(comm)
    if m is not None:
        got = _mpi_world_ranks.get(comm)
        if got is None:
            got = _mpi_world_ranks[comm] = m.world_ranks()
        return got
    if comm.size > 1:  # thread ranks: the group is the world
        return tuple(range(comm.size))
    return (home_rank(),)


@contextlib.contextmanager
def inject_faults(
    every_n: int,
    *,
    seed: int = 0,
    ranks: Iterable[int] | None = None,
    kinds: Iterable[str] | None = None,
    limit: int | None = None,
    errno: int | None = None,
) -> Iterator[FaultPlan]:
    """Make about one in ``every_n`` I/O and MPI calls fail while the block runs; call on every rank.

    Parameters
    ----------
    every_n : int
        Mean number of calls per fault (libsc ``fuzzy_everyn``); 1 fails every call.
    seed : int, optional
        The draws' seed (libsc ``fuzzy_seed``); the same on every rank.
    ranks : iterable of int, optional
        World ranks to inject on (default: all).
    kinds : iterable of str, optional
        A subset of :data:`KINDS` (default: all).
    limit : int, optional
        At most this many faults per rank (I/O) and per group of ranks (MPI).
    errno : int, optional
        The errno of every I/O fault (e.g. ``errno.ENOSPC``).

    Yields
    ------
    FaultPlan
        Its :attr:`~FaultPlan.injected` lists the faults injected on this process.
    """
    global ACTIVE
    spec = FaultSpec(
        every_n,
        seed,
        None if ranks is None else frozenset(int(r) for r in ranks),
        KINDS if kinds is None else frozenset(kinds),
        limit,
        errno,
    )
    plan = FaultPlan(spec)
    key = thread_rank()
    key = _ANY if key is None else int(key)
    with _registry_lock:
        plans = dict(ACTIVE or {})
        previous = plans.get(key)
        plans[key] = plan
        ACTIVE = plans  # replaced, never changed in place: a hook reads it once
    try:
        yield plan
    finally:
        with _registry_lock:
            plans = dict(ACTIVE or {})
            if previous is None:
                plans.pop(key, None)
            else:
                plans[key] = previous
            ACTIVE = plans or None


def _plan_of(plans: dict[int, FaultPlan], rank: int) -> FaultPlan | None:
    return plans.get(rank) or plans.get(_ANY)


def io_error(kind: str, comm: Any, what: str) -> OSError | None:
    """Return the OSError that the I/O call ``kind`` on ``what`` of ``comm``'s rank fails with, or None.

    The hook of the file backends, called only when :data:`ACTIVE` is set.
    """
    if ACTIVE is None:
        return None
    return io_error_at(kind, _world_ranks(comm)[comm.rank], what)


def io_error_at(kind: str, rank: int, what: str) -> OSError | None:
    """Return the OSError that the I/O call ``kind`` on ``what`` of world rank ``rank`` fails with, or None.

    What the fault wrappers of :mod:`amrckpt.testing` call (a file system
    knows its rank, not a communicator).
    """
    plans = ACTIVE
    if plans is None:
        return None
    plan = _plan_of(plans, rank)
    if plan is None:
        return None
    code = plan.io(kind, rank, what)
    if not code:
        return None
    return OSError(code, f"{os.strerror(code)} (injected {kind} fault, seed {plan.spec.seed})")


def collective(comm: Any, what: str) -> None:
    """Count a collective call that ``comm`` just performed; raise CommError on every rank if it is to fail.

    The hook of the communicators, called only when :data:`ACTIVE` is set.
    Every rank of ``comm`` must be inside an :func:`inject_faults` block
    entered at the same point of the program (as for any collective).
    """
    plans = ACTIVE
    if plans is None:
        return
    world = _world_ranks(comm)
    plan = _plan_of(plans, world[comm.rank])
    if plan is not None:
        plan.collective(comm, world, what)


_env = os.environ.get("AMRCKPT_FAULTS")
if _env:
    ACTIVE = {_ANY: FaultPlan(FaultSpec.parse(_env))}
