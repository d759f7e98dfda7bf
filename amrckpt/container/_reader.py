"""Reading a checkpoint file: metadata from the root, fields by their handlers' plans, CRC32s against the index."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from .. import scda
from ..comm import Comm, as_comm, collective, collective_method, current_call
from ..errors import AmrckptError, CheckpointError, IncompleteCheckpointError, ScdaIOError
from ..partition import Partition
from ..scda import checksum_error
from ._convention import FieldSpec, Index, IndexEntry, Manifest, MeshSpec, Provenance, RunRecord
from ._geometry import Geometry
from ._handlers import handler_for
from ._metadata import (
    CheckpointInfo,
    Metadata,
    entry_of,
    explain,
    parse_model,
    read_index_on_root,
    read_metadata,
    read_run_record,
    read_sections,
    writer_partition_of,
)
from ._ranges import LeafRanges
from ._sections import Section, Span, resolve

__all__ = [
    "CheckpointInfo",
    "CheckpointReader",
    "Geometry",
    "checksum_error",
    "parse_model",
    "read_index_on_root",
    "read_info",
    "read_run_record",
]


class CheckpointReader(LeafRanges):
    """One checkpoint opened for reading; a context manager.

    Opening is collective (any number of ranks, whatever number wrote the
    file) and costs one broadcast: rank 0 alone reads, with POSIX reads,
    the footer, the index it points at and the manifest (with their CRC32s
    if ``verify``), the run record beside the file, and the headers of the
    sections of the fields named by ``fields``.  No MPI-IO file is opened
    until fields are read.  Every field, whatever its layout, is read the
    same way: its kind's handler plans this rank's byte ranges
    (:meth:`~amrckpt.container.FieldHandler.plan`) and one
    :class:`amrckpt.scda.ReadPlan` reads them (two collective reads around
    one exscan, one CRC32 reduction).  The reader only reads: its errors
    are kept by the collective call it runs in, and agreed on where that
    call agrees.  Inside a caller's call (:func:`amrckpt.load` reading many
    fields), that is once, where the caller agrees on its own errors too;
    called alone, each method is a call of its own and agrees when it ends.
    :meth:`read_fields` reads many fields in one plan; :meth:`read_field`
    one field; :meth:`check_crcs` lists what was checked against the index.  :meth:`read_mesh`,
    :meth:`read_cells` and :meth:`read_hp` run the same plans over a range of
    leaves on the calling rank alone (not collective), for tools that stream
    a file (:class:`~amrckpt.container._ranges.LeafRanges`);
    :meth:`check_crcs` checks their sections too.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    comm : None, mpi4py.MPI.Comm or Comm, optional
        The communicator (None: serial).
    verify : bool, optional
        Check the CRC32 of every section read against the index.
    access : amrckpt.scda.FileAccess, optional
        MPI-IO hints and backend of the collective reads.
    fields : sequence of str or "all", optional
        The fields whose sections the root finds while opening, in the same
        broadcast as the metadata: ``"all"``, or these names and every
        inline field (names the file does not hold are left to the
        caller).  Others are found when first read, at the cost of one
        more broadcast.  None (the default): the metadata alone.

    Raises
    ------
    IncompleteCheckpointError
        On every rank: no footer (the save did not finish, or the file was cut short).
    ChecksumError
        On every rank: the file header, index, manifest or an inline or
        block section of ``fields`` does not match its CRC32.
    CheckpointError
        On every rank: a malformed index or manifest, a section of
        ``fields`` that is not the field the manifest describes, or a format this release does not read.
    ScdaIOError, ScdaFormatError
        On every rank: the file cannot be opened or read, or is not an scda file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        comm: Any = None,
        verify: bool = True,
        access: scda.FileAccess | None = None,
        fields: Sequence[str] | Literal["all"] | None = None,
    ) -> None:
        self.comm: Comm = as_comm(comm)
        self.verify = verify
        self.path = os.fspath(path)
        self.access = scda.FileAccess() if access is None else access
        self.is_root = self.comm.rank == 0
        self.cursors: dict[str, tuple[int, int]] = {}  # range reads: where each prefix sum stopped
        self._file: scda.LocalFile | None = None  # this rank's own descriptor: the root's metadata, leaf ranges
        self._executor = scda.GatheredExecutor(self.path, self.comm, self.access)
        self._closed = False
        self._ranged: set[str] = set()  # fields read by ranges: their CRC32s checked by check_crcs
        self._range_crcs: dict[int, set[tuple[int, int, int]]] = {}  # by section offset: (offset, nbytes, crc32) read
        self._checked: list[str] = []  # sections whose CRC32 matched
        self._local_sections: dict[str, list[Section]] = {}  # found by this rank for its range reads
        try:
            with collective(self.comm, "CheckpointReader.open") as call:
                meta: Metadata = call.on_root(
                    lambda: read_metadata(self._local(root=True), verify, fields), what="checkpoint metadata"
                )
                self.file_size: int = meta.file_size
                self.index: Index = parse_model(Index, meta.index_raw, "index", self.path)
                self.manifest: Manifest = parse_model(Manifest, meta.manifest_raw, "manifest", self.path)
                self._run: RunRecord | None = meta.run
                self._sections: dict[str, list[Section]] = dict(meta.sections)
                if verify:  # checked by the root: the file header, inline and block sections
                    self._checked.extend(name for name, secs in self._sections.items() if not secs or secs[0].data is not None)
                self.provenance: Provenance | None = None
                self._writer_partition: Partition | None = None
                if meta.provenance_raw is not None and meta.writer_counts is not None:
                    self.provenance = parse_model(Provenance, meta.provenance_raw, "provenance", self.path)
                    self._writer_partition = writer_partition_of(self.provenance, meta.writer_counts, self.path)
                    if verify:
                        self._checked.extend(["amrckpt provenance", "amrckpt partition"])
        except BaseException:
            self._close_quietly()
            raise

    # -- the file on this rank --------------------------------------------------------------------------

    def _local(self, root: bool = False) -> scda.LocalFile:
        """Return this rank's own descriptor of the file (POSIX reads), opened on first use. Not collective.

        Raises
        ------
        ScdaIOError
            On this rank, with ``root``, if the file cannot be opened.
        CheckpointError
            On this rank, without ``root``, if the file cannot be opened.
        """
        if self._file is None:
            try:
                opener = self.access.local_file or scda.LocalFile
                self._file = opener(self.path, short=IncompleteCheckpointError)
            except ScdaIOError as exc:
                if root:
                    raise
                raise CheckpointError(f"{self.path!r}: cannot open for reading: {exc}") from exc
        return self._file

    # -- what a handler sees (FieldSource) --------------------------------------------------------------

    def sections(self, name: str) -> list[Section]:
        """Return the sections of field ``name`` as found (by the root when opening, or by this rank for its ranges).

        Not collective.
        """
        got = self._sections.get(name)
        return got if got is not None else self._local_sections.get(name, [])

    def _find_sections(self, names: Sequence[str]) -> None:
        """Find the sections of the fields ``names`` not found when opening: the root reads them, one broadcast. Collective."""
        missing = [n for n in names if n not in self._sections]  # the same on every rank
        if not missing:
            return
        call = current_call(self.comm)
        assert call is not None
        found = call.on_root(
            lambda: read_sections(
                self._local(root=True).read, self.file_size, self.index, self.manifest, missing, self.verify, self.path
            ),
            what="sections",
        )
        self._sections.update(found)
        if self.verify:
            self._checked.extend(n for n, secs in found.items() if secs and secs[0].data is not None)

    # -- metadata ----------------------------------------------------------------------------------------

    def entry(self, name: str) -> IndexEntry:
        """Return the index entry of section ``name``. Not collective.

        Raises
        ------
        CheckpointError
            If the index has no such section.
        """
        return entry_of(self.index, name, self.path)

    def entries(self, name: str) -> list[IndexEntry]:
        """Return the index entries of the sections named ``name``, in file order (two for an hp field of layout ``counts``).

        Not collective.

        Raises
        ------
        CheckpointError
            If the index has no such section.
        """
        out = [e for e in self.index.sections if e.name == name]
        if not out:
            raise CheckpointError(f"{self.path!r}: the index has no section {name!r}")
        return out

    @property
    def info(self) -> CheckpointInfo:
        """Manifest, index, provenance (format 1), writing partition and run record, where known. Not collective."""
        return CheckpointInfo(self.manifest, self.index, self.provenance, self.writer_partition(), self._run)

    def writer_partition(self, run: RunRecord | None = None) -> Partition | None:
        """Return the partition of the first mesh's leaves when written, where known (format 1, or a run record). Not collective.

        The run record is the one beside the file when it was opened (or
        ``run``).  A run record that does not fit the file (another leaf
        count) is ignored.
        """
        if self._writer_partition is not None:
            return self._writer_partition
        run = run if run is not None else self._run
        gfq = run.global_first_quadrant if run is not None else None
        if gfq is None or len(gfq) != run.writer_size + 1 or gfq[-1] != self.manifest.num_leaves:  # type: ignore[union-attr]
            return None
        try:
            return Partition.from_offsets(gfq)
        except AmrckptError:
            return None

    @property
    def geometry(self) -> Geometry | None:
        """The geometry of the first mesh (None without a mesh). Not collective."""
        m = self.manifest.mesh
        return Geometry.of(m) if m is not None else None

    def elem_count(self, fs: FieldSpec) -> int | None:
        """Return the global element count of field ``fs`` (leaves of its mesh, or its count), None if not partitioned.

        Not collective.
        """
        return handler_for(fs.kind).elem_count(fs, self.manifest)

    def _field(self, name: str) -> FieldSpec:
        try:
            return self.manifest.field(name)
        except KeyError:
            raise CheckpointError(f"{self.path!r} has no field {name!r}") from None

    # -- fields ------------------------------------------------------------------------------------------

    def _cover(self, plan: scda.ReadPlan, secs: list[Section]) -> None:
        """Cover the sections the plan reads (every rank the same); the root adds what it read of them."""
        for sec in secs:
            if sec.data is None:  # inline and block sections: checked by the root when found
                e = sec.entry
                plan.cover(e.name, e.offset, e.end, e.crc32, sec.known if self.is_root else ())

    def _plan(
        self, plan: scda.ReadPlan, fs: FieldSpec, span: Span | None, build: dict[str, Any], *, every_rank: bool = True
    ) -> None:
        """Let field ``fs``'s handler plan its reads; keep what builds its value.

        Not collective, except where a section does not fit the manifest
        (the same on every rank): then, with ``verify`` and ``every_rank``,
        the root CRCs the field's sections (one more collective, on this
        error path only), so that damage is said as damage.

        Raises
        ------
        AmrckptError
            On every rank alike (the sections and the manifest are the same everywhere), if a section of ``fs`` does
            not fit the manifest: the handler's error, or, with ``verify`` and ``every_rank``, the ChecksumError of a
            section whose bytes do not match (agreed by one more collective).
        """
        self._cover(plan, self.sections(fs.name))
        try:
            build[fs.name] = handler_for(fs.kind).plan(self, plan, fs, span)
        except AmrckptError as exc:  # a section that does not fit the manifest: the same on every rank
            if self.verify and every_rank:
                self._explain(fs, exc)
            raise
        except Exception as exc:  # noqa: BLE001 - agreed on by the caller (MemoryError...)
            plan.fail(exc)

    def _explain(self, fs: FieldSpec, exc: BaseException) -> None:
        """Raise on every rank the ChecksumError of a section of ``fs`` whose bytes do not match the index. Collective.

        The root reads the sections; nothing is raised if they match.
        """
        call = current_call(self.comm)
        assert call is not None
        entries = self.entries(fs.name)

        def check() -> None:
            for e in entries:
                explain(self._local(root=True).read, self.file_size, e, True, self.path, exc)

        call.on_root(check, what="damage")

    @collective_method("CheckpointReader.read_fields")
    def read_fields(self, fields: Sequence[FieldSpec], parts: Mapping[str, Partition]) -> dict[str, Any]:
        """Read this rank's part of many fields at once: one read plan, whatever their number and layouts. Collective.

        Two collective reads around one exscan, then one CRC32 allreduce.
        This rank's error (a read, a section's CRC32 mismatch, a value that
        does not build) is kept by the collective call: inside a caller's
        call, its next agreement raises it on every rank (the caller checks
        :attr:`amrckpt.comm.Call.failed` before using what was read); called
        alone, it is raised on every rank when this returns.

        Parameters
        ----------
        fields : sequence of FieldSpec
            The fields, in the manifest's order.
        parts : mapping of str to Partition
            The partition of each mesh (by its field's name) and of each
            distributed array field (by its name).

        Returns
        -------
        dict of str to object
            By field name, what :meth:`read_field` returns (empty on a rank with an error).

        Raises
        ------
        CheckpointError, ScdaError
            On every rank: a section that is not the field the manifest
            describes, or the file cannot be opened for the collective
            reads; called alone, any rank's error of the read.
        """
        self._find_sections([fs.name for fs in fields])
        plan = scda.ReadPlan(self.path, verify=self.verify, file_size=self.file_size)
        build: dict[str, Any] = {}
        for fs in fields:
            self._plan(plan, fs, self._span(fs, parts), build)
        self._executor.run(plan)  # collective: opens the file for collective reads on first use
        values: dict[str, Any] = {}
        for name, b in build.items():
            if plan.error is None:
                values[name] = plan.try_(b)
        if plan.error is None:  # the chunks of every field decoded in one pass of the threads
            plan.try_(functools.partial(resolve, values))
        self._checked.extend(plan.checked)
        if plan.error is None:
            return values
        call = current_call(self.comm)
        assert call is not None
        call.run(_raise, plan.error)  # kept for the call's agreement
        return {}

    @collective_method("CheckpointReader.read_field")
    def read_field(self, name: str, elem_counts: Sequence[int] | None = None) -> Any:
        r"""Read this rank's part of field ``name``. Collective, agreeing.

        Parameters
        ----------
        name : str
            The field.
        elem_counts : (P,) sequence of int, optional
            N_p of each rank, for per-leaf fields and distributed arrays
            (default: the uniform partition); global fields ignore it.

        Returns
        -------
        object
            inline, block: the JSON value; ndarray: the array; mesh:
            (N_p,) records of :func:`mesh_record_dtype`; cells, array:
            (N_p, \\*shape) of the field's dtype; hp: ``(values, counts)``.

        Raises
        ------
        CheckpointError, ChecksumError, ScdaError
            On every rank.
        """
        fs = self._field(name)
        h = handler_for(fs.kind)
        parts: dict[str, Partition] = {}
        N = h.elem_count(fs, self.manifest)
        if N is not None:
            part = Partition.uniform(N, self.comm.size) if elem_counts is None else Partition.from_counts(list(elem_counts))
            ms = self.manifest.mesh_of(fs)
            parts[ms.field if h.per_leaf and ms is not None else fs.name] = part
        values = self.read_fields([fs], parts)
        call = current_call(self.comm)
        assert call is not None
        call.agree("read_field")
        return values[name]

    def _part(self, fs: FieldSpec, parts: Mapping[str, Partition]) -> Partition | None:
        h = handler_for(fs.kind)
        ms = self.manifest.mesh_of(fs)
        if ms is not None and h.per_leaf:
            return parts[ms.field]
        return parts.get(fs.name) if h.partitioned else None

    def _span(self, fs: FieldSpec, parts: Mapping[str, Partition]) -> Span | None:
        part = self._part(fs, parts)
        if part is None:
            return None
        if part.N != self.elem_count(fs) or part.size != self.comm.size:
            raise ValueError(
                f"read_fields: the partition of field {fs.name!r} has {part.N} elements on {part.size} ranks, "
                f"the file {self.elem_count(fs)}, the communicator {self.comm.size} ranks"
            )
        r = self.comm.rank
        return Span(int(part.elem_counts[r]), int(part.global_first_quadrant[r]), part.N)

    @collective_method("CheckpointReader.leaf_weights")
    def leaf_weights(self, mesh: str | None = None) -> np.ndarray:
        """Bytes per leaf (mesh record, cells, hp payloads) of this rank's leaves under the uniform partition. Collective.

        One read plan of the hp counts or size entries (no CRC32: the load checks them).

        Returns
        -------
        (N_p,) numpy.ndarray of int64
        """
        ms = self.manifest.mesh if mesh is None else next((m for m in self.manifest.meshes if m.field == mesh), None)
        if ms is None:
            return np.zeros(0, dtype=np.int64)
        return self._weights(ms, [fs for fs in self.manifest.fields if self.manifest.mesh_of(fs) is ms])

    def _weights(self, ms: MeshSpec, fields: list[FieldSpec]) -> np.ndarray:
        self._find_sections([fs.name for fs in fields])
        N, P, r = ms.num_leaves, self.comm.size, self.comm.rank
        span = Span(N * (r + 1) // P - N * r // P, N * r // P, N)
        plan = scda.ReadPlan(self.path, verify=False, file_size=self.file_size)
        fixed, later = 0, []
        for fs in fields:
            self._cover(plan, self.sections(fs.name))
            got = handler_for(fs.kind).plan_leaf_nbytes(self, plan, fs, span)  # raises the same on every rank
            if callable(got):
                later.append(got)
            else:
                fixed += got
        if fixed > self.file_size:  # a manifest's shapes, not the file: would not fit int64 either
            raise CheckpointError(f"{self.path!r}: the manifest gives each leaf {fixed} bytes, more than the file holds")
        self._executor.run(plan)
        w = np.full(span.count, fixed, dtype=np.int64)
        for fn in later:
            if plan.error is None:
                got = plan.try_(fn)
                if got is not None:
                    w += got
        call = current_call(self.comm)
        assert call is not None
        if plan.error is not None:
            call.fail(plan.error)
        call.agree("leaf weights")
        return w

    @collective_method("CheckpointReader.check_crcs")
    def check_crcs(self) -> tuple[str, ...]:
        """Return the sections read in full whose CRC32 matched the index; check the fields read by ranges. Collective.

        Fields read by leaf ranges (:meth:`read_mesh`, :meth:`read_cells`,
        :meth:`read_hp`) are checked here, on the calling rank: the CRC32s of
        the pieces its range reads took are combined (``crc32_combine``), and
        only the bytes no range read (headers, paddings, leaves not read) are
        read and CRC'd now.  Ranges that cover a field in order, as a
        streaming tool reads it, leave nothing to read.

        Returns
        -------
        tuple of str
            The names of the sections checked.

        Raises
        ------
        ChecksumError
            On the calling rank, for fields read by ranges, naming the first
            section that does not match.
        """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
        if not self.verify:
            return ()
        done = list(self._checked)
        for name in sorted(self._ranged - set(done)):  # read by ranges on this rank
            for e in self.entries(name):  # two for an hp field of layout "counts"
                if not 0 <= e.offset <= e.end <= self.file_size or self._range_crc(e) != e.crc32:
                    raise checksum_error(name, e.offset, e.end, self.path)
            done.append(name)
        done = list(dict.fromkeys(done))
        # The index and the manifest were checked by rank 0 when opening.
        return tuple(n for n in ("amrckpt manifest", "amrckpt index") if n not in done) + tuple(done)

    # -- closing -----------------------------------------------------------------------------------------

    @collective_method("CheckpointReader.close")
    def close(self) -> None:
        """Close the file on every rank. Collective.

        A failing ``close(2)`` or ``MPI_File_close`` is this rank's error,
        kept by the collective call: inside a caller's call (a load), its
        agreement raises it on every rank; called alone, it is raised on
        every rank when this returns.

        Raises
        ------
        AmrckptError
            Called alone: on every rank, if any rank cannot close the file.
        """
        if self._closed:
            return
        self._closed = True
        call = current_call(self.comm)
        assert call is not None
        file, self._file = self._file, None
        # On every rank (a step on some ranks only would leave them alone in the agreement).
        call.run(lambda: file.close() if file is not None else None, always=True)
        self._executor.close()  # on every rank; its errors are kept by the call

    def _close_quietly(self) -> None:
        """Close what this rank opened after an error that every rank raises (no agreement: they all raise it)."""
        self._closed = True
        file, self._file = self._file, None
        with contextlib.suppress(Exception):  # the error every rank raises says more than a failing close(2)
            if file is not None:
                file.close()
        with contextlib.suppress(Exception):
            self._executor.close()

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _raise(exc: BaseException) -> None:
    """Raise ``exc``: a step of a collective call that failed earlier, for :meth:`amrckpt.comm.Call.run` to keep."""
    raise exc


def read_info(
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    verify: bool = True,
    access: scda.FileAccess | None = None,
) -> CheckpointInfo:
    """Read a checkpoint's manifest, index, (format 1) provenance, writing partition and run record (no field data).

    Collective (any number of ranks; serial with ``comm=None``).

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        The communicator (None: serial, no MPI).
    verify : bool, optional
        Check the index and the metadata against their CRC32s.
    access : amrckpt.FileAccess, optional
        How the file is opened: MPI-IO hints, byte backend
        (:class:`~amrckpt.scda.FileAccess`); None: the defaults.

    Returns
    -------
    CheckpointInfo

    Raises
    ------
    IncompleteCheckpointError
        If the file has no footer (the save did not finish).
    CheckpointError
        If the index or manifest is malformed; ChecksumError if they do not
        match their CRC32s.
    """
    a = scda.FileAccess.of(access)
    with CheckpointReader(path, comm=comm, verify=verify, access=a) as r:
        return r.info
