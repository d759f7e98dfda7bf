"""Communicators, and the one helper through which every collective call of amrckpt agrees.

Layer 1 of amrckpt.  Every public function of amrckpt takes ``comm=None``
(serial; refused inside an MPI job of several processes), an
``mpi4py.MPI.Comm``, or any object that implements :class:`Comm`.  mpi4py is
imported only when an mpi4py communicator is passed.  Each public collective
entry point opens a :class:`Call` (:func:`collective`) and runs its local
steps and exchanges through it: an error on any rank is raised on every
rank, and ranks that made different calls are told so.
"""

from __future__ import annotations

from ._agreed import agreed_error, describe
from ._base import NONE, Columns, Comm, Reduced, ReduceOp, SerialComm, combine_columns, digest_of
from ._call import Call, collective, current_call
from ._method import collective_method, unwatch, watch
from ._mpi import MPIComm, is_mpi4py_comm, world_comm
from ._reduction import Reduction, Totals
from ._registry import as_comm, mpi_of, require_comm
from ._thread import ThreadComm, run_threads, thread_rank
from ._watchdog import DEFAULT_TIMEOUT, install_excepthook

__all__ = [
    "DEFAULT_TIMEOUT",
    "NONE",
    "Call",
    "Columns",
    "Comm",
    "MPIComm",
    "ReduceOp",
    "Reduced",
    "Reduction",
    "SerialComm",
    "ThreadComm",
    "Totals",
    "agreed_error",
    "as_comm",
    "collective",
    "collective_method",
    "combine_columns",
    "current_call",
    "describe",
    "digest_of",
    "install_excepthook",
    "is_mpi4py_comm",
    "mpi_of",
    "require_comm",
    "run_threads",
    "thread_rank",
    "unwatch",
    "watch",
    "world_comm",
]
