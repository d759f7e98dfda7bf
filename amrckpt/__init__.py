"""amrckpt: checkpoint/restart for adaptive-mesh simulations in one scda file.

Layers (each imports only the ones below it): :mod:`amrckpt.errors`,
:mod:`amrckpt.comm` and :mod:`amrckpt.scda`.  ``import amrckpt`` works without
any MPI library; mpi4py is imported only when an MPI communicator is used.
"""

from __future__ import annotations

from . import comm, errors, scda
from ._version import __version__
from .errors import (
    AmrckptError,
    CollectiveError,
    PartitionError,
    ScdaArgumentError,
    ScdaCountError,
    ScdaDecodeError,
    ScdaError,
    ScdaFormatError,
    ScdaIOError,
    ScdaUsageError,
    SchemaError,
)

__all__ = [
    "AmrckptError",
    "CollectiveError",
    "PartitionError",
    "SchemaError",
    "ScdaArgumentError",
    "ScdaCountError",
    "ScdaDecodeError",
    "ScdaError",
    "ScdaFormatError",
    "ScdaIOError",
    "ScdaUsageError",
    "__version__",
    "comm",
    "errors",
    "scda",
]
