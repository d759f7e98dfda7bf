"""Declarative checkpoint schemas (layer 4): a simulation's state as pydantic fields, mapped onto scda sections.

See :class:`CheckpointSchema` for declaring a schema, :func:`save` for writing
one, and :mod:`amrckpt.restart` for reading it back on any number of ranks.
The on-disk convention is described in the user guide (``docs/checkpoints.md``,
"Checkpoint files"); its JSON Schemas are in ``schemas/``.
"""

from __future__ import annotations

from ._base import CheckpointSchema, Migration
from ._kinds import (
    Block,
    BlockKind,
    CellData,
    Cells,
    CellsKind,
    FieldKind,
    Forest,
    HpCells,
    HpCellsKind,
    HpData,
    Inline,
    InlineKind,
    Mesh,
    MeshKind,
    mesh_record_dtype,
)
from ._manifest import FieldSpec, Index, IndexEntry, Manifest, MeshSpec, Provenance, json_schemas, write_json_schemas
from ._save import SaveResult, check_local, save

__all__ = [
    "Block",
    "BlockKind",
    "CellData",
    "Cells",
    "CellsKind",
    "CheckpointSchema",
    "FieldKind",
    "FieldSpec",
    "Forest",
    "HpCells",
    "HpCellsKind",
    "HpData",
    "Index",
    "IndexEntry",
    "Inline",
    "InlineKind",
    "Manifest",
    "Mesh",
    "MeshKind",
    "MeshSpec",
    "Migration",
    "Provenance",
    "SaveResult",
    "check_local",
    "json_schemas",
    "mesh_record_dtype",
    "save",
    "write_json_schemas",
]
