"""Reading scda files on any number of processes (scda paper, appendix A.5)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _crc
from .._crc import SectionCrc, crc32
from ..comm import Call, Comm, as_comm, collective, collective_method, current_call, digest_of
from ..errors import (
    AmrckptError,
    ScdaArgumentError,
    ScdaCountError,
    ScdaDecodeError,
    ScdaError,
    ScdaFormatError,
    ScdaUsageError,
)
from ._access import FileAccess, open_backend
from ._backend import Backend
from ._codec import MAX_INFLATE_RATIO, decode_elements
from ._entries import parse_entries
from ._format import (
    COUNT_ENTRY_NBYTES,
    FILE_HEADER_NBYTES,
    MAGIC,
    data_padding_nbytes,
    padding_form,
    parse_file_header,
)
from ._io import byte_view, rounds
from ._layout import RawSection, SectionHeader, partition_offsets, read_raw_section, recognize, to_count, to_rank

__all__ = ["ScdaReader", "fopen_read", "read_file_header"]


@dataclass
class _VState:
    """What a V section's sizes call found, for its data call."""

    counts: list[int]
    sizes: np.ndarray | None  # this rank's E_i of the raw V section (encoded sizes if decoded)
    usizes: np.ndarray | None  # this rank's uncompressed sizes (decoded only)
    local_offset: int  # byte offset of this rank's data within the V data
    total: int  # S of the raw V section
    uproc: list[int] = field(default_factory=list)  # S_p of what the user sees


@dataclass
class _Pending:
    header: SectionHeader
    raws: tuple[RawSection, ...]
    stage: str  # "data", "vsizes", "vdata"
    v: _VState | None = None

    @property
    def raw(self) -> RawSection:
        """The raw section that holds the data (the second of a pair)."""
        return self.raws[-1]


class ScdaReader:
    """A file opened for reading by :func:`fopen_read`; a context manager.

    The file is read one section at a time: :meth:`fread_section_header`
    returns the next section's type and counts, then one data call reads
    (or skips) its data.  A section whose data is not read is skipped by the
    next :meth:`fread_section_header`.  Every method is collective.

    Attributes
    ----------
    path : str
        The file.
    comm : Comm
        The communicator.
    vendor : bytes
        The vendor string of the file header.
    user_string : bytes
        The user string of the file header.
    file_size : int
        The file's size in bytes.
    offset : int
        Where the next section starts.
    strict : bool
        Whether data padding bytes are checked (the paper ignores them).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        comm: Any = None,
        strict: bool = False,
        checksum: bool = False,
        access: FileAccess | None = None,
    ) -> None:
        self.comm: Comm = as_comm(comm)
        self.path = os.fspath(path)
        self.strict = bool(strict)
        self._checksum = bool(checksum)
        self._cur: SectionCrc | None = None
        self._cur_entries: set[tuple[int, bytes]] = set()
        self._crc_log: list[tuple[int, int, SectionCrc | None]] = []  # (offset, end, the section's pieces on this rank)
        self._pending: _Pending | None = None
        with collective(self.comm, "scda.fopen_read") as call:
            self._backend: Backend | None = open_backend(self.path, "r", self.comm, access=access)
            try:
                size = self._backend.file_size()
                head = call.on_root(
                    lambda: read_file_header(self._read_bytes, size, self.path, strict=self.strict), what="file header"
                )
            except AmrckptError:
                self._backend.close()
                self._backend = None
                raise
        self.file_size, self.vendor, self.user_string = size, head[0], head[1]
        self.offset = FILE_HEADER_NBYTES
        if self._checksum:
            header = SectionCrc()
            if self.comm.rank == 0:
                header.add_crc(0, FILE_HEADER_NBYTES, head[2])
            self._crc_log.append((0, FILE_HEADER_NBYTES, header))

    # -- plumbing ---------------------------------------------------------

    def _read_bytes(self, offset: int, nbytes: int) -> bytes:
        """Independent read of exactly ``nbytes`` (not collective)."""
        buf = bytearray(nbytes)
        assert self._backend is not None
        self._backend.read([(offset, memoryview(buf))], None, 0)
        return bytes(buf)

    @property
    def call(self) -> Call:
        """The collective call of the method running (every public method is one: :func:`amrckpt.comm.collective`)."""
        call = current_call(self.comm)
        assert call is not None, "ScdaReader: a collective step outside a method"
        return call

    def _check_open(self, what: str) -> None:
        if self._backend is None:
            raise ScdaUsageError(f"{what}: the file {self.path!r} is closed")

    def _expect(self, what: str, stages: Sequence[str], types: str) -> _Pending:
        self._check_open(what)
        p = self._pending
        if p is None:
            raise ScdaUsageError(f"{what}: call fread_section_header first")
        if p.header.type not in types or p.stage not in stages:
            if p.stage == "vsizes" and "vdata" in stages:
                raise ScdaUsageError(f"{what}: read the element sizes with fread_varray_sizes first")
            raise ScdaUsageError(f"{what}: the current section is of type {p.header.type!r}")
        return p

    def _agree(self, what: str, digest: int | None = None) -> None:
        """Agree on every rank's errors and, with ``digest``, that the collective arguments are the same. Collective."""
        red = self.call.reduction(what)
        if digest is not None:
            red.equal("arguments", digest)
        got = red.run()
        if digest is not None and not got.equal("arguments"):
            raise self.call.agreed(
                ScdaArgumentError(
                    f"{what}: collective arguments differ between ranks (every rank must pass the same counts, sizes and root)"
                )
            )

    def _done(self) -> None:
        p, self._pending = self._pending, None
        assert p is not None
        end = p.raw.end
        if end is None:  # a V section: its end follows from the sizes read
            assert p.v is not None
            end = p.raw.data_offset + p.v.total + data_padding_nbytes(p.v.total)
        self.offset = end
        cur, self._cur = self._cur, None
        if cur is None:
            return

        # Rank 0 reads the data padding (which no data call reads) to cover every byte.
        def padding() -> None:
            for raw in p.raws:
                if raw.type == "I":
                    continue
                if raw.type == "V":
                    assert p.v is not None
                    nbytes = p.v.total
                else:
                    nbytes = raw.elem_count * raw.elem_size if raw.type == "A" else raw.elem_size
                start = raw.data_offset + nbytes
                stop = raw.end if raw.end is not None else end
                cur.add(start, self._read_bytes(start, stop - start))

        self.call.run(padding, on=0 if cur.complete else -1)
        self._agree("checksum")
        cur.wait()  # the buffers go back to the caller now
        self._crc_log.append((p.raws[0].offset, end, cur))

    def _crc_add(self, offset: int, data: Any) -> None:
        """Checksum mode: count bytes this rank read for the current section."""
        if self._cur is not None:
            self._cur.add_later([(offset, data)])

    def _crc_skip(self) -> None:
        """Checksum mode: this rank skipped data, so the section cannot be verified."""
        if self._cur is not None:
            self._cur.complete = False

    def section_crcs(self) -> list[tuple[int, int, int | None]]:
        """CRC32 of every section read so far, from the bytes read (file header first).

        Collective: one allreduce of two numbers per section.  Needs
        ``checksum=True`` at :func:`fopen_read`; compare with the CRCs that
        a writer recorded (e.g. the index of an amrckpt checkpoint).

        Returns
        -------
        list of (int, int, int or None)
            ``(offset, end, crc32)`` of each section whose bytes were read;
            the CRC is None for a section that was skipped on some rank.

        Raises
        ------
        ScdaUsageError
            If the file was not opened with ``checksum=True``.
        """
        if not self._checksum:
            raise ScdaUsageError("section_crcs: open the file with checksum=True")
        with collective(self.comm, "scda.section_crcs") as call:
            terms = call.run(lambda: [(s.term(e), s.complete) for _, e, s in self._crc_log]) or []  # type: ignore[union-attr]
            red = call.reduction("section_crcs").max("incomplete", [0 if ok else 1 for _, ok in terms])
            got = red.xor("crc terms", [t for t, _ in terms]).run()
        incomplete, crcs = got.max("incomplete"), got.xor("crc terms")
        return [(o, e, None if bad else c) for (o, e, _), bad, c in zip(self._crc_log, incomplete, crcs, strict=True)]

    # -- headers ----------------------------------------------------------

    @collective_method("scda.fread_section_header")
    def fread_section_header(self, *, decode: bool = False) -> SectionHeader | None:
        """Read the next section's header (libsc ``sc_scda_fread_section_header``).

        Collective; rank 0 reads and broadcasts.  If the data of the
        previous section was not read, it is skipped first.

        Parameters
        ----------
        decode : bool, optional
            Recognize the compression convention (paper 3, Table 2): a
            compressed section is returned as the section that was
            compressed (``decoded=True``) and decompressed by the data call.
            With False, its two raw sections are returned one by one.

        Returns
        -------
        SectionHeader or None
            None at the end of the file.

        Raises
        ------
        ScdaFormatError
            For a malformed header.
        ScdaCountError
            If the file ends inside the section or its counts exceed the file
            (checked before anything is allocated), or 1 to 63 bytes follow
            the last section.
        ScdaDecodeError
            With ``decode``, for a compression header that does not conform.
        """
        self._check_open("fread_section_header")
        self._skip_pending()
        if self.offset == self.file_size:
            return None
        off = self.offset
        header, raws = self.call.on_root(
            lambda: recognize(
                self._read_bytes, read_raw_section(self._read_bytes, off, self.file_size), self.file_size, bool(decode)
            ),
            what="fread_section_header",
        )
        stage = "vsizes" if header.type == "V" else "data"
        self._pending = _Pending(header, raws, stage)
        if self._checksum:
            self._cur = SectionCrc()
            self._cur_entries = set()
            if self.comm.rank == 0:
                for raw in raws:
                    self._cur.add_crc(raw.offset, raw.head_nbytes, raw.head_crc)
        return header

    @collective_method("scda.fseek_section")
    def fseek_section(self, offset: int) -> None:
        """Move to the section that starts at ``offset`` (from an index or :func:`scan`).

        Collective.  Not in libsc: it serves random access to one section
        of a large file without reading the ones before it.

        Raises
        ------
        ScdaArgumentError
            If ``offset`` is not inside the file or not a multiple of 32 (no
            section can start there).
        """
        self._check_open("fseek_section")
        off = to_count(offset, "offset")
        if off < FILE_HEADER_NBYTES or off > self.file_size or off % 32:
            raise ScdaArgumentError(f"no section can start at byte {off} of a {self.file_size}-byte file")
        self._pending = None
        self._cur = None
        self.offset = off

    def _skip_pending(self) -> None:
        p = self._pending
        if p is None:
            return
        self._crc_skip()
        if p.raw.end is None and p.v is None:
            p.v = self._v_sizes(p, _uniform(p.raw.elem_count, self.comm.size), want=False)
        self._done()

    # -- I and B ----------------------------------------------------------

    @collective_method("scda.fread_inline_data")
    def fread_inline_data(self, *, root: int = 0, skip: bool = False) -> bytes | None:
        """Read the 32 data bytes of an inline section (libsc ``sc_scda_fread_inline_data``).

        Collective.

        Parameters
        ----------
        root : int, optional
            The rank that receives the data.
        skip : bool, optional
            On the root: do not return the data (libsc's NULL).

        Returns
        -------
        bytes or None
            32 bytes on ``root``; None elsewhere or when skipped.

        Raises
        ------
        ScdaUsageError
            If the current section is not an inline section.
        """
        what = "fread_inline_data"
        try:
            p = self._expect(what, ("data",), "I")
            root = to_rank(root, self.comm.size)
        except ScdaError as exc:
            self.call.fail(exc)
        self._agree(what, digest_of(root, what))
        raw = p.raw
        out = None
        if root == 0 and self.comm.rank == 0:
            out = raw.inline  # read with the header
        elif root != 0:
            out = self.call.run(self._read_bytes, raw.data_offset, 32, on=root if not skip else -1)
            self._agree(what)
        self._done()
        return None if (skip or self.comm.rank != root) else out

    @collective_method("scda.fread_block_data")
    def fread_block_data(self, *, root: int | None = 0, out: Any = None, skip: bool = False) -> np.ndarray | None:
        """Read the data of a block section (libsc ``sc_scda_fread_block_data``).

        Collective.  A decoded section is decompressed on the reading ranks.

        Parameters
        ----------
        root : int or None, optional
            The rank that receives the block; None: every rank reads it.
        out : writable buffer, optional
            Where to put the E bytes (else a new array is returned).
        skip : bool, optional
            Do not read the data on this rank (libsc's NULL).

        Returns
        -------
        (E,) numpy.ndarray of uint8, or None
            The block on the receiving rank(s); None elsewhere or when
            skipped.  With ``out``, a uint8 view of it.

        Raises
        ------
        ScdaUsageError
            If the current section is not a block.
        ScdaCountError, ScdaIOError
            If the block cannot be read.
        ScdaDecodeError
            If a decoded block does not conform to the convention.
        """
        what = "fread_block_data"
        p = self._pending
        try:
            p = self._expect(what, ("data",), "B")
            if root is not None:
                root = to_rank(root, self.comm.size)
        except ScdaError as exc:
            self.call.fail(exc)
        self._agree(what, digest_of(root, what))
        assert p is not None
        raw, hdr = p.raw, p.header
        me = (root is None or self.comm.rank == root) and not skip
        counter = (0 if root is None else root) == self.comm.rank  # whose bytes count for checksums
        if counter and skip:
            self._crc_skip()
        result = None
        if me:
            try:
                dest = _out_view(out, hdr.elem_size, "out")
                if hdr.decoded:
                    enc = np.frombuffer(self._read_bytes(raw.data_offset, raw.elem_size), dtype=np.uint8)
                    if counter:
                        self._crc_add(raw.data_offset, enc)
                    dec = decode_elements(
                        enc,
                        np.array([raw.elem_size], np.uint64),
                        np.array([hdr.elem_size], np.uint64),
                        offset=raw.data_offset,
                        what=raw.where,
                    )
                    result = _deliver(dec, dest)
                else:
                    result, view = _destination(out, hdr.elem_size)
                    assert self._backend is not None
                    self._backend.read([(raw.data_offset, view)], None, 0)
                    if counter:
                        self._crc_add(raw.data_offset, view)
                if self.strict:
                    self._check_padding(raw, raw.elem_size)
            except Exception as exc:  # noqa: BLE001 - agreed on below
                self.call.fail(exc)
        self._agree(what)
        self._done()
        return result

    # -- A ----------------------------------------------------------------

    @collective_method("scda.fread_array_data")
    def fread_array_data(
        self, elem_counts: Sequence[int] | np.ndarray, elem_size: int | None = None, *, out: Any = None, skip: bool = False
    ) -> np.ndarray | None:
        """Read this rank's elements of a fixed-size array (libsc ``sc_scda_fread_array_data``).

        Collective.  The reading partition may differ from the writing one.

        Parameters
        ----------
        elem_counts : (P,) sequence of int
            N_p, the elements each rank reads; must sum to N.  Collective.
        elem_size : int, optional
            E; if given, must equal the section's.  Collective.
        out : writable buffer, optional
            ``N_p * E`` bytes to fill (e.g. a numpy array of the element
            dtype); else a new uint8 array is returned.
        skip : bool, optional
            Read nothing on this rank (libsc's NULL).

        Returns
        -------
        (N_p * E,) numpy.ndarray of uint8, or None
            This rank's elements (a uint8 view of ``out`` if given); None
            when skipped.

        Raises
        ------
        ScdaArgumentError
            If elem_counts do not have P entries summing to N, or elem_size
            differs from the file's.
        ScdaCountError, ScdaIOError, ScdaDecodeError
            If the data cannot be read or decoded.
        """
        what = "fread_array_data"
        p = self._pending
        counts: list[int] = []
        C: list[int] = []
        try:
            p = self._expect(what, ("data",), "A")
            counts, C = self._read_partition(elem_counts, p.header.elem_count)
            if elem_size is not None and to_count(elem_size, "elem_size") != p.header.elem_size:
                raise ScdaArgumentError(f"elem_size {elem_size} differs from the section's E = {p.header.elem_size}")
        except ScdaError as exc:
            self.call.fail(exc)
        self._agree(what, digest_of(counts, elem_size, what))
        assert p is not None
        hdr = p.header
        r = self.comm.rank
        E = hdr.elem_size
        if hdr.decoded:
            v = p.v = self._v_sizes(p, counts, want=not skip)
            n = counts[r]
            usizes = np.full(n, E, dtype=np.uint64)
            decoded = self._v_decode(p, v, usizes, n * E, out, skip)
            self._done()
            return decoded
        raw = p.raw
        result: np.ndarray | None = None
        bulk = None
        if not skip:
            try:
                result, view = _destination(out, counts[r] * E)
                bulk = (raw.data_offset + C[r] * E, view)
            except ScdaError as exc:
                self.call.fail(exc)
        self._read_data(bulk, max(counts) * E, what, raw, hdr.elem_count * E)
        self._done()
        return result

    # -- V ----------------------------------------------------------------

    @collective_method("scda.fread_varray_sizes")
    def fread_varray_sizes(self, elem_counts: Sequence[int] | np.ndarray, *, skip: bool = False) -> np.ndarray | None:
        """Read this rank's element sizes E_i of a variable-size array (libsc ``sc_scda_fread_varray_sizes``).

        Collective.  Every rank reads and parses its own E_i entries; only
        the O(P) per-rank sums are exchanged.

        Parameters
        ----------
        elem_counts : (P,) sequence of int
            N_p, the elements each rank reads; must sum to N.  Collective.
        skip : bool, optional
            Do not return the sizes on this rank (they are read anyway: their
            sum locates the end of the section).

        Returns
        -------
        (N_p,) numpy.ndarray of uint64, or None
            E_i for this rank's elements (the uncompressed sizes of a decoded
            section); None when skipped.

        Raises
        ------
        ScdaArgumentError
            If elem_counts do not have P entries summing to N.
        ScdaFormatError
            Naming the first malformed entry.
        ScdaCountError
            If the sizes add up to more than the file holds.
        """
        what = "fread_varray_sizes"
        p = self._pending
        counts: list[int] = []
        try:
            p = self._expect(what, ("vsizes", "vdata"), "V")
            counts, _ = self._read_partition(elem_counts, p.header.elem_count)
        except ScdaError as exc:
            self.call.fail(exc)
        self._agree(what, digest_of(counts, what))
        assert p is not None
        v = self._v_sizes(p, counts, want=True)
        p.v = v
        p.stage = "vdata"
        if skip:
            return None
        return v.usizes if p.header.decoded else v.sizes

    def proc_sizes(self) -> list[int]:
        """S_p for the partition of the last :meth:`fread_varray_sizes` (libsc ``sc_scda_proc_sizes``).

        Not collective: every rank already knows them.  For a decoded
        section these are uncompressed sizes.

        Raises
        ------
        ScdaUsageError
            If no sizes were read for the current section.
        """
        p = self._pending
        if p is None or p.v is None:
            raise ScdaUsageError("proc_sizes: call fread_varray_sizes first")
        return list(p.v.uproc)

    @collective_method("scda.fread_varray_data")
    def fread_varray_data(
        self,
        elem_counts: Sequence[int] | np.ndarray,
        elem_sizes: Any,
        proc_sizes: Sequence[int] | np.ndarray,
        *,
        out: Any = None,
        skip: bool = False,
    ) -> np.ndarray | None:
        """Read this rank's elements of a variable-size array (libsc ``sc_scda_fread_varray_data``).

        Collective.  Call :meth:`fread_varray_sizes` first.

        Parameters
        ----------
        elem_counts : (P,) sequence of int
            N_p; must sum to N.  Collective.
        elem_sizes : (N_p,) array_like of int
            E_i of this rank's elements, as returned by
            :meth:`fread_varray_sizes`; ignored where ``skip``.
        proc_sizes : (P,) sequence of int
            S_p, the bytes of every rank (:meth:`proc_sizes`).  Collective.
        out : writable buffer, optional
            ``proc_sizes[rank]`` bytes to fill; else a new array.
        skip : bool, optional
            Read nothing on this rank.

        Returns
        -------
        (S_p,) numpy.ndarray of uint8, or None
            This rank's elements concatenated; None when skipped.

        Raises
        ------
        ScdaUsageError
            Without a preceding :meth:`fread_varray_sizes`.
        ScdaArgumentError
            If the partition, elem_sizes or proc_sizes disagree with the file.
        ScdaCountError, ScdaIOError, ScdaDecodeError
            If the data cannot be read or decoded.
        """
        what = "fread_varray_data"
        p = self._pending
        counts: list[int] = []
        S: list[int] = []
        r = self.comm.rank
        usizes = None
        try:
            p = self._expect(what, ("vdata",), "V")
            counts, _ = self._read_partition(elem_counts, p.header.elem_count)
            S, _ = partition_offsets(proc_sizes, self.comm.size, "proc_sizes")
            if not skip:
                usizes = np.asarray(elem_sizes, dtype=np.uint64).reshape(-1)
                if usizes.shape[0] != counts[r]:
                    raise ScdaArgumentError(f"elem_sizes has {usizes.shape[0]} entries; this rank reads {counts[r]} elements")
                if int(usizes.sum(dtype=np.uint64)) != S[r]:
                    raise ScdaArgumentError(f"elem_sizes of this rank sum to {int(usizes.sum())}, proc_sizes[{r}] is {S[r]}")
        except ScdaError as exc:
            self.call.fail(exc)
        self._agree(what, digest_of(counts, S, what))
        assert p is not None and p.v is not None
        v = p.v
        if counts != v.counts:
            v = self._v_sizes(p, counts, want=True)
            p.v = v
        if S != v.uproc:
            self.call.fail(ScdaArgumentError(f"proc_sizes {S[:8]} differ from the section's {v.uproc[:8]} for this partition"))
        self._agree(what)
        if p.header.decoded:
            assert v.usizes is not None
            result = self._v_decode(p, v, v.usizes, S[r], out, skip)
        else:
            result, bulk = None, None
            if not skip:
                try:
                    if usizes is not None and v.sizes is not None and not np.array_equal(usizes, v.sizes):
                        raise ScdaArgumentError("elem_sizes differ from the sizes in the file")
                    result, view = _destination(out, S[r])
                    bulk = (p.raw.data_offset + v.local_offset, view)
                except ScdaError as exc:
                    self.call.fail(exc)
            self._read_data(bulk, max(S), what, p.raw, v.total)
        self._done()
        return result

    # -- internals for V and decoding -------------------------------------

    def _read_partition(self, elem_counts: Any, N: int) -> tuple[list[int], list[int]]:
        counts, C = partition_offsets(elem_counts, self.comm.size)
        if C[-1] != N:
            raise ScdaArgumentError(f"elem_counts sum to {C[-1]}; the section has N = {N} elements")
        return counts, C

    def _read_data(self, bulk: tuple[int, memoryview] | None, max_bulk: int, what: str, raw: RawSection, n: int) -> None:
        """Agree, read this rank's bulk run (collective) and count its bytes for the checksum; strict: check the padding.

        The padding is the one after the ``n`` data bytes of ``raw``, read
        and checked by rank 0 and agreed on.

        When checksumming a large section, the run is read in rounds of
        ``amrckpt._crc.CHUNK_NBYTES`` bytes (the same number of collective calls on every
        rank) and the helper thread CRCs each chunk while the next one is
        read: on bytes still in the cache, and with no CRC of the whole run
        left to wait for at the end.
        """
        chunk = _crc.CHUNK_NBYTES
        self._agree(what)
        if self._cur is None or max_bulk <= 2 * chunk:
            self._bulk_read(bulk, max_bulk, what)
            if bulk is not None:
                self._crc_add(*bulk)
        else:
            assert self._backend is not None
            for part in rounds(bulk, max_bulk, chunk):
                if self.call.failed:
                    part = None  # after an error, join the remaining rounds with nothing
                try:
                    self._backend.read([], part, chunk)  # every rank calls every round: they are collective
                except ScdaError as exc:
                    self.call.fail(exc)
                    continue
                if part is not None:
                    self._cur.add_later([part])
            self._agree(what)
        if bulk is None:
            self._crc_skip()
        if self.strict:
            self.call.run(self._check_padding, raw, n, on=0)
            self._agree(what)

    def _bulk_read(self, bulk: tuple[int, memoryview] | None, max_bulk: int, what: str) -> None:
        assert self._backend is not None
        try:
            self._backend.read([], bulk, max_bulk)
        except ScdaError as exc:
            self.call.fail(exc)
        self._agree(what)

    def _entries(self, raw: RawSection, letter: bytes, entries_offset: int, counts: list[int]) -> np.ndarray:
        """Read and parse this rank's 32-byte entries (collective read; a local error is kept by the call)."""
        r = self.comm.rank
        C0 = sum(counts[:r])
        buf = np.empty(COUNT_ENTRY_NBYTES * counts[r], dtype=np.uint8)
        assert self._backend is not None
        try:
            self._backend.read([], (entries_offset + COUNT_ENTRY_NBYTES * C0, memoryview(buf)), COUNT_ENTRY_NBYTES * max(counts))
        except ScdaError as exc:
            self.call.fail(exc)
        key = (entries_offset, letter)
        if not self.call.failed and key not in self._cur_entries:
            self._cur_entries.add(key)
            self._crc_add(entries_offset + COUNT_ENTRY_NBYTES * C0, buf)
        at = entries_offset + COUNT_ENTRY_NBYTES * C0
        vals = self.call.run(parse_entries, letter, buf, first_index=C0, offset=at, what=raw.where)
        return np.zeros(0, np.uint64) if vals is None else vals

    def _v_sizes(self, p: _Pending, counts: list[int], want: bool) -> _VState:
        """Read E_i (and U_i for a decoded section) for the partition ``counts``. Collective.

        Raises
        ------
        ScdaCountError
            On every rank, if an element size exceeds the file size, or the sizes with their padding end after the end
            of the file.
        """
        raw = p.raw
        sizes = self._entries(raw, b"E", raw.entries_offset, counts)
        usizes = None
        vdecoded = p.header.decoded and p.header.type == "V"
        if vdecoded:
            a = p.raws[0]
            usizes = self._entries(a, b"U", a.data_offset, counts)
        local = int(sizes.sum(dtype=np.uint64)) if sizes.size else 0
        ulocal = int(usizes.sum(dtype=np.uint64)) if usizes is not None and usizes.size else 0
        if not self.call.failed and sizes.size and int(sizes.max()) > self.file_size:
            self.call.fail(ScdaCountError(f"{raw.where}an element size exceeds the file size {self.file_size}"))
        gathered = self.call.allgather_ints([local, ulocal], what="fread_varray_sizes")  # S_p: libsc's P-long proc_sizes
        S = [int(g) for g in gathered[:, 0]]
        total = sum(S)
        end = raw.data_offset + total + data_padding_nbytes(total)
        if end > self.file_size:
            raise ScdaCountError(
                f"{raw.where}element sizes add up to {total} bytes; with padding the section ends at byte {end}, "
                f"after the end of the file ({self.file_size})"
            )
        uproc = [int(g) for g in gathered[:, 1]] if vdecoded else S
        r = self.comm.rank
        return _VState(list(counts), sizes if want else None, usizes if want else None, sum(S[:r]), total, uproc)

    def _v_decode(self, p: _Pending, v: _VState, usizes: np.ndarray, nbytes: int, out: Any, skip: bool) -> np.ndarray | None:
        """Read this rank's encoded elements of a decoded A or V section and decode them.

        Raises
        ------
        ScdaDecodeError
            On every rank (agreed by the gather of the encoded sizes), if a rank's uncompressed bytes cannot come from
            its encoded bytes.
        """
        raw = p.raw
        r = self.comm.rank
        enc = np.empty(0, np.uint8)
        dest = None
        if not skip:
            try:
                assert v.sizes is not None
                enc_n = int(v.sizes.sum(dtype=np.uint64)) if v.sizes.size else 0
                # Nothing is allocated for decoded data that the encoded bytes cannot hold.
                if nbytes > MAX_INFLATE_RATIO * (enc_n + v.sizes.size):
                    raise ScdaDecodeError(f"{raw.where}{nbytes} uncompressed bytes cannot come from {enc_n} encoded bytes")
                dest = _out_view(out, nbytes, "out")
                enc = np.empty(enc_n, dtype=np.uint8)
            except ScdaError as exc:
                self.call.fail(exc)
        S = self.call.allgather_ints([enc.size], what="decode")[:, 0]
        self._bulk_read(None if skip else (raw.data_offset + v.local_offset, memoryview(enc)), int(S.max()), "read")
        if skip:
            self._crc_skip()
            self._agree("decode")
            return None
        self._crc_add(raw.data_offset + v.local_offset, enc)
        result = None
        try:
            assert v.sizes is not None
            first = sum(v.counts[:r])
            dec = decode_elements(enc, v.sizes, usizes, first_index=first, offset=raw.data_offset + v.local_offset, what=raw.where)
            result = _deliver(dec, dest)
        except Exception as exc:  # noqa: BLE001 - agreed on below
            self.call.fail(exc)
        self._agree("decode")
        return result

    def _check_padding(self, raw: RawSection, n: int) -> None:
        """Strict mode: the data padding after ``n`` data bytes is canonical (not collective).

        Raises
        ------
        ScdaFormatError
            On this rank, if the padding is not canonical.
        """
        pad = data_padding_nbytes(n)
        start = raw.data_offset + n
        buf = self._read_bytes(start - 1 if n else start, pad + (1 if n else 0))
        last = buf[0] if n else None
        if padding_form(buf[1:] if n else buf, n, last) == "other":
            raise ScdaFormatError(f"{raw.where}malformed data padding at byte {start}")

    # -- closing ----------------------------------------------------------

    @collective_method("scda.fclose")
    def fclose(self) -> None:
        """Close the file (libsc ``sc_scda_fclose``). Collective; closing twice is a no-op."""
        if self._backend is None:
            return
        backend, self._backend = self._backend, None
        backend.close()

    def __enter__(self) -> ScdaReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fclose()

    def __repr__(self) -> str:
        state = "closed" if self._backend is None else f"offset={self.offset}/{self.file_size}"
        return f"<ScdaReader {self.path!r} {state} P={self.comm.size}>"


def read_file_header(read: Any, size: int, path: str, *, strict: bool = False) -> tuple[bytes, bytes, int]:
    """Read and check the file header section F (paper section 2.2) on this rank alone. Not collective.

    Parameters
    ----------
    read : callable
        ``read(offset, nbytes) -> bytes`` reading exactly ``nbytes``.
    size : int
        The file's size in bytes.
    path : str
        Names the file in messages.
    strict : bool, optional
        Also check the header's data padding.

    Returns
    -------
    vendor, user_string : bytes
    crc32 : int
        The CRC32 of the 128 header bytes.

    Raises
    ------
    ScdaFormatError
        If the file does not start with a valid scda file header.
    ScdaCountError
        If it is shorter than a file header.
    """
    if size < FILE_HEADER_NBYTES:
        head = read(0, min(size, 8))
        if not (MAGIC + b" ").startswith(head):
            raise ScdaFormatError(f"not an scda file: magic {head!r}, expected b'scdata0 '")
        raise ScdaCountError(f"{path!r} has {size} bytes, fewer than the 128-byte scda file header")
    buf = read(0, FILE_HEADER_NBYTES)
    vendor, user = parse_file_header(buf)
    if strict and padding_form(buf[96:], 0, None) == "other":
        raise ScdaFormatError("file header: malformed data padding")
    return vendor, user, crc32(buf)


def _uniform(N: int, P: int) -> list[int]:
    """Return the uniform partition of p4est_partition: rank p starts at floor(N p / P)."""
    return [(N * (p + 1)) // P - (N * p) // P for p in range(P)]


def _out_view(out: Any, nbytes: int, what: str) -> memoryview | None:
    if out is None:
        return None
    mv = byte_view(out, what)
    if mv.readonly:
        raise ScdaArgumentError(f"{what} is read-only")
    if isinstance(out, np.ndarray) and not out.flags.c_contiguous:
        raise ScdaArgumentError(f"{what} must be C-contiguous")
    if mv.nbytes != nbytes:
        raise ScdaArgumentError(f"{what} has {mv.nbytes} bytes; {nbytes} are to be read on this rank")
    return mv


def _destination(out: Any, nbytes: int) -> tuple[np.ndarray, memoryview]:
    """Return ``(array, byte view)`` to read ``nbytes`` into: a view of ``out``, or a new array."""
    dest = _out_view(out, nbytes, "out")
    if dest is None:
        result = np.empty(nbytes, dtype=np.uint8)
        return result, memoryview(result)
    return np.frombuffer(dest, dtype=np.uint8), dest


def _deliver(dec: np.ndarray, dest: memoryview | None) -> np.ndarray:
    if dest is None:
        return dec
    view = np.frombuffer(dest, dtype=np.uint8)
    view[:] = dec
    return view


def fopen_read(
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    info: Any = None,
    backend: str | None = None,
    strict: bool = False,
    checksum: bool = False,
    access: FileAccess | None = None,
) -> ScdaReader:
    """Open an scda file and read its header section F (libsc ``sc_scda_fopen_read``).

    Collective.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        ``None`` reads serially without MPI.  Any number of processes can
        read a file, whatever number wrote it.
    info : dict or mpi4py.MPI.Info, optional
        MPI-IO hints.
    backend : {None, "posix", "mpiio"}, optional
        Default: MPI-IO for an MPI communicator, POSIX otherwise.
    strict : bool, optional
        Also check the data padding bytes, which the paper lets readers
        ignore (libsc checks them).
    checksum : bool, optional
        CRC32 every byte read, for :meth:`ScdaReader.section_crcs`; rank 0
        then also reads each section's padding, so that every byte of a
        section whose data is read on all ranks is covered.
    access : FileAccess, optional
        ``info`` and ``backend`` as one value (the keyword arguments given override it).

    Returns
    -------
    ScdaReader
        A context manager; leaving it closes the file.

    Raises
    ------
    ScdaIOError
        If the file cannot be opened (ScdaFileNotFoundError if missing).
    ScdaFormatError
        If it does not start with a valid scda file header.
    ScdaCountError
        If it is shorter than a file header.
    """
    a = FileAccess.of(access, info=info, backend=backend)
    return ScdaReader(path, comm=comm, strict=strict, checksum=checksum, access=a)
