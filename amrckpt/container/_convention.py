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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from ..errors import CheckpointError, ConnectivityError, IncompleteCheckpointError
from ..sfc import Connectivity, mesh_record_dtype
from ._registry import of_mesh

__all__ = [
    "CONNECTIVITY_FORMAT_VERSION",
    "FOOTER_NBYTES",
    "FOOTER_USER_STRING",
    "FORMAT_VERSION",
    "INDEX_USER_STRING",
    "MANIFEST_USER_STRING",
    "ConnectivitySpec",
    "FieldSpec",
    "GeometryMap",
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
    "format_version_of",
    "json_schemas",
    "mesh_record_dtype",
    "parse_footer",
    "write_json_schemas",
]

FORMAT_VERSION = 2
"""Version of the amrckpt convention written for files without a p4est connectivity (format 1 is still read)."""
CONNECTIVITY_FORMAT_VERSION = 3
"""Version written for files whose meshes have a p4est connectivity (:class:`ConnectivitySpec`): format 2 and
geometries holding a connectivity, brick trees numbered by p4est's Morton curve."""
READ_FORMAT_VERSIONS = (1, 2, 3)
MANIFEST_USER_STRING = b"amrckpt manifest"
PROVENANCE_USER_STRING = b"amrckpt provenance"  # format 1 only
PARTITION_USER_STRING = b"amrckpt partition"  # format 1 only
INDEX_USER_STRING = b"amrckpt index"
FOOTER_USER_STRING = b"amrckpt footer 1"
FOOTER_NBYTES = 96
"""The footer: an inline section, the last 96 bytes of a complete checkpoint."""

FieldKindName = Literal["inline", "block", "mesh", "cells", "hp", "array", "ndarray"]


class _Model(BaseModel):
    # Non-finite floats (a time of inf) are written as Infinity/NaN, as Python's json does.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")


def _without_none(out: Any, keys: Sequence[str]) -> Any:
    """Return a model's serialized dict ``out`` without those of ``keys`` whose value is None (anything else as it is)."""
    if isinstance(out, dict):
        for k in keys:
            if out.get(k, 0) is None:
                del out[k]
    return out


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
    units: str | None = Field(default=None, description="physical units")
    description: str | None = None
    compressed: bool = Field(False, description="written by the compression convention of scda (paper section 3)")
    native_byteorder: bool = Field(False, description="the schema left the byte order to the machine; readers convert to theirs")
    mesh: str | None = Field(default=None, description="the mesh field whose leaves this field's values belong to (cells, hp)")
    count: int | None = Field(None, ge=0, description="global number of elements (array)")
    layout: Literal["counts", "chunks"] | None = Field(
        None,
        description="how the field is laid out, if not as one section of its kind (absent: one section): "
        "'counts' (hp): an A section of the values per leaf (count_dtype), then an A section of all values; "
        "'chunks' (cells, array, mesh): a V section of zlib streams, each the byte-shuffled values of `chunk` consecutive leaves; "
        "(hp): a V section of zlib streams, each the byte-shuffled counts (count_dtype) of `chunk` consecutive leaves, "
        "then a V section of zlib streams, each the byte-shuffled values of the same leaves",
    )
    count_dtype: Literal["u1", "<u2", "<u4", "<u8"] | None = Field(
        None,
        description="layouts 'counts' and 'chunks' (hp): the unsigned integer of one leaf's value count, "
        "the narrowest for the largest count",
    )
    chunk: int | None = Field(None, ge=1, description="layout 'chunks': leaves (elements) per chunk; the last chunk holds the rest")

    @model_serializer(mode="wrap")
    def _without_default_layout(self, handler: SerializerFunctionWrapHandler) -> Any:
        # The layout attributes are written only where set: a field in one section keeps format 2's first bytes.
        return _without_none(handler(self), ("layout", "count_dtype", "chunk"))


class ConnectivitySpec(_Model):
    """p4est's connectivity of a mesh (``p4est_connectivity_t``), as the manifest stores it (format 3).

    The arrays of :class:`amrckpt.sfc.Connectivity` as JSON, under p4est's
    names; the edge arrays in 3D only, the corner arrays where there are
    shared corners.  Absent entries are not written.
    """

    vertices: list[list[float]] = Field(default_factory=list, description="p4est vertices, (num_vertices, 3)")
    tree_to_vertex: list[list[int]] | None = Field(
        None, description="p4est tree_to_vertex, (num_trees, 2**dim), corners in z-order"
    )
    tree_to_tree: list[list[int]] = Field(description="p4est tree_to_tree, (num_trees, 2 * dim): the neighbour across each face")
    tree_to_face: list[list[int]] = Field(description="p4est tree_to_face, (num_trees, 2 * dim): face + 2 * dim * orientation")
    tree_to_edge: list[list[int]] | None = Field(
        default=None, description="p8est tree_to_edge, (num_trees, 12) (3D with shared edges)"
    )
    ett_offset: list[int] | None = Field(default=None, description="p8est ett_offset, (num_edges + 1,) (3D)")
    edge_to_tree: list[int] | None = Field(default=None, description="p8est edge_to_tree, (num_ett,)")
    edge_to_edge: list[int] | None = Field(default=None, description="p8est edge_to_edge, (num_ett,): edge + 12 * flip")
    tree_to_corner: list[list[int]] | None = Field(
        None, description="p4est tree_to_corner, (num_trees, 2**dim) (with shared corners)"
    )
    ctt_offset: list[int] | None = Field(default=None, description="p4est ctt_offset, (num_corners + 1,)")
    corner_to_tree: list[int] | None = Field(default=None, description="p4est corner_to_tree, (num_ctt,)")
    corner_to_corner: list[int] | None = Field(default=None, description="p4est corner_to_corner, (num_ctt,)")
    tree_to_attr: list[str] | None = Field(default=None, description="p4est tree_to_attr: each tree's attribute bytes in hex")

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        return _without_none(out, list(out) if isinstance(out, dict) else [])

    def to_connectivity(self, dim: int) -> Connectivity:
        """Return the connectivity of a ``dim``-dimensional mesh (ConnectivityError if the arrays do not fit).

        Raises
        ------
        ConnectivityError
            On this rank, if the arrays do not fit a ``dim``-dimensional connectivity (``tree_to_attr`` not hex, for
            one).
        """
        attr = None
        if self.tree_to_attr is not None:
            try:
                raw = [bytes.fromhex(h) for h in self.tree_to_attr]
            except ValueError as exc:
                raise ConnectivityError(f"connectivity: tree_to_attr is not hex: {exc}") from exc
            attr = np.array([list(b) for b in raw], dtype=np.uint8) if raw else None
        v = np.array(self.vertices, dtype=np.float64).reshape(-1, 3) if self.vertices else np.zeros((0, 3))
        return Connectivity(
            dim,
            v,
            self.tree_to_vertex,
            self.tree_to_tree,
            self.tree_to_face,
            self.tree_to_edge,
            self.ett_offset,
            self.edge_to_tree,
            self.edge_to_edge,
            self.tree_to_corner,
            self.ctt_offset,
            self.corner_to_tree,
            self.corner_to_corner,
            attr,
        )

    @classmethod
    def of(cls, conn: Connectivity) -> ConnectivitySpec:
        """Return the spec of a connectivity (every array as it is, nothing recomputed)."""

        def lst(a: np.ndarray | None) -> Any:
            return None if a is None else a.tolist()

        three = conn.dim == 3
        corners = conn.num_corners > 0
        return cls(
            vertices=conn.vertices.tolist(),
            tree_to_vertex=lst(conn.tree_to_vertex),
            tree_to_tree=conn.tree_to_tree.tolist(),
            tree_to_face=conn.tree_to_face.tolist(),
            tree_to_edge=lst(conn.tree_to_edge),
            ett_offset=lst(conn.ett_offset) if three else None,
            edge_to_tree=lst(conn.edge_to_tree) if three and conn.num_edges else None,
            edge_to_edge=lst(conn.edge_to_edge) if three and conn.num_edges else None,
            tree_to_corner=lst(conn.tree_to_corner),
            ctt_offset=lst(conn.ctt_offset) if corners else None,
            corner_to_tree=lst(conn.corner_to_tree) if corners else None,
            corner_to_corner=lst(conn.corner_to_corner) if corners else None,
            tree_to_attr=None if conn.tree_to_attr is None else [bytes(r).hex() for r in conn.tree_to_attr],
        )


class GeometryMap(_Model):
    """An analytic map of a connectivity's trees into space, after the vertex map (p4est's ``p4est_geometry_t``)."""

    kind: Literal["p8est shell"] = Field(description="'p8est shell': p8est_geometry_new_shell of the 24-tree shell connectivity")
    R1: float = Field(gt=0, description="inner radius")
    R2: float = Field(gt=0, description="outer radius")

    @model_validator(mode="after")
    def _radii(self) -> GeometryMap:
        if not self.R1 < self.R2:
            raise ValueError(f"the shell's radii must satisfy R1 < R2, not R1={self.R1}, R2={self.R2}")
        return self


class GeometrySpec(_Model):
    """Where the trees of a forest are in physical space, and how they touch (p4est keeps its connectivity with the forest).

    Either p4est's connectivity (format 3): each tree placed by p4est's
    (bi/tri)linear map of its corner vertices (and then by ``map``), its
    neighbours and their orientation in ``tree_to_tree`` and
    ``tree_to_face`` (periodicity included); a brick's trees are numbered as
    ``p4est_connectivity_new_brick`` numbers them, along a Morton curve.
    Or, as formats 1 and 2 wrote it, a box per tree: tree ``k`` covers
    ``[tree_lower[k], tree_upper[k])`` and a tree's integer coordinate maps
    linearly onto it; a brick there is numbered row-major (tree = (k * ny
    + j) * nx + i), and ``vertices`` and ``tree_to_vertex`` were kept for
    information only.
    """

    brick: list[int] | None = Field(
        default=None,
        description="trees per axis of a brick (nx, ny[, nz]): with a connectivity in p4est's Morton order, else row-major",
    )
    periodic: list[bool] | None = Field(default=None, description="a brick's periodicity per axis (with a connectivity)")
    tree_lower: list[list[float]] | None = Field(
        None, description="lower corner of each tree, (num_trees, dim) (without a connectivity)"
    )
    tree_upper: list[list[float]] | None = Field(default=None, description="upper corner of each tree, (num_trees, dim)")
    units: str | None = Field(default=None, description="length units of the vertices or corners")
    vertices: list[list[float]] | None = Field(
        default=None, description="formats 1, 2: p4est connectivity vertices, (num_vertices, 3)"
    )
    tree_to_vertex: list[list[int]] | None = Field(
        default=None, description="formats 1, 2: p4est tree_to_vertex, (num_trees, 2**dim)"
    )
    connectivity: ConnectivitySpec | None = Field(default=None, description="p4est's connectivity of the trees (format 3)")
    map: GeometryMap | None = Field(
        default=None, description="an analytic map of the trees after the vertex map (with a connectivity)"
    )

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        # What formats 1 and 2 did not have is written only where set: their geometries keep their bytes.
        out = _without_none(handler(self), ("periodic", "connectivity", "map"))
        if self.connectivity is not None:
            out = _without_none(out, ("tree_lower", "tree_upper", "vertices", "tree_to_vertex"))
        return out

    @model_validator(mode="after")
    def _boxes_or_connectivity(self) -> GeometrySpec:
        if self.connectivity is None and (self.tree_lower is None or self.tree_upper is None):
            raise ValueError("a geometry needs a connectivity, or tree_lower and tree_upper")
        if self.map is not None and self.connectivity is None:
            raise ValueError("a geometry's map applies to a connectivity; this geometry has none")
        return self

    @property
    def num_trees(self) -> int:
        """The number of trees the geometry places."""
        if self.connectivity is not None:
            return len(self.connectivity.tree_to_tree)
        return len(self.tree_lower or [])

    @classmethod
    def of_connectivity(
        cls,
        conn: Connectivity,
        *,
        units: str | None = None,
        map: GeometryMap | None = None,
        brick: Any = None,
        periodic: Any = None,
    ) -> GeometrySpec:
        """Return the geometry of a p4est connectivity (ConnectivityError unless it passes :meth:`Connectivity.check`)."""
        conn.check()
        return cls(
            tree_lower=None,
            tree_upper=None,
            connectivity=ConnectivitySpec.of(conn),
            units=units,
            map=map,
            brick=None if brick is None else [int(b) for b in brick],
            periodic=None if periodic is None else [bool(p) for p in periodic],
        )


class MeshSpec(_Model):
    """One mesh of a checkpoint: a forest of quadtrees or octrees."""

    field: str = Field(description="name of the mesh field")
    dim: Literal[2, 3]
    num_trees: int = Field(ge=1)
    curve: Literal["morton", "hilbert"]
    maxlevel: int = Field(description="p4est's MAXLEVEL: coordinates are in units of 2**-maxlevel of a tree")
    record: list[tuple[str, str]] = Field(description="the packed record of one leaf: (name, numpy dtype)")
    num_leaves: int = Field(0, ge=0, description="global number of leaves of this mesh")
    geometry: GeometrySpec | None = Field(default=None, description="the trees in physical space (None: unit trees in a row)")


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

    @model_validator(mode="after")
    def _connectivity_in_format_3(self) -> Manifest:
        if self.format_version < CONNECTIVITY_FORMAT_VERSION and format_version_of(self.meshes) == CONNECTIVITY_FORMAT_VERSION:
            raise ValueError(
                f"a mesh geometry with a p4est connectivity is format {CONNECTIVITY_FORMAT_VERSION}, not {self.format_version}"
            )
        return self

    @property
    def mesh(self) -> MeshSpec | None:
        """The first mesh (the only one of most checkpoints), or None."""
        return self.meshes[0] if self.meshes else None

    @property
    def num_leaves(self) -> int:
        """Global number of leaves of the first mesh (0 without a mesh)."""
        return self.meshes[0].num_leaves if self.meshes else 0

    def mesh_of(self, fs: FieldSpec) -> MeshSpec | None:
        """Return the mesh that field ``fs``'s values belong to (a mesh field: itself; a field of values per leaf: its mesh).

        A field of values per leaf that names no mesh (format 1) belongs to the first.
        """
        own = next((m for m in self.meshes if m.field == fs.name), None)
        if own is not None or not of_mesh(fs.kind):
            return own
        if fs.mesh is None:
            return self.mesh
        return next((m for m in self.meshes if m.field == fs.mesh), None)

    def field(self, name: str) -> FieldSpec:
        """Return the spec of field ``name`` (KeyError if absent).

        Raises
        ------
        KeyError
            On this rank, if the manifest has no field ``name``.
        """
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def format_version_of(meshes: list[MeshSpec]) -> int:
    """Return the format version to write for these meshes: 3 if a geometry holds a p4est connectivity, else 2."""
    conn = any(m.geometry is not None and m.geometry.connectivity is not None for m in meshes)
    return CONNECTIVITY_FORMAT_VERSION if conn else FORMAT_VERSION


class Provenance(_Model):
    """Who wrote a format-1 checkpoint (the JSON of its ``amrckpt provenance`` block); format 2 has none."""

    writer_size: int = Field(ge=1, description="number of processes that wrote the file")
    saved_at: str = Field(description="UTC time the save started, ISO 8601 (2026-11-24T09:26:53Z)")
    amrckpt_version: str
    python_version: str
    numpy_version: str
    mpi_library: str | None = Field(default=None, description="MPI library version string, or None for a serial save")
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
        """Return the entry of section ``name`` (KeyError if absent).

        Raises
        ------
        KeyError
            On this rank, if the index has no section ``name``.
        """
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
    """Invert :func:`dtype_to_json`; CheckpointError for anything else.

    Raises
    ------
    CheckpointError
        On this rank, if ``obj`` is not a numpy dtype, or one with no fixed-size binary form.
    """

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
    CheckpointError
        On this rank, if the footer's data are malformed.
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
