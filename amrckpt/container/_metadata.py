"""What the root reads of a checkpoint when it is opened: footer, index, manifest, the wanted sections' headers.

Everything here is read on one rank alone, with POSIX reads
(:class:`amrckpt.scda.LocalFile`), CRC-checked, and broadcast by the
reader's one collective call of opening; nothing here is collective.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .. import scda
from .._crc import crc32
from .._files import read_regular
from ..errors import (
    AmrckptError,
    CheckpointError,
    ChecksumError,
    IncompleteCheckpointError,
    ScdaCountError,
    ScdaError,
    ScdaIOError,
)
from ..partition import Partition
from ..scda import checksum_error, decode_elements, read_raw_section, read_section
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
    Provenance,
    RunRecord,
    parse_footer,
)
from ._handlers import handler_for
from ._sections import Section
from ._writer import RUN_RECORD_LIMIT, run_record_path

_log = logging.getLogger("amrckpt.container")

__all__ = [
    "CheckpointInfo",
    "Metadata",
    "check_manifest",
    "checksum_error",
    "entry_of",
    "explain",
    "parse_model",
    "read_index_on_root",
    "read_metadata",
    "read_run_record",
    "read_sections",
]


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
        rec = self.run if self.run is not None else self.provenance
        return rec.writer_size if rec is not None else None

    @property
    def saved_at(self) -> str | None:
        """When the save started (UTC, ISO 8601), where known."""
        rec = self.run if self.run is not None else self.provenance
        return rec.saved_at if rec is not None else None


def parse_model(model: Any, raw: bytes, what: str, path: str) -> Any:
    """Validate JSON ``raw`` as pydantic ``model``; CheckpointError naming ``what`` and the first problem.

    Raises
    ------
    CheckpointError
        On this rank, if ``raw`` is not valid JSON of ``model``.
    """
    try:
        return model.model_validate_json(raw)
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"msg": str(exc), "loc": ()}
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise CheckpointError(f"{path!r}: the {what} is not valid: {first['msg']}{' at ' + where if where else ''}") from exc


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
    ScdaIOError
        On this rank, if the file cannot be read (an I/O error is no verdict on its bytes).
    """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
    off = size - FOOTER_NBYTES
    not_a_footer = f"{path!r}: the last 96 bytes are not an amrckpt footer (the save did not finish?)"
    try:
        if off < scda.FILE_HEADER_NBYTES or off % 32:
            raise IncompleteCheckpointError(f"a file of {size} bytes")
        foot = read_raw_section(read, off, size)
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except (ScdaError, IncompleteCheckpointError) as exc:
        raise IncompleteCheckpointError(f"{not_a_footer}: {exc}") from exc
    if foot.type != "I":
        raise IncompleteCheckpointError(not_a_footer)
    index_offset, index_crc = parse_footer(foot.user_string, foot.inline or b"", repr(path))
    where = f"the footer (bytes {off}..{size}) points at byte {index_offset}"
    try:
        raw = read_raw_section(read, index_offset, size) if 0 <= index_offset < off else None
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except ScdaError:
        raw = None
    if raw is None or raw.type != "B" or raw.user_string != INDEX_USER_STRING or raw.end is None:
        if verify and 0 <= index_offset < off and _crc_of(read, index_offset, off) != index_crc:
            raise checksum_error("amrckpt index", index_offset, off, path)
        raise CheckpointError(f"{path!r}: {where}, where there is no amrckpt index: the footer or the index is damaged")
    blob = read(index_offset, raw.end - index_offset)
    if verify and crc32(blob) != index_crc:
        raise checksum_error("amrckpt index", index_offset, raw.end, path)
    index_raw = bytes(blob[raw.data_offset - index_offset : raw.data_offset - index_offset + raw.elem_size])
    index: Index = parse_model(Index, index_raw, "index", path)
    return index_raw, index


def read_run_record(path: str | os.PathLike[str]) -> RunRecord | None:
    """Return the run record beside checkpoint ``path`` (``<path>.run.json``), or None if there is none or it cannot be used.

    Not collective.  The record is advisory (the checkpoint is the truth):
    one that cannot be used is ignored, with a warning logged (logger
    ``amrckpt.container``) that names it and why: a symbolic link (never
    followed), a FIFO (never waited on), a device or a directory, a file of
    more than :data:`RUN_RECORD_LIMIT` bytes, an error of reading it, or
    contents that are not a run record.  It is never an error of the
    checkpoint.  Never raises (for a missing record: None, and no warning).
    """
    where = run_record_path(path)
    try:
        raw = read_regular(where, RUN_RECORD_LIMIT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _log.warning("ignoring the run record %s: %s", where, exc.strerror or exc)
        return None
    try:
        rec: RunRecord = RunRecord.model_validate_json(raw)
    except ValueError as exc:
        _log.warning("ignoring the run record %s: not a run record (%s)", where, str(exc).splitlines()[0])
        return None
    return rec


def check_manifest(m: Manifest, path: str) -> None:
    """Check what reading relies on before the manifest is used (not collective).

    Raises
    ------
    CheckpointError
        On this rank, if the format version is not read by this release, a field or a mesh is named twice, a mesh
        field is not one, a kind is unknown, or a per-leaf field has no mesh.
    """
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
        if ms.field not in names or not _is_mesh(m.field(ms.field)):
            raise CheckpointError(f"{path!r}: the manifest's mesh field {ms.field!r} is not a mesh field")
    for fs in m.fields:
        try:
            h = handler_for(fs.kind)
        except KeyError:
            raise CheckpointError(f"{path!r}: field {fs.name!r} is of kind {fs.kind!r}, unknown to this release") from None
        h.check_spec(fs, m, path)
        if h.per_leaf and m.mesh_of(fs) is None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} holds values per leaf, but the manifest has no mesh for it")


@dataclass(frozen=True)
class Metadata:
    """What the root read when opening, for every rank (picklable).

    Attributes
    ----------
    file_size : int
    index_raw, manifest_raw : bytes
        The JSON of the index and the manifest (every rank validates them).
    run : RunRecord or None
        The run record beside the file.
    sections : dict of str to list of Section
        The sections of the wanted fields; ``"file header"`` maps to an
        empty list when its CRC32 was checked.
    provenance_raw : bytes or None
        Format 1: the provenance block's JSON.
    writer_counts : list of int or None
        Format 1: the writing partition's counts.
    """

    file_size: int
    index_raw: bytes
    manifest_raw: bytes
    run: RunRecord | None
    sections: dict[str, list[Section]]
    provenance_raw: bytes | None = None
    writer_counts: list[int] | None = None


def found_at_open(manifest: Manifest, fields: Sequence[str] | Literal["all"] | None) -> list[str]:
    """Return the fields whose sections the root finds when opening, in the manifest's order. Not collective.

    No field for None (the metadata alone); every field for ``"all"``;
    otherwise those of ``fields`` that the file holds and every field whose
    value the manifest holds (inline values: a load reads them whatever
    fields it asks for).  A name the file does not hold is left to the
    caller, which says so on every rank.
    """
    if fields is None:
        return []
    if fields == "all":
        return [fs.name for fs in manifest.fields]
    asked = set(fields)
    return [fs.name for fs in manifest.fields if fs.name in asked or handler_for(fs.kind).in_manifest]


def read_metadata(f: scda.LocalFile, verify: bool, fields: Sequence[str] | Literal["all"] | None = None) -> Metadata:
    """Read the metadata on this rank alone, CRC-checked: what every rank needs to read fields. Not collective.

    The file size, the scda file header, the footer, the index and the
    manifest, the run record beside the file, the headers of the sections
    of the fields :func:`found_at_open` names (with the data of inline and
    block sections, and the padding of array sections), and in format 1
    the provenance block and the writing partition.

    Raises
    ------
    IncompleteCheckpointError
        On this rank, if the file does not end in an amrckpt footer (the save did not finish, the file was cut short).
    ChecksumError
        On this rank, with ``verify``, if a section read does not match its CRC32 (damage, said by section).
    CheckpointError
        On this rank, if the index or the manifest is missing or malformed, or a section is not what the manifest describes.
    ScdaIOError
        On this rank, if the file cannot be read (an I/O error is no verdict on its bytes).
    ScdaError
        On this rank, if the file header is not that of an scda file and no amrckpt index explains it.
    """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
    path, read, size = f.path, f.read, f.size
    try:
        header_crc = scda.read_file_header(read, size, path)[2]
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except ScdaError as exc:  # damage (with the index's word for it), a file cut short, or no scda file at all
        try:
            index = read_index_on_root(read, size, path, verify=verify)[1]
        except IncompleteCheckpointError as inc:
            if isinstance(exc, ScdaCountError):
                raise inc from exc
            raise exc from None
        except AmrckptError:
            raise exc from None
        head = [x for x in index.sections if x.offset == 0]
        if head:
            explain(read, size, head[0], verify, path, exc)
        raise
    index_raw, index = read_index_on_root(read, size, path, verify=verify)
    manifest_raw = _block(read, size, entry_of(index, "amrckpt manifest", path), MANIFEST_USER_STRING, verify, path)
    manifest: Manifest = parse_model(Manifest, manifest_raw, "manifest", path)
    check_manifest(manifest, path)
    sections: dict[str, list[Section]] = {}
    head = [x for x in index.sections if x.offset == 0]
    if head and verify:  # the file header section F, checked here (its entry is named "file header")
        if head[0].crc32 != header_crc or head[0].end != scda.FILE_HEADER_NBYTES:
            raise checksum_error(head[0].name, 0, head[0].end, path)
        sections[head[0].name] = []
    sections.update(read_sections(read, size, index, manifest, found_at_open(manifest, fields), verify, path))
    prov = counts = None
    if manifest.format_version == 1:
        prov = _block(read, size, entry_of(index, "amrckpt provenance", path), PROVENANCE_USER_STRING, verify, path)
        counts = _format1_partition(read, size, entry_of(index, "amrckpt partition", path), verify, path)
    return Metadata(size, index_raw, manifest_raw, read_run_record(path), sections, prov, counts)


def entry_of(index: Index, name: str, path: str) -> IndexEntry:
    try:
        return index.entry(name)
    except KeyError:
        raise CheckpointError(f"{path!r}: the index has no section {name!r}") from None


def _crc_of(read: Any, start: int, end: int) -> int:
    """Return the CRC32 of bytes ``start .. end - 1`` of the file, read in pieces of 16 MiB."""
    crc = 0
    for off in range(start, end, 16 << 20):
        crc = crc32(read(off, min(16 << 20, end - off)), crc)
    return crc


def explain(read: Any, size: int, e: IndexEntry, verify: bool, path: str, exc: BaseException) -> None:
    """With ``verify``, raise the section's ChecksumError (from ``exc``) if the bytes of index entry ``e`` do not match its CRC32.

    For a section whose structure broke a check before its bytes were
    CRC'd: damage is the better explanation, and says where.  Not collective.

    Raises
    ------
    ChecksumError
        On this rank, with ``verify``, if the bytes of ``e`` do not match its CRC32 (from ``exc``).
    ScdaIOError
        On this rank, if those bytes cannot be read.
    """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
    if not verify:
        return
    end = min(e.end, size)
    try:
        damaged = not 0 <= e.offset <= end or e.end > size or _crc_of(read, e.offset, end) != e.crc32
    except ScdaIOError:  # the bytes could not be read: no evidence either way, and the I/O error is the better cause
        raise
    except AmrckptError:
        damaged = True
    if damaged:
        raise checksum_error(e.name, e.offset, e.end, path) from exc


def _block(read: Any, size: int, e: IndexEntry, user_string: bytes, verify: bool, path: str) -> bytes:
    """Return the data of the block section of index entry ``e``, its CRC32 checked against the index with ``verify``.

    Raises
    ------
    CheckpointError
        On this rank, if there is no block section of that user string at ``e``'s offset (with ``verify``, a
        ChecksumError instead where the section's bytes do not match).
    ChecksumError
        On this rank, with ``verify``, if the section does not match its CRC32.
    ScdaIOError
        On this rank, if the file cannot be read.
    """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
    try:
        raw = read_raw_section(read, e.offset, size)
        if raw.type != "B" or raw.user_string != user_string or raw.end is None:
            raise CheckpointError(f"{path!r}: expected section {user_string.decode()!r} at byte {e.offset}")
        whole = read(e.offset, raw.end - e.offset)
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except ScdaError as exc:
        explain(read, size, e, verify, path, exc)
        raise CheckpointError(f"{path!r}: no section {user_string.decode()!r} at byte {e.offset}: {exc}") from exc
    except CheckpointError as exc:
        explain(read, size, e, verify, path, exc)
        raise
    if verify and (crc32(whole) != e.crc32 or raw.end != e.end):
        raise checksum_error(e.name, e.offset, e.end, path)
    start = raw.data_offset - e.offset
    return bytes(whole[start : start + raw.elem_size])


def _format1_partition(read: Any, size: int, e: IndexEntry, verify: bool, path: str) -> list[int]:
    """Format 1: the counts of the writing partition (an A section of P int64).

    Raises
    ------
    CheckpointError
        On this rank, if the section is not an A section of int64 counts (with ``verify``, a ChecksumError instead
        where its bytes do not match).
    ChecksumError
        On this rank, with ``verify``, if the section does not match its CRC32.
    ScdaIOError
        On this rank, if the file cannot be read.
    """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
    try:
        raw = read_raw_section(read, e.offset, size)
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except ScdaError as exc:
        explain(read, size, e, verify, path, exc)
        raise CheckpointError(f"{path!r}: malformed writing partition section: {exc}") from exc
    if raw.type != "A" or raw.user_string != PARTITION_USER_STRING or raw.elem_size != 8 or raw.end is None:
        exc2 = CheckpointError(f"{path!r}: malformed writing partition section")
        explain(read, size, e, verify, path, exc2)
        raise exc2
    whole = read(e.offset, raw.end - e.offset)
    if verify and (crc32(whole) != e.crc32 or raw.end != e.end):
        raise checksum_error(e.name, e.offset, e.end, path)
    start = raw.data_offset - e.offset
    return [int(c) for c in np.frombuffer(whole[start : start + 8 * raw.elem_count], dtype="<i8")]


def writer_partition_of(prov: Provenance, counts: list[int], path: str) -> Partition:
    """Format 1: the writing partition, checked against the provenance.

    Raises
    ------
    CheckpointError
        On this rank, if the partition and the provenance differ in their number of ranks.
    """
    if len(counts) != prov.writer_size or sum(counts) < 0:
        raise CheckpointError(f"{path!r}: the writing partition has {len(counts)} ranks, the provenance {prov.writer_size}")
    return Partition.from_counts(counts)


def read_sections(
    read: Any, size: int, index: Index, manifest: Manifest, names: Sequence[str], verify: bool, path: str
) -> dict[str, list[Section]]:
    """Read the headers of the sections of fields ``names`` (not collective): :class:`Section` of each, by field name."""
    out: dict[str, list[Section]] = {}
    for name in names:
        fs = manifest.field(name)
        out[name] = [section_at(read, size, x, fs, verify, path) for x in index.sections if x.name == name]
    return out


def section_at(read: Any, size: int, e: IndexEntry, fs: FieldSpec, verify: bool, path: str) -> Section:
    """Read the section of index entry ``e`` as the root does: its header(s); I and B sections whole; the padding of A sections.

    Raises
    ------
    CheckpointError
        If the section is not field ``fs`` as the manifest describes it, or does not end where the index says.
    ChecksumError
        With ``verify``, an inline or block section (or an A section's
        padding) that does not match.
    ScdaError
        On this rank, if the section's bytes are not an scda section (with ``verify``, a ChecksumError instead where
        they do not match).
    ScdaIOError
        On this rank, if the file cannot be read.
    """
    try:
        return _section_at(read, size, e, fs, verify, path)
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except (CheckpointError, ScdaError) as exc:
        if isinstance(exc, ChecksumError):
            raise
        explain(read, size, e, verify, path, exc)  # damage explains a section that is not what it should be
        raise


def _section_at(read: Any, size: int, e: IndexEntry, fs: FieldSpec, verify: bool, path: str) -> Section:
    try:
        header, raws = read_section(read, e.offset, size, decode=True)
    except ScdaIOError:  # an I/O error is no verdict on the file's bytes: raised as it is
        raise
    except ScdaError as exc:
        raise CheckpointError(f"{path!r}: no section of field {fs.name!r} at byte {e.offset}: {exc}") from exc
    if header.type != fs.section or header.user_string != fs.name.encode() or header.decoded != fs.compressed:
        raise CheckpointError(f"{path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it")
    last = raws[-1]
    if header.type in ("I", "B"):  # replicated: read here, checked here, broadcast
        assert last.end is not None
        whole = read(e.offset, last.end - e.offset)
        if verify and (crc32(whole) != e.crc32 or last.end != e.end):
            raise checksum_error(e.name, e.offset, e.end, path)
        start = last.data_offset - e.offset
        data = bytes(whole[start : start + (32 if last.type == "I" else last.elem_size)])
        if header.decoded:  # a compressed block: one element of the convention (paper 3.2)
            enc = np.frombuffer(data, dtype=np.uint8)
            sizes = np.array([len(data)], dtype=np.uint64)
            data = decode_elements(
                enc, sizes, np.array([header.elem_size], dtype=np.uint64), offset=last.data_offset, what=last.where
            ).tobytes()
        return Section(header, raws, e, (), data)
    if last.end is not None and last.end != e.end:
        raise CheckpointError(f"{path!r}: field {fs.name!r} does not end where the index says (byte {last.end}, not {e.end})")
    if not last.data_offset <= e.end <= size:
        raise CheckpointError(f"{path!r}: the index ends field {fs.name!r} outside the file")
    known: list[tuple[int, int, int]] = []
    for raw in raws:
        known.append((raw.offset, raw.head_nbytes, raw.head_crc))  # the header (all of an inline section)
        if raw.type == "A" and verify:  # the padding after the data
            assert raw.end is not None
            start = raw.data_offset + raw.elem_count * raw.elem_size
            known.append((start, raw.end - start, crc32(read(start, raw.end - start))))
    return Section(header, raws, e, tuple(known))


def _is_mesh(fs: FieldSpec) -> bool:
    try:
        return handler_for(fs.kind).is_mesh
    except KeyError:
        return False
