"""Communicators: serial (no MPI), MPI through mpi4py, and threads for tests.

Layer 1 of amrckpt.  Every public function of amrckpt takes ``comm=None``
(serial), an ``mpi4py.MPI.Comm``, or any object that implements
:class:`Comm`; :func:`as_comm` turns each into a :class:`Comm`.  mpi4py is
imported only when an mpi4py communicator is passed.
"""

from __future__ import annotations

from typing import Any

from ..errors import ScdaArgumentError
from ._base import (
    Comm,
    SerialComm,
    agree,
    agree_gather,
    agree_gather_int,
    agree_max,
    agree_sum_max,
    allgather_int,
    allreduce_max_array,
    digest_of,
    exscan_sum_max,
    relay_down,
    run_on_root,
)
from ._mpi import MPIComm, is_mpi4py_comm
from ._thread import ThreadComm, run_threads

__all__ = [
    "Comm",
    "MPIComm",
    "SerialComm",
    "ThreadComm",
    "agree",
    "agree_gather",
    "agree_gather_int",
    "agree_max",
    "agree_sum_max",
    "allgather_int",
    "allreduce_max_array",
    "as_comm",
    "digest_of",
    "exscan_sum_max",
    "relay_down",
    "run_on_root",
    "run_threads",
]


def as_comm(comm: Any = None) -> Comm:
    """Return a :class:`Comm` for ``comm``.

    Parameters
    ----------
    comm : None, mpi4py.MPI.Comm or Comm
        ``None`` for a serial run (no MPI needed), an mpi4py
        intracommunicator, or an object implementing :class:`Comm`.

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
    raise ScdaArgumentError(f"comm must be None, an mpi4py communicator or an amrckpt Comm, not {type(comm).__name__}")
