"""Declarative checkpoint schemas (layer 4): a simulation's state as pydantic fields, mapped onto scda sections.

See :class:`CheckpointSchema` for declaring a schema, :func:`save` for writing
one, and :mod:`amrckpt.restart` for reading it back on any number of ranks.
The on-disk convention is the container's (:mod:`amrckpt.container`,
``docs/checkpoints.md``); its JSON Schemas are in ``schemas/``.
"""

from __future__ import annotations

from ._base import CheckpointSchema, Migration
from ._declare import Array, Block, Cells, HpCells, Inline, Mesh, NDArray
from ._json import adapter as field_adapter
from ._kinds import (
    KINDS,
    ArrayKind,
    BlockKind,
    CellData,
    CellsKind,
    FieldKind,
    Forest,
    HpCellsKind,
    HpData,
    InlineKind,
    MeshKind,
    NDArrayKind,
    Prepared,
)
from ._save import SaveResult, check_local, save

__all__ = [
    "KINDS",
    "Array",
    "ArrayKind",
    "Block",
    "BlockKind",
    "CellData",
    "Cells",
    "CellsKind",
    "CheckpointSchema",
    "FieldKind",
    "Forest",
    "HpCells",
    "HpCellsKind",
    "HpData",
    "Inline",
    "InlineKind",
    "Mesh",
    "MeshKind",
    "Migration",
    "NDArray",
    "NDArrayKind",
    "Prepared",
    "SaveResult",
    "check_local",
    "field_adapter",
    "save",
]
