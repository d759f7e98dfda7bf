"""A non-collective scan of every section of an scda file, for tools and random access."""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import AmrckptError, ScdaCountError, ScdaDecodeError, ScdaError
from ._entries import parse_entries
from ._format import COUNT_ENTRY_NBYTES, FILE_HEADER_NBYTES, data_padding_nbytes, padding_form, parse_file_header
from ._io import open_read, pread
from ._layout import Logical, RawSection, read_raw_section, recognize

__all__ = ["FileInfo", "RawSectionInfo", "SectionInfo", "scan"]

_ENTRY_CHUNK = 1 << 20  # entries parsed at a time: 32 MiB of memory at most


RawSectionInfo = RawSection
"""One raw section of the file as :func:`scan` finds it: a :class:`RawSection` with ``end`` and ``data_nbytes`` known."""


@dataclass(frozen=True, slots=True)
class SectionInfo:
    """One logical section: a raw section, or a compression pair (paper 3).

    Attributes
    ----------
    index : int
        Position among the logical sections (0-based; the file header is
        not counted).
    type, user_string, elem_count, elem_size :
        As :class:`~amrckpt.scda.SectionHeader` reports them with
        ``decode=True``: the compressed section's type and uncompressed
        element size.
    offset, end : int
        Byte range of the logical section (both raw sections of a pair).
    compressed : bool
        Whether this is a compression pair.
    nbytes : int
        Data bytes a reader gets (decompressed for a pair).
    raw : tuple of RawSectionInfo
        The raw sections (two for a pair).
    """

    index: int
    type: str
    user_string: bytes
    elem_count: int
    elem_size: int
    offset: int
    end: int
    compressed: bool
    nbytes: int
    raw: tuple[RawSectionInfo, ...]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What :func:`scan` found.

    Attributes
    ----------
    path : str
    file_size : int
    vendor, user_string : bytes
        From the file header.
    sections : list of SectionInfo
    """

    path: str
    file_size: int
    vendor: bytes
    user_string: bytes
    sections: list[SectionInfo]


def exact_reader(fd: int, path: str, short: type[AmrckptError] = ScdaCountError) -> Callable[[int, int], bytes]:
    """Return ``read(offset, nbytes)``: exactly ``nbytes`` bytes of the open file ``fd`` (``pread``), not collective.

    Short reads are continued (:func:`~amrckpt.scda._io.pread`); raises
    ``short`` (default :class:`ScdaCountError`) where the file ends first
    and :class:`ScdaIOError` (with its errno) where ``pread`` fails.
    """
    return functools.partial(pread, fd, path, short=short)


def scan(path: str | os.PathLike[str], *, decode: bool = True, check_padding: bool = False) -> FileInfo:
    """List every section of an scda file without reading its data.

    Not collective: one process reads the headers (and, for V sections,
    the E_i entries, in chunks of bounded memory, to find the section's
    end).  No MPI is used.  The result serves tools (``amrckpt inspect``)
    and random access (:meth:`ScdaReader.fseek_section`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    decode : bool, optional
        Group compression pairs into one logical section (paper Table 2).
    check_padding : bool, optional
        Also read and classify the data padding of every section.

    Returns
    -------
    FileInfo

    Raises
    ------
    ScdaFormatError, ScdaCountError, ScdaDecodeError, ScdaIOError
        At the first section that is malformed, truncated or (with
        ``decode``) violates the compression convention.
    """
    info, error = scan_partial(path, decode=decode, check_padding=check_padding)
    if error is not None:
        raise error
    return info


def scan_partial(
    path: str | os.PathLike[str], *, decode: bool = True, check_padding: bool = False
) -> tuple[FileInfo, AmrckptError | None]:
    """Scan a file as far as it goes: the sections before the first error, and that error.

    Not collective, no MPI: the same walk as :func:`scan`, which gives all
    or nothing; for tools that report what a damaged file still holds.

    Returns
    -------
    FileInfo
        The sections found before the first error.
    AmrckptError or None
        The error that stopped the walk, or None if the file is whole.

    Raises
    ------
    ScdaIOError
        If the file cannot be opened.
    ScdaFormatError
        On this rank, if the file header itself is malformed (nothing to list).
    ScdaCountError
        On this rank, if the file is shorter than its 128-byte file header (nothing to list).
    """
    path = os.fspath(path)
    fd = open_read(path)
    try:
        size = os.fstat(fd).st_size

        read = exact_reader(fd, path)
        if size < FILE_HEADER_NBYTES:
            raise ScdaCountError(f"{path!r} has {size} bytes, fewer than the 128-byte scda file header")
        vendor, user = parse_file_header(read(0, FILE_HEADER_NBYTES))
        sections: list[SectionInfo] = []
        off = FILE_HEADER_NBYTES
        try:
            while off < size:
                pair = recognize(read, read_raw_section(read, off, size), size, decode)
                raws = tuple(_complete(read, r, size, check_padding) for r in pair[1])
                sections.append(_logical(len(sections), pair, raws, read))
                off = _end(raws[-1])
        except AmrckptError as exc:
            return FileInfo(path, size, vendor, user, sections), exc
        return FileInfo(path, size, vendor, user, sections), None
    finally:
        os.close(fd)


def _sum_entries(read: object, raw: RawSection, letter: bytes, first: int, N: int) -> int:
    total = 0
    for s in range(0, N, _ENTRY_CHUNK):
        n = min(_ENTRY_CHUNK, N - s)
        off = first + COUNT_ENTRY_NBYTES * s
        buf = np.frombuffer(read(off, COUNT_ENTRY_NBYTES * n), dtype=np.uint8)  # type: ignore[operator]
        total += int(parse_entries(letter, buf, first_index=s, offset=off, what=raw.where).sum(dtype=np.uint64))
    return total


def _complete(read: object, raw: RawSection, size: int, check_padding: bool) -> RawSectionInfo:
    end: int | None
    if raw.type == "V":
        nbytes = _sum_entries(read, raw, b"E", raw.entries_offset, raw.elem_count)
        end = raw.data_offset + nbytes + data_padding_nbytes(nbytes)
        if end > size:
            raise ScdaCountError(
                f"{raw.where}element sizes add up to {nbytes} bytes; with padding the section ends at byte {end}, "
                f"after the end of the file ({size})"
            )
    elif raw.type == "I":
        nbytes, end = 32, raw.end
    else:
        nbytes = raw.elem_count * raw.elem_size if raw.type == "A" else raw.elem_size
        end = raw.end
    assert end is not None
    form = "unchecked"
    if raw.type == "I":
        form = "none"
    elif check_padding:
        pad = data_padding_nbytes(nbytes)
        start = raw.data_offset + nbytes
        buf = read(start - 1, pad + 1) if nbytes else b"\0" + read(start, pad)  # type: ignore[operator]
        form = padding_form(buf[1:], nbytes, buf[0] if nbytes else None)
    return dataclasses.replace(raw, end=end, data_nbytes=nbytes, padding_form=form)


def _logical(index: int, pair: Logical, raws: tuple[RawSection, ...], read: object) -> SectionInfo:
    h = pair[0]
    if not h.decoded:
        nbytes = raws[0].data_nbytes or 0
    elif h.type == "B":
        nbytes = h.elem_size
    elif h.type == "A":
        nbytes = h.elem_count * h.elem_size
    else:
        a = pair[1][0]
        try:
            nbytes = _sum_entries(read, a, b"U", a.data_offset, a.elem_count)
        except ScdaError as exc:
            raise ScdaDecodeError(f"{a.where}invalid U entry: {exc}") from exc
    return SectionInfo(
        index, h.type, h.user_string, h.elem_count, h.elem_size, raws[0].offset, _end(raws[-1]), h.decoded, nbytes, raws
    )


def _end(raw: RawSection) -> int:
    """Return the end of a raw section that :func:`_complete` completed."""
    assert raw.end is not None
    return raw.end
