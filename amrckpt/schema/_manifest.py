"""The amrckpt convention on top of scda: manifest, provenance, index and footer.

A checkpoint is a valid scda file whose sections are, in order::

    F  "amrckpt <schema name> v<version>"           file header (vendor "amrckpt")
    B  "amrckpt manifest"     JSON of Manifest       what the file holds
    ...                       one section per field  I, B, A or V (or a compressed pair)
    B  "amrckpt provenance"   JSON of Provenance     who wrote it, when, on how many ranks
    A  "amrckpt partition"    P x <i8                the leaves of each writing rank
    B  "amrckpt index"        JSON of Index          offset, end, CRC32 of every section above
    I  "amrckpt footer 1"     32 bytes               offset and CRC32 of the index

Everything up to the end of the last field section does not depend on the
number of processes that wrote the file (the scda format is
serial-equivalent, and the manifest holds nothing about the writer); what
does (the provenance, the writing partition, and the offsets after them)
follows the fields.  The footer is the last 96 bytes: a reader that finds it
can jump to the index, from the index to any field, and tell a complete file
from one that was cut short.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import CheckpointError, IncompleteCheckpointError

__all__ = [
    "FOOTER_USER_STRING",
    "FORMAT_VERSION",
    "FieldSpec",
    "Index",
    "IndexEntry",
    "Manifest",
    "MeshSpec",
    "Provenance",
    "dtype_from_json",
    "dtype_to_json",
    "footer_bytes",
    "json_schemas",
    "parse_footer",
    "write_json_schemas",
]

FORMAT_VERSION = 1
"""Version of the amrckpt convention described here."""
MANIFEST_USER_STRING = b"amrckpt manifest"
PROVENANCE_USER_STRING = b"amrckpt provenance"
PARTITION_USER_STRING = b"amrckpt partition"
INDEX_USER_STRING = b"amrckpt index"
FOOTER_USER_STRING = b"amrckpt footer 1"
FOOTER_NBYTES = 96
"""The footer: an inline section, the last 96 bytes of a complete checkpoint."""


class _Model(BaseModel):
    # Non-finite floats (a time of inf) are written as Infinity/NaN, as Python's json does.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")


class FieldSpec(_Model):
    """One field of a checkpoint, as the manifest describes it."""

    name: str = Field(description="the field's name, also the user string of its section")
    kind: Literal["inline", "block", "mesh", "cells", "hp"] = Field(description="the field kind of amrckpt.schema")
    section: Literal["I", "B", "A", "V"] = Field(description="the scda section type that holds the data")
    dtype: str | list[Any] | None = Field(
        None,
        description="numpy dtype of one value with byte order, as numpy's .npy header describes it "
        "(numpy.lib.format.dtype_to_descr: '<f8', or a list of [name, descr] for records) (cells, hp)",
    )
    shape: list[int] = Field(default_factory=list, description="shape of one leaf's value (cells) or of one value (hp)")
    units: str | None = Field(None, description="physical units")
    description: str | None = None
    compressed: bool = Field(False, description="written by the compression convention of scda (paper section 3)")
    native_byteorder: bool = Field(False, description="the schema left the byte order to the machine; readers convert to theirs")


class MeshSpec(_Model):
    """The mesh of a checkpoint: a forest of quadtrees or octrees."""

    field: str = Field(description="name of the mesh field")
    dim: Literal[2, 3]
    num_trees: int = Field(ge=1)
    curve: Literal["morton", "hilbert"]
    maxlevel: int = Field(description="p4est's MAXLEVEL: coordinates are in units of 2**-maxlevel of a tree")
    record: list[tuple[str, str]] = Field(description="the packed record of one leaf: (name, numpy dtype)")


class Manifest(_Model):
    """What a checkpoint holds (the JSON of its ``amrckpt manifest`` block)."""

    format: Literal["amrckpt"] = "amrckpt"
    format_version: int = FORMAT_VERSION
    amrckpt_version: str
    schema_name: str
    schema_version: int = Field(ge=1)
    num_leaves: int = Field(ge=0, description="global number of mesh leaves (0 without a mesh)")
    mesh: MeshSpec | None = None
    fields: list[FieldSpec]
    values: dict[str, Any] = Field(default_factory=dict, description="the values of the inline fields (step, time, ...)")

    def field(self, name: str) -> FieldSpec:
        """Return the spec of field ``name`` (KeyError if absent)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


class Provenance(_Model):
    """Who wrote a checkpoint (the JSON of its ``amrckpt provenance`` block)."""

    writer_size: int = Field(ge=1, description="number of processes that wrote the file")
    saved_at: str = Field(description="UTC time the save started, ISO 8601")
    amrckpt_version: str
    python_version: str
    numpy_version: str
    mpi_library: str | None = Field(None, description="MPI library version string, or None for a serial save")
    hostname: str | None = None
    byteorder: Literal["little", "big"] = Field(description="byte order of the writing machine")


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
    """Return the JSON Schemas of the manifest, provenance and index, by file name."""
    return {
        "manifest.schema.json": Manifest.model_json_schema(),
        "provenance.schema.json": Provenance.model_json_schema(),
        "index.schema.json": Index.model_json_schema(),
    }


def write_json_schemas(directory: str | Path) -> list[Path]:
    """Write :func:`json_schemas` into ``directory`` (the repository's ``schemas/``)."""
    out = []
    for name, schema in json_schemas().items():
        p = Path(directory) / name
        p.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
        out.append(p)
    return out
