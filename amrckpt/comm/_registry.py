"""Which communicator a call is on: ``comm=`` arguments made :class:`~amrckpt.comm.Comm`, and what is kept on each.

:func:`as_comm` and :func:`require_comm` turn a ``comm=`` argument into a
communicator (refusing ``comm=None`` inside an MPI job); :func:`mpi_of`
finds the MPI communicator under amrckpt.testing's wrappers.  Each
communicator carries its own count of amrckpt's calls (the sequence number
of :class:`~amrckpt.comm.Call`) and, once a meeting timed out, why it cannot
agree any more: as MPI attributes (``MPI_Comm_set_attr``), on the thread
group, or in a weak dictionary, never by a reusable id.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

from .. import errors
from ._base import Comm, SerialComm
from ._launch import launched_task
from ._mpi import MPIComm, is_mpi4py_comm
from ._thread import ThreadComm

__all__ = ["as_comm", "mpi_of", "require_comm"]


def as_comm(comm: Any = None) -> Comm:
    """Return a :class:`~amrckpt.comm.Comm` for ``comm`` (no check of the MPI job: see :func:`require_comm`).

    Parameters
    ----------
    comm : None, mpi4py.MPI.Comm or Comm
        ``None`` for a serial run (no MPI needed), an mpi4py
        intracommunicator, or an object implementing :class:`~amrckpt.comm.Comm`.

    Returns
    -------
    Comm
        Not collective.

    Raises
    ------
    ScdaArgumentError
        If ``comm`` is none of the above.
    """
    if comm is None:
        return SerialComm()
    if isinstance(comm, (SerialComm, MPIComm, ThreadComm)):
        return comm
    if is_mpi4py_comm(comm):
        return MPIComm(comm)
    if isinstance(comm, Comm):
        return comm
    raise errors.ScdaArgumentError(f"comm must be None, an mpi4py communicator or an amrckpt Comm, not {type(comm).__name__}")


def require_comm(comm: Any, op: str) -> Comm:
    """Return :func:`as_comm` of ``comm``, refusing ``comm=None`` inside an MPI job of several processes. Not collective.

    Serial use without MPI is unchanged: ``None`` is the serial
    communicator unless mpi4py has initialised MPI and ``MPI.COMM_WORLD``
    has more than one rank, or, mpi4py not imported, a launcher started
    this process as one of several tasks
    (:func:`~amrckpt.comm._launch.launched_task`).  Every rank decides
    alone, from the same facts, so every rank raises.

    Raises
    ------
    CommRequiredError
        For ``comm=None`` inside an MPI job of several processes.
    """
    if comm is None:
        MPI = sys.modules.get("mpi4py.MPI")
        where = ""
        if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
            n = MPI.COMM_WORLD.Get_size()
            where = f"in an MPI job of {n} processes" if n > 1 else ""
        elif MPI is None:
            found = launched_task()  # mpi4py not imported: the launcher's environment tells (PMI, Open MPI, Slurm)
            if found is not None:
                n = found[1]
                where = f"in a process that a launcher started as one of {n} ({found[0]}={n}; mpi4py is not imported)"
        if where:
            raise errors.CommRequiredError(
                f"{op}: comm=None {where}: each process would act alone, on the same files "
                "(a save would write its own part of the state as if it were the whole, a manager would commit it). "
                "Pass comm=MPI.COMM_WORLD (from mpi4py import MPI; or the communicator of the ranks that take part); "
                "pass comm=MPI.COMM_SELF, explicitly, for files of one process each. Nothing was read or written."
            )
    return as_comm(comm)


_counts: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()
_counts_lock = threading.Lock()
_keyval: list[Any] = []


def _inner(comm: Comm) -> Comm:
    """Return the communicator under wrappers (amrckpt.testing's fault and counting wrappers set ``wrapped``)."""
    while True:
        w = getattr(comm, "wrapped", None)
        if w is None:
            return comm
        comm = w


def mpi_of(comm: Any) -> MPIComm | None:
    """Return the :class:`~amrckpt.comm.MPIComm` under ``comm`` (through amrckpt.testing's wrappers), or None. Not collective.

    The one way to ask whether a communicator is MPI's and what its MPI
    library and job are (:meth:`MPIComm.library_version`,
    :meth:`MPIComm.thread_multiple`, :meth:`MPIComm.ranks_on_node`): code
    outside the communicator layer never imports mpi4py.
    """
    c = _inner(comm)
    return c if isinstance(c, MPIComm) else None


def _key(comm: Comm) -> Any:
    """Identify the communicator ``comm`` wraps: the MPI handle, the thread group, or the object."""
    c = _inner(comm)
    if isinstance(c, MPIComm):
        return ("mpi", c.mpi_comm.py2f())
    if isinstance(c, ThreadComm):
        return ("threads", id(c._group))
    if isinstance(c, SerialComm):
        return ("serial",)
    return ("object", id(c))


def _next_seq(comm: Comm) -> int:
    """Count a call on ``comm`` and return its number (1, 2, ...): cached on the communicator itself.

    MPI: an attribute of the communicator (``MPI_Comm_set_attr``), dropped
    when it is freed and not copied by ``MPI_Comm_dup``; threads: the group.
    """
    c = _inner(comm)
    if isinstance(c, ThreadComm):
        calls = c._group.calls
        calls[c.rank] += 1
        return int(calls[c.rank])
    if isinstance(c, MPIComm):
        MPI = c._MPI
        if not _keyval:
            _keyval.append(MPI.Comm.Create_keyval())
        got = c.mpi_comm.Get_attr(_keyval[0])
        n = (got or 0) + 1
        c.mpi_comm.Set_attr(_keyval[0], n)
        return int(n)
    with _counts_lock:
        box = _counts.setdefault(c, [0])
        box[0] += 1
        return box[0]


_broken_keyval: list[Any] = []
_broken_objects: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _broken(comm: Comm) -> str | None:
    """Why ``comm`` cannot agree any more (a meeting timed out), kept on the communicator itself (never a reused id)."""
    c = _inner(comm)
    if isinstance(c, ThreadComm):
        return getattr(c._group, "broken", None)
    if isinstance(c, MPIComm):
        if not _broken_keyval:
            return None
        got = c.mpi_comm.Get_attr(_broken_keyval[0])
        return None if got is None else str(got)
    return _broken_objects.get(c)


def _mark_broken(comm: Comm, why: str) -> None:
    c = _inner(comm)
    if isinstance(c, ThreadComm):
        c._group.broken = why  # type: ignore[attr-defined]
    elif isinstance(c, MPIComm):
        if not _broken_keyval:
            _broken_keyval.append(c._MPI.Comm.Create_keyval())
        c.mpi_comm.Set_attr(_broken_keyval[0], why)
    else:
        _broken_objects[c] = why
