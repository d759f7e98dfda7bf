"""amrckpt: checkpoint/restart for adaptive-mesh simulations in one scda file.

The top level holds what the README and the first pages of the docs use:
the schema (:class:`CheckpointSchema` and its field kinds), :func:`save`,
:func:`load`, :func:`read_info`, :func:`verify`, :class:`Partition`,
:class:`FileAccess` (how they open the file, their ``access=``), the
:class:`CheckpointManager` with the policies of the README, and the
subpackages.  Every other public name lives in its subpackage: every error
in :mod:`amrckpt.errors`, every save and keep policy in
:mod:`amrckpt.manager`, what :func:`load` and :func:`save` return in
:mod:`amrckpt.restart` and :mod:`amrckpt.schema`.

Layers (each imports only the ones below it): :mod:`amrckpt.errors`;
:mod:`amrckpt.comm` and :mod:`amrckpt.scda`; :mod:`amrckpt.partition` and
:mod:`amrckpt.sfc`; :mod:`amrckpt.container` (the on-disk convention);
:mod:`amrckpt.schema`; :mod:`amrckpt.adapt`; :mod:`amrckpt.restart`;
:mod:`amrckpt.manager`.  ``import amrckpt`` works without any MPI library;
mpi4py is imported only when an MPI communicator is used.  Messages go to
the logger ``amrckpt`` (a ``NullHandler``: configure logging to see them),
on rank 0 where every rank would say the same thing.
:mod:`amrckpt.export` (ParaView, pyvista and yt) is imported on first use
of ``amrckpt.export`` or ``amrckpt.to_yt``, and imports h5py or yt only
when it writes or loads.
"""

from logging import NullHandler as _NullHandler
from typing import Any as _Any

from . import adapt, comm, container, errors, manager, partition, restart, scda, schema, sfc
from ._logging import get_logger as _get_logger
from ._version import __version__
from .container import Geometry
from .manager import CheckpointManager, EveryNSteps, OnSignal
from .partition import Partition
from .restart import load, read_info, verify
from .scda import FileAccess
from .schema import (
    Array,
    Block,
    CellData,
    Cells,
    CheckpointSchema,
    Forest,
    HpCells,
    HpData,
    Inline,
    Mesh,
    NDArray,
    save,
)

_get_logger(__name__).addHandler(_NullHandler())  # a library does not print: the application configures logging

_LAZY = ("export", "to_yt")  # amrckpt.export, imported on first use


def __getattr__(name: str) -> _Any:
    """Import :mod:`amrckpt.export` on first use (``amrckpt.export``, ``amrckpt.to_yt``).

    Raises
    ------
    AttributeError
        On this rank, for a name the package does not have (as for any module).
    """
    if name in _LAZY:
        import importlib

        module = importlib.import_module(".export", __name__)
        return module if name == "export" else module.to_yt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """Return the module's names and the lazy ones (``export``, ``to_yt``); the public ones are ``__all__``."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "__version__",
    # declaring a schema (amrckpt.schema)
    "CheckpointSchema",
    "Inline",
    "Block",
    "Mesh",
    "Cells",
    "HpCells",
    "Array",
    "NDArray",
    "Forest",
    "CellData",
    "HpData",
    "Geometry",
    # saving, loading, checking
    "save",
    "load",
    "read_info",
    "verify",
    "Partition",
    "FileAccess",
    # checkpointing a run (amrckpt.manager)
    "CheckpointManager",
    "EveryNSteps",
    "OnSignal",
    # looking at checkpoints (amrckpt.export, imported on first use)
    "to_yt",  # noqa: F822 - imported on first use (__getattr__)
    # subpackages
    "adapt",
    "comm",
    "container",
    "errors",
    "export",  # noqa: F822 - imported on first use (__getattr__)
    "manager",
    "partition",
    "restart",
    "scda",
    "schema",
    "sfc",
]
