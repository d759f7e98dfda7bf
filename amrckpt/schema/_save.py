"""Writing a checkpoint: a schema instance onto one scda file through the container (collective)."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import scda, sfc
from .._crc import crc32
from .._version import __version__
from ..comm import Comm, agree, agree_gather, as_comm
from ..container import (
    CheckpointWriter,
    FieldSpec,
    Manifest,
    MeshSpec,
    RunRecord,
    WriteResult,
    mesh_record_dtype,
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
        The writing partition of the first mesh's leaves.
    """

    num_leaves: int = 0
    run: RunRecord | None = None
    partition: Partition | None = None


def check_local(state: CheckpointSchema, *, check_order: bool = True) -> list[Prepared]:
    """Validate this rank's state against its schema; prepare every field for writing.

    Not collective: :func:`save` agrees on the outcome on all ranks.  Meshes
    are checked first (ranges while packing; with ``check_order`` the curve
    order of the local leaves, p4est's ``p4est_tree_is_linear``), then every
    other field against its mesh's local leaf count.

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
    out: dict[str, Prepared] = {}
    n_of: dict[str, int] = {}
    for name, kind in kinds.items():
        if isinstance(kind, MeshKind):
            mesh = getattr(state, name)
            out[name] = kind.prepare(cls, name, mesh, None)
            # The order check costs ~70% of a save of a 2M-leaf 3D mesh (issue 18's profile); meshes
            # change at adaptation, not at every checkpoint: a mesh whose records have the CRC32 and
            # length of the ones last checked (a 10 ms pass) is not checked again.
            seen = _records_key(out[name].payload.data, mesh) if check_order else None
            if check_order and getattr(mesh, "_ordered", None) != seen:
                try:
                    mesh.check_order()
                    mesh._ordered = seen
                except SchemaError as exc:
                    raise SchemaError(
                        f"field {name!r}: {exc} (leaves must follow the space-filling curve within each rank; "
                        "sort them with amrckpt.sfc.sfc_order, or pass check_mesh=False to skip this check)"
                    ) from exc
            n_of[name] = out[name].count
    for name, kind in kinds.items():
        if name not in out:
            n = n_of[kind.mesh] if kind.per_leaf and isinstance(kind, CellsKind) and kind.mesh is not None else None
            out[name] = kind.prepare(cls, name, getattr(state, name), n)
    return [out[name] for name in kinds]


def _records_key(records: Any, mesh: Forest) -> tuple[int, int, str, int]:
    """Return what the order check of a mesh depends on: CRC32 and length of its records, curve, number of trees."""
    return (crc32(records), len(records), mesh.curve, mesh.num_trees)


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


def _report(state: CheckpointSchema, prepared: list[Prepared]) -> tuple[Any, ...]:
    """Return this rank's O(1)-sized report: counts, hp bytes, mesh boundaries and metadata, digests, ndarray shapes."""
    meshes = [(p.name, getattr(state, p.name)) for p in prepared if isinstance(p.kind, MeshKind)]
    return (
        tuple(p.count for p in prepared),
        tuple(p.nbytes for p in prepared),
        tuple(_boundary(m) for _, m in meshes),
        tuple(p.digest for p in prepared),
        tuple((m.dim, m.num_trees, m.curve) for _, m in meshes),
        _schema_digest(type(state)),
        tuple(p.shape for p in prepared),
        tuple(p.max_count for p in prepared),
    )


def save(
    state: CheckpointSchema,
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    style: scda.Style = "unix",
    sync: bool = False,
    check_mesh: bool = True,
    info: Any = None,
    backend: str | None = None,
    truncate: bool = True,
    run_record: bool = False,
) -> SaveResult:
    """Write a simulation's state as one scda checkpoint file.

    Collective.  Every rank passes its own part of the state (its mesh
    leaves, one cell value per local leaf, its elements of distributed
    arrays); inline, block and replicated array fields must be the same on
    every rank.  Everything is checked on every rank before a byte is
    written, with one gather of O(1) numbers per rank; then every rank
    writes its own bytes through :class:`amrckpt.container.CheckpointWriter`.
    The file's bytes are a function of the state alone: the same state
    saved on any number of ranks, at any time, gives the same file (the
    convention is in ``docs/checkpoints.md``).  What depends on the run is
    in the returned :class:`SaveResult` ``.run``.

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
        Check that each rank's leaves follow the curve without overlaps
        (default True; vectorized, a few ns per leaf); the order across
        ranks is always checked.  ``False`` skips the local check.
    info, backend, truncate : optional
        MPI-IO hints, backend choice and truncation of an existing file, as
        for :func:`amrckpt.scda.fopen_write`.
    run_record : bool, optional
        Also write the run record beside the file (``<path>.run.json``, by
        rank 0), so that ``load(partition="writer")`` can restore the
        writing partition.

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
        On every rank, if the file cannot be written.
    """
    t0 = time.time()
    c = as_comm(comm)
    cls = type(state)
    err: BaseException | None = None
    prepared: list[Prepared] = []
    report: tuple[Any, ...] = ()
    try:
        if not isinstance(state, CheckpointSchema):
            raise SchemaError(f"save: expected an instance of a CheckpointSchema, got {cls.__name__}")
        prepared = check_local(state, check_order=check_mesh)
        report = _report(state, prepared)
    except Exception as exc:  # noqa: BLE001 - agreed on by every rank below
        err = exc
    gathered = agree_gather(c, err, report)
    _check_across_ranks(cls, prepared, gathered)
    counts = [[g[0][j] for g in gathered] for j in range(len(prepared))]  # (fields, P): libsc's elem_counts
    manifest = _manifest(cls, prepared, gathered, counts)
    with CheckpointWriter(path, manifest, comm=c, style=style, sync=sync, info=info, backend=backend, truncate=truncate) as w:
        for j, (p, fs) in enumerate(zip(prepared, manifest.fields, strict=True)):
            p.payload.elem_counts = counts[j]
            if fs.section == "V" or fs.kind == "hp":
                p.payload.proc_sizes = [g[1][j] for g in gathered]
            w.write_field(fs, p.payload)
    result = w.close()
    first_mesh = next((j for j, p in enumerate(prepared) if isinstance(p.kind, MeshKind)), None)
    partition = Partition.from_counts(counts[first_mesh]) if first_mesh is not None else None
    gfq = partition.global_first_quadrant.tolist() if partition is not None else None
    run = run_record_of(c, gfq, t0)
    if run_record:
        _write_record(c, result.path, run, sync)
    return SaveResult(result.path, result.nbytes, manifest, result.index, manifest.num_leaves, run, partition)


def run_record_of(comm: Comm, gfq: list[int] | None, t0: float) -> RunRecord:
    """Return the run record of a save that started at ``t0`` (not collective)."""
    return run_record(comm, gfq, t0, time.time() - t0)


def _write_record(comm: Comm, path: str, run: RunRecord, sync: bool) -> None:
    """Rank 0 writes the run record beside the file; every rank raises if it fails. Collective."""
    err: BaseException | None = None
    if comm.rank == 0:
        try:
            write_run_record(path, run, sync=sync)
        except OSError as exc:
            err = SchemaError(f"{path!r} was written, but not its run record: {exc}")
            with contextlib.suppress(OSError):
                os.unlink(path)  # nothing half-done is left behind
    agree(comm, err, what="save")


def _manifest(cls: type[CheckpointSchema], prepared: list[Prepared], gathered: list[Any], counts: list[list[int]]) -> Manifest:
    kinds = cls.__amrckpt_fields__
    meshes = []
    metas = iter(gathered[0][4])
    for j, p in enumerate(prepared):
        if isinstance(p.kind, MeshKind):
            dim, num_trees, curve = next(metas)
            rec = mesh_record_dtype(dim)
            meshes.append(
                MeshSpec(
                    field=p.name,
                    dim=dim,
                    num_trees=num_trees,
                    curve=curve,
                    maxlevel=sfc.MAXLEVEL[dim],
                    record=[(nm, rec[nm].str) for nm in rec.names or ()],
                    num_leaves=sum(counts[j]),
                    geometry=p.kind.geometry,
                )
            )
    fields = []
    for j, p in enumerate(prepared):
        k = kinds[p.name]
        spec = k.describe(p, getattr(k, "mesh", None))
        if k.kind == "array":
            spec["count"] = sum(counts[j])
        if spec.get("layout") == "counts":
            spec["count_dtype"] = count_dtype(max(g[7][j] for g in gathered))
        fields.append(FieldSpec.model_validate(spec))
    return Manifest(
        amrckpt_version=__version__,
        schema_name=cls.__amrckpt_name__,
        schema_version=cls.__amrckpt_version__,
        meshes=meshes,
        fields=fields,
        values={p.name: p.value for p in prepared if isinstance(p.kind, InlineKind)},
    )


def count_dtype(max_count: int) -> str:
    """Return the narrowest unsigned integer (``u1``, ``<u2``, ``<u4``, ``<u8``) that holds ``max_count``."""
    for dt in ("u1", "<u2", "<u4"):
        if max_count <= np.iinfo(dt).max:
            return dt
    return "<u8"


def _schema_digest(cls: type[CheckpointSchema]) -> int:
    """Identify a schema: name, version, and every field's name and kind."""
    fields = [(n, type(k).__name__, repr(k)) for n, k in cls.__amrckpt_fields__.items()]
    return digest(repr((cls.__amrckpt_name__, cls.__amrckpt_version__, fields)).encode())


def _check_across_ranks(cls: type[CheckpointSchema], prepared: list[Prepared], gathered: list[Any]) -> None:
    """Check the gathered reports; deterministic, so every rank raises the same error."""
    schemas = [g[5] for g in gathered]
    if len(set(schemas)) > 1:
        r = next(r for r, d in enumerate(schemas) if d != schemas[0])
        raise SchemaError(f"the ranks save different schemas (rank 0 and rank {r} differ in name, version or fields)")
    names = list(cls.__amrckpt_fields__)
    for key, what in ((3, "differs between ranks"), (6, "has a different shape on some ranks")):
        per_rank = [g[key] for g in gathered]
        for j, name in enumerate(names):
            if len({d[j] for d in per_rank}) > 1:
                r = next(r for r, d in enumerate(per_rank) if d[j] != per_rank[0][j])
                raise SchemaError(f"field {name!r} {what} (e.g. rank 0 and rank {r}); it must be the same on every rank")
    metas = {g[4] for g in gathered}
    if len(metas) > 1:
        raise SchemaError(f"the ranks' meshes disagree on dimension, number of trees or curve: {sorted(metas, key=str)}")
    mesh_names = [n for n, k in cls.__amrckpt_fields__.items() if isinstance(k, MeshKind)]
    for m, mesh in enumerate(mesh_names):
        bounds = [(r, g[2][m]) for r, g in enumerate(gathered) if g[2][m] is not None]
        if len(bounds) > 1 and all(b == bounds[0][1] for _, b in bounds):
            raise SchemaError(
                f"mesh {mesh!r}: every rank passed the same {gathered[0][0][names.index(mesh)]} leaves: each rank must pass "
                "only its own part of the mesh (its leaves of a partition along the curve, e.g. amrckpt.Partition.uniform), "
                "not the whole mesh"
            )
        for (r0, last), (r, b) in itertools.pairwise(bounds):
            if (b[0], b[1]) < (last[2], last[3]):
                raise SchemaError(
                    f"mesh {mesh!r}: the leaves are not in curve order across ranks: the first leaf of rank {r} "
                    f"(tree {b[0]}) does not follow the last leaf of rank {r0} (tree {last[2]}); the ranks' parts overlap "
                    "or are out of rank order"
                )
