"""Reading a checkpoint on any number of processes, with a new partition (layer 5).

The file is read through the container (:class:`amrckpt.container.CheckpointReader`):
this module chooses the partition of each mesh, asks the reader for each
field, turns what it returns into the schema's values (each field kind's
``from_file``), runs migrations and validates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from .adapt import Adapt, adapt_state
from .comm import Call, Comm, collective, mpi_of
from .container import CheckpointInfo, CheckpointReader, FieldSpec, Manifest, MeshSpec, VerifyReport, handler_for, read_info, verify
from .errors import AdaptError, AmrckptError, SchemaError
from .partition import Partition, family_window, keep_families
from .scda import FileAccess
from .schema import KINDS, CheckpointSchema, FieldKind

__all__ = ["CheckpointInfo", "Loaded", "VerifyReport", "load", "read_info", "verify"]

S = TypeVar("S", bound=CheckpointSchema)
PartitionSpec = Literal["uniform", "weighted", "writer"] | Partition


@dataclass(frozen=True)
class Loaded(Generic[S]):
    """What :func:`load` returns on each rank.

    Attributes
    ----------
    state : CheckpointSchema
        This rank's part of the state: its leaves under :attr:`partition`
        and their cell values, its elements of distributed arrays; inline,
        block and replicated array fields in full.
    partition : Partition or None
        The partition the leaves of the (first) mesh were read with
        (p4est's ``global_first_quadrant``); None without a mesh.
    info : CheckpointInfo
        Manifest, index, writing partition and run record where known.
    verified : tuple of str
        The sections whose CRC32 was checked against the index.
    comm : mpi4py.MPI.Comm or None
        The MPI communicator the state was read on (None without MPI), so
        that a restored object can rebuild its ghost layer on it.
    partitions : dict of str to Partition
        The partition of every mesh and distributed array read, by field name.
    """

    state: S
    partition: Partition | None
    info: CheckpointInfo
    verified: tuple[str, ...] = field(default=())
    comm: Any = field(default=None, compare=False)
    partitions: dict[str, Partition] = field(default_factory=dict, compare=False)

    def __iter__(self) -> Any:
        """Unpack as ``state, partition = load(...)`` (the two that most callers want)."""
        return iter((self.state, self.partition))


def _partition(spec: Any, ms: MeshSpec, r: CheckpointReader, comm: Comm, first: bool, families: bool = False) -> Partition:
    """Return the partition of mesh ``ms``'s leaves over the ranks of ``comm`` (families kept together). Collective."""
    part = _base_partition(spec, ms, r, comm, first)
    if not families:
        return part
    start, count = family_window(part, comm.rank, ms.dim)
    with collective(comm, "load: keep families") as call:
        # At most 2 * 2**dim - 2 leaves around this rank's cut, read on this rank; a failure is agreed in keep_families.
        window: Any = call.run(r.read_mesh, start, count, ms.field)
        if window is None:
            return keep_families(part, [], [], [[]] * ms.dim, maxlevel=ms.maxlevel, comm=comm)
        coords = [window[c] for c in ("x", "y", "z")[: ms.dim]]
        return keep_families(part, window["tree"], window["level"], coords, maxlevel=ms.maxlevel, comm=comm)


def _base_partition(spec: Any, ms: MeshSpec, r: CheckpointReader, comm: Comm, first: bool) -> Partition:
    """Return the partition of mesh ``ms``'s leaves over the ranks of ``comm``. Collective.

    Raises
    ------
    SchemaError
        On every rank alike, if ``spec`` gives no partition of the mesh's leaves on the ranks of ``comm``: a Partition
        of another N or size, ``"writer"`` where the writing partition is unknown or of another number of ranks, or no
        partition at all.
    """
    N = ms.num_leaves
    if isinstance(spec, Partition):
        if not first:
            return Partition.uniform(N, comm.size)
        if spec.N != N or spec.size != comm.size:
            raise SchemaError(
                f"the partition has {spec.N} leaves on {spec.size} ranks; the checkpoint has {N} leaves, the job {comm.size} ranks"
            )
        return spec
    if spec == "uniform" or (spec == "writer" and not first):
        return Partition.uniform(N, comm.size)
    if spec == "weighted":
        return Partition.weighted(r.leaf_weights(ms.field), comm)
    if spec == "writer":
        w = r.writer_partition()
        if w is None:
            raise SchemaError(
                f"{r.path!r}: its writing partition is unknown (format 2 keeps it beside the file, in "
                f"{os.path.basename(r.path)}.run.json, written by a CheckpointManager or save(run_record=True)); "
                "load with partition='uniform' or 'weighted'"
            )
        if w.size != comm.size:
            raise SchemaError(
                f"{r.path!r} was written on {w.size} ranks; this job has {comm.size}: partition='writer' restores the "
                "writing partition on the same number of ranks only (use 'uniform' or 'weighted')"
            )
        return w
    raise SchemaError(f"partition must be 'uniform', 'weighted', 'writer' or a Partition, not {spec!r}")


def _wanted(m: Manifest, fields: list[str] | None, migrate: bool, path: str) -> list[FieldSpec]:
    """Return the fields to read: all, or those asked for and every inline field (step, time...).

    Raises
    ------
    SchemaError
        On this rank, if a field asked for is not in the file.
    """
    if fields is None or migrate:
        return list(m.fields)
    missing = sorted(set(fields) - {fs.name for fs in m.fields})
    if missing:
        raise SchemaError(f"{path!r} has no fields {missing}")
    return [fs for fs in m.fields if fs.name in fields or handler_for(fs.kind).in_manifest]


def _value_of(kind: FieldKind | None, fs: FieldSpec, m: Manifest, raw: Any, check: bool) -> Any:
    """Return what the container read as a schema value: by the schema's kind, or as the file declares it (a field it lacks)."""
    if kind is None or kind.kind != fs.kind:
        # the kind the file declares (a migration turns it into the schema's)
        kind = KINDS[fs.kind].from_spec(fs, m)[1].metadata[-1]
    return kind.from_file(raw, fs, m.mesh_of(fs), check)


def load(
    path: str | os.PathLike[str],
    schema: type[S] | None = None,
    *,
    comm: Any = None,
    partition: PartitionSpec = "uniform",
    fields: list[str] | None = None,
    verify: bool = True,
    allow_for_coarsening: bool = False,
    access: FileAccess | None = None,
    adapt: Any = None,
) -> Loaded[S]:
    """Read a checkpoint on the current communicator, with a new partition of its leaves.

    Collective.  Any number of ranks can read a file, whatever number wrote
    it: leaves are stored in curve order, so rank p reads the contiguous
    leaves ``global_first_quadrant[p] .. [p + 1]`` of the chosen partition
    and their cell values, straight from the file (no data moves between
    ranks).  Fields are found through the index (no scan), so ``fields=``
    reads only those (and the inline fields, always).  With ``verify`` every
    byte read is checked against the CRC32 in the index.  A file of an
    older schema version is upgraded by the schema's migrations; data
    stored in the other byte order is converted where the schema asks for
    the native one.  Files of format 1 are read too.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    schema : type of CheckpointSchema, optional
        The schema to read into (its name must match the file's).  Without
        one, the schema the file describes
        (:meth:`CheckpointSchema.from_manifest`): every field, with its
        dtype, shape and units as declared when it was written; inline and
        block values as JSON values.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        The communicator (None: serial, no MPI).
    partition : {"uniform", "weighted", "writer"} or Partition, optional
        ``"uniform"``: rank p starts at floor(N p / P) (p4est_load).
        ``"weighted"``: ranges of equal bytes (mesh, cells and hp payloads
        of each leaf), computed by a parallel prefix sum.  ``"writer"``: the
        partition the file was written with (same number of ranks; known
        from the run record beside the file, or a format-1 file).  Or an
        explicit :class:`~amrckpt.partition.Partition` of N leaves over P
        ranks.  It applies to the first mesh; other meshes and distributed
        arrays are split uniformly.
    fields : list of str, optional
        Read only these fields and the inline ones (the others are missing
        from ``state``, built with ``model_construct``).  Without migrations only.
    verify : bool, optional
        Check CRC32s (one pass over the bytes read, by zlib-ng).
    allow_for_coarsening : bool, optional
        Keep every family of sibling leaves (``2**dim`` leaves of one
        parent) on one rank, as p4est's ``p4est_partition_ext`` with
        ``partition_for_coarsening`` does, so that a restarted p4est code
        can coarsen any family: each cut of the uniform, weighted, writer's
        or given partition that splits a family moves to its start or end
        (:func:`amrckpt.partition.keep_families`; each rank reads the few
        leaves around its own cut, then one allgather of one int64 per rank).
        With ``"writer"``, the writer's partition where it keeps every
        family whole (a p4est code's after ``p4est_partition_ext`` with
        ``partition_for_coarsening``), else the cuts that split one moved.
    access : amrckpt.FileAccess, optional
        How the file is opened: MPI-IO hints (``info``) and the byte
        backend (:class:`~amrckpt.scda.FileAccess`); None: the defaults.
    adapt : amrckpt.adapt.Adapt, Refine, Coarsen, Balance or a sequence of them, optional
        Change the (first) mesh and its per-leaf fields while loading
        (:mod:`amrckpt.adapt`): refine, coarsen complete families, 2:1
        balance, change an hp field's degree, with each
        field's transfer.  The leaves are read under the uniform partition
        of the file's leaves (families kept whole if something coarsens),
        adapted on each rank, and moved to ``partition`` (``"uniform"`` or
        ``"weighted"`` over the new leaves; families kept with
        ``allow_for_coarsening``).  The result is an ordinary state of the
        schema, the same on any number of ranks.

    Returns
    -------
    Loaded
        ``state``, ``partition``, ``info``, ``verified``, ``comm``,
        ``partitions`` (unpacks as ``state, partition``).

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
    AdaptError
        On every rank: an adaptation that cannot be done (a marker of the
        wrong length or dtype, a level out of range, a transfer returning
        the wrong shape, Balance without a connectivity, a partition other
        than ``"uniform"`` or ``"weighted"``).
    CheckpointError, ScdaError
        For malformed files.
    """
    if schema is not None and not (
        isinstance(schema, type) and issubclass(schema, CheckpointSchema) and schema is not CheckpointSchema
    ):
        raise SchemaError(f"load: schema must be a subclass of CheckpointSchema, not {schema!r}")
    a = FileAccess.of(access)
    spec = None if adapt is None else Adapt.of(adapt)
    if spec is not None and not (isinstance(partition, str) and partition in ("uniform", "weighted")):
        raise AdaptError(f"load: with adapt, partition must be 'uniform' or 'weighted' (of the new leaves), not {partition!r}")
    with collective(comm, "load") as call:
        return _load(call, path, schema, partition, fields, verify, a, allow_for_coarsening, spec)


def _load(
    call: Call,
    path: str | os.PathLike[str],
    schema: type[S] | None,
    partition: PartitionSpec,
    fields: list[str] | None,
    verify: bool,
    access: FileAccess,
    allow_for_coarsening: bool,
    adapt: Adapt | None = None,
) -> Loaded[S]:
    """Read the checkpoint: the body of :func:`load`, inside its collective ``call``, which agrees once on every error.

    One broadcast of the metadata (with the sections of the fields asked
    for), one or two collective reads, one agreement: the reader keeps its
    errors in ``call``, this builds the state where no error came before,
    and ``call`` agrees on both once the file is closed.
    """
    c = call.comm
    with CheckpointReader(path, comm=c, verify=verify, access=access, fields="all" if fields is None else fields) as r:
        m = r.manifest  # the same on every rank: so is every check of it below
        if schema is None:
            schema = CheckpointSchema.from_manifest(m)  # type: ignore[assignment]
        assert schema is not None
        if m.schema_name != schema.__amrckpt_name__:
            raise call.agreed(
                SchemaError(f"{r.path!r} holds schema {m.schema_name!r}, not {schema.__amrckpt_name__!r} ({schema.__name__})")
            )
        migrate = m.schema_version != schema.__amrckpt_version__
        try:
            if migrate:
                schema.check_migrations(m.schema_version)
            wanted = _wanted(m, fields, migrate, r.path)
        except AmrckptError as exc:
            raise call.agreed(exc) from None
        kinds: dict[str, FieldKind] = schema.__amrckpt_fields__
        target = _adapted_mesh(m, adapt, r.path)
        parts: dict[str, Partition] = {
            ms.field: (
                _partition(partition, ms, r, c, j == 0, allow_for_coarsening)
                if ms.field != target
                else _partition("uniform", ms, r, c, True, adapt is not None and adapt.coarsens and c.size > 1)
            )
            for j, ms in enumerate(m.meshes)
        }
        conn = None
        for fs in m.fields:
            h = handler_for(fs.kind)
            if h.partitioned and not h.per_leaf:  # a distributed array: split uniformly
                parts[fs.name] = Partition.uniform(fs.count or 0, c.size)
        raw = r.read_fields(wanted, parts)  # this rank's error is kept by call
        verified = r.check_crcs()
        ck = r.info
        state: Any = None
        values: dict[str, Any] = {}
        checked: set[str] = set()
        if not call.failed:
            try:
                # Unverified leaves are checked while unpacked; verified ones were checked by their writer.
                values = {fs.name: _value_of(kinds.get(fs.name), fs, m, raw[fs.name], not verify) for fs in wanted}
                as_read = dict(values)
                if migrate:
                    values = schema.migrate(values, m.schema_version)
                # Meshes checked while read, or proven by their CRC to be what their writer checked, not replaced by a migration.
                checked = {k for k, v in values.items() if as_read.get(k) is v and (not verify or k in verified)}
                if target is None:
                    state = _build(schema, values, fields, parts, c.rank, r.path, checked)
                else:
                    g = r.geometry if m.meshes[0].field == target else None
                    conn = None if g is None else g.connectivity
            except Exception as exc:  # noqa: BLE001 - agreed on by every rank below
                call.fail(
                    exc
                    if isinstance(exc, AmrckptError)
                    else SchemaError(f"{r.path!r}: the fields do not fit {schema.__name__}: {exc}")
                )
    call.agree("load")  # the one agreement: raises on every rank if any rank failed (a read, a close, a build)
    if target is not None:
        assert adapt is not None
        state = _adapt_and_build(
            call, schema, values, fields, parts, checked, r.path, target, adapt, partition, allow_for_coarsening, conn
        )
    first = parts.get(m.meshes[0].field) if m.meshes else None
    mc = mpi_of(c)
    return Loaded(state, first, ck, verified, mc.mpi_comm if mc is not None else None, parts)


def _adapted_mesh(m: Manifest, adapt: Adapt | None, path: str) -> str | None:
    """Return the mesh field that ``adapt`` changes (the first by default), or None without an adaptation.

    Raises
    ------
    AdaptError
        On this rank, if the file holds no mesh, or none named as ``adapt.mesh``.
    """
    if adapt is None:
        return None
    names = [ms.field for ms in m.meshes]
    if not names:
        raise AdaptError(f"{path!r} holds no mesh to adapt")
    if adapt.mesh is not None and adapt.mesh not in names:
        raise AdaptError(f"{path!r} has no mesh {adapt.mesh!r} to adapt (its meshes: {names})")
    return adapt.mesh or names[0]


def _adapt_and_build(
    call: Call,
    schema: Any,
    values: dict[str, Any],
    fields: list[str] | None,
    parts: dict[str, Partition],
    checked: set[str],
    path: str,
    mesh: str,
    adapt: Adapt,
    partition: Any,
    families: bool,
    conn: Any,
) -> Any:
    """Adapt the state read (:func:`amrckpt.adapt.adapt_state`), then build it. Collective, inside the load's call."""
    kinds = schema.__amrckpt_fields__
    values, parts[mesh] = adapt_state(call, values, kinds, mesh, adapt, partition, families, conn)
    # The adapted leaves are made valid by construction from leaves that were checked: keep the mesh's mark.
    checked = {k for k in checked if k == mesh}
    state = call.run(_build, schema, values, fields, parts, call.rank, path, checked)
    call.agree("load: the adapted state")
    return state


def _build(
    schema: type[S],
    values: dict[str, Any],
    fields: list[str] | None,
    parts: dict[str, Partition],
    rank: int,
    path: str,
    checked: set[str],
) -> S:
    """Validate the (migrated) local fields against the schema and build the state. Not collective.

    Raises
    ------
    SchemaError
        On this rank, if the fields read are not those of ``schema`` (fields it lacks, or it has fields the file
        lacks).
    """
    kinds: dict[str, FieldKind] = schema.__amrckpt_fields__
    extra = sorted(set(values) - set(kinds))
    if extra:
        raise SchemaError(f"{path!r} holds fields {extra} that {schema.__name__} lacks (a migration may drop or rename them)")
    names = list(kinds) if fields is None else [k for k in kinds if k in fields or k in values]
    missing = [k for k in names if k not in values and schema.model_fields[k].is_required()]
    if missing:
        raise SchemaError(f"{path!r} lacks fields {missing} of {schema.__name__} (a migration may add them)")
    typed: dict[str, Any] = {}
    for name in names:
        if name in values:
            kind = kinds[name]
            mesh = kind.mesh_name(name)
            part = parts.get(mesh) if mesh is not None else None
            n = int(part.elem_counts[rank]) if part is not None and kind.per_leaf else None
            typed[name] = kind.from_read(schema, name, values[name], n, check=name not in checked, path=path)
    if fields is None:
        return schema.model_validate(typed)
    return schema.model_construct(**typed)
