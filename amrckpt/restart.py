"""Reading a checkpoint on any number of processes, with a new partition (layer 5)."""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import numpy as np
from pydantic import TypeAdapter

from . import scda
from ._crc import SectionCrc, crc32
from .comm import Comm, agree, agree_gather, as_comm, run_on_root
from .errors import (
    AmrckptError,
    CheckpointError,
    ChecksumError,
    IncompleteCheckpointError,
    ScdaError,
    SchemaError,
)
from .partition import Partition
from .scda._backend import os_error
from .scda._layout import read_raw_section
from .scda._scan import exact_reader
from .schema._base import CheckpointSchema
from .schema._kinds import BlockKind, CellsKind, FieldKind, Forest, HpData, InlineKind, disk_dtype, mesh_record_dtype
from .schema._manifest import (
    FOOTER_NBYTES,
    FOOTER_USER_STRING,
    INDEX_USER_STRING,
    MANIFEST_USER_STRING,
    PARTITION_USER_STRING,
    PROVENANCE_USER_STRING,
    FieldSpec,
    Index,
    Manifest,
    Provenance,
    dtype_from_json,
    parse_footer,
)
from .schema._save import validate_field

__all__ = ["CheckpointInfo", "Loaded", "VerifyReport", "load", "read_info", "verify"]

S = TypeVar("S", bound=CheckpointSchema)
PartitionSpec = Literal["uniform", "weighted"] | Partition


@dataclass(frozen=True)
class CheckpointInfo:
    """The metadata of a checkpoint: what :func:`read_info` returns.

    Attributes
    ----------
    manifest : Manifest
    provenance : Provenance
    index : Index
    writer_partition : Partition
        The leaves of each rank that wrote the file.
    """

    manifest: Manifest
    provenance: Provenance
    index: Index
    writer_partition: Partition


@dataclass(frozen=True)
class Loaded(Generic[S]):
    """What :func:`load` returns on each rank.

    Attributes
    ----------
    state : CheckpointSchema
        This rank's part of the state: its leaves under :attr:`partition`
        and their cell values; inline and block fields in full.
    partition : Partition
        The partition the leaves were read with (p4est's
        ``global_first_quadrant``).
    info : CheckpointInfo
        Manifest, provenance, index and writing partition.
    verified : tuple of str
        The sections whose CRC32 was checked against the index.
    comm : mpi4py.MPI.Comm or None
        The MPI communicator the state was read on (None without MPI), so
        that a restored object can rebuild its ghost layer on it.
    """

    state: S
    partition: Partition
    info: CheckpointInfo
    verified: tuple[str, ...] = field(default=())
    comm: Any = field(default=None, compare=False)

    def __iter__(self) -> Any:
        """Unpack as ``state, partition = load(...)`` (the two that most callers want)."""
        return iter((self.state, self.partition))


def _as_checkpoint_error(exc: ScdaError, what: str) -> CheckpointError:
    return IncompleteCheckpointError(f"{what}: {exc}")


class _Reader:
    """Footer, index and sections of one checkpoint, over an open scda reader."""

    def __init__(self, f: scda.ScdaReader) -> None:
        self.f = f
        self.comm: Comm = f.comm
        self.path = f.path

    def footer(self) -> tuple[int, int]:
        f = self.f
        off = f.file_size - FOOTER_NBYTES
        if off < scda.FILE_HEADER_NBYTES or off % 32:
            raise IncompleteCheckpointError(f"{self.path!r}: {f.file_size} bytes cannot end in an amrckpt footer (cut short?)")
        try:
            f.fseek_section(off)
            h = f.fread_section_header()
        except ScdaError as exc:
            raise _as_checkpoint_error(exc, f"{self.path!r}: no amrckpt footer at the end (cut short?)") from exc
        if h is None or h.type != "I" or h.user_string != FOOTER_USER_STRING:
            raise IncompleteCheckpointError(f"{self.path!r}: no amrckpt footer at the end (the save did not finish)")
        data: bytes = self.comm.bcast(f.fread_inline_data(root=0) or b"", root=0)
        return parse_footer(h.user_string, data, repr(self.path))

    def block_at(self, offset: int, user_string: bytes) -> bytes:
        f = self.f
        try:
            f.fseek_section(offset)
            h = f.fread_section_header()
        except ScdaError as exc:
            raise CheckpointError(f"{self.path!r}: no section {user_string.decode()!r} at byte {offset}: {exc}") from exc
        if h is None or h.type != "B" or h.user_string != user_string:
            raise CheckpointError(f"{self.path!r}: expected section {user_string.decode()!r} at byte {offset}")
        data = f.fread_block_data(root=None)
        assert data is not None
        return data.tobytes()

    def check_crc(self, offset: int, crc: int, name: str, end: int | None = None) -> None:
        """Compare the CRC32 of the section just read (at ``offset``) with ``crc``. Collective."""
        got = {o: c for o, _, c in self.f.section_crcs()}
        if got.get(offset) != crc:
            raise _checksum_error(name, offset, end, self.path)

    def index(self, verify: bool) -> Index:
        """Return the index, found through the footer (its CRC32 checked against the footer's)."""
        index_offset, index_crc = self.footer()
        raw = self.block_at(index_offset, INDEX_USER_STRING)
        if verify:
            self.check_crc(index_offset, index_crc, "amrckpt index")
        index: Index = _parse(Index, raw, "index", self.path)
        return index

    def info(self, verify: bool) -> CheckpointInfo:
        index = self.index(verify)

        def block(name: str, user_string: bytes) -> bytes:
            e = _entry(index, name, self.path)
            data = self.block_at(e.offset, user_string)
            if verify:
                self.check_crc(e.offset, e.crc32, name, e.end)
            return data

        manifest = _parse(Manifest, block("amrckpt manifest", MANIFEST_USER_STRING), "manifest", self.path)
        prov = _parse(Provenance, block("amrckpt provenance", PROVENANCE_USER_STRING), "provenance", self.path)
        return CheckpointInfo(manifest, prov, index, self.writer_partition(index, prov, verify))

    def writer_partition(self, index: Index, prov: Provenance, verify: bool) -> Partition:
        f = self.f
        e = _entry(index, "amrckpt partition", self.path)
        f.fseek_section(e.offset)
        h = f.fread_section_header()
        if h is None or h.type != "A" or h.user_string != PARTITION_USER_STRING or h.elem_size != 8:
            raise CheckpointError(f"{self.path!r}: malformed writing partition section")
        P = h.elem_count
        counts = [P] + [0] * (self.comm.size - 1)
        data = f.fread_array_data(counts)
        if verify:
            self.check_crc(e.offset, e.crc32, e.name, e.end)
        mine: list[int] = data.view("<i8").tolist() if data is not None and self.comm.rank == 0 else []
        counts = self.comm.bcast(mine, root=0)
        if len(counts) != prov.writer_size or sum(counts) < 0:
            raise CheckpointError(
                f"{self.path!r}: the writing partition has {len(counts)} ranks, the provenance {prov.writer_size}"
            )
        return Partition.from_counts(counts)


def _parse(model: Any, raw: bytes, what: str, path: str) -> Any:
    try:
        return model.model_validate_json(raw)
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"msg": str(exc), "loc": ()}
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise CheckpointError(f"{path!r}: the {what} is not valid: {first['msg']}{' at ' + where if where else ''}") from exc


def _entry(index: Index, name: str, path: str) -> Any:
    try:
        return index.entry(name)
    except KeyError:
        raise CheckpointError(f"{path!r}: the index has no section {name!r}") from None


def _checksum_error(name: str, offset: int, end: int | None, path: str) -> ChecksumError:
    where = f"bytes {offset}..{end}" if end is not None else f"at byte {offset}"
    err = ChecksumError(f"{path!r}: section {name!r} ({where}) does not match its CRC32: the file is damaged")
    err.section, err.offset, err.end = name, offset, end if end is not None else -1
    return err


def read_info(path: str | os.PathLike[str], *, comm: Any = None, verify: bool = True, info: Any = None) -> CheckpointInfo:
    """Read a checkpoint's manifest, provenance, index and writing partition (no field data).

    Collective (any number of ranks; serial with ``comm=None``).

    Raises
    ------
    IncompleteCheckpointError
        If the file has no footer (the save did not finish).
    CheckpointError
        If the index or manifest is malformed; ChecksumError if the index
        does not match the CRC32 in the footer.
    """
    with scda.fopen_read(path, comm=as_comm(comm), info=info, checksum=verify) as f:
        return _Reader(f).info(verify)


def _partition(spec: Any, N: int, comm: Comm, weights: Any) -> Partition:
    if isinstance(spec, Partition):
        if spec.N != N or spec.size != comm.size:
            raise SchemaError(
                f"the partition has {spec.N} leaves on {spec.size} ranks; the checkpoint has {N} leaves, the job {comm.size} ranks"
            )
        return spec
    if spec == "uniform":
        return Partition.uniform(N, comm.size)
    if spec == "weighted":
        return Partition.weighted(weights(), comm)
    raise SchemaError(f"partition must be 'uniform', 'weighted' or a Partition, not {spec!r}")


def load(
    path: str | os.PathLike[str],
    schema: type[S],
    *,
    comm: Any = None,
    partition: PartitionSpec = "uniform",
    fields: list[str] | None = None,
    verify: bool = True,
    info: Any = None,
    backend: str | None = None,
) -> Loaded[S]:
    """Read a checkpoint on the current communicator, with a new partition of its leaves.

    Collective.  Any number of ranks can read a file, whatever number wrote
    it: leaves are stored in curve order, so rank p reads the contiguous
    leaves ``global_first_quadrant[p] .. [p + 1]`` of the chosen partition
    and their cell values, straight from the file (no data moves between
    ranks).  Fields are found through the index (no scan), so ``fields=``
    reads only those.  With ``verify`` every byte read is checked against the
    CRC32 in the index.  A file of an older schema version is upgraded by the
    schema's migrations; data stored in the other byte order is converted
    where the schema asks for the native one.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    schema : type of CheckpointSchema
        The schema to read into (its name must match the file's).
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        The communicator (None: serial, no MPI).
    partition : {"uniform", "weighted"} or Partition, optional
        ``"uniform"``: rank p starts at floor(N p / P) (p4est_load).
        ``"weighted"``: ranges of equal bytes (mesh, cells and hp payloads
        of each leaf), computed by a parallel prefix sum.  Or an explicit
        :class:`~amrckpt.partition.Partition` of N leaves over P ranks.
    fields : list of str, optional
        Read only these fields (the others are missing from ``state``,
        built with ``model_construct``).  Without migrations only.
    verify : bool, optional
        Check CRC32s (one pass over the bytes read, by zlib-ng).
    info, backend : optional
        MPI-IO hints and backend, as for :func:`amrckpt.scda.fopen_read`.

    Returns
    -------
    Loaded
        ``state``, ``partition``, ``info``, ``verified``, ``comm`` (unpacks as
        ``state, partition``).

    Raises
    ------
    IncompleteCheckpointError
        On every rank: no footer, the file was cut short.
    ChecksumError
        On every rank: a section read does not match its CRC32 (naming it).
    SchemaError
        On every rank: another schema name, a version without migrations
        (naming both versions), fields that the schema lacks, a partition
        that does not fit.
    CheckpointError, ScdaError
        For malformed files.
    """
    c = as_comm(comm)
    if not (isinstance(schema, type) and issubclass(schema, CheckpointSchema) and schema is not CheckpointSchema):
        raise SchemaError(f"load: schema must be a subclass of CheckpointSchema, not {schema!r}")
    with scda.fopen_read(path, comm=c, info=info, backend=backend, checksum=verify) as f:
        f._defer_crc = True  # nothing read is handed out before _check_crcs: CRC while reading on
        rd = _Reader(f)
        ck = rd.info(verify)
        m = ck.manifest
        _check_manifest(m, rd.path)
        if m.schema_name != schema.__amrckpt_name__:
            raise SchemaError(f"{rd.path!r} holds schema {m.schema_name!r}, not {schema.__amrckpt_name__!r} ({schema.__name__})")
        migrate = m.schema_version != schema.__amrckpt_version__
        schema.check_migrations(m.schema_version)
        wanted = [fs for fs in m.fields if fields is None or migrate or fs.name in fields]
        if fields is not None and not migrate:
            missing = sorted(set(fields) - {fs.name for fs in m.fields})
            if missing:
                raise SchemaError(f"{rd.path!r} has no fields {missing}")
        part = _partition(partition, m.num_leaves, c, lambda: _leaf_weights(rd, m, ck.index))
        values = {fs.name: _read_field(rd, fs, ck, part, verify) for fs in wanted}
        verified = _check_crcs(f, ck.index, rd.path) if verify else ()
    n_local = int(part.elem_counts[c.rank])
    err: BaseException | None = None
    state: Any = None
    try:
        as_read = dict(values)
        if migrate:
            values = schema.migrate(values, m.schema_version)
        # Meshes checked while read, or proven by their CRC to be what their writer checked, and not replaced by a migration.
        checked = {k for k, v in values.items() if as_read.get(k) is v and (not verify or k in verified)}
        state = _build(schema, values, fields, n_local, rd.path, checked)
    except Exception as exc:  # noqa: BLE001 - agreed on by every rank below
        err = exc if isinstance(exc, AmrckptError) else SchemaError(f"{rd.path!r}: the fields do not fit {schema.__name__}: {exc}")
    agree(c, err, what="load")
    return Loaded(state, part, ck, verified, getattr(c, "mpi_comm", None))


def _build(schema: type[S], values: dict[str, Any], fields: list[str] | None, n: int, path: str, checked: set[str]) -> S:
    """Validate the (migrated) local fields against the schema and build the state. Not collective."""
    kinds = schema.__amrckpt_fields__
    extra = sorted(set(values) - set(kinds))
    if extra:
        raise SchemaError(f"{path!r} holds fields {extra} that {schema.__name__} lacks (a migration may drop or rename them)")
    names = list(kinds) if fields is None else [k for k in kinds if k in fields]
    missing = [k for k in names if k not in values and schema.model_fields[k].is_required()]
    if missing:
        raise SchemaError(f"{path!r} lacks fields {missing} of {schema.__name__} (a migration may add them)")
    typed: dict[str, Any] = {}
    for name in names:
        if name not in values:
            continue
        kind, v = kinds[name], values[name]
        if isinstance(kind, (InlineKind, BlockKind)):
            # JSON values validate in JSON mode, as written (strict models, dates, tuples).
            try:
                v = _json_adapter(schema, name).validate_json(json.dumps(v, allow_nan=True))
            except ValueError as exc:
                raise SchemaError(f"field {name!r}: the value in {path!r} does not fit {schema.__name__}: {exc}") from exc
        else:
            v = _to_schema_dtype(kind, v)
            validate_field(name, kind, v, n, check_values=name not in checked)
        typed[name] = v
    if fields is None:
        return schema.model_validate(typed)
    return schema.model_construct(**typed)


@functools.cache
def _json_adapter(schema: type[CheckpointSchema], name: str) -> TypeAdapter[Any]:
    annotation: Any = schema.model_fields[name].annotation
    return TypeAdapter(annotation)


def _check_manifest(m: Manifest, path: str) -> None:
    """Check what the reader relies on before using the manifest (same outcome on every rank)."""
    names = [fs.name for fs in m.fields]
    if len(set(names)) != len(names):
        raise CheckpointError(f"{path!r}: the manifest names a field twice")
    if m.mesh is not None:
        want = mesh_record_dtype(m.mesh.dim)
        if [tuple(r) for r in m.mesh.record] != [(nm, want[nm].str) for nm in want.names or ()]:
            raise CheckpointError(f"{path!r}: the mesh record {m.mesh.record} is not amrckpt's for {m.mesh.dim}D")
        if m.mesh.field not in names or m.field(m.mesh.field).kind != "mesh":
            raise CheckpointError(f"{path!r}: the manifest's mesh field {m.mesh.field!r} is not a mesh field")
    for fs in m.fields:
        kinds = {"inline": "I", "block": "B", "mesh": "A", "cells": "A", "hp": "V"}
        if kinds[fs.kind] != fs.section or any(d < 0 for d in fs.shape):
            raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")
        if fs.kind in ("cells", "hp"):
            dt = dtype_from_json(fs.dtype, f"{path!r}: field {fs.name!r}")
            if fs.kind == "hp" and dt.itemsize * math.prod(fs.shape) == 0:
                raise CheckpointError(f"{path!r}: field {fs.name!r} has values of no bytes")
        elif fs.kind == "mesh" and m.mesh is None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} is a mesh, but the manifest has no mesh")
    if m.mesh is None and any(fs.kind in ("cells", "hp") for fs in m.fields):
        raise CheckpointError(f"{path!r}: cell fields without a mesh")


def _check_leaves(rd: _Reader, name: str, h: scda.SectionHeader | None, m: Manifest) -> None:
    """Raise CheckpointError unless the A or V section ``h`` of a leaf field has the manifest's leaf count."""
    if h is not None and h.type in ("A", "V") and h.elem_count != m.num_leaves:
        raise CheckpointError(f"{rd.path!r}: field {name!r} has {h.elem_count} leaves in the file, the manifest {m.num_leaves}")


def _leaf_weights(rd: _Reader, m: Manifest, index: Index) -> np.ndarray:
    """Bytes per leaf (mesh, cells, hp payloads) on this rank under the uniform partition."""
    if m.mesh is not None:
        rd.f.fseek_section(_entry(index, m.mesh.field, rd.path).offset)
        _check_leaves(rd, m.mesh.field, rd.f.fread_section_header(), m)
    part = Partition.uniform(m.num_leaves, rd.comm.size)
    n = int(part.elem_counts[rd.comm.rank])
    fixed = 0
    if m.mesh is not None:
        fixed += sum(np.dtype(dt).itemsize for _, dt in m.mesh.record)
    w = np.full(n, 0, dtype=np.int64)
    for fs in m.fields:
        if fs.kind == "cells":
            fixed += dtype_from_json(fs.dtype, rd.path).itemsize * math.prod(fs.shape)
        elif fs.kind == "hp":
            rd.f.fseek_section(_entry(index, fs.name, rd.path).offset)
            rd.f.fread_section_header(decode=True)
            sizes = rd.f.fread_varray_sizes(part.elem_counts.tolist())
            assert sizes is not None
            w += sizes.astype(np.int64)
    if fixed > rd.f.file_size:  # a manifest's shapes, not the file: would not fit int64 either
        raise CheckpointError(f"{rd.path!r}: the manifest gives each leaf {fixed} bytes, more than the file holds")
    return w + fixed


def _read_field(rd: _Reader, fs: FieldSpec, ck: CheckpointInfo, part: Partition, verify: bool) -> Any:
    f, comm = rd.f, rd.comm
    e = _entry(ck.index, fs.name, rd.path)
    f.fseek_section(e.offset)
    h = f.fread_section_header(decode=True)
    if h is None or h.type != fs.section or h.user_string != fs.name.encode() or h.decoded != fs.compressed:
        raise CheckpointError(f"{rd.path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it")
    _check_leaves(rd, fs.name, h, ck.manifest)  # before anything is allocated by the manifest's leaf count
    counts = part.elem_counts.tolist()
    n = counts[comm.rank]
    if fs.kind in ("inline", "block"):
        if fs.kind == "inline":
            raw: bytes = comm.bcast(f.fread_inline_data(root=0) or b"", root=0)
        else:
            data = f.fread_block_data(root=None)
            assert data is not None
            raw = data.tobytes()
        if verify:  # before parsing: damaged JSON is a damaged section, not a parse error
            rd.check_crc(e.offset, e.crc32, fs.name, e.end)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise CheckpointError(f"{rd.path!r}: field {fs.name!r} does not hold JSON: {exc}") from exc
    if fs.kind == "mesh":
        assert ck.manifest.mesh is not None
        ms = ck.manifest.mesh
        rec = mesh_record_dtype(ms.dim)
        buf = np.empty(n, dtype=rec)
        f.fread_array_data(counts, rec.itemsize, out=buf)
        # Unverified leaves are checked while they are unpacked; verified ones were checked by their writer.
        return Forest.from_records(buf, num_trees=ms.num_trees, curve=ms.curve, check=not verify)
    dt = dtype_from_json(fs.dtype, f"{rd.path!r}: field {fs.name!r}")
    if fs.kind == "cells":
        if h.elem_size != dt.itemsize * math.prod(fs.shape):  # before allocating by the manifest's shape
            what = f"{fs.shape} of {dt}"
            raise CheckpointError(f"{rd.path!r}: field {fs.name!r} has {h.elem_size}-byte values in the file, not {what}")
        arr = np.empty((n, *fs.shape), dtype=dt)
        f.fread_array_data(counts, dt.itemsize * math.prod(fs.shape), out=arr)
        return arr
    value_nbytes = dt.itemsize * math.prod(fs.shape)
    if value_nbytes > f.file_size:  # the manifest's shape, the same on every rank: no value of the file is that large
        raise CheckpointError(f"{rd.path!r}: field {fs.name!r} has values of {value_nbytes} bytes, more than the file holds")
    sizes = f.fread_varray_sizes(counts)
    assert sizes is not None
    err: BaseException | None = None
    if value_nbytes and sizes.size and _not_multiples(sizes, value_nbytes):
        err = CheckpointError(f"{rd.path!r}: field {fs.name!r} has a leaf whose size is not a multiple of {value_nbytes} bytes")
    agree(comm, err, what="load")
    data = f.fread_varray_data(counts, sizes, f.proc_sizes())
    assert data is not None
    values = data.view(dt).reshape(-1, *fs.shape)
    counts = sizes.view(np.int64)  # sizes are below 2**63: they fit the file
    shift = value_nbytes.bit_length() - 1
    return HpData(values, counts >> shift if value_nbytes == 1 << shift else counts // value_nbytes)


def _not_multiples(sizes: np.ndarray, value_nbytes: int) -> bool:
    """Whether a size is not a multiple of ``value_nbytes``; for a power of two, one OR-reduction (no temporary)."""
    if value_nbytes & (value_nbytes - 1) == 0:
        return bool(int(np.bitwise_or.reduce(sizes)) & (value_nbytes - 1))
    return bool(np.any(sizes % np.uint64(value_nbytes)))


def _to_schema_dtype(kind: FieldKind, v: Any) -> Any:
    """Convert cell data to the byte order the schema asks for (native: the reader's)."""
    if not isinstance(kind, CellsKind):
        return v
    arr = v.values if isinstance(v, HpData) else v
    if not isinstance(arr, np.ndarray):
        return v
    target = disk_dtype(kind.dtype, kind.native)
    if arr.dtype == target or arr.dtype.newbyteorder("=") != target.newbyteorder("="):
        return v  # equal, or not a byte-order difference: validate_field reports it
    arr = arr.astype(target)
    return HpData(arr, v.counts) if isinstance(v, HpData) else arr


def _check_crcs(f: scda.ScdaReader, index: Index, path: str) -> tuple[str, ...]:
    """Compare the CRC32 of every section read in full with the index (same outcome on every rank)."""
    by_offset = {e.offset: e for e in index.sections}
    done = []
    for off, end, crc in f.section_crcs():
        e = by_offset.get(off)
        if e is None or crc is None:
            continue
        if e.end != end or e.crc32 != crc:
            raise _checksum_error(e.name, e.offset, e.end, path)
        done.append(e.name)
    return tuple(done)


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes
    ----------
    path : str
    ok : bool
        True only if the file is complete and every section matches its CRC32.
    problems : list of str
        One sentence per problem, naming the section and its byte range.
    info : CheckpointInfo or None
        The metadata, if the footer, index and manifest could be read.
    """

    path: str
    ok: bool
    problems: list[str]
    info: CheckpointInfo | None


def verify(path: str | os.PathLike[str], *, comm: Any = None, info: Any = None, structure: bool = True) -> VerifyReport:
    """Check that a checkpoint is complete and intact.

    Collective; the bytes of every section in the index are read, spread
    evenly over the ranks, and their CRC32s combined (one allreduce) and
    compared with the index.  With ``structure``, rank 0 also walks the scda
    sections (:func:`amrckpt.scda.scan`) and compares them with the index.

    Returns
    -------
    VerifyReport
        Never raises for a damaged file: the report says what is wrong.
    """
    c = as_comm(comm)
    spath = os.fspath(path)
    try:
        index = run_on_root(c, lambda: _locate_index(spath))
    except (AmrckptError, OSError) as exc:
        return VerifyReport(spath, False, [f"{type(exc).__name__}: {exc}"], None)
    problems: list[str] = []
    try:
        crcs = _crc_ranges(spath, [(e.offset, e.end) for e in index.sections], c, info)
    except AmrckptError as exc:
        return VerifyReport(spath, False, [f"{type(exc).__name__}: {exc}"], None)
    for e, crc in zip(index.sections, crcs, strict=True):
        if crc is None:
            problems.append(f"section {e.name!r} (bytes {e.offset}..{e.end}) is not inside the file")
        elif crc != e.crc32:
            problems.append(f"section {e.name!r} (bytes {e.offset}..{e.end}) does not match its CRC32")
    ck = None
    try:
        ck = read_info(path, comm=c, verify=True, info=info)
    except (AmrckptError, OSError) as exc:
        if not problems:
            problems.append(f"{type(exc).__name__}: {exc}")
    if structure:
        problems += run_on_root(c, lambda: _structure_problems(spath, index))
    return VerifyReport(spath, not problems, problems, ck)


def _locate_index(path: str) -> Index:
    """Find and check the index through the footer with plain reads (not collective).

    Unlike :func:`read_info` this does not need a valid file header, so that
    :func:`verify` can report damage anywhere by section.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise os_error(exc, path, "cannot open for reading") from exc
    try:
        size = os.fstat(fd).st_size

        read = exact_reader(fd, path, IncompleteCheckpointError)

        off = size - FOOTER_NBYTES
        try:
            if off < scda.FILE_HEADER_NBYTES or off % 32:
                raise IncompleteCheckpointError(f"a file of {size} bytes")
            foot = read_raw_section(read, off, size)
        except (ScdaError, IncompleteCheckpointError) as exc:
            raise IncompleteCheckpointError(
                f"{path!r}: the last 96 bytes are not an amrckpt footer (the save did not finish?): {exc}"
            ) from exc
        if foot.type != "I":
            raise IncompleteCheckpointError(f"{path!r}: the last 96 bytes are not an amrckpt footer (the save did not finish?)")
        index_offset, index_crc = parse_footer(foot.user_string, foot.inline or b"", repr(path))
        where = f"the footer (bytes {off}..{size}) points at byte {index_offset}"
        try:
            raw = read_raw_section(read, index_offset, size) if 0 <= index_offset < off else None
        except ScdaError:
            raw = None
        if raw is None or raw.type != "B" or raw.user_string != INDEX_USER_STRING or raw.end is None:
            raise CheckpointError(f"{path!r}: {where}, where there is no amrckpt index: the footer or the index is damaged")
        blob = read(index_offset, raw.end - index_offset)
        if crc32(blob) != index_crc:
            raise _checksum_error("amrckpt index", index_offset, raw.end, path)
        index: Index = _parse(
            Index, blob[raw.data_offset - index_offset : raw.data_offset - index_offset + raw.elem_size], "index", path
        )
        return index
    finally:
        os.close(fd)


def _structure_problems(path: str, index: Index) -> list[str]:
    try:
        found = scda.scan(path, decode=True).sections
    except (AmrckptError, OSError) as exc:
        return [f"the scda structure is broken: {exc}"]
    have = {(s.offset, s.end, s.type) for s in found}
    out = []
    for e in index.sections:
        if e.type != "F" and (e.offset, e.end, e.type) not in have:
            out.append(f"section {e.name!r}: no {e.type} section spans bytes {e.offset}..{e.end}")
    return out


_VERIFY_CHUNK = 64 << 20


def _crc_ranges(path: str, ranges: list[tuple[int, int]], comm: Comm, info: Any) -> list[int | None]:
    """CRC32 of each byte range (None if it is not inside the file), the reading spread evenly over the ranks. Collective."""
    backend = scda.open_backend(path, "r", comm, info=info)
    terms = []
    err: BaseException | None = None
    try:
        size = backend.file_size()  # collective; a damaged index may name bytes that the file does not have
        outside = [not 0 <= start <= end <= size for start, end in ranges]
        for (start, end), out in zip(ranges, outside, strict=True):
            if out:
                start = end = 0  # read nothing: no buffer sized by the index
            n = end - start
            lo = start + n * comm.rank // comm.size
            hi = start + n * (comm.rank + 1) // comm.size
            s = SectionCrc()
            pos = lo
            while pos < hi and err is None:
                k = min(_VERIFY_CHUNK, hi - pos)
                buf = bytearray(k)
                try:
                    backend.read([(pos, memoryview(buf))], None, 0)
                except ScdaError as exc:
                    err = exc
                    break
                s.add(pos, buf)
                pos += k
            terms.append(s.term(end))
        agree_gather(comm, err, None)
        crcs = comm.allreduce_xor(terms)
        return [None if out else crc for crc, out in zip(crcs, outside, strict=True)]
    finally:
        backend.close()
