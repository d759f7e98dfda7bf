"""Writing a checkpoint: a schema instance onto one scda file through the container (collective)."""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import scda, sfc
from .._crc import crc32
from .._version import __version__
from ..comm import Call, Comm, collective
from ..container import (
    AgreedField,
    CheckpointWriter,
    FieldSpec,
    Manifest,
    RunRecord,
    SaveField,
    WriteResult,
    agree_fields,
    format_version_of,
    handler_for,
    run_record,
    write_run_record,
)
from ..errors import SchemaError
from ..partition import Partition
from ._base import CheckpointSchema
from ._json import digest
from ._kinds import CellsKind, FieldKind, Forest, InlineKind, MeshKind, Prepared

__all__ = ["SaveResult", "check_local", "save"]


@dataclass(frozen=True)
class SaveResult(WriteResult):
    """What :func:`save` wrote: the container's :class:`~amrckpt.container.WriteResult`, and the run.

    Attributes
    ----------
    num_leaves : int
        The global number of leaves of the (first) mesh.
    run : RunRecord or None
        How it was written (ranks, writing partition, host, times): kept out
        of the file; written beside it as ``<path>.run.json`` with
        ``save(..., run_record=True)`` and by the manager.
    partition : Partition or None
        The writing partition of the first mesh's leaves, on every rank
        (its P + 1 offsets: p4est's ``global_first_quadrant``, which every
        rank of a p4est holds too).  It costs the save's one O(P) step, an
        ``MPI_Allgather`` of 8 bytes per rank (no pickling); kept on every
        rank because it is public and ``run`` (on every rank) holds it.
    """

    num_leaves: int = 0
    run: RunRecord | None = None
    partition: Partition | None = None


def check_local(state: CheckpointSchema, *, check_order: bool = True, checksum: bool = False) -> list[Prepared]:
    """Validate this rank's state against its schema; prepare every field for writing.

    Not collective: :func:`save` agrees on the outcome on all ranks.  The
    fields other than meshes are checked against their mesh's local leaf
    count first (with ``checksum``, the CRC32 of each one written as it is
    starts in the helper thread meanwhile), then every mesh is packed into
    its records and, with ``check_order``, its leaves are checked: ranges
    while packing, then the curve order (p4est's ``p4est_tree_is_linear``),
    unless its records are the ones that passed last time (a save's checks,
    or :meth:`Forest.from_p4est`'s: its CRC32 and length).  With
    ``checksum``, a mesh written as it is whose arrays are not views of
    its records is not packed here: its ranges and order are checked on
    the arrays (unless their CRC32s and length are the ones that passed
    last time), and the helper thread packs and CRCs its records
    (:meth:`amrckpt.scda.Checksummed.later`) while the save writes the
    bytes that exist.
    Errors are raised in the same order either way: meshes first.

    Parameters
    ----------
    state : CheckpointSchema
    check_order : bool, optional
        Check each mesh's local leaves: their ranges and alignment while
        packing, and their curve order (unless its records are the ones
        that passed last time).  False: leaves valid by construction
        (p4est's), packed as they are.
    checksum : bool, optional
        Start the CRC32 of every payload written as it is (uncompressed
        cells, arrays, hp values, mesh records): its data is then an
        :class:`amrckpt.scda.Checksummed`, whose CRC32 the save's writer
        takes instead of CRCing the bytes again (a mesh's records are
        packed, then CRC'd, by the helper thread).

    Returns
    -------
    list of Prepared
        One per field, in declaration order.

    Raises
    ------
    SchemaError
        Naming the field: a wrong dtype, shape or length, a value that
        cannot be serialized, an inline value too long, a mesh of the wrong
        dimension or with leaves out of range or out of curve order.
    """
    cls = type(state)
    kinds: dict[str, FieldKind] = cls.__amrckpt_fields__
    meshes = {name: kind for name, kind in kinds.items() if isinstance(kind, MeshKind)}
    for name, mk in meshes.items():
        mk.check_value(name, getattr(state, name), None, check_values=False)
    out: dict[str, Prepared] = {}
    later: SchemaError | None = None  # a field's error, raised after the meshes' own
    for name, kind in kinds.items():
        if name in meshes:
            continue
        mesh = kind.mesh if kind.per_leaf and isinstance(kind, CellsKind) else None
        try:
            out[name] = kind.prepare(cls, name, getattr(state, name), len(getattr(state, mesh)) if mesh is not None else None)
        except SchemaError as exc:
            later = later or exc
            continue
        payload = out[name].payload
        if checksum and isinstance(payload.data, np.ndarray) and _verbatim(kind):
            payload.data = scda.Checksummed.start(payload.data)  # in the helper thread, while the meshes are packed
    for name, mk in meshes.items():
        mesh = getattr(state, name)
        # The checks cost most of a save of a 2M-leaf 3D mesh; meshes change at adaptation, not at every
        # checkpoint: a mesh whose bytes have the CRC32 and length of the ones last checked (ranges and order,
        # by a save or by Forest.from_p4est) is not checked again.  A mesh whose arrays must be packed into
        # records (not views of records) is packed by the helper thread while the writer writes the bytes that
        # exist (Checksummed.later): its key is the CRC32 of its arrays, and it is checked on them.  Else a mesh
        # that may be a known one is packed unchecked, and checked after its CRC32 if it is not.
        known = getattr(mesh, "_ordered", None)
        if checksum and _verbatim(mk) and mesh._own_records() is None:
            seen = (_arrays_crc(mesh), len(mesh), mesh.curve, mesh.num_trees) if check_order else None
            if seen is not None and known != seen:
                _check_mesh(name, mesh, seen, ranges=True)
            out[name] = mk.prepare(cls, name, mesh, None, later=True)
            continue
        out[name] = mk.prepare(cls, name, mesh, None, check=check_order and known is None)
        payload = out[name].payload
        records = payload.data
        if check_order:
            crc = crc32(records)  # the checks' key and the records' CRC32 in the file: one pass
            if checksum and _verbatim(mk):
                payload.data = scda.Checksummed(records, crc)
        elif checksum and _verbatim(mk):
            payload.data = scda.Checksummed.start(records)  # no key needed: in the helper thread
        seen = (crc, len(records), mesh.curve, mesh.num_trees) if check_order else None
        if seen is not None and known != seen:
            _check_mesh(name, mesh, seen, ranges=known is not None)  # known: packed unchecked above
    if later is not None:
        raise later
    return [out[name] for name in kinds]


def _check_mesh(name: str, mesh: Forest, seen: tuple[int, int, str, int], *, ranges: bool) -> None:
    """Check a mesh's leaves (their ranges too, if ``ranges``), then remember ``seen`` as the key of the checked mesh.

    Raises
    ------
    SchemaError
        On this rank, naming the field: a leaf out of range, or leaves out of curve order.
    """
    if ranges:
        try:
            mesh.check()
        except SchemaError as exc:
            raise SchemaError(f"field {name!r}: {exc}") from exc
    try:
        mesh.check_order()
        mesh._ordered = seen
    except SchemaError as exc:
        raise SchemaError(
            f"field {name!r}: {exc} (leaves must follow the space-filling curve within each rank; "
            "sort them with amrckpt.sfc.sfc_order, or pass check_mesh=False to skip this check)"
        ) from exc


def _arrays_crc(mesh: Forest) -> int:
    """Return the key of a mesh's arrays for the check cache: their CRC32s chained, above 2**32 (never a records' key)."""
    crc = 0
    for a in (mesh.tree, mesh.level, *mesh.coords()):
        crc = crc32(np.ascontiguousarray(a), crc)
    return crc | (1 << 32)


def _verbatim(kind: FieldKind) -> bool:
    """Whether this rank writes a field's payload into the file as it is (its own part; not compressed, not in chunks)."""
    return kind.distributed and not kind.compress and getattr(kind, "chunks", None) is None


def _boundary(mesh: Forest) -> tuple[int, int, int, int] | None:
    """(tree, key) of the first local leaf and (tree, key past) the last, for the order across ranks."""
    if len(mesh) == 0:
        return None
    idx = np.array([0, len(mesh) - 1])
    coords = [c[idx] for c in mesh.coords()]
    lev = mesh.level[idx]
    keys = sfc.sfc_keys(*coords, level=lev, curve=mesh.curve, check=False)  # type: ignore[arg-type]
    L = sfc.MAXLEVEL[mesh.dim]
    past = int(keys[1]) + (1 << (mesh.dim * (L - int(lev[1]))))
    return (int(mesh.tree[0]), int(keys[0]), int(mesh.tree[-1]), past)


def _save_fields(state: Any, prepared: list[Prepared]) -> list[SaveField]:
    """Return this rank's fields as the container's agreement takes them, each mesh with its bounds. Not collective."""
    return [
        SaveField(
            p.name,
            p.kind.kind,
            p.payload,
            p.count,
            p.digest,
            p.shape,
            _boundary(getattr(state, p.name)) if isinstance(p.kind, MeshKind) else None,
            isinstance(p.kind, MeshKind),
        )
        for p in prepared
    ]


def _agree(call: Call, state: Any, prepared: list[Prepared] | None) -> dict[str, AgreedField]:
    """Check the state across ranks (:func:`amrckpt.container.agree_fields`: two collectives); every rank raises the same error.

    Besides the container's checks of every field: the schema (its name,
    version and fields) and the meshes' dimension, trees and curve are the
    same on every rank.
    """
    cls = type(state)
    fields = call.run(_save_fields, state, prepared) if prepared is not None else None
    meshes = [getattr(state, p.name) for p in prepared or [] if isinstance(p.kind, MeshKind)]
    equal = {
        "schema": (_schema_digest(cls), "the ranks save different schemas (their name, version or fields differ)"),
        "meshes": (
            digest(repr([(m.dim, m.num_trees, m.curve) for m in meshes]).encode()),
            "the ranks' meshes disagree on dimension, number of trees or curve",
        ),
    }
    return agree_fields(call, fields, equal)


def save(
    state: CheckpointSchema,
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    check_mesh: bool = True,
    run_record: bool = False,
    access: scda.FileAccess | None = None,
) -> SaveResult:
    """Write a simulation's state as one scda checkpoint file.

    Collective.  Every rank passes its own part of the state (its mesh
    leaves, one cell value per local leaf, its elements of distributed
    arrays); inline, block and replicated array fields must be the same on
    every rank.  Everything is checked on every rank before a byte is
    written, with one exclusive scan and one reduction of O(1) numbers per
    rank (nothing of size P); then every rank queues its own bytes through
    :class:`amrckpt.container.CheckpointWriter`, which agrees once on every
    error and writes the whole file with one collective write per rank.
    The file's bytes are a function of the state alone: the same state
    saved on any number of ranks, at any time, gives the same file (the
    convention is in ``docs/checkpoints.md``).  What depends on the run is
    in the returned :class:`SaveResult` ``.run``.

    Parameters
    ----------
    state : CheckpointSchema
        This rank's state.
    path : str or os.PathLike
        The file to write (created, or overwritten: ``FileAccess.truncate``; never through a symbolic link
        under this name).  For atomic commits use a :class:`~amrckpt.CheckpointManager`.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        The communicator; None writes serially, without MPI.
    check_mesh : bool, optional
        Check each rank's leaves: in range (trees, levels, coordinates in
        their tree and aligned to their level) and in curve order without
        overlaps (default True; vectorized, a few ns per leaf).  ``False``
        skips these local checks, for leaves valid by construction (a p4est
        forest: p4est does not check them either when it saves); the order
        of the ranks' parts along the curve is always checked.
    run_record : bool, optional
        Also write the run record beside the file (``<path>.run.json``, by
        rank 0), so that ``load(partition="writer")`` can restore the
        writing partition.
    access : amrckpt.FileAccess, optional
        How the file is opened and closed: MPI-IO hints (``info``), the
        byte backend, truncation of an existing file, ``sync``
        (``fsync``/``MPI_File_sync`` before closing) and the line breaks of
        the scda padding (``style``); None: the defaults
        (:class:`~amrckpt.scda.FileAccess`).

    Returns
    -------
    SaveResult

    Raises
    ------
    SchemaError
        On every rank, naming the field and the rank: a dtype, shape or
        length that does not fit, values of global fields that differ between
        ranks, leaves out of order within a rank or across ranks, every
        rank passing the same (global) mesh.
    ScdaIOError
        On every rank, if the file cannot be written (errno ``ELOOP``, before it is opened, if ``path`` is a symbolic
        link).
    """
    t0 = time.time()
    a = scda.FileAccess.of(access)
    with collective(comm, "save") as call:
        result, manifest, prepared = _save(call, state, path, a, check_mesh)
        first_mesh = next((j for j, p in enumerate(prepared) if isinstance(p.kind, MeshKind)), None)
        # The writing partition (P + 1 offsets) is what a save returns, on every rank (public: SaveResult.partition,
        # run.global_first_quadrant): one MPI_Allgather of 8 bytes per rank, the save's only O(P) step.
        partition = (
            Partition.from_counts(call.allgather_int(prepared[first_mesh].count, what="save: partition"))
            if first_mesh is not None
            else None
        )
        gfq = partition.global_first_quadrant.tolist() if partition is not None else None
        run = run_record_of(call.comm, gfq, t0)
        if run_record:
            _write_record(call, result.path, run, a.sync)
    return SaveResult(result.path, result.nbytes, manifest, result.index, manifest.num_leaves, run, partition)


def _save(
    call: Call,
    state: CheckpointSchema,
    path: str | os.PathLike[str],
    access: scda.FileAccess,
    check_mesh: bool,
) -> tuple[WriteResult, Manifest, list[Prepared]]:
    """Check the state on every rank, agree, and write the file (the body of :func:`save`). Collective."""

    def check() -> list[Prepared]:
        if not isinstance(state, CheckpointSchema):
            raise SchemaError(f"save: expected an instance of a CheckpointSchema, got {type(state).__name__}")
        return check_local(state, check_order=check_mesh, checksum=True)

    prepared = call.run(check)
    agreed = _agree(call, state, prepared)
    assert prepared is not None  # else the agreement raised
    manifest = _manifest(type(state), state, prepared, agreed)
    with CheckpointWriter(path, manifest, comm=call.comm, access=access, defer=True) as w:
        for p, fs in zip(prepared, manifest.fields, strict=True):
            w.write_field(fs, p.payload, agreed[p.name].counts, agreed[p.name].nbytes)
    return w.close(), manifest, prepared


def run_record_of(comm: Comm, gfq: list[int] | None, t0: float) -> RunRecord:
    """Return the run record of a save that started at ``t0`` (not collective)."""
    return run_record(comm, gfq, t0, time.time() - t0)


def _write_record(call: Call, path: str, run: RunRecord, sync: bool) -> None:
    """Rank 0 writes the run record beside the file; every rank raises if it fails. Collective."""

    def write() -> None:
        try:
            write_run_record(path, run, sync=sync)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(path)  # nothing half-done is left behind
            raise SchemaError(f"{path!r} was written, but not its run record: {exc}") from exc

    call.run(write, on=0)
    call.agree("save: run record")


def _manifest(
    cls: type[CheckpointSchema], state: CheckpointSchema, prepared: list[Prepared], agreed: dict[str, AgreedField]
) -> Manifest:
    kinds = cls.__amrckpt_fields__
    meshes = []
    for p in prepared:
        if isinstance(p.kind, MeshKind):
            mesh = getattr(state, p.name)  # dimension, trees and curve agreed on by every rank
            h = handler_for(p.kind.kind)
            meshes.append(
                h.mesh_spec(  # type: ignore[attr-defined]
                    p.name,
                    mesh.dim,
                    mesh.num_trees,
                    mesh.curve,
                    sfc.MAXLEVEL[mesh.dim],
                    agreed[p.name].counts.total,
                    p.kind.geometry,
                )
            )
    fields: list[FieldSpec] = []
    for p in prepared:
        k = kinds[p.name]
        decl = k.declaration(p, getattr(k, "mesh", None))
        fields.append(handler_for(k.kind).describe(decl, agreed[p.name].counts.total, agreed[p.name].max_count))
    return Manifest(
        format_version=format_version_of(meshes),
        amrckpt_version=__version__,
        schema_name=cls.__amrckpt_name__,
        schema_version=cls.__amrckpt_version__,
        meshes=meshes,
        fields=fields,
        values={p.name: p.value for p in prepared if isinstance(p.kind, InlineKind)},
    )


_DIGESTS: weakref.WeakKeyDictionary[type, int] = weakref.WeakKeyDictionary()


def _schema_digest(cls: type[CheckpointSchema]) -> int:
    """Identify a schema: name, version, and every field's name and kind (once per class: a geometry's repr is long)."""
    got = _DIGESTS.get(cls)
    if got is None:
        fields = [(n, type(k).__name__, repr(k)) for n, k in cls.__amrckpt_fields__.items()]
        got = _DIGESTS[cls] = digest(repr((cls.__amrckpt_name__, cls.__amrckpt_version__, fields)).encode())
    return got
