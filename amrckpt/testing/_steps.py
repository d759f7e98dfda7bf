"""Make a chosen step of every collective call fail on chosen ranks: the agreement test's injector."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ..comm import Call, thread_rank
from ..errors import AmrckptError

__all__ = ["InjectedStepError", "StepFaults", "failing_steps"]

T = TypeVar("T")


class InjectedStepError(AmrckptError):
    """The error :func:`failing_steps` raises in a step (an error of amrckpt's tree, as the library's own are)."""


class StepFaults:
    """What :func:`failing_steps` injected on this process: the ranks (of the call's communicator) whose step failed."""

    def __init__(self, ranks: frozenset[int], at: int) -> None:
        self.ranks = ranks
        self.at = at
        self.failed: set[int] = set()
        self._lock = threading.Lock()
        self._seen: weakref.WeakKeyDictionary[Call, int] = weakref.WeakKeyDictionary()

    def _hit(self, call: Call) -> bool:
        """Count a step that runs on this rank; whether it is the one to fail."""
        rank = call.comm.rank
        if rank not in self.ranks:
            return False
        with self._lock:
            n = self._seen.get(call, 0) + 1
            self._seen[call] = n
            if n == self.at:
                self.failed.add(rank)
                return True
        return False


@contextlib.contextmanager
def failing_steps(ranks: Iterable[int], at: int = 1) -> Iterator[StepFaults]:
    """Make the ``at``-th step (:meth:`amrckpt.comm.Call.run` that runs on that rank) of every call fail on ``ranks``.

    Enter it on every rank (thread ranks of one process share it); the
    step raises :class:`InjectedStepError` instead of running (a step of
    collective calls, ``always=True``, runs and then raises, as an MPI call
    that returns an error has taken part).  What every
    collective entry point must do then is what the agreement test checks:
    every rank raises the same error naming exactly the ranks that failed
    (:attr:`StepFaults.failed`, gathered over the ranks), or every rank
    returns the same result where the entry point reports errors instead
    of raising them (``verify``), and nothing is left half written.

    Parameters
    ----------
    ranks : iterable of int
        The ranks, in the communicator of the call, whose step fails.
    at : int, optional
        Which step of each call (1: the first that runs on the rank).

    Yields
    ------
    StepFaults
        ``failed``: the ranks of this process whose step failed.
    """
    faults = StepFaults(frozenset(int(r) for r in ranks), int(at))
    key = thread_rank()
    with _lock:
        if not _active:
            Call.run = _run  # type: ignore[method-assign]
        _active[key] = faults
    try:
        yield faults
    finally:
        with _lock:
            del _active[key]
            if not _active:
                Call.run = _REAL_RUN  # type: ignore[method-assign]


_REAL_RUN = Call.run
_active: dict[int | None, StepFaults] = {}
"""The injections in force, by the thread rank that entered them (None: the process, an MPI rank)."""
_lock = threading.Lock()


def _run(self: Call, fn: Callable[..., T], *args: Any, on: int | None = None, always: bool = False, **kwargs: Any) -> T | None:
    """:meth:`amrckpt.comm.Call.run`, but the chosen step fails on the chosen ranks."""
    faults = _active.get(thread_rank())
    runs_here = (self.error is None or always) and (on is None or self.comm.rank == on)
    if faults is not None and runs_here and faults._hit(self):
        if always:  # a step of collective calls (MPI-IO): it takes part, then fails, as an MPI call that returns an error
            return _REAL_RUN(self, _after, fn, args, kwargs, self.comm.rank, self.op, on=on, always=always)
        return _REAL_RUN(self, _raise, self.comm.rank, self.op, on=on, always=always)
    return _REAL_RUN(self, fn, *args, on=on, always=always, **kwargs)


def _after(fn: Callable[..., Any], args: Any, kwargs: Any, rank: int, op: str) -> Any:
    fn(*args, **kwargs)
    _raise(rank, op)


def _raise(rank: int, op: str) -> Any:
    raise InjectedStepError(f"injected failure of a step of {op} on rank {rank}")
