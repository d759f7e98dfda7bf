"""Writing a checkpoint: a schema instance onto one scda file (collective)."""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import platform
import socket
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import TypeAdapter

from .. import scda, sfc
from .._version import __version__
from ..comm import Comm, MPIComm, agree_gather, as_comm
from ..errors import SchemaError
from ._base import CheckpointSchema
from ._kinds import (
    BlockKind,
    CellsKind,
    FieldKind,
    Forest,
    HpCellsKind,
    HpData,
    InlineKind,
    MeshKind,
    disk_dtype,
    mesh_record_dtype,
)
from ._manifest import (
    FOOTER_USER_STRING,
    INDEX_USER_STRING,
    MANIFEST_USER_STRING,
    PARTITION_USER_STRING,
    PROVENANCE_USER_STRING,
    FieldSpec,
    Index,
    IndexEntry,
    Manifest,
    MeshSpec,
    Provenance,
    dtype_to_json,
    footer_bytes,
)

__all__ = ["SaveResult", "check_local", "save", "validate_field"]


@dataclass(frozen=True)
class SaveResult:
    """What :func:`save` wrote.

    Attributes
    ----------
    path : str
        The file.
    nbytes : int
        Its size in bytes.
    num_leaves : int
        The global number of mesh leaves.
    manifest : Manifest
        The manifest written into it.
    index : Index
        Its index (offsets and CRC32 of every section).
    """

    path: str
    nbytes: int
    num_leaves: int
    manifest: Manifest
    index: Index


@dataclass
class _Prepared:
    """One field, ready to be written by this rank."""

    name: str
    kind: FieldKind
    data: Any = None  # bytes (inline, block), numpy array (mesh, cells, hp values)
    elem_size: int = 0
    sizes: np.ndarray | None = None  # per-leaf bytes (hp)
    value: Any = None  # JSON value (inline), for the manifest
    digest: int = 0  # of a global value (inline, block), to check that ranks agree


@functools.cache
def _adapter(cls: type[CheckpointSchema], name: str) -> TypeAdapter[Any]:
    annotation: Any = cls.model_fields[name].annotation
    return TypeAdapter(annotation)


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 2


def _canonical(obj: Any) -> Any:
    """Return a form of a Python-mode dump that equal values share: dict keys and set elements sorted."""
    if isinstance(obj, dict):
        return ("dict", sorted(((repr(k), _canonical(v)) for k, v in obj.items()), key=lambda kv: kv[0]))
    if isinstance(obj, (set, frozenset)):
        return ("set", sorted((_canonical(v) for v in obj), key=repr))
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    return obj


def _json_value(cls: type[CheckpointSchema], name: str, value: Any) -> tuple[Any, int]:
    """Return the JSON-compatible form of a global field's value and a digest of its meaning."""
    adapter = _adapter(cls, name)
    try:
        json_value = adapter.dump_python(value, mode="json")
        canonical = repr(_canonical(adapter.dump_python(value, mode="python")))
    except Exception as exc:  # pydantic's serialization errors are not ours: name the field
        raise SchemaError(f"field {name!r}: the value cannot be serialized to JSON: {exc}") from exc
    return json_value, _digest(canonical.encode())


def _json_bytes(json_value: Any, name: str) -> bytes:
    """Compact JSON text (``Infinity``/``NaN`` for non-finite floats, as Python's json writes them)."""
    try:
        return json.dumps(json_value, separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"field {name!r}: the value cannot be serialized to JSON: {exc}") from exc


def encode_inline(value: Any, name: str) -> bytes:
    """Return the 32 data bytes of an inline field: JSON, left-aligned, spaces, a line feed."""
    text = _json_bytes(value, name)
    if len(text) > 31:
        raise SchemaError(f"field {name!r}: {len(text)} bytes of JSON do not fit an inline section (31); declare it with Block()")
    return text.ljust(31) + b"\n"


def _as_disk(value: np.ndarray, kind: CellsKind) -> np.ndarray:
    """Return the array in the dtype it has in the file (a byte swap if needed), contiguous."""
    target = disk_dtype(kind.dtype, kind.native)
    if value.dtype != target:
        value = value.astype(target)  # only the byte order differs: validate_field checked
    return np.ascontiguousarray(value)


def _check_dtype(name: str, got: np.dtype[Any], kind: CellsKind) -> None:
    if got.newbyteorder("=") != kind.dtype.newbyteorder("=") or (got.names or ()) != (kind.dtype.names or ()):
        raise SchemaError(f"field {name!r}: dtype {got.str}, the schema declares {kind.dtype.str} (no casting)")


def validate_field(name: str, kind: FieldKind, value: Any, n: int | None, *, check_values: bool = True) -> None:
    """Check one field's local value against its kind and the local leaf count ``n``.

    Not collective.  Inline and block values are typed by pydantic; a mesh
    must be a :class:`Forest` of the declared dimension and curve whose
    leaves are in range (and, if ``n`` is given, ``n`` of them); cell data
    must have the declared dtype (any byte order), shape and ``n`` leaves.
    ``check_values=False`` skips the O(n) range check of a mesh (for data
    that a CRC proves unchanged since a writer checked it).

    Raises
    ------
    SchemaError
        Naming the field.
    """
    if isinstance(kind, MeshKind):
        if not isinstance(value, Forest):
            raise SchemaError(f"field {name!r}: expected a Forest, got {type(value).__name__}")
        if value.dim != kind.dim or value.curve != kind.curve:
            raise SchemaError(f"field {name!r}: a {value.dim}D {value.curve} forest; the schema declares {kind.dim}D {kind.curve}")
        if n is not None and len(value) != n:
            raise SchemaError(f"field {name!r}: {len(value)} leaves; the partition gives this rank {n}")
        if check_values:
            try:
                value.check()
            except SchemaError as exc:
                raise SchemaError(f"field {name!r}: {exc}") from exc
    elif isinstance(kind, HpCellsKind):
        if not isinstance(value, HpData):
            raise SchemaError(f"field {name!r}: expected HpData, got {type(value).__name__}")
        if n is not None and len(value) != n:
            raise SchemaError(f"field {name!r}: {len(value)} leaves of values; the mesh has {n} local leaves")
        if value.values.shape[1:] != kind.shape:
            raise SchemaError(f"field {name!r}: values of shape {value.values.shape[1:]}; the schema declares {kind.shape}")
        _check_dtype(name, value.values.dtype, kind)
    elif isinstance(kind, CellsKind):
        if not isinstance(value, np.ndarray):
            raise SchemaError(f"field {name!r}: expected a numpy array, got {type(value).__name__}")
        want = (n if n is not None else value.shape[0] if value.ndim else -1, *kind.shape)
        if value.shape != want:
            raise SchemaError(f"field {name!r}: shape {value.shape}; {want[0]} local leaves of shape {kind.shape} need {want}")
        _check_dtype(name, value.dtype, kind)


def index_of(f: scda.ScdaWriter, roles: list[str]) -> Index:
    """Return the index of the sections ``f`` has written so far: offsets, sizes and CRC32s. Collective.

    Parameters
    ----------
    f : ScdaWriter
        A writer opened with checksums (its records and :meth:`section_crcs`).
    roles : list of str
        The role of each section written (``"header"``, ``"manifest"``, ``"field"``, ...).

    Returns
    -------
    Index
        What the ``amrckpt index`` block holds (the convention of docs/checkpoints.md).
    """
    crcs = f.section_crcs()
    return Index(
        sections=[
            IndexEntry(
                name="file header" if r.type == "F" else r.user_string.decode("utf-8", "replace"),
                role=role,  # type: ignore[arg-type]
                type=r.type,  # type: ignore[arg-type]
                compressed=r.encoded,
                offset=r.offset,
                end=r.end,
                crc32=crc,
            )
            for r, role, crc in zip(f.records, roles, crcs, strict=True)
        ]
    )


def check_local(state: CheckpointSchema) -> tuple[int, list[_Prepared], Forest | None]:
    """Validate this rank's state against its schema; prepare every field for writing.

    Not collective: :func:`save` agrees on the outcome on all ranks.

    Returns
    -------
    n_local : int
        The number of local leaves (0 without a mesh).
    prepared : list
        One entry per field, in declaration order.
    mesh : Forest or None

    Raises
    ------
    SchemaError
        Naming the field: a wrong dtype, shape or length, a value that
        cannot be serialized, an inline value too long, a mesh of the wrong
        dimension or with leaves out of range.
    """
    cls = type(state)
    kinds = cls.__amrckpt_fields__
    mesh: Forest | None = None
    records: np.ndarray | None = None
    for name, kind in kinds.items():
        if isinstance(kind, MeshKind):
            mesh = getattr(state, name)
            validate_field(name, kind, mesh, None, check_values=False)
            assert mesh is not None
            try:  # check the ranges while packing: one pass over the leaves
                records = mesh.to_records(check=True)
            except SchemaError as exc:
                raise SchemaError(f"field {name!r}: {exc}") from exc
    n = len(mesh) if mesh is not None else 0
    out = []
    for name, kind in kinds.items():
        value = getattr(state, name)
        if not isinstance(kind, MeshKind):  # the mesh was checked above
            validate_field(name, kind, value, n)
        p = _Prepared(name, kind)
        if isinstance(kind, InlineKind):
            p.value, p.digest = _json_value(cls, name, value)
            p.data = encode_inline(p.value, name)
        elif isinstance(kind, BlockKind):
            json_value, p.digest = _json_value(cls, name, value)
            p.data = _json_bytes(json_value, name) + b"\n"
        elif isinstance(kind, MeshKind):
            assert records is not None
            p.data = records
            p.elem_size = records.dtype.itemsize
        elif isinstance(kind, HpCellsKind):
            p.data = _as_disk(value.values, kind)
            p.sizes = _sizes(value.counts, kind.cell_nbytes)
        elif isinstance(kind, CellsKind):
            p.data = _as_disk(value, kind)
            p.elem_size = kind.cell_nbytes
        out.append(p)
    return n, out, mesh


def _sizes(counts: np.ndarray, cell_nbytes: int) -> np.ndarray:
    """Bytes per leaf of an hp field, (n,) uint64, in one pass (a shift for power-of-two value sizes)."""
    shift = cell_nbytes.bit_length() - 1
    if cell_nbytes == 1 << shift:
        return np.left_shift(counts.view(np.uint64), np.uint64(shift))
    return np.multiply(counts.view(np.uint64), np.uint64(cell_nbytes))


def _field_spec(p: _Prepared) -> FieldSpec:
    k = p.kind
    return FieldSpec.model_validate(
        {
            "name": p.name,
            "kind": k.kind,
            "section": k.section,
            "units": k.units,
            "description": k.description,
            "compressed": k.compress,
            "dtype": dtype_to_json(disk_dtype(k.dtype, k.native)) if isinstance(k, CellsKind) else None,
            "shape": list(k.shape) if isinstance(k, CellsKind) else [],
            "native_byteorder": k.native if isinstance(k, CellsKind) else False,
        }
    )


def _boundary(mesh: Forest | None) -> tuple[Any, ...] | None:
    """(tree, key) of the first local leaf and (tree, key past) the last, for the order across ranks."""
    if mesh is None or len(mesh) == 0:
        return None
    idx = np.array([0, len(mesh) - 1])
    coords = [c[idx] for c in mesh.coords()]
    lev = mesh.level[idx]
    keys = sfc.sfc_keys(*coords, level=lev, curve=mesh.curve, check=False)  # type: ignore[arg-type]
    L = sfc.MAXLEVEL[mesh.dim]
    past = int(keys[1]) + (1 << (mesh.dim * (L - int(lev[1]))))
    return (int(mesh.tree[0]), int(keys[0]), int(mesh.tree[-1]), past)


def _provenance(comm: Comm) -> Provenance:
    mpi = None
    if isinstance(comm, MPIComm):
        from mpi4py import MPI

        mpi = MPI.Get_library_version().strip().splitlines()[0]
    return Provenance(
        writer_size=comm.size,
        saved_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        amrckpt_version=__version__,
        python_version=platform.python_version(),
        numpy_version=np.__version__,
        mpi_library=mpi,
        hostname=socket.gethostname(),
        byteorder=sys.byteorder,
    )


def save(
    state: CheckpointSchema,
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    style: scda.Style = "unix",
    sync: bool = False,
    check_mesh: bool = False,
    info: Any = None,
    backend: str | None = None,
    truncate: bool = True,
) -> SaveResult:
    """Write a simulation's state as one scda checkpoint file.

    Collective.  Every rank passes its own part of the state (its mesh
    leaves, one cell value per local leaf); inline and block fields must be
    the same on every rank.  Everything is checked on every rank before a
    byte is written, with one gather of O(1) numbers per rank; then every
    rank writes its own bytes.  The file's bytes up to the end of the last
    field do not depend on the number of ranks (see ``docs/checkpoints.md``
    for the layout); the CRC32 of every
    section is recorded in the index.

    Parameters
    ----------
    state : CheckpointSchema
        This rank's state.
    path : str or os.PathLike
        The file to write (created or truncated).  For atomic commits use a
        :class:`~amrckpt.CheckpointManager`.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        The communicator; None writes serially, without MPI.
    style : {"unix", "mime"}, optional
        Line breaks of the scda padding.
    sync : bool, optional
        ``fsync`` (``MPI_File_sync``) before closing.
    check_mesh : bool, optional
        Also check that each rank's leaves follow the curve without overlaps
        (O(n) work, about 60 ns per leaf); the order across ranks is always
        checked.
    info, backend, truncate : optional
        MPI-IO hints, backend choice and truncation of an existing file, as
        for :func:`amrckpt.scda.fopen_write`.

    Returns
    -------
    SaveResult

    Raises
    ------
    SchemaError
        On every rank, naming the field and the rank: a dtype, shape or
        length that does not fit, values of global fields that differ between
        ranks, leaves out of order across ranks.
    ScdaIOError
        On every rank, if the file cannot be written.
    """
    c = as_comm(comm)
    cls = type(state)
    err: BaseException | None = None
    n_local, mesh = 0, None
    prepared: list[_Prepared] = []
    report: tuple[Any, ...] = ()
    try:
        if not isinstance(state, CheckpointSchema):
            raise SchemaError(f"save: expected an instance of a CheckpointSchema, got {cls.__name__}")
        n_local, prepared, mesh = check_local(state)
        if check_mesh and mesh is not None:
            mesh.check_order()
        hp = tuple(int(p.sizes.sum(dtype=np.uint64)) for p in prepared if p.sizes is not None)
        mesh_meta = (mesh.dim, mesh.num_trees, mesh.curve) if mesh is not None else None
        report = (n_local, hp, _boundary(mesh), tuple(p.digest for p in prepared), mesh_meta, _schema_digest(cls))
    except Exception as exc:  # noqa: BLE001 - agreed on by every rank below
        err = exc
    gathered = agree_gather(c, err, report)
    counts = [g[0] for g in gathered]
    _check_across_ranks(cls, prepared, gathered)
    N = sum(counts)
    kinds = cls.__amrckpt_fields__
    mesh_field = next((n for n, k in kinds.items() if isinstance(k, MeshKind)), None)
    mesh_spec = None
    if mesh_field is not None:
        dim, num_trees, curve = gathered[0][4]
        rec = mesh_record_dtype(dim)
        mesh_spec = MeshSpec(
            field=mesh_field,
            dim=dim,
            num_trees=num_trees,
            curve=curve,
            maxlevel=sfc.MAXLEVEL[dim],
            record=[(nm, rec[nm].str) for nm in rec.names or ()],
        )
    manifest = Manifest(
        amrckpt_version=__version__,
        schema_name=cls.__amrckpt_name__,
        schema_version=cls.__amrckpt_version__,
        num_leaves=N,
        mesh=mesh_spec,
        fields=[_field_spec(p) for p in prepared],
        values={p.name: p.value for p in prepared if isinstance(p.kind, InlineKind)},
    )
    hp_totals = iter(range(len(gathered[0][1])))
    root = c.rank == 0
    header = f"amrckpt {cls.__amrckpt_name__} v{cls.__amrckpt_version__}".encode()[:58]
    with scda.fopen_write(
        path, header, comm=c, style=style, vendor=b"amrckpt", info=info, backend=backend, checksum=True, truncate=truncate
    ) as f:
        roles = ["file header"]
        f.fwrite_block(manifest.model_dump_json(indent=1).encode() + b"\n" if root else None, MANIFEST_USER_STRING)
        roles.append("manifest")
        for p in prepared:
            k, u = p.kind, p.name.encode()
            if isinstance(k, InlineKind):
                f.fwrite_inline(p.data if root else None, u)
            elif isinstance(k, BlockKind):
                f.fwrite_block(p.data if root else None, u, encode=k.compress, level=k.level)
            elif isinstance(k, HpCellsKind):
                j = next(hp_totals)
                proc = [g[1][j] for g in gathered]
                f.fwrite_varray(p.data, counts, p.sizes, proc, u, encode=k.compress, level=k.level)
            else:
                f.fwrite_array(p.data, counts, p.elem_size, u, encode=k.compress, level=k.level)
            roles.append("field")
        f.fwrite_block(_provenance(c).model_dump_json(indent=1).encode() + b"\n" if root else None, PROVENANCE_USER_STRING)
        roles.append("provenance")
        f.fwrite_array(np.array([n_local], dtype="<i8"), [1] * c.size, 8, PARTITION_USER_STRING)
        roles.append("partition")
        index = index_of(f, roles)
        f.fwrite_block(index.model_dump_json(indent=1).encode() + b"\n" if root else None, INDEX_USER_STRING)
        index_crc = f.section_crcs()[-1]
        f.fwrite_inline(footer_bytes(f.records[-1].offset, index_crc) if root else None, FOOTER_USER_STRING)
        if sync:
            f.sync()
        nbytes = f.offset
    return SaveResult(os.fspath(path), nbytes, N, manifest, index)


def _schema_digest(cls: type[CheckpointSchema]) -> int:
    """Identify a schema: name, version, and every field's name and kind."""
    fields = [(n, type(k).__name__, repr(k)) for n, k in cls.__amrckpt_fields__.items()]
    return _digest(repr((cls.__amrckpt_name__, cls.__amrckpt_version__, fields)).encode())


def _check_across_ranks(cls: type[CheckpointSchema], prepared: list[_Prepared], gathered: list[Any]) -> None:
    """Check the gathered reports; deterministic, so every rank raises the same error."""
    schemas = [g[5] for g in gathered]
    if len(set(schemas)) > 1:
        r = next(r for r, d in enumerate(schemas) if d != schemas[0])
        raise SchemaError(f"the ranks save different schemas (rank 0 and rank {r} differ in name, version or fields)")
    names = list(cls.__amrckpt_fields__)
    digests = [g[3] for g in gathered]
    for j, name in enumerate(names):
        vals = {d[j] for d in digests}
        if len(vals) > 1:
            ranks = [r for r, d in enumerate(digests) if d[j] != digests[0][j]]
            raise SchemaError(
                f"field {name!r} differs between ranks (e.g. rank 0 and rank {ranks[0]}); it must be the same on every rank"
            )
    metas = {g[4] for g in gathered}
    if len(metas) > 1:
        raise SchemaError(f"the ranks' meshes disagree on dimension, number of trees or curve: {sorted(metas, key=str)}")
    prev: tuple[int, Any] | None = None
    for r, g in enumerate(gathered):
        b = g[2]
        if b is None:
            continue
        if prev is not None:
            last_rank, last = prev
            if (b[0], b[1]) < (last[2], last[3]):
                raise SchemaError(
                    f"the mesh leaves are not in curve order across ranks: the first leaf of rank {r} "
                    f"(tree {b[0]}) does not follow the last leaf of rank {last_rank} (tree {last[2]})"
                )
        prev = (r, b)
