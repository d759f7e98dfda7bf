"""What tools need beyond reading and writing: the metadata of damaged files, and rewriting a checkpoint."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .. import scda
from .._files import replacing, same_file
from .._version import __version__
from ..comm import SerialComm, as_comm, collective
from ..errors import CheckpointError, ScdaArgumentError
from ._convention import (
    FOOTER_USER_STRING,
    MANIFEST_USER_STRING,
    PARTITION_USER_STRING,
    PROVENANCE_USER_STRING,
    FieldSpec,
    Manifest,
    Provenance,
    format_version_of,
)
from ._reader import CheckpointReader, checksum_error, read_info
from ._verify import is_checkpoint
from ._writer import CheckpointWriter, WriteResult

__all__ = ["ConvertResult", "RawMetadata", "convert", "convert_file", "read_raw_metadata"]


@dataclass(frozen=True)
class RawMetadata:
    """The convention's sections found by a scan of a (possibly damaged) file, unchecked.

    Attributes
    ----------
    manifest : Manifest or None
        None if absent; see ``manifest_error``.
    manifest_error : str or None
        Why the manifest block that is there does not validate.
    provenance : Provenance or None
        Format 1 only.
    writer_counts : (P,) numpy.ndarray of int64 or None
        Format 1's writing partition.
    complete : bool
        Whether the last section is a footer that ends the file.
    """

    manifest: Manifest | None
    manifest_error: str | None
    provenance: Provenance | None
    writer_counts: np.ndarray | None
    complete: bool


def read_raw_metadata(path: str, info: scda.FileInfo) -> RawMetadata | None:
    """Read the manifest, (format 1) provenance and partition, and the footer among the sections of a scan.

    Not collective, no CRC checks: for tools that describe damaged files
    (``amrckpt inspect``).  None if the file holds no manifest block.
    """
    wanted = {MANIFEST_USER_STRING: "B", PROVENANCE_USER_STRING: "B", PARTITION_USER_STRING: "A", FOOTER_USER_STRING: "I"}
    if not any(s.type == "B" and s.user_string == MANIFEST_USER_STRING for s in info.sections):
        return None
    found: dict[bytes, Any] = {}
    with scda.fopen_read(path, comm=SerialComm()) as f:  # one rank reads its own metadata
        for s in info.sections:
            if wanted.get(s.user_string) != s.type or s.user_string in found:
                continue
            f.fseek_section(s.offset)
            h = f.fread_section_header(decode=True)
            assert h is not None
            if h.type == "B":
                data = f.fread_block_data()
                assert data is not None
                found[s.user_string] = data.tobytes()
            elif h.type == "A":
                if h.elem_size == 8:
                    arr = f.fread_array_data([h.elem_count])
                    assert arr is not None
                    found[s.user_string] = arr.view("<i8")
            else:
                found[s.user_string] = s.offset
    manifest, error = None, None
    try:
        manifest = Manifest.model_validate_json(found[MANIFEST_USER_STRING])
    except ValueError as exc:
        error = f"the manifest is not valid: {str(exc).splitlines()[0]}"
    prov = None
    if PROVENANCE_USER_STRING in found:
        with contextlib.suppress(ValueError):
            prov = Provenance.model_validate_json(found[PROVENANCE_USER_STRING])
    last = info.sections[-1] if info.sections else None
    foot = found.get(FOOTER_USER_STRING)
    complete = foot is not None and last is not None and last.offset == foot and last.end == info.file_size
    return RawMetadata(manifest, error, prov, found.get(PARTITION_USER_STRING), complete)


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    comm: Any = None,
    compress: Literal["keep", "encode", "decode"] = "keep",
    level: int = 9,
    style: scda.Style = "unix",
    progress: Any = None,
) -> tuple[WriteResult, int]:
    """Rewrite checkpoint ``src`` as ``dst`` field by field, in the current format. Collective.

    Every byte read is checked against ``src``'s CRC32s; the manifest's
    ``compressed`` flags, the index and the footer are made anew, so that
    ``dst`` is a valid checkpoint; a format-1 file becomes format 2 (its
    provenance and writing partition are left out).

    Parameters
    ----------
    src, dst : str or os.PathLike
        The checkpoint and the new file (created, or overwritten: ``FileAccess.truncate``).
    comm : None, mpi4py.MPI.Comm or Comm, optional
    compress : {"keep", "encode", "decode"}, optional
        Keep each field's compression, compress every field (paper section 3) or none.
    level : int, optional
        zlib level of new compression.
    style : {"unix", "mime"}, optional
        Line breaks of the new file.
    progress : object with ``update(nbytes)``, optional
        Told the bytes of ``src`` read, field by field.

    Returns
    -------
    WriteResult
        What was written.
    int
        The number of fields whose compression changed.

    Raises
    ------
    ScdaArgumentError
        On every rank, if ``dst`` is ``src`` itself (it would be overwritten while it is read); nothing is written.
    ChecksumError
        On every rank, if a section of ``src`` does not match its CRC32.
    CheckpointError
        On every rank, if ``src`` is damaged: not a checkpoint, or a section is not the field the manifest describes.
    ScdaError
        On every rank, if ``src`` is not a valid scda file or ``dst`` cannot be written.
    """  # noqa: DOC501 (checksum_error() returns the ChecksumError)
    c = as_comm(comm)
    with collective(c, "convert") as call:
        same = call.on_root(lambda: same_file(src, dst), what="convert: the same file")
    if same:
        raise ScdaArgumentError(f"convert: {os.fspath(dst)!r} is {os.fspath(src)!r} itself; write to another name")
    changed = 0
    with CheckpointReader(src, comm=c, verify=True) as r:
        m = r.manifest

        def compressed(fs: FieldSpec) -> bool:
            if fs.section == "I" or fs.layout is not None:  # a layout's sections are copied as they are
                return fs.compressed
            return {"keep": fs.compressed, "encode": True, "decode": False}[compress]

        fields = [fs.model_copy(update={"compressed": compressed(fs)}) for fs in m.fields]
        changed = sum(a.compressed != b.compressed for a, b in zip(fields, m.fields, strict=True))
        manifest = m.model_copy(
            update={"fields": fields, "format_version": format_version_of(m.meshes), "amrckpt_version": __version__}
        )
        # The sections are copied through the scda API (decoded as read, encoded as written), their CRC32s compared after.
        with scda.fopen_read(src, comm=c, checksum=True) as f:
            with CheckpointWriter(dst, manifest, comm=c, access=scda.FileAccess(style=style)) as w:
                for fs in fields:
                    was = m.field(fs.name)
                    parts = r.entries(fs.name) if fs.layout is not None else [r.entry(fs.name)]
                    data = []
                    for e in parts:
                        f.fseek_section(e.offset)
                        h = f.fread_section_header(decode=True)
                        if h is None or h.type != was.section or h.user_string != fs.name.encode() or h.decoded != was.compressed:
                            raise CheckpointError(
                                f"{r.path!r}: the section at byte {e.offset} is not field {fs.name!r} as the manifest describes it"
                            )
                        data.append(scda.read_section_data(f, h))
                    w.copy_field(fs, data if fs.layout is not None else data[0], level=level)
                    if progress is not None:
                        progress.update(sum(e.end - e.offset for e in parts))
            by_offset = {e.offset: e for e in r.index.sections}
            for off, end, crc in f.section_crcs():  # the same on every rank
                got = by_offset.get(off)
                if got is not None and crc is not None and (got.end != end or got.crc32 != crc):
                    raise checksum_error(got.name, got.offset, got.end, r.path)
    assert w.result is not None
    return w.result, changed


@dataclass(frozen=True)
class ConvertResult:
    """What :func:`convert_file` did.

    Attributes
    ----------
    kind : {"checkpoint", "scda"}
        What ``src`` was rewritten as.
    sections : int
        The new file's sections (a checkpoint's index entries and footer).
    encoded, decoded : int
        Sections (fields) compressed, and decompressed, by the rewrite.
    style : {"unix", "mime"}
        The new file's line breaks.
    file_size : int
        The new file's size in bytes.
    """

    kind: Literal["checkpoint", "scda"]
    sections: int
    encoded: int
    decoded: int
    style: scda.Style
    file_size: int


def convert_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    comm: Any = None,
    compress: Literal["keep", "encode", "decode"] = "keep",
    style: scda.Style | None = None,
    level: int = 9,
    progress: Any = None,
) -> ConvertResult:
    """Rewrite any scda file: a checkpoint by :func:`convert` (checked, a valid checkpoint again), any other section by section.

    Collective.  ``dst`` is written under a temporary name beside it and
    renamed when complete (never through a link planted under either
    name); if anything fails it is untouched.  ``style`` defaults to that
    of ``src``.

    Returns
    -------
    ConvertResult

    Raises
    ------
    CheckpointError
        On every rank, if ``src`` claims to be a checkpoint but its footer,
        index or metadata do not verify (nothing is written).
    ScdaError, ChecksumError
        On every rank, if ``src`` is damaged or ``dst`` cannot be written.
    """
    with collective(comm, "convert") as call:
        spath = os.fspath(src)
        in_style, is_ckpt = call.on_root(lambda: (scda.line_style(spath), is_checkpoint(spath)), what="convert: sniff")
        out_style: scda.Style = style or in_style
        if is_ckpt:
            read_info(spath, comm=call.comm, verify=True)
        with replacing(dst, call) as tmp:
            if is_ckpt:
                res, changed = convert(
                    spath, tmp, comm=call.comm, compress=compress, level=level, style=out_style, progress=progress
                )
                enc = changed if compress == "encode" else 0
                dec = changed if compress == "decode" else 0
                return ConvertResult("checkpoint", len(res.index.sections) + 1, enc, dec, out_style, res.nbytes)
            got = scda.rewrite(spath, tmp, comm=call.comm, compress=compress, style=out_style, level=level, progress=progress)
            return ConvertResult("scda", got.sections, got.encoded, got.decoded, out_style, got.file_size)
