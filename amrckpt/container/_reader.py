"""Reading a checkpoint file: footer, index, manifest, fields by their handlers, CRC32s against the index."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import scda
from .._crc import crc32
from ..comm import Comm, SerialComm, as_comm, collective, collective_method, current_call
from ..errors import (
    AmrckptError,
    CheckpointError,
    ChecksumError,
    IncompleteCheckpointError,
    ScdaError,
)
from ..partition import Partition
from ..scda._backend import os_error
from ..scda._layout import SectionHeader, read_raw_section
from ..scda._scan import exact_reader
from ._chunks import read_chunk_range
from ._convention import (
    FOOTER_NBYTES,
    INDEX_USER_STRING,
    MANIFEST_USER_STRING,
    PARTITION_USER_STRING,
    PROVENANCE_USER_STRING,
    READ_FORMAT_VERSIONS,
    FieldSpec,
    Index,
    IndexEntry,
    Manifest,
    MeshSpec,
    Provenance,
    RunRecord,
    dtype_from_json,
    mesh_record_dtype,
    parse_footer,
)
from ._gather import GatheredRead, Section, Span
from ._geometry import Geometry
from ._handlers import counts_of, handler_for
from ._writer import run_record_path

__all__ = ["CheckpointInfo", "CheckpointReader", "Geometry", "checksum_error", "parse_model", "read_info", "read_run_record"]


@dataclass(frozen=True)
class CheckpointInfo:
    """The metadata of a checkpoint: what :func:`read_info` returns.

    Attributes
    ----------
    manifest : Manifest
    index : Index
    provenance : Provenance or None
        Who wrote it: in the file in format 1, None in format 2 (see ``run``).
    writer_partition : Partition or None
        The leaves of each rank that wrote the file (of the first mesh): in
        the file in format 1; in format 2 from the run record beside the
        file, if there is one; else None.
    run : RunRecord or None
        The run record beside the file (``<checkpoint>.run.json``), if any.
    """

    manifest: Manifest
    index: Index
    provenance: Provenance | None = None
    writer_partition: Partition | None = None
    run: RunRecord | None = None

    @property
    def writer_size(self) -> int | None:
        """The number of processes that wrote the file, where known."""
        if self.run is not None:
            return self.run.writer_size
        return self.provenance.writer_size if self.provenance is not None else None

    @property
    def saved_at(self) -> str | None:
        """When the save started (UTC, ISO 8601), where known."""
        if self.run is not None:
            return self.run.saved_at
        return self.provenance.saved_at if self.provenance is not None else None


def parse_model(model: Any, raw: bytes, what: str, path: str) -> Any:
    """Validate JSON ``raw`` as pydantic ``model``; CheckpointError naming ``what`` and the first problem."""
    try:
        return model.model_validate_json(raw)
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"msg": str(exc), "loc": ()}
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise CheckpointError(f"{path!r}: the {what} is not valid: {first['msg']}{' at ' + where if where else ''}") from exc


def checksum_error(name: str, offset: int, end: int | None, path: str) -> ChecksumError:
    """Return the error for a section whose bytes do not match the index's CRC32 (section, offset, end attached)."""
    where = f"bytes {offset}..{end}" if end is not None else f"at byte {offset}"
    err = ChecksumError(f"{path!r}: section {name!r} ({where}) does not match its CRC32: the file is damaged")
    err.section, err.offset, err.end = name, offset, end if end is not None else -1
    return err


def read_index_on_root(read: Any, size: int, path: str, *, verify: bool = True) -> tuple[bytes, Index]:
    """Find the index through the footer at the end of the file, on this rank alone; return its JSON and the model.

    Not collective.  ``read(offset, nbytes)`` reads exactly ``nbytes`` of
    the file of ``size`` bytes; the file header is not needed, so that
    :func:`~amrckpt.container.verify` can report damage anywhere by section.

    Raises
    ------
    IncompleteCheckpointError
        If the last 96 bytes are not an amrckpt footer (the save did not finish, the file was cut short).
    ChecksumError
        With ``verify``, if the index does not match the CRC32 in the footer.
    CheckpointError
        If the footer points where there is no index, or the index is malformed.
    """
    off = size - FOOTER_NBYTES
    not_a_footer = f"{path!r}: the last 96 bytes are not an amrckpt footer (the save did not finish?)"
    try:
        if off < scda.FILE_HEADER_NBYTES or off % 32:
            raise IncompleteCheckpointError(f"a file of {size} bytes")
        foot = read_raw_section(read, off, size)
    except (ScdaError, IncompleteCheckpointError) as exc:
        raise IncompleteCheckpointError(f"{not_a_footer}: {exc}") from exc
    if foot.type != "I":
        raise IncompleteCheckpointError(not_a_footer)
    index_offset, index_crc = parse_footer(foot.user_string, foot.inline or b"", repr(path))
    where = f"the footer (bytes {off}..{size}) points at byte {index_offset}"
    try:
        raw = read_raw_section(read, index_offset, size) if 0 <= index_offset < off else None
    except ScdaError:
        raw = None
    if raw is None or raw.type != "B" or raw.user_string != INDEX_USER_STRING or raw.end is None:
        raise CheckpointError(f"{path!r}: {where}, where there is no amrckpt index: the footer or the index is damaged")
    blob = read(index_offset, raw.end - index_offset)
    if verify and crc32(blob) != index_crc:
        raise checksum_error("amrckpt index", index_offset, raw.end, path)
    index_raw = bytes(blob[raw.data_offset - index_offset : raw.data_offset - index_offset + raw.elem_size])
    index: Index = parse_model(Index, index_raw, "index", path)
    return index_raw, index


def read_run_record(path: str | os.PathLike[str]) -> RunRecord | None:
    """Return the run record beside checkpoint ``path`` (``<path>.run.json``), or None if there is none or it is unreadable.

    Not collective.  The record is advisory (the checkpoint is the truth):
    a damaged record is ignored.
    """
    try:
        raw = run_record_path(path).read_bytes()
    except OSError:
        return None
    try:
        rec: RunRecord = RunRecord.model_validate_json(raw)
    except ValueError:
        return None
    return rec


class CheckpointReader:
    """One checkpoint opened for reading; a context manager.

    Opening is collective (any number of ranks, whatever number wrote the
    file) and costs one broadcast: rank 0 alone reads, with POSIX reads,
    the footer, the index it points at and the manifest (with their CRC32s
    if ``verify``), the run record beside the file, and with ``select`` the
    header of every section of the fields it names.  No MPI-IO file is
    opened until fields are read.  :meth:`read_fields` reads those fields
    all at once (two collective reads, one CRC32 reduction; errors are
    agreed on once, by :meth:`close`); :meth:`read_field` reads one field
    by its kind's handler through the scda API (collective, agreeing on
    each call); :meth:`check_crcs` compares everything read with the
    index.  :meth:`read_mesh`,
    :meth:`read_cells` and :meth:`read_hp` read a range of leaves on the
    calling rank alone (not collective), for tools that stream a file; their
    sections are checked against the index by :meth:`check_crcs` too.

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
    defer_crc : bool, optional
        CRC the bytes read in a helper thread until :meth:`check_crcs`
        (for readers that hand nothing out before it).
    select : callable, optional
        ``select(manifest) -> names``, run on rank 0 once the manifest is
        checked: the fields :meth:`read_fields` will read.  What it raises
        is raised on every rank (:func:`amrckpt.load` checks the schema there).

    Raises
    ------
    IncompleteCheckpointError
        On every rank: no footer (the save did not finish, or the file was cut short).
    ChecksumError
        On every rank: the file header, index, manifest or a selected inline
        or block section does not match its CRC32.
    CheckpointError
        On every rank: a malformed index or manifest, a selected section that
        is not the field the manifest describes, or a format this release does not read.
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
        defer_crc: bool = False,
        select: Callable[[Manifest], Sequence[str]] | None = None,
    ) -> None:
        self.comm: Comm = as_comm(comm)
        self.verify = verify
        self.path = os.fspath(path)
        self.access = scda.FileAccess() if access is None else access
        self._defer_crc = defer_crc
        self._scda: scda.ScdaReader | None = None  # opened when a field is read section by section
        self._gathered: scda.Backend | None = None  # opened by read_fields, for collective reads only
        self._fd: int | None = None
        self._closed = False
        self._hp_cursor: dict[str, tuple[int, int]] = {}  # read_hp: (leaf, byte) where the last range ended
        self._ranged: set[str] = set()  # fields read by ranges: their CRC32s checked by check_crcs
        self._checked: list[str] = []  # sections whose CRC32 matched, outside the scda reader
        self._agree_on_close = False  # read_fields ran: close agrees (with the caller's error)
        try:
            with collective(self.comm, "CheckpointReader.open") as call:
                meta = call.on_root(lambda: self._metadata_on_root(select), what="checkpoint metadata")
                self.file_size: int = meta[0]
                self.index: Index = parse_model(Index, meta[1], "index", self.path)
                self.manifest: Manifest = parse_model(Manifest, meta[2], "manifest", self.path)
                self._run: RunRecord | None = meta[3]
                self._sections: dict[str, list[Section]] = meta[4]
                if verify:  # checked by the root: the file header, inline and block sections
                    self._checked.extend(name for name, secs in self._sections.items() if not secs or secs[0].data is not None)
                self.provenance: Provenance | None = None
                self._writer_partition: Partition | None = None
                if self.manifest.format_version == 1:
                    raw = self._metadata_block("amrckpt provenance", PROVENANCE_USER_STRING)
                    self.provenance = parse_model(Provenance, raw, "provenance", self.path)
                    self._writer_partition = self._format1_partition(self.provenance)
        except BaseException:
            self._close_quietly()
            raise

    @property
    def scda(self) -> scda.ScdaReader:
        """The file opened through the scda API, for reading section by section (opened on first use: collective)."""
        if self._scda is None:
            f = scda.fopen_read(self.path, comm=self.comm, checksum=self.verify, access=self.access)
            f._defer_crc = self._defer_crc
            self._scda = f
        return self._scda

    # -- metadata -----------------------------------------------------------

    def _metadata_on_root(
        self, select: Callable[[Manifest], Sequence[str]] | None
    ) -> tuple[int, bytes, bytes, RunRecord | None, dict[str, list[Section]]]:
        """Read the metadata on this rank alone with POSIX reads, CRC-checked; return what every rank needs of it.

        Not collective: :func:`~amrckpt.comm.run_on_root` runs it on rank 0
        and broadcasts the result or the error, so opening a checkpoint costs
        one broadcast whatever P, and no MPI-IO call: the file size, the
        scda file header, the footer, the index and the manifest, the run
        record beside the file, and with ``select`` the headers of the
        sections of the fields it names (with the data of inline and block
        sections, and the padding of array sections).
        """
        read = self._pread(root=True)
        try:
            size = os.fstat(self._fd).st_size  # type: ignore[arg-type]
        except OSError as exc:
            raise os_error(exc, self.path, "cannot get the size of") from exc
        header_crc = scda.read_file_header(read, size, self.path)[2]
        index_raw, index = read_index_on_root(read, size, self.path, verify=self.verify)
        try:
            e = index.entry("amrckpt manifest")
        except KeyError:
            raise CheckpointError(f"{self.path!r}: the index has no section 'amrckpt manifest'") from None
        manifest_raw, crc = self._block_on_root(read, size, e.offset, MANIFEST_USER_STRING)
        if self.verify and crc != e.crc32:
            raise checksum_error("amrckpt manifest", e.offset, e.end, self.path)
        manifest: Manifest = parse_model(Manifest, manifest_raw, "manifest", self.path)
        _check_manifest(manifest, self.path)
        sections: dict[str, list[Section]] = {}
        head = [x for x in index.sections if x.offset == 0]
        if head and self.verify:  # the file header section F, checked here (its entry is named "file header")
            if head[0].crc32 != header_crc or head[0].end != scda.FILE_HEADER_NBYTES:
                raise checksum_error(head[0].name, 0, head[0].end, self.path)
            sections[head[0].name] = []
        if select is not None:
            for name in select(manifest):
                fs = manifest.field(name)
                if fs.compressed or fs.layout == "chunks":
                    continue  # read section by section (handler.read)
                entries = [x for x in index.sections if x.name == name]
                sections[name] = [self._section_on_root(read, size, x, fs) for x in entries]
        return size, index_raw, manifest_raw, read_run_record(self.path), sections

    def _section_on_root(self, read: Any, size: int, e: IndexEntry, fs: FieldSpec) -> Section:
        """Read the header of the section of index entry ``e`` (and its data if I or B, its padding if A), on this rank alone."""
        try:
            raw = read_raw_section(read, e.offset, size)
        except ScdaError as exc:
            raise CheckpointError(f"{self.path!r}: no section of field {fs.name!r} at byte {e.offset}: {exc}") from exc
        if raw.type != fs.section or raw.user_string != fs.name.encode():
            raise CheckpointError(
                f"{self.path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it"
            )
        if raw.type in ("I", "B"):  # replicated: read here, checked here, broadcast
            assert raw.end is not None
            whole = (raw.inline or b"") if raw.type == "I" else read(e.offset, raw.end - e.offset)
            crc = raw.head_crc if raw.type == "I" else crc32(whole)
            if self.verify and (crc != e.crc32 or raw.end != e.end):
                raise checksum_error(e.name, e.offset, e.end, self.path)
            data = whole if raw.type == "I" else whole[raw.data_offset - e.offset : raw.data_offset - e.offset + raw.elem_size]
            return Section(raw, e, -1, bytes(data))
        if raw.type == "A":
            assert raw.end is not None
            if raw.end != e.end:
                raise CheckpointError(
                    f"{self.path!r}: field {fs.name!r} does not end where the index says (byte {raw.end}, not {e.end})"
                )
            start = raw.data_offset + raw.elem_count * raw.elem_size
            return Section(raw, e, crc32(read(start, raw.end - start)) if self.verify else 0)
        if not raw.data_offset <= e.end <= size:
            raise CheckpointError(f"{self.path!r}: the index ends field {fs.name!r} outside the file")
        return Section(raw, e)

    def sections(self, name: str) -> list[Section]:
        """Return the sections of field ``name`` that the root read when opening (empty if none). Not collective."""
        return self._sections.get(name, [])

    def _block_on_root(self, read: Any, size: int, offset: int, user_string: bytes) -> tuple[bytes, int]:
        """Read the block section at ``offset`` on this rank alone: its data and the CRC32 of the whole section."""
        try:
            raw = read_raw_section(read, offset, size)
            if raw.type != "B" or raw.user_string != user_string or raw.end is None:
                raise CheckpointError(f"{self.path!r}: expected section {user_string.decode()!r} at byte {offset}")
            whole = read(offset, raw.end - offset)
        except ScdaError as exc:
            raise CheckpointError(f"{self.path!r}: no section {user_string.decode()!r} at byte {offset}: {exc}") from exc
        start = raw.data_offset - offset
        return whole[start : start + raw.elem_size], crc32(whole)

    def _block_at(self, offset: int, user_string: bytes) -> bytes:
        f = self.scda
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

    def _crc_matches(self, offset: int, crc: int) -> bool:
        got = {o: c for o, _, c in self.scda.section_crcs()}
        return got.get(offset) == crc

    def entry(self, name: str) -> IndexEntry:
        """Return the index entry of section ``name``. Not collective.

        Raises
        ------
        CheckpointError
            If the index has no such section.
        """
        try:
            return self.index.entry(name)
        except KeyError:
            raise CheckpointError(f"{self.path!r}: the index has no section {name!r}") from None

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

    @collective_method("CheckpointReader.check_crc")
    def check_crc(self, name: str, part: int = 0) -> None:
        """Compare the CRC32 of section ``name``, just read, with the index. Collective; no-op without ``verify``.

        ``part`` is the section's place among those of that name (1: the values of an hp field of layout ``counts``).

        Raises
        ------
        ChecksumError
            On every rank, naming the section and its bytes.
        """
        if not self.verify:
            return
        e = self.entry(name) if part == 0 else self.entries(name)[part]
        if not self._crc_matches(e.offset, e.crc32):
            raise checksum_error(name, e.offset, e.end, self.path)

    def _metadata_block(self, name: str, user_string: bytes) -> bytes:
        e = self.entry(name)
        data = self._block_at(e.offset, user_string)
        self.check_crc(name)
        return data

    def _format1_partition(self, prov: Provenance) -> Partition:
        """Return the writing partition section of a format-1 file."""
        f = self.scda
        e = self.entry("amrckpt partition")
        f.fseek_section(e.offset)
        h = f.fread_section_header()
        if h is None or h.type != "A" or h.user_string != PARTITION_USER_STRING or h.elem_size != 8:
            raise CheckpointError(f"{self.path!r}: malformed writing partition section")
        P = h.elem_count
        counts = [P] + [0] * (self.comm.size - 1)
        data = f.fread_array_data(counts)
        self.check_crc(e.name)
        mine: list[int] = data.view("<i8").tolist() if data is not None and self.comm.rank == 0 else []
        call = current_call(self.comm)
        assert call is not None
        counts = call.allreduce(root_value=mine, what="writing partition").value
        if len(counts) != prov.writer_size or sum(counts) < 0:
            raise CheckpointError(
                f"{self.path!r}: the writing partition has {len(counts)} ranks, the provenance {prov.writer_size}"
            )
        return Partition.from_counts(counts)

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

    # -- fields ---------------------------------------------------------------

    @collective_method("CheckpointReader.seek_field")
    def seek_field(self, fs: FieldSpec) -> SectionHeader:
        """Move to field ``fs``'s section through the index and read its header (decoded). Collective.

        Raises
        ------
        CheckpointError
            If the section there is not the field the manifest describes, or
            an A/V section holds another number of elements than its mesh has leaves.
        """
        e = self.entry(fs.name)
        f = self.scda
        try:
            f.fseek_section(e.offset)
            h = f.fread_section_header(decode=True)
        except ScdaError as exc:
            raise CheckpointError(f"{self.path!r}: no section of field {fs.name!r} at byte {e.offset}: {exc}") from exc
        if h is None or h.type != fs.section or h.user_string != fs.name.encode() or h.decoded != fs.compressed:
            raise CheckpointError(
                f"{self.path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it"
            )
        want = self.elem_count(fs)
        if want is not None and fs.layout == "chunks" and fs.chunk is not None:
            want = -(-want // fs.chunk)  # the section holds chunks
        if h.type in ("A", "V") and want is not None and h.elem_count != want:
            # before anything is allocated by the manifest's count
            what = "leaves" if handler_for(fs.kind).per_leaf else "elements"
            raise CheckpointError(f"{self.path!r}: field {fs.name!r} has {h.elem_count} {what} in the file, the manifest {want}")
        return h

    def elem_count(self, fs: FieldSpec) -> int | None:
        """Return the global element count the manifest gives field ``fs`` (leaves of its mesh, or its count). Not collective."""
        ms = self.manifest.mesh_of(fs)
        if ms is not None and handler_for(fs.kind).per_leaf:
            return ms.num_leaves
        return fs.count

    @collective_method("CheckpointReader.read_field")
    def read_field(self, name: str, elem_counts: list[int] | None = None) -> Any:
        r"""Read this rank's part of field ``name`` by its handler. Collective.

        Parameters
        ----------
        name : str
            The field.
        elem_counts : (P,) list of int, optional
            N_p of each rank, for per-leaf fields and arrays; global fields ignore it.

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
        try:
            fs = self.manifest.field(name)
        except KeyError:
            raise CheckpointError(f"{self.path!r} has no field {name!r}") from None
        return handler_for(fs.kind).read(self, fs, elem_counts)

    @collective_method("CheckpointReader.read_fields")
    def read_fields(
        self, fields: Sequence[FieldSpec], parts: Mapping[str, Partition]
    ) -> tuple[dict[str, Any], BaseException | None]:
        """Read this rank's part of many fields at once. Collective.

        The fields whose sections the root read when opening (``select``)
        are read by one gathered read:
        two collective reads around one exscan, then one CRC32 allreduce,
        whatever the number of fields; the others (compressed, chunked) by
        their handlers section by section.  Errors of the gathered read are
        not raised: they are returned, for the caller to agree on once
        (:meth:`close` with ``error``), after which nothing read may be used.

        Parameters
        ----------
        fields : sequence of FieldSpec
            The fields, in the manifest's order.
        parts : mapping of str to Partition
            The partition of each mesh (by its field's name) and of each
            distributed array field (by its name).

        Returns
        -------
        values : dict of str to object
            By field name, what :meth:`read_field` returns (empty on a rank with an error).
        error : BaseException or None
            This rank's error, or a section's CRC32 mismatch (on every rank).

        Raises
        ------
        CheckpointError, ScdaError
            On every rank: from the fields read section by section, or if
            the file cannot be opened for the collective reads.
        """
        self._agree_on_close = True
        g = GatheredRead(self.comm, self.verify, self.path)
        build: dict[str, Callable[[], Any]] = {}
        one_by_one: list[FieldSpec] = []
        for fs in fields:
            secs = self.sections(fs.name)
            if not secs:
                one_by_one.append(fs)
                continue
            try:
                b = handler_for(fs.kind).plan(self, g, fs, self._span(fs, parts))
            except AmrckptError:
                raise  # a section that does not fit the manifest: the same on every rank
            except Exception as exc:  # noqa: BLE001 - agreed on by the caller (MemoryError...)
                g.fail(exc)
                b = None
            if b is None and g.error is None:
                one_by_one.append(fs)
                continue
            for sec in secs:  # every rank covers the same sections, whatever its errors
                if sec.data is None:
                    g.cover(sec)
            if b is not None:
                build[fs.name] = b
        if g.nbytes:
            if self._gathered is None:
                self._gathered = scda.open_backend(self.path, "r", self.comm, access=self.access, defer=True)
            g.run(self._gathered)
        values: dict[str, Any] = {}
        if g.error is None:
            for name, b in build.items():
                try:
                    values[name] = b()
                except Exception as exc:  # noqa: BLE001 - agreed on by the caller
                    g.fail(exc)
                    break
        for fs in one_by_one:
            part = self._part(fs, parts)
            values[fs.name] = self.read_field(fs.name, part.elem_counts.tolist() if part is not None else None)
        self._checked.extend(g.checked)
        return (values if g.error is None else {}), g.error

    def _part(self, fs: FieldSpec, parts: Mapping[str, Partition]) -> Partition | None:
        ms = self.manifest.mesh_of(fs)
        if ms is not None and handler_for(fs.kind).per_leaf:
            return parts[ms.field]
        return parts.get(fs.name) if fs.kind == "array" else None

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

        Returns
        -------
        (N_p,) numpy.ndarray of int64
        """
        ms = self.manifest.mesh if mesh is None else next((m for m in self.manifest.meshes if m.field == mesh), None)
        if ms is None:
            return np.zeros(0, dtype=np.int64)
        mine = [fs for fs in self.manifest.fields if self.manifest.mesh_of(fs) is ms]
        if all(self.sections(fs.name) for fs in mine):  # their headers read when opening: one collective read
            return self._gathered_weights(ms, mine)
        self.seek_field(self.manifest.field(ms.field))  # the leaf count checked before anything is sized by it
        part = Partition.uniform(ms.num_leaves, self.comm.size)
        counts = part.elem_counts.tolist()
        w = np.zeros(counts[self.comm.rank], dtype=np.int64)
        fixed = 0
        for fs in self.manifest.fields:
            if self.manifest.mesh_of(fs) is not ms:
                continue
            got = handler_for(fs.kind).leaf_nbytes(self, fs, counts)
            if isinstance(got, np.ndarray):
                w += got
            else:
                fixed += got
        if fixed > self.file_size:  # a manifest's shapes, not the file: would not fit int64 either
            raise CheckpointError(f"{self.path!r}: the manifest gives each leaf {fixed} bytes, more than the file holds")
        return w + fixed

    def _gathered_weights(self, ms: MeshSpec, fields: list[FieldSpec]) -> np.ndarray:
        """:meth:`leaf_weights` by one collective read of the hp counts or V size entries (CRC32s: by the load). Collective."""
        N, P, r = ms.num_leaves, self.comm.size, self.comm.rank
        span = Span(N * (r + 1) // P - N * r // P, N * r // P, N)
        g = GatheredRead(self.comm, False, self.path)
        fixed, later = 0, []
        for fs in fields:
            got = handler_for(fs.kind).plan_leaf_nbytes(self, g, fs, span)  # raises the same on every rank
            if callable(got):
                later.append(got)
            else:
                fixed += got
        if fixed > self.file_size:  # a manifest's shapes, not the file: would not fit int64 either
            raise CheckpointError(f"{self.path!r}: the manifest gives each leaf {fixed} bytes, more than the file holds")
        if g.nbytes:
            if self._gathered is None:
                self._gathered = scda.open_backend(self.path, "r", self.comm, access=self.access, defer=True)
            g.run(self._gathered)
        w = np.full(span.count, fixed, dtype=np.int64)
        for fn in later:
            if g.error is None:
                try:
                    w += fn()
                except Exception as exc:  # noqa: BLE001 - agreed on by every rank below
                    g.fail(exc)
        call = current_call(self.comm)
        assert call is not None
        if g.error is not None:
            call.fail(g.error)
        call.agree("leaf weights")
        return w

    @collective_method("CheckpointReader.check_crcs")
    def check_crcs(self) -> tuple[str, ...]:
        """Compare the CRC32 of every section read in full with the index. Collective.

        Fields read by leaf ranges (:meth:`read_mesh`, :meth:`read_cells`,
        :meth:`read_hp`) are checked too, each by one more pass over its
        section on the calling rank (from the page cache, usually).

        Returns
        -------
        tuple of str
            The names of the sections checked.

        Raises
        ------
        ChecksumError
            On every rank (on the calling rank for fields read by ranges),
            naming the first section that does not match.
        """
        if not self.verify:
            return ()
        done = list(self._checked)
        if self._scda is not None:
            by_offset = {e.offset: e for e in self.index.sections}
            for off, end, crc in self._scda.section_crcs():
                e = by_offset.get(off)
                if e is None or crc is None:
                    continue
                if e.end != end or e.crc32 != crc:
                    raise checksum_error(e.name, e.offset, e.end, self.path)
                done.append(e.name)
        for name in sorted(self._ranged - set(done)):  # read by ranges on this rank: one pass over each section
            for e in self.entries(name):  # two for an hp field of layout "counts"
                read, crc = self._pread(), 0
                if not 0 <= e.offset <= e.end <= self.file_size:
                    raise checksum_error(name, e.offset, e.end, self.path)
                for off in range(e.offset, e.end, 16 << 20):
                    crc = crc32(read(off, min(16 << 20, e.end - off)), crc)
                if crc != e.crc32:
                    raise checksum_error(name, e.offset, e.end, self.path)
            done.append(name)
        done = list(dict.fromkeys(done))
        # The index and the manifest were checked by rank 0 when opening (_metadata_on_root).
        return tuple(n for n in ("amrckpt manifest", "amrckpt index") if n not in done) + tuple(done)

    # -- ranges of leaves, on one rank -------------------------------------------

    def _pread(self, root: bool = False) -> Any:
        """Return ``read(offset, nbytes)`` of this rank's own descriptor of the file (POSIX ``pread``). Not collective."""
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except OSError as exc:
                if root:
                    raise os_error(exc, self.path, "cannot open") from exc
                raise CheckpointError(f"{self.path!r}: cannot open for reading: {exc.strerror or exc}") from exc
        return exact_reader(self._fd, self.path, IncompleteCheckpointError)

    def _range_check(self, fs: FieldSpec, start: int, count: int) -> int:
        N = self.elem_count(fs)
        assert N is not None
        if start < 0 or count < 0 or start + count > N:
            raise ValueError(f"leaves {start}..{start + count} are not inside field {fs.name!r} of {N} leaves")
        return N

    def _fixed_range(self, fs: FieldSpec, start: int, count: int, dt: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
        N = self._range_check(fs, start, count)
        self._ranged.add(fs.name)
        e = self.entry(fs.name)
        E = dt.itemsize * math.prod(shape)
        out = np.empty((count, *shape), dtype=dt)
        if fs.layout == "chunks":
            assert fs.chunk is not None
            read_chunk_range(self._pread(), e.offset, self.file_size, self.path, fs.name, N, E, fs.chunk, start, out)
            return out
        if fs.compressed:  # one zlib stream per element: decode the whole section serially, keep the range
            with scda.fopen_read(self.path, comm=SerialComm()) as f:
                f.fseek_section(e.offset)
                f.fread_section_header(decode=True)
                whole = f.fread_array_data([N], E)
                assert whole is not None
            out.reshape(-1).view(np.uint8)[:] = whole[start * E : (start + count) * E]
            return out
        read = self._pread()
        raw = read_raw_section(read, e.offset, self.file_size)
        if raw.type != "A" or raw.elem_size != E or raw.elem_count != N:
            raise CheckpointError(
                f"{self.path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it"
            )
        if count:
            out.reshape(-1).view(np.uint8)[:] = np.frombuffer(read(raw.data_offset + start * E, count * E), dtype=np.uint8)
        return out

    def read_mesh(self, start: int, count: int, mesh: str | None = None) -> np.ndarray:
        """Leaves ``start .. start + count - 1`` of a mesh (the first by default), on this rank alone. Not collective.

        Returns
        -------
        (count,) numpy.ndarray of :func:`mesh_record_dtype`
            Fields ``tree``, ``x``, ``y`` [, ``z``] (``<i4``; coordinates in units
            of ``2**-maxlevel`` of a tree) and ``level`` (``i1``), in curve order.
        """
        ms = self.manifest.mesh if mesh is None else next(m for m in self.manifest.meshes if m.field == mesh)
        if ms is None:
            raise CheckpointError(f"{self.path!r} holds no mesh")
        rec = mesh_record_dtype(ms.dim)
        return self._fixed_range(self.manifest.field(ms.field), start, count, rec, ())

    def read_cells(self, name: str, start: int, count: int) -> np.ndarray:
        r"""Values of leaves ``start .. start + count - 1`` of a cells (or array) field, on this rank alone. Not collective.

        Returns
        -------
        (count, \\*shape) numpy.ndarray of the field's dtype (as stored)
        """
        fs = self.manifest.field(name)
        if fs.kind not in ("cells", "array"):
            raise ValueError(f"field {name!r} is a {fs.kind} field, not cells")
        return self._fixed_range(fs, start, count, dtype_from_json(fs.dtype, name), tuple(fs.shape))

    def read_hp(self, name: str, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        r"""Values of leaves ``start .. start + count - 1`` of an hp field, on this rank alone. Not collective.

        The sizes of the leaves before ``start`` are read (in chunks) to find
        where the range's values begin, from the end of the previous range of
        the same field when that lies before ``start``: reading a field in
        order, range after range, reads every size once.

        Returns
        -------
        counts : (count,) numpy.ndarray of int64
            Values per leaf.
        values : (sum(counts), \\*shape) numpy.ndarray of the field's dtype
        """
        fs = self.manifest.field(name)
        if fs.kind != "hp":
            raise ValueError(f"field {name!r} is a {fs.kind} field, not hp")
        N = self._range_check(fs, start, count)
        self._ranged.add(fs.name)
        dt = dtype_from_json(fs.dtype, name)
        vbytes = dt.itemsize * math.prod(fs.shape)
        e = self.entry(fs.name)
        if fs.layout == "counts":
            return self._hp_range(fs, N, start, count, dt, vbytes)
        if fs.compressed:
            with scda.fopen_read(self.path, comm=SerialComm()) as f:
                f.fseek_section(e.offset)
                f.fread_section_header(decode=True)
                sizes = f.fread_varray_sizes([N])
                assert sizes is not None
                data = f.fread_varray_data([N], sizes, f.proc_sizes())
                assert data is not None
            before = int(sizes[:start].sum())
            mine = sizes[start : start + count]
            values = data[before : before + int(mine.sum())].view(dt).reshape(-1, *fs.shape)
            return counts_of(mine, vbytes), values.copy()
        read = self._pread()
        raw = read_raw_section(read, e.offset, self.file_size)
        if raw.type != "V" or raw.elem_count != N:
            raise CheckpointError(
                f"{self.path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it"
            )
        entries = raw.entries_offset

        def sizes_of(lo: int, n: int) -> np.ndarray:
            buf = np.frombuffer(read(entries + 32 * lo, 32 * n), dtype=np.uint8)
            return scda.parse_entries(b"E", buf, first_index=lo, offset=entries + 32 * lo, what=raw.where)

        before = self._before(fs.name, start, 1 << 16, lambda lo, n: int(sizes_of(lo, n).sum()))
        mine = sizes_of(start, count) if count else np.zeros(0, dtype=np.uint64)
        if mine.size and np.any(mine % np.uint64(vbytes)):
            raise CheckpointError(f"{self.path!r}: field {name!r} has a leaf whose size is not a multiple of {vbytes} bytes")
        nbytes = int(mine.sum())
        data_start = raw.data_offset
        if data_start + before + nbytes > self.file_size:
            raise IncompleteCheckpointError(f"{self.path!r}: field {name!r} runs past the end of the file")
        values = np.frombuffer(bytearray(read(data_start + before, nbytes)), dtype=dt).reshape(-1, *fs.shape)
        self._hp_cursor[fs.name] = (start + count, before + nbytes)
        return counts_of(mine, vbytes), values

    def _before(self, name: str, start: int, chunk: int, total: Any) -> int:
        """Return the sum of ``total(lo, n)`` over leaves ``0 .. start - 1`` of hp field ``name``, in chunks.

        From the end of the previous range read of the field when that is at
        or before ``start``, so that streaming a field in order costs O(N)
        in all (:meth:`read_hp` keeps that position), else from the first leaf.
        """
        first, before = self._hp_cursor.get(name, (0, 0))
        if first > start:
            first, before = 0, 0
        for lo in range(first, start, chunk):
            before += int(total(lo, min(chunk, start - lo)))
        return before

    def _hp_range(self, fs: FieldSpec, N: int, start: int, count: int, dt: np.dtype[Any], E: int) -> tuple[np.ndarray, np.ndarray]:
        """read_hp of layout ``counts``: the counts before ``start`` summed in chunks, then the range's values."""
        assert fs.count_dtype is not None
        cdt = np.dtype(fs.count_dtype)
        read = self._pread()
        ce, ve = self.entries(fs.name)[:2]
        craw = read_raw_section(read, ce.offset, self.file_size)
        vraw = read_raw_section(read, ve.offset, self.file_size)
        if craw.type != "A" or craw.elem_size != cdt.itemsize or craw.elem_count != N or vraw.type != "A" or vraw.elem_size != E:
            raise CheckpointError(f"{self.path!r}: the sections of field {fs.name!r} are not as the manifest describes them")

        def counts_at(lo: int, n: int) -> np.ndarray:
            return np.frombuffer(read(craw.data_offset + lo * cdt.itemsize, n * cdt.itemsize), dtype=cdt).astype(np.int64)

        before = self._before(fs.name, start, 1 << 20, lambda lo, n: int(counts_at(lo, n).sum()))
        mine = counts_at(start, count)
        n = int(mine.sum())
        if before + n > vraw.elem_count or (mine.size and int(mine.min()) < 0):
            raise CheckpointError(f"{self.path!r}: the counts of field {fs.name!r} exceed its values")
        values = np.frombuffer(bytearray(read(vraw.data_offset + before * E, n * E)), dtype=dt).reshape(-1, *fs.shape)
        self._hp_cursor[fs.name] = (start + count, before + n)  # here in values, not bytes: this layout's own cursor
        return mine, values

    # -- closing ----------------------------------------------------------------

    @collective_method("CheckpointReader.close")
    def close(self, error: BaseException | None = None) -> None:
        """Close the file, agreeing on ``error``: this rank's error of :meth:`read_fields` or of using what it read. Collective.

        Raises
        ------
        AmrckptError
            On every rank, if any rank passed an error or cannot close the
            file: the one agreement of a load.
        """
        if self._closed:
            if error is not None:
                raise error
            return
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        call = current_call(self.comm)
        assert call is not None
        agree = self._gathered is not None or self._agree_on_close  # the same on every rank: read_fields ran
        if error is not None:
            if not agree:
                raise error  # an error every rank has (the caller's)
            call.fail(error)
        try:
            if self._scda is not None:
                self._scda.fclose()
        finally:
            g, self._gathered = self._gathered, None
            if g is not None:
                g.close()  # on every rank; its errors are kept by the call
            if agree:
                call.agree("load")

    def _close_quietly(self) -> None:
        """Close what this rank opened after an error that every rank raises (no agreement: they all raise it)."""
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for f in (self._scda, self._gathered):
            if f is not None:
                with contextlib.suppress(Exception):
                    f.fclose() if isinstance(f, scda.ScdaReader) else f.close()
        self._scda = self._gathered = None

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_manifest(m: Manifest, path: str) -> None:
    """Check what reading relies on before the manifest is used (not collective)."""
    if m.format_version not in READ_FORMAT_VERSIONS:
        raise CheckpointError(
            f"{path!r} is of amrckpt format {m.format_version}; this release ({m.amrckpt_version} wrote it) reads "
            f"formats {', '.join(map(str, READ_FORMAT_VERSIONS))}: upgrade amrckpt"
        )
    names = [fs.name for fs in m.fields]
    if len(set(names)) != len(names):
        raise CheckpointError(f"{path!r}: the manifest names a field twice")
    meshes = [ms.field for ms in m.meshes]
    if len(set(meshes)) != len(meshes):
        raise CheckpointError(f"{path!r}: the manifest describes a mesh twice")
    for ms in m.meshes:
        if ms.field not in names or m.field(ms.field).kind != "mesh":
            raise CheckpointError(f"{path!r}: the manifest's mesh field {ms.field!r} is not a mesh field")
    for fs in m.fields:
        try:
            h = handler_for(fs.kind)
        except KeyError:
            raise CheckpointError(f"{path!r}: field {fs.name!r} is of kind {fs.kind!r}, unknown to this release") from None
        h.check_spec(fs, m, path)
        if h.per_leaf and m.mesh_of(fs) is None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} holds values per leaf, but the manifest has no mesh for it")


def read_info(path: str | os.PathLike[str], *, comm: Any = None, verify: bool = True, info: Any = None) -> CheckpointInfo:
    """Read a checkpoint's manifest, index, (format 1) provenance, writing partition and run record (no field data).

    Collective (any number of ranks; serial with ``comm=None``).

    Raises
    ------
    IncompleteCheckpointError
        If the file has no footer (the save did not finish).
    CheckpointError
        If the index or manifest is malformed; ChecksumError if they do not
        match their CRC32s.
    """
    with CheckpointReader(path, comm=comm, verify=verify, access=scda.FileAccess.of(info=info)) as r:
        return r.info
