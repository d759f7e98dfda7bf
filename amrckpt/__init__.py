"""amrckpt: checkpoint/restart for adaptive-mesh simulations in one scda file.

Layers (each imports only the ones below it): :mod:`amrckpt.errors`;
:mod:`amrckpt.comm` and :mod:`amrckpt.scda`; :mod:`amrckpt.partition` and
:mod:`amrckpt.sfc`; :mod:`amrckpt.container` (the on-disk convention);
:mod:`amrckpt.schema`; :mod:`amrckpt.restart`; :mod:`amrckpt.manager`.
``import amrckpt`` works without any MPI library; mpi4py is imported only
when an MPI communicator is used.  Messages go to the logger ``amrckpt``
(a ``NullHandler``: configure logging to see them), on rank 0 where every
rank would say the same thing.  :mod:`amrckpt.export` (ParaView, pyvista
and yt) is imported on first use of ``amrckpt.export`` or ``amrckpt.to_yt``,
and imports h5py or yt only when it writes or loads.
"""

from __future__ import annotations

import logging
from typing import Any

from . import comm, container, errors, manager, partition, restart, scda, schema, sfc
from ._logging import get_logger
from ._version import __version__
from .container import Geometry, GeometrySpec, Problem, RunRecord
from .errors import (
    AmrckptError,
    CheckpointError,
    CheckpointSkippedWarning,
    ChecksumError,
    CollectiveError,
    CommError,
    IncompleteCheckpointError,
    ManagerError,
    PartitionError,
    ScdaArgumentError,
    ScdaCountError,
    ScdaDecodeError,
    ScdaError,
    ScdaFormatError,
    ScdaIOError,
    ScdaUsageError,
    SchemaError,
    StepAlreadyExistsError,
    StepNotFoundError,
)
from .manager import (
    AnyOf,
    BeforeWallTime,
    CheckpointManager,
    CheckpointRecord,
    EveryNSeconds,
    EveryNSteps,
    KeepAll,
    KeepAny,
    KeepBest,
    KeepEvery,
    KeepEveryNSeconds,
    KeepLast,
    Never,
    NodeCache,
    OnFileTrigger,
    OnSignal,
    Restored,
    SaveHandle,
    Skipped,
    StepMetadata,
    checkpointable,
)
from .partition import Partition
from .restart import CheckpointInfo, Loaded, VerifyReport, load, read_info, verify
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
    SaveResult,
    save,
)

get_logger(__name__).addHandler(logging.NullHandler())  # a library does not print: the application configures logging


def __getattr__(name: str) -> Any:
    """Import :mod:`amrckpt.export` on first use (``amrckpt.export``, ``amrckpt.to_yt``)."""
    if name in ("export", "to_yt"):
        import importlib

        module = importlib.import_module(".export", __name__)
        return module if name == "export" else module.to_yt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AmrckptError",
    "AnyOf",
    "BeforeWallTime",
    "CheckpointManager",
    "CheckpointRecord",
    "CheckpointSkippedWarning",
    "EveryNSeconds",
    "EveryNSteps",
    "KeepAll",
    "KeepAny",
    "KeepBest",
    "KeepEvery",
    "KeepEveryNSeconds",
    "KeepLast",
    "ManagerError",
    "Never",
    "NodeCache",
    "OnFileTrigger",
    "OnSignal",
    "Restored",
    "SaveHandle",
    "Skipped",
    "StepAlreadyExistsError",
    "StepMetadata",
    "StepNotFoundError",
    "checkpointable",
    "Array",
    "Block",
    "CellData",
    "Cells",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointSchema",
    "ChecksumError",
    "CollectiveError",
    "CommError",
    "Forest",
    "Geometry",
    "GeometrySpec",
    "HpCells",
    "HpData",
    "IncompleteCheckpointError",
    "Inline",
    "Loaded",
    "Mesh",
    "NDArray",
    "Partition",
    "PartitionError",
    "Problem",
    "RunRecord",
    "SaveResult",
    "SchemaError",
    "ScdaArgumentError",
    "ScdaCountError",
    "ScdaDecodeError",
    "ScdaError",
    "ScdaFormatError",
    "ScdaIOError",
    "ScdaUsageError",
    "VerifyReport",
    "__version__",
    "comm",
    "container",
    "errors",
    "export",
    "load",
    "manager",
    "partition",
    "read_info",
    "restart",
    "save",
    "scda",
    "schema",
    "sfc",
    "to_yt",
    "verify",
]
