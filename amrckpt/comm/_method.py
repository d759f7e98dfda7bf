"""What is built on a collective call: methods run as one call, and a manager's watch over its communicator.

:func:`collective_method` runs a method as one :class:`~amrckpt.comm.collective`
call; :func:`watch` and :func:`unwatch` bound a manager's meetings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from .. import errors
from . import _watchdog
from ._base import Comm
from ._call import Call, collective
from ._mpi import MPIComm
from ._registry import _inner, _key

__all__ = ["collective_method", "unwatch", "watch"]

T = TypeVar("T")
_S = TypeVar("_S")
_P = ParamSpec("_P")


def collective_method(op: str) -> Callable[[Callable[Concatenate[_S, _P], T]], Callable[Concatenate[_S, _P], T]]:
    """Run a method of an object with a ``comm`` attribute as one collective call named ``op`` (:class:`~amrckpt.comm.collective`).

    For the objects whose every method is collective (an open file): each
    method is a call of its own, or joins the call open on the same
    communicator (a load that reads through the object); inside it,
    :func:`~amrckpt.comm.current_call` gives the call.
    """

    def wrap(fn: Callable[Concatenate[_S, _P], T]) -> Callable[Concatenate[_S, _P], T]:
        def method(obj: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> T:
            with collective(obj.comm, op):  # type: ignore[attr-defined]
                return fn(obj, *args, **kwargs)

        functools.update_wrapper(method, fn)
        return method

    return wrap


# -- a manager's watch over its communicator ------------------------------------------------------------------


def watch(call: Call, timeout: float | None = None) -> None:
    """Watch ``call``'s communicator for a manager: its meeting timeout, and exit notices under MPI. Collective.

    ``timeout`` (seconds; None: ``AMRCKPT_COLLECTIVE_TIMEOUT`` or the
    default) bounds every meeting on the communicator while it is watched.
    Under MPI with several ranks, a duplicate of the communicator carries
    exit notices: a process that ends while it is watched tells the others
    (``atexit``), so that a rank waiting for it fails at once.  Watches
    nest (one per open manager); :func:`unwatch` ends one.

    Raises
    ------
    ScdaArgumentError
        If ``timeout`` is not a positive number.
    """
    if timeout is not None and not timeout > 0:
        raise call.agreed(errors.ScdaArgumentError(f"collective_timeout={timeout!r}: give a positive number of seconds"))
    key = _key(call.comm)
    inner = _inner(call.comm)
    _watchdog.watch(key, inner.mpi_comm if isinstance(inner, MPIComm) and inner.size > 1 else None)
    if timeout is not None:
        _watchdog.set_timeout(key, timeout)


def unwatch(comm: Comm) -> None:
    """End one :func:`watch` of ``comm`` (the last one drops its timeout and exit notices). Not collective."""
    _watchdog.unwatch(_key(comm))
