"""The amrckpt convention on top of scda: manifest, index, footer (format 2; format 1 read).

A checkpoint is a valid scda file whose sections are, in order::

    F  "amrckpt <schema name> v<version>"           file header (vendor "amrckpt")
    B  "amrckpt manifest"     JSON of Manifest       what the file holds
    ...                       one section per field  I, B, A or V (or a compressed pair)
    B  "amrckpt index"        JSON of Index          offset, end, CRC32 of every section above
    I  "amrckpt footer 1"     32 bytes               offset and CRC32 of the index

Every byte is a function of the state alone (format 2): the scda format is
serial-equivalent, the manifest holds nothing about the run, and the index's
offsets and CRC32s follow from the bytes before it.  What depends on the run
(the number of processes, the writing partition, host, MPI library, times)
is in a :class:`RunRecord`, returned by the save and kept by the manager
beside the file (``<checkpoint>.run.json``), never in it.

Format 1 (amrckpt up to 0.x of November 2026) also held a ``B "amrckpt
provenance"`` block and an ``A "amrckpt partition"`` section of P counts
after the fields; readers still read those files (``tests/golden/``).  The
footer is the last 96 bytes: a reader that finds it can jump to the index,
from the index to any field, and tell a complete file from one cut short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from ..errors import CheckpointError, IncompleteCheckpointError
from ..sfc import mesh_record_dtype

__all__ = [
    "FOOTER_NBYTES",
    "FOOTER_USER_STRING",
    "FORMAT_VERSION",
    "INDEX_USER_STRING",
    "MANIFEST_USER_STRING",
    "FieldSpec",
    "GeometrySpec",
    "Index",
    "IndexEntry",
    "Manifest",
    "MeshSpec",
    "Provenance",
    "RunRecord",
    "dtype_from_json",
    "dtype_to_json",
    "footer_bytes",
    "json_schemas",
    "mesh_record_dtype",
    "parse_footer",
    "write_json_schemas",
]

FORMAT_VERSION = 2
"""Version of the amrckpt convention written (format 1 is still read)."""
READ_FORMAT_VERSIONS = (1, 2)
MANIFEST_USER_STRING = b"amrckpt manifest"
PROVENANCE_USER_STRING = b"amrckpt provenance"  # format 1 only
PARTITION_USER_STRING = b"amrckpt partition"  # format 1 only
INDEX_USER_STRING = b"amrckpt index"
FOOTER_USER_STRING = b"amrckpt footer 1"
FOOTER_NBYTES = 96
"""The footer: an inline section, the last 96 bytes of a complete checkpoint."""

FieldKindName = Literal["inline", "block", "mesh", "cells", "hp", "array", "ndarray"]
SECTION_OF_KIND: dict[str, str] = {
    "inline": "I",
    "block": "B",
    "mesh": "A",
    "cells": "A",
    "hp": "V",
    "array": "A",
    "ndarray": "B",
}
"""The scda section type that holds each field kind."""


class _Model(BaseModel):
    # Non-finite floats (a time of inf) are written as Infinity/NaN, as Python's json does.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")


class FieldSpec(_Model):
    """One field of a checkpoint, as the manifest describes it."""

    name: str = Field(description="the field's name, also the user string of its section")
    kind: FieldKindName = Field(description="the field kind (amrckpt.container.handler_for)")
    section: Literal["I", "B", "A", "V"] = Field(description="the scda section type that holds the data")
    dtype: str | list[Any] | None = Field(
        None,
        description="numpy dtype of one value with byte order, as numpy's .npy header describes it "
        "(numpy.lib.format.dtype_to_descr: '<f8', or a list of [name, descr] for records) (cells, hp, array, ndarray)",
    )
    shape: list[int] = Field(
        default_factory=list,
        description="shape of one leaf's value (cells), of one value (hp), of one element (array), of the whole array (ndarray)",
    )
    units: str | None = Field(None, description="physical units")
    description: str | None = None
    compressed: bool = Field(False, description="written by the compression convention of scda (paper section 3)")
    native_byteorder: bool = Field(False, description="the schema left the byte order to the machine; readers convert to theirs")
    mesh: str | None = Field(None, description="the mesh field whose leaves this field's values belong to (cells, hp)")
    count: int | None = Field(None, ge=0, description="global number of elements (array)")
    layout: Literal["counts", "chunks"] | None = Field(
        None,
        description="how the field is laid out, if not as one section of its kind (absent: one section): "
        "'counts' (hp): an A section of the values per leaf (count_dtype), then an A section of all values; "
        "'chunks' (cells, array): a V section of zlib streams, each the byte-shuffled values of `chunk` consecutive leaves",
    )
    count_dtype: Literal["u1", "<u2", "<u4", "<u8"] | None = Field(
        None, description="layout 'counts': the unsigned integer of one leaf's value count, the narrowest for the largest count"
    )
    chunk: int | None = Field(None, ge=1, description="layout 'chunks': leaves (elements) per chunk; the last chunk holds the rest")

    @model_serializer(mode="wrap")
    def _without_default_layout(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The layout attributes are written only where set: a field in one section keeps format 2's first bytes.
        out = handler(self)
        if isinstance(out, dict):
            for k in _LAYOUT_KEYS:
                if out.get(k, 0) is None:
                    del out[k]
        return out


_LAYOUT_KEYS = ("layout", "count_dtype", "chunk")


class GeometrySpec(_Model):
    """Where the trees of a forest are in physical space (p4est keeps its connectivity with the forest).

    Tree ``k`` covers the box ``[tree_lower[k], tree_upper[k])``; a tree's
    integer coordinate ``x`` (units of ``2**-maxlevel``) maps linearly onto
    it.  A brick (p4est_connectivity_new_brick's layout) records its tree
    counts per axis in ``brick``; ``vertices`` and ``tree_to_vertex`` are
    p4est's connectivity arrays when the trees are not axis-aligned boxes
    (then the boxes are their vertices' bounding boxes).
    """

    brick: list[int] | None = Field(None, description="trees per axis of a brick (nx, ny[, nz]); trees in row-major order")
    tree_lower: list[list[float]] = Field(description="lower corner of each tree, (num_trees, dim), in the mesh's length units")
    tree_upper: list[list[float]] = Field(description="upper corner of each tree, (num_trees, dim)")
    units: str | None = Field(None, description="length units of the corners")
    vertices: list[list[float]] | None = Field(default=None, description="p4est connectivity vertices, (num_vertices, 3)")
    tree_to_vertex: list[list[int]] | None = Field(default=None, description="p4est tree_to_vertex, (num_trees, 2**dim)")


class MeshSpec(_Model):
    """One mesh of a checkpoint: a forest of quadtrees or octrees."""

    field: str = Field(description="name of the mesh field")
    dim: Literal[2, 3]
    num_trees: int = Field(ge=1)
    curve: Literal["morton", "hilbert"]
    maxlevel: int = Field(description="p4est's MAXLEVEL: coordinates are in units of 2**-maxlevel of a tree")
    record: list[tuple[str, str]] = Field(description="the packed record of one leaf: (name, numpy dtype)")
    num_leaves: int = Field(0, ge=0, description="global number of leaves of this mesh")
    geometry: GeometrySpec | None = Field(None, description="the trees in physical space (None: unit trees in a row)")


class Manifest(_Model):
    """What a checkpoint holds (the JSON of its ``amrckpt manifest`` block).

    Format 1 had one optional ``mesh`` and a top-level ``num_leaves``; such
    manifests are read into ``meshes`` (:meth:`_from_format_1`).
    """

    format: Literal["amrckpt"] = "amrckpt"
    format_version: int = FORMAT_VERSION
    amrckpt_version: str
    schema_name: str
    schema_version: int = Field(ge=1)
    meshes: list[MeshSpec] = Field(default_factory=list, description="the meshes, in the order of their fields")
    fields: list[FieldSpec]
    values: dict[str, Any] = Field(default_factory=dict, description="the values of the inline fields (step, time, ...)")

    @model_validator(mode="before")
    @classmethod
    def _from_format_1(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("format_version") == 1 and ("mesh" in data or "num_leaves" in data):
            data = dict(data)
            mesh, n = data.pop("mesh", None), data.pop("num_leaves", 0)
            if mesh is not None:
                if not isinstance(mesh, dict) or "meshes" in data:
                    raise ValueError("a format-1 mesh must be an object, without 'meshes'")
                data["meshes"] = [dict(mesh, num_leaves=n)]
        return data

    @property
    def mesh(self) -> MeshSpec | None:
        """The first mesh (the only one of most checkpoints), or None."""
        return self.meshes[0] if self.meshes else None

    @property
    def num_leaves(self) -> int:
        """Global number of leaves of the first mesh (0 without a mesh)."""
        return self.meshes[0].num_leaves if self.meshes else 0

    def mesh_of(self, fs: FieldSpec) -> MeshSpec | None:
        """Return the mesh that field ``fs``'s values belong to (a mesh field: itself; cells/hp: its mesh)."""
        name = fs.name if fs.kind == "mesh" else fs.mesh
        if name is None:
            return self.mesh if fs.kind in ("cells", "hp") else None
        return next((m for m in self.meshes if m.field == name), None)

    def field(self, name: str) -> FieldSpec:
        """Return the spec of field ``name`` (KeyError if absent)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


class Provenance(_Model):
    """Who wrote a format-1 checkpoint (the JSON of its ``amrckpt provenance`` block); format 2 has none."""

    writer_size: int = Field(ge=1, description="number of processes that wrote the file")
    saved_at: str = Field(description="UTC time the save started, ISO 8601 (2026-11-24T09:26:53Z)")
    amrckpt_version: str
    python_version: str
    numpy_version: str
    mpi_library: str | None = Field(None, description="MPI library version string, or None for a serial save")
    hostname: str | None = None
    byteorder: Literal["little", "big"] = Field(description="byte order of the writing machine")


class RunRecord(Provenance):
    """How a checkpoint was written: what depends on the run, kept out of the file (format 2).

    Format 1's provenance, and the writing partition and the save's wall
    time.  Returned by :func:`amrckpt.save` (``SaveResult.run``), written
    beside the file as ``<checkpoint>.run.json`` by the manager (and by
    ``save`` on request); :func:`amrckpt.load` with ``partition="writer"``
    reads the writing partition from it.
    """

    format: Literal["amrckpt run"] = "amrckpt run"
    global_first_quadrant: list[int] | None = Field(
        default=None, description="p4est's global_first_quadrant of the first mesh when written, (writer_size + 1,)"
    )
    save_seconds: float | None = Field(default=None, description="wall-clock seconds of the save")


class IndexEntry(_Model):
    """One section of a checkpoint in its index."""

    name: str = Field(description="the section's user string (a field name, or 'amrckpt ...')")
    role: Literal["file header", "manifest", "field", "provenance", "partition"]
    type: Literal["F", "I", "B", "A", "V"]
    compressed: bool = False
    offset: int = Field(ge=0, description="first byte of the section (of its first raw section if compressed)")
    end: int = Field(ge=0, description="one past its last byte, padding included")
    crc32: int = Field(ge=0, lt=2**32, description="CRC32 (zlib) of bytes [offset, end)")


class Index(_Model):
    """The index of a checkpoint (the JSON of its ``amrckpt index`` block)."""

    format: Literal["amrckpt index"] = "amrckpt index"
    format_version: int = FORMAT_VERSION
    sections: list[IndexEntry]

    def entry(self, name: str) -> IndexEntry:
        """Return the entry of section ``name`` (KeyError if absent)."""
        for e in self.sections:
            if e.name == name:
                return e
        raise KeyError(name)


def dtype_to_json(dt: np.dtype[Any]) -> str | list[Any]:
    """Return the JSON form of a dtype: numpy's ``.npy`` descr (``'<f8'``, or a list for records)."""
    descr = np.lib.format.dtype_to_descr(dt)
    out: str | list[Any] = json.loads(json.dumps(descr))  # tuples become lists
    return out


def dtype_from_json(obj: Any, what: str) -> np.dtype[Any]:
    """Invert :func:`dtype_to_json`; CheckpointError for anything else."""

    def tuples(x: Any) -> Any:
        return [tuple(tuples(i) for i in e) if isinstance(e, list) else e for e in x] if isinstance(x, list) else x

    try:
        dt = np.lib.format.descr_to_dtype(tuples(obj))
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"{what}: {obj!r} is not a numpy dtype") from exc
    if dt.hasobject or dt.itemsize == 0:
        raise CheckpointError(f"{what}: dtype {dt} has no fixed-size binary form")
    return dt


def footer_bytes(index_offset: int, index_crc: int) -> bytes:
    """Return the 32 data bytes of the footer: index offset and CRC32, in hex, ASCII."""
    return (b"%016x %08x" % (index_offset, index_crc)).ljust(31) + b"\n"


def parse_footer(user_string: bytes, data: bytes, what: str) -> tuple[int, int]:
    """Return ``(index_offset, index_crc)`` from a footer section.

    Raises
    ------
    IncompleteCheckpointError
        If the section is not an amrckpt footer.
    """
    if user_string != FOOTER_USER_STRING:
        raise IncompleteCheckpointError(f"{what}: no amrckpt footer at the end of the file (the save did not finish)")
    try:
        off_s, crc_s = data.split()
        return int(off_s, 16), int(crc_s, 16)
    except ValueError as exc:
        raise CheckpointError(f"{what}: malformed footer data {data!r}") from exc


def json_schemas() -> dict[str, dict[str, Any]]:
    """Return the JSON Schemas of the manifest, index, run record and (format 1) provenance, by file name."""
    return {
        "manifest.schema.json": Manifest.model_json_schema(),
        "index.schema.json": Index.model_json_schema(),
        "run.schema.json": RunRecord.model_json_schema(),
        "provenance.schema.json": Provenance.model_json_schema(),
    }


def write_json_schemas(directory: str | Path) -> list[Path]:
    """Write :func:`json_schemas` into ``directory`` (the repository's ``schemas/``)."""
    out = []
    for name, schema in json_schemas().items():
        p = Path(directory) / name
        p.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
        out.append(p)
    return out
