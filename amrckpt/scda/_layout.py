"""Where each section's bytes are: partitions, raw section headers, magic pairs.

Shared by the collective reader, the writer and the non-collective scan.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._crc import crc32
from ..errors import ScdaArgumentError, ScdaCountError, ScdaDecodeError, ScdaFormatError
from ._codec import MAX_INFLATE_RATIO
from ._format import (
    COUNT_ENTRY_NBYTES,
    INLINE_DATA_NBYTES,
    SECTION_HEADER_NBYTES,
    data_padding_nbytes,
    parse_count_entry,
    parse_section_header,
)

__all__ = [
    "MAGIC_A",
    "MAGIC_B",
    "MAGIC_V",
    "RawSection",
    "SectionHeader",
    "Share",
    "last_owner",
    "partition_offsets",
    "read_raw_section",
    "read_section",
    "to_count",
    "to_rank",
]

MAGIC_B = b"B compressed scda 00"
"""User string of the inline section before a compressed block (paper eq. 8)."""
MAGIC_A = b"A compressed scda 00"
"""User string of the inline section before a compressed fixed-size array (eq. 9)."""
MAGIC_V = b"V compressed scda 00"
"""User string of the U-entry array before a compressed variable-size array (eq. 10)."""


@dataclass(frozen=True, slots=True)
class SectionHeader:
    """What :meth:`ScdaReader.fread_section_header` returns (libsc names).

    Attributes
    ----------
    type : {"I", "B", "A", "V"}
        The section type; for a decoded compression pair, the type of the
        section that was compressed.
    user_string : bytes
        0 to 58 bytes.
    elem_count : int
        N, the number of array elements for A and V; 0 for I and B (paper
        A.5.1).
    elem_size : int
        E, the bytes per element for A, the bytes of the block for B (for a
        decoded section: the uncompressed sizes); 0 for I and V.
    decoded : bool
        True if the section follows the compression convention and will be
        decompressed on reading (paper Table 2).
    offset : int
        Byte offset of the section (of its first raw section when decoded).
    """

    type: str
    user_string: bytes
    elem_count: int
    elem_size: int
    decoded: bool
    offset: int


@dataclass(frozen=True, slots=True)
class RawSection:
    """One raw section of the file as found: its type, counts and where its entries, data and padding are.

    Attributes
    ----------
    type : str
        ``"I"``, ``"B"``, ``"A"`` or ``"V"``.
    user_string : bytes
        0 to 58 bytes.
    offset : int
        Its first byte.
    elem_count, elem_size : int
        N and E as in the file (E = 0 for I and V).
    data_offset : int
        First data byte (for V, after the E_i entries).
    entries_offset : int
        First E_i entry of a V section (else ``data_offset``).
    end : int or None
        One past its last byte, padding included; None for a V section until
        the sum of its element sizes is known (:func:`scan` knows it).
    inline : bytes or None
        The 32 data bytes of an I section (on the rank that parsed the header).
    head_nbytes, head_crc : int
        The bytes of its header (all of an I section) and their CRC32.
    data_nbytes : int or None
        Data bytes without padding (for V, the sum of the E_i), where known (:func:`scan`).
    padding_form : str
        :func:`scan` with ``check_padding``: ``"unix"``, ``"mime"`` or
        ``"other"`` for the data padding, ``"none"`` for I sections; else ``"unchecked"``.
    """

    type: str
    user_string: bytes
    offset: int
    elem_count: int
    elem_size: int
    data_offset: int
    entries_offset: int
    end: int | None
    inline: bytes | None = None
    head_nbytes: int = 0
    head_crc: int = 0
    data_nbytes: int | None = None
    padding_form: str = "unchecked"

    @property
    def where(self) -> str:
        """Names the section in error messages."""
        return f"section {self.type!r} {self.user_string[:40]!r} at byte {self.offset}: "


def to_count(value: Any, what: str) -> int:
    """Return a non-negative Python int from an int-like value, or raise ScdaArgumentError.

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``value`` is not an integer, or is negative.
    """
    try:
        v = operator.index(value)
    except TypeError as exc:
        raise ScdaArgumentError(f"{what} must be an integer, not {type(value).__name__}") from exc
    if v < 0:
        raise ScdaArgumentError(f"{what} must be non-negative, not {v}")
    return v


def to_rank(root: Any, size: int) -> int:
    """Return ``root`` as a rank of a communicator of ``size`` ranks (the ``root`` argument of libsc's ``sc_scda`` calls).

    Raises
    ------
    ScdaArgumentError
        If ``root`` is not a non-negative int below ``size``.
    """
    r = to_count(root, "root")
    if r >= size:
        raise ScdaArgumentError(f"root {r} is not a rank of a communicator of size {size}")
    return r


def partition_offsets(elem_counts: Sequence[int] | np.ndarray, size: int, what: str = "elem_counts") -> tuple[list[int], list[int]]:
    """Validate a partition and return ``(counts, C)``.

    Parameters
    ----------
    elem_counts : (P,) sequence of int
        N_p, the elements of each rank (paper A.1), as Python or numpy ints.
    size : int
        P, the number of ranks.

    Returns
    -------
    counts : list of int
        N_p as Python ints.
    C : list of int
        The offsets ``C_p = sum(N_q, q < p)``, P + 1 entries (paper eq. 11).

    Raises
    ------
    ScdaArgumentError
        If there are not P counts or one is negative or not an integer.
    """
    if isinstance(elem_counts, (str, bytes)) or not hasattr(elem_counts, "__len__"):
        raise ScdaArgumentError(f"{what} must be a sequence of {size} counts, one per rank")
    if len(elem_counts) != size:
        raise ScdaArgumentError(f"{what} has {len(elem_counts)} entries; the communicator has {size} ranks")
    counts = [to_count(c, f"{what}[{p}]") for p, c in enumerate(elem_counts)]
    C = [0] * (size + 1)
    acc = 0
    for p, c in enumerate(counts):
        acc += c
        C[p + 1] = acc
    return counts, C


@dataclass(frozen=True, slots=True)
class Share:
    """A rank's share of a partitioned count, without the list of every rank's (O(1) per rank).

    What a writer needs of ``elem_counts`` or ``proc_sizes`` (paper A.1),
    computed by prefix sums and reductions instead of a P-length list: pass
    one wherever :meth:`ScdaWriter.fwrite_array` and
    :meth:`ScdaWriter.fwrite_varray` take the counts of every rank.

    Attributes
    ----------
    count : int
        This rank's count N_p (or bytes S_p).
    offset : int
        The sum over the ranks below this one (C_p, paper eq. 11).
    total : int
        The sum over all ranks.  The same on every rank.
    max : int
        The largest count of any rank.  The same on every rank.
    last : int
        The last rank with a non-zero count, 0 if none.  The same on every rank.
    """

    count: int
    offset: int
    total: int
    max: int
    last: int

    @classmethod
    def of(cls, counts: Sequence[int] | np.ndarray, rank: int, what: str = "elem_counts") -> Share:
        """Return the share of ``rank`` in the counts of every rank (validated as :func:`partition_offsets`)."""
        c, C = partition_offsets(counts, len(counts), what)
        return cls(c[rank], C[rank], C[-1], max(c, default=0), last_owner(c))

    def collective(self) -> tuple[int, int, int]:
        """Return what every rank must agree on: ``(total, max, last)``."""
        return (self.total, self.max, self.last)


def last_owner(nbytes: Sequence[int]) -> int:
    """Return the last rank with data bytes (it writes the padding), or 0 if none has."""
    for p in range(len(nbytes) - 1, -1, -1):
        if nbytes[p]:
            return p
    return 0


def read_raw_section(read: Any, offset: int, file_size: int) -> RawSection:
    """Parse the raw section that starts at ``offset`` (not collective).

    Parameters
    ----------
    read : callable
        ``read(offset, nbytes) -> bytes`` reading exactly ``nbytes``.
    offset : int
        Start of the section.
    file_size : int
        Every count is checked against it before anything else is read.

    Raises
    ------
    ScdaCountError
        If the file ends inside the section's header or its counts say
        more bytes than the file has.
    ScdaFormatError
        If the header is malformed.
    """
    remaining = file_size - offset
    if remaining < SECTION_HEADER_NBYTES:
        raise ScdaCountError(
            f"byte {offset}: {remaining} bytes follow the last section, too few for a section header "
            "(the file is truncated or has trailing bytes)"
        )
    buf = read(offset, min(SECTION_HEADER_NBYTES + 2 * COUNT_ENTRY_NBYTES, remaining))
    stype, user = parse_section_header(buf[:SECTION_HEADER_NBYTES], offset)
    need = SECTION_HEADER_NBYTES + (2 if stype == "A" else 1) * COUNT_ENTRY_NBYTES
    if remaining < need:
        raise ScdaCountError(f"section {stype!r} at byte {offset}: the file ends inside its header")
    where = f"section {stype!r} at byte {offset}"
    h = SECTION_HEADER_NBYTES
    hcrc = crc32(buf[:need])  # for checksums: the header (and an inline section's data)
    if stype == "I":
        end = offset + h + INLINE_DATA_NBYTES
        return RawSection("I", user, offset, 0, 0, offset + h, offset + h, end, bytes(buf[h:need]), need, hcrc)
    if stype == "B":
        E = parse_count_entry(bytes(buf[h:need]), b"E", f"{where}, E entry")
        data = offset + need
        end = data + E + data_padding_nbytes(E)
        if end > file_size:
            raise ScdaCountError(
                f"{where}: block of {E} bytes plus padding ends at byte {end}, after the end of the file ({file_size})"
            )
        return RawSection("B", user, offset, 0, E, data, data, end, None, need, hcrc)
    N = parse_count_entry(bytes(buf[h : h + COUNT_ENTRY_NBYTES]), b"N", f"{where}, N entry")
    if stype == "A":
        E = parse_count_entry(bytes(buf[h + COUNT_ENTRY_NBYTES : need]), b"E", f"{where}, E entry")
        data = offset + need
        end = data + N * E + data_padding_nbytes(N * E)
        if end > file_size:
            raise ScdaCountError(
                f"{where}: {N} elements of {E} bytes plus padding end at byte {end}, after the end of the file ({file_size})"
            )
        return RawSection("A", user, offset, N, E, data, data, end, None, need, hcrc)
    entries = offset + need
    data = entries + COUNT_ENTRY_NBYTES * N
    if data + data_padding_nbytes(0) > file_size:
        raise ScdaCountError(
            f"{where}: {N} element size entries end at byte {data}, which leaves no room in a file of {file_size} bytes"
        )
    return RawSection("V", user, offset, N, 0, data, entries, None, None, need, hcrc)


Logical = tuple[SectionHeader, tuple[RawSection, ...]]
"""A logical section: its (decoded) header and its raw sections (two for a compression pair, paper 3.2-3.4)."""


def recognize(read: Any, first: RawSection, file_size: int, decode: bool) -> Logical:
    """Return the logical section that starts with ``first`` (paper Table 2): its header and raw sections.

    With ``decode`` and a compression header (an I section with the B or A
    magic, an A section with the V magic), the partner section is parsed
    and the pair checked; any deviation is a :class:`ScdaDecodeError`.

    Raises
    ------
    ScdaDecodeError
        On this rank, with ``decode``, if a compression header is the last section, its partner section is not the one
        it announces, or the pair is malformed.
    """
    t, user = first.type, first.user_string
    plain = (SectionHeader(t, user, first.elem_count, first.elem_size, False, first.offset), (first,))
    if not decode or not ((t == "I" and user in (MAGIC_B, MAGIC_A)) or (t == "A" and user == MAGIC_V)):
        return plain
    magic = user.decode()
    if t == "I":
        try:
            usize = parse_count_entry(first.inline or b"", b"U", f"{first.where}U entry")
        except ScdaFormatError as exc:
            raise ScdaDecodeError(f"{first.where}the data of {magic!r} is not a valid U entry: {exc}") from exc
        # Every compressed element lies in the file, and deflate expands at most
        # MAX_INFLATE_RATIO-fold: a larger U is corrupt (and would not fit 64 bits).
        if usize > MAX_INFLATE_RATIO * (file_size + 1):
            raise ScdaDecodeError(
                f"{first.where}U = {usize} uncompressed bytes per element cannot come from a file of {file_size} bytes"
            )
    else:
        usize = 0
        if first.elem_size != COUNT_ENTRY_NBYTES:
            raise ScdaDecodeError(f"{first.where}{magic!r} array must have E = 32, not {first.elem_size}")
    nxt = first.end
    assert nxt is not None
    if nxt >= file_size:
        raise ScdaDecodeError(f"{first.where}compression header {magic!r} is the last section of the file")
    partner = read_raw_section(read, nxt, file_size)
    want = "B" if user == MAGIC_B else "V"
    if partner.type != want:
        raise ScdaDecodeError(f"{first.where}{magic!r} must be followed by a {want} section, found {partner.type}")
    if user == MAGIC_B:
        hdr = SectionHeader("B", partner.user_string, 0, usize, True, first.offset)
    elif user == MAGIC_A:
        hdr = SectionHeader("A", partner.user_string, partner.elem_count, usize, True, first.offset)
    else:
        if partner.elem_count != first.elem_count:
            raise ScdaDecodeError(
                f"{first.where}U array has N = {first.elem_count}, the compressed V section N = {partner.elem_count}"
            )
        hdr = SectionHeader("V", partner.user_string, partner.elem_count, 0, True, first.offset)
    return hdr, (first, partner)


def read_section(read: Any, offset: int, file_size: int, *, decode: bool = True) -> tuple[SectionHeader, tuple[RawSection, ...]]:
    """Parse the logical section that starts at ``offset``: its header and its one or two raw sections. Not collective.

    With ``decode``, a compression pair (paper Table 2) is one logical
    section: the header says the type and sizes of what was compressed, and
    both raw sections are returned (the inline or U-entry section first).
    ``read`` and ``file_size`` are as for :func:`read_raw_section`.

    Raises
    ------
    ScdaCountError, ScdaFormatError, ScdaDecodeError
        As :func:`read_raw_section`, or a pair that breaks the compression convention.
    """
    return recognize(read, read_raw_section(read, offset, file_size), file_size, decode)
