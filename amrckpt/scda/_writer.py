"""Writing scda files, serial or in parallel (scda paper, appendix A.4)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._crc import LaterCrc
from ..comm import Call, Comm, as_comm, collective, collective_method, current_call, digest_of
from ..errors import AmrckptError, ScdaArgumentError, ScdaError, ScdaUsageError
from ._access import FileAccess, open_backend, open_sink
from ._backend import Backend, ByteSink
from ._checksummed import Produced, unwrap
from ._codec import encode_elements
from ._entries import format_entries
from ._format import (
    COUNT_ENTRY_NBYTES,
    FILE_HEADER_NBYTES,
    INLINE_DATA_NBYTES,
    MAX_COUNT,
    SECTION_HEADER_NBYTES,
    Style,
    check_style,
    check_user_string,
    count_entry,
    data_padding,
    data_padding_nbytes,
    file_header,
    section_header,
    to_bytes,
)
from ._io import byte_view, refuse_link
from ._layout import MAGIC_A, MAGIC_B, MAGIC_V, Share, last_owner, partition_offsets, to_count, to_rank
from ._write_plan import WritePlan

__all__ = ["ScdaWriter", "SectionRecord", "fopen_write"]

_DIFFER = "collective arguments differ between ranks (every rank must pass the same user strings, counts and sizes)"


_EMPTY = memoryview(b"")


@dataclass(frozen=True, slots=True)
class SectionRecord:
    """Where a written section landed; returned by every ``fwrite_*`` call.

    Attributes
    ----------
    type : str
        ``"I"``, ``"B"``, ``"A"`` or ``"V"`` (the logical type; a compressed
        section spans two raw sections).
    user_string : bytes
        The section's user string.
    offset : int
        Byte offset of its first byte in the file.
    end : int
        Byte offset one past its last byte (padding included).
    encoded : bool
        Whether it was written by the compression convention.
    """

    type: str
    user_string: bytes
    offset: int
    end: int
    encoded: bool


def _reserved(ustr: bytes, magics: tuple[bytes, ...], allow: bool, kind: str) -> None:
    if ustr in magics and not allow:
        raise ScdaArgumentError(
            f"the user string {ustr.decode()!r} is reserved on {kind} sections by the compression convention "
            "(scda paper, section 3); write with encode=True, or pass allow_magic=True to write a raw pair yourself"
        )


def _level(level: Any) -> int:
    lv = to_count(level, "level")
    if lv > 9:
        raise ScdaArgumentError(f"zlib level must be 0 to 9, not {lv}")
    return lv


def _local_view(data: Any, nbytes: int, what: str) -> memoryview:
    if data is None:
        if nbytes:
            raise ScdaArgumentError(f"{what} is None but {nbytes} bytes are to be written on this rank")
        return _EMPTY
    mv = byte_view(data, what)
    if mv.nbytes != nbytes:
        raise ScdaArgumentError(f"{what} has {mv.nbytes} bytes; this rank must write {nbytes}")
    return mv


def _sizes_array(elem_sizes: Any, count: int) -> np.ndarray:
    arr = np.asarray(elem_sizes if elem_sizes is not None else [], dtype=None)
    if arr.size == 0:
        arr = np.zeros(0, dtype=np.uint64)
    if arr.ndim != 1 or arr.shape[0] != count:
        raise ScdaArgumentError(f"elem_sizes has shape {arr.shape}; this rank owns {count} elements")
    if arr.dtype.kind not in "iu":
        raise ScdaArgumentError(f"elem_sizes must be integers, not {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise ScdaArgumentError("elem_sizes must be non-negative")
    return arr.astype(np.uint64, copy=False)


class ScdaWriter:
    """A file opened for writing by :func:`fopen_write`; a context manager.

    Every method is collective over the communicator the file was opened
    with, and advances the file by one (logical) section.  The calls of all
    ranks must agree on their collective arguments (user strings, counts,
    sizes, ``root``, ``encode``); this is checked with one small allreduce
    per call, and a mismatch raises :class:`~amrckpt.errors.ScdaArgumentError`
    on every rank before anything is written.  An argument error leaves the
    file usable; an I/O error leaves it unusable except for :meth:`fclose`.

    Attributes
    ----------
    path : str
        The file.
    comm : Comm
        The communicator.
    style : {"unix", "mime"}
        The line-break style of the file.
    offset : int
        Bytes written so far: where the next section starts.
    records : list of SectionRecord
        Every section written so far, the file header (type ``"F"``) first.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        user_string: bytes | str,
        *,
        comm: Any = None,
        vendor: bytes | str = b"amrckpt",
        checksum: bool = False,
        defer: bool = False,
        access: FileAccess | None = None,
    ) -> None:
        self.comm: Comm = as_comm(comm)
        self.path = os.fspath(path)
        self._defer = bool(defer)
        self._pending: BaseException | None = None
        self._digest = 0
        self._sink: ByteSink | None = None  # a streaming writer's file, opened by flush()
        # Deferred: every byte, until fclose; immediate: written after each call.
        self._plan = WritePlan(bool(checksum), immediate=not self._defer)
        self._sync_at_close = False
        self.style: Style = "unix"
        header = b""
        digest = 0
        try:
            self.access = FileAccess() if access is None else access
            self.style = check_style(self.access.style)
            if self.comm.rank == 0:
                refuse_link(self.path)  # agreed with the first agreement, before the file is opened
            header = file_header(to_bytes(vendor, "vendor"), to_bytes(user_string, "user_string"), self.style)
            digest = digest_of(header)
        except ScdaError as exc:
            self._pending = exc  # agreed on by the opening call below (deferred: by settle)
        with collective(self.comm, "scda.fopen_write"):
            self._open(user_string, header, digest, checksum)

    def _open(self, user_string: bytes | str, header: bytes, digest: int, checksum: bool) -> None:
        self._begin("fopen_write", digest)
        self._is_open = True
        # Deferred: the file is opened by fclose, after settle's agreement (a save that fails creates nothing).
        self._backend: Backend | None = None
        if not self._defer:
            self._backend = open_backend(self.path, "w", self.comm, access=self.access)
        self._truncate = bool(self.access.truncate)
        self._failed: BaseException | None = None
        self._checksum = bool(checksum)
        self.records: list[SectionRecord] = []
        self.offset = 0
        try:
            self._io([(0, memoryview(header))] if self.comm.rank == 0 else [], None, 0, "file header")
        except BaseException:  # agreed on every rank: close the file together, then re-raise
            self.fclose()
            raise
        self._section_end(SectionRecord("F", to_bytes(user_string, "user_string"), 0, FILE_HEADER_NBYTES, False))

    # -- plumbing ---------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if not self._is_open:
            raise ScdaUsageError(f"{what}: the file {self.path!r} is closed")
        if self._failed is not None:
            raise ScdaUsageError(f"{what}: the file {self.path!r} is unusable after an earlier error: {self._failed}")

    @contextlib.contextmanager
    def _unusable_on(self, kind: type[BaseException] = ScdaError) -> Iterator[None]:
        """Make the file unusable (:meth:`_check_open`) by an error of ``kind`` that the body raises, and re-raise it."""
        try:
            yield
        except kind as exc:
            self._failed = exc
            raise

    @property
    def call(self) -> Call:
        """The collective call of the method running (every public method is one: :func:`amrckpt.comm.collective`)."""
        call = current_call(self.comm)
        assert call is not None, "ScdaWriter: a collective step outside a method"
        return call

    def _note(self, exc: BaseException) -> None:
        """Keep this rank's error of a call's arguments: for the call's agreement, or (deferred) for :meth:`settle`'s."""
        if self._defer:
            self._pending = self._pending or exc
        else:
            self.call.fail(exc)

    def _begin(self, what: str, digest: int, root_value: Any = None, root: int = 0) -> Any:
        """Start the next section; agree on argument checks before any byte is written (deferred: note them for :meth:`settle`).

        Returns ``root``'s ``root_value`` on every rank (deferred: this rank's own).
        """
        self._plan.begin_section()  # the plan keeps the section's CRC32 pieces
        if not self._defer:
            if self._pending is not None:
                self.call.fail(self._pending)
                self._pending = None
            got = self.call.reduction(what).equal("arguments", digest).root(root_value, root).run()
            if not got.equal("arguments"):
                raise self.call.agreed(ScdaArgumentError(f"{what}: {_DIFFER}"))
            return got.value
        self._digest = digest_of(self._digest, what, digest, root_value)
        return root_value

    def _section_end(self, record: SectionRecord) -> SectionRecord:
        self.records.append(record)
        self.offset = record.end
        self._plan.end_section(record.end)
        return record

    def settle(self, *, stream: bool = False) -> list[int] | None:
        """Agree once on every call of a deferred writer so far; return the CRC32 of every section so far.

        Collective: one allreduce (errors, a digest of every call's
        collective arguments, the largest number of bytes any rank has to
        write, and the CRC terms).  Only for a writer
        opened with ``defer=True``; nothing has been written yet.  After it,
        sections may still be added (by one rank, e.g. an index): their
        errors are agreed on by :meth:`fclose`, which writes everything.

        With ``stream=True`` (the same on every rank) the CRC32s are not
        waited for: :meth:`flush` writes what is queued while they are
        computed, then agrees on them and returns them.

        Parameters
        ----------
        stream : bool, optional
            Leave the CRC32s to :meth:`flush` (a large file: the helper
            thread CRCs, and makes the produced data, while the bytes are
            written).

        Returns
        -------
        list of int or None
            The CRC32 of every section written so far (as :meth:`section_crcs`;
            empty without ``checksum=True``); None with ``stream``.

        Raises
        ------
        AmrckptError
            On every rank, the agreed error of any rank's call (the file is
            then unusable except for :meth:`fclose`, which writes nothing).
        ScdaUsageError
            If the writer was not opened with ``defer=True`` or is settled already.
        ScdaArgumentError
            On every rank, if the ranks' collective arguments differ.
        ScdaError
            On every rank, if the agreement fails (the file is then unusable except for :meth:`fclose`).
        """
        plan = self._plan
        if not self._defer or plan.settled:
            raise ScdaUsageError("settle: only once, on a writer opened with defer=True")
        with collective(self.comm, "scda.settle") as call:
            if self._pending is not None:
                call.fail(self._pending)
            with self._unusable_on():
                agreed = plan.settle(call, self._digest, stream=stream)
            if not agreed:
                self._failed = call.agreed(ScdaArgumentError(f"write: {_DIFFER}"))
                raise self._failed
        return None if plan.crcs is None else list(plan.crcs)

    @collective_method("scda.flush")
    def flush(self) -> list[int]:
        """Open the file, write what is queued, and agree on the CRC32 of every section so far. Collective.

        For a deferred writer settled with ``stream=True``: the helper
        thread CRCs the bytes, and makes those still to be made, while they
        are written; then one allreduce agrees on the CRC32s (and on every
        rank's errors).  Sections added after it (an index that holds the
        CRC32s, a footer) and the bytes still being made are written by
        :meth:`fclose`.

        Returns
        -------
        list of int
            The CRC32 of every section written so far (empty without ``checksum=True``).

        Raises
        ------
        ScdaUsageError
            If the writer is not settled with ``stream=True``, or flushed already.
        AmrckptError
            On every rank, if the file cannot be opened (:class:`ScdaIOError`), or any rank's write, CRC32 or
            bytes to make failed (the file is then unusable except for :meth:`fclose`, which closes it).
        """
        plan = self._plan
        if not self._defer or not plan.settled or plan.crcs is not None or self._failed is not None:
            raise ScdaUsageError("flush: only once, on a deferred writer settled with stream=True")
        call = self.call
        with self._unusable_on(AmrckptError):  # agreed on every rank (an I/O error, or a rank's error in making its bytes)
            self._sink = open_sink(self.path, self.comm, access=self.access)
            crcs = plan.flush(self._sink, call)
        return list(crcs)

    def local_crcs(self) -> list[int]:
        """Return this rank's CRC32 terms of every section (not collective): a section's CRC32 where this rank wrote all of it."""
        return list(self._plan.terms)

    def section_crcs(self) -> list[int]:
        """CRC32 of every section written so far (file header first), as in :attr:`records`.

        Collective: one allreduce of one number per section.  Each rank CRCs
        the bytes it wrote (zlib-ng) and the terms are combined as zlib's
        ``crc32_combine`` does, so the result does not depend on the
        partition.  Needs ``checksum=True`` at :func:`fopen_write`.

        Returns
        -------
        list of int
            The CRC32 of bytes ``[record.offset, record.end)`` of each record.

        Raises
        ------
        ScdaUsageError
            If the file was not opened with ``checksum=True``.
        """
        if not self._checksum:
            raise ScdaUsageError("section_crcs: open the file with checksum=True")
        with collective(self.comm, "scda.section_crcs") as call:
            got = call.reduction("section_crcs").xor("crc terms", self.local_crcs()).run()
            return list(got.xor("crc terms"))

    def _io(
        self,
        pieces: list[tuple[int, memoryview]],
        bulk: tuple[int, Any] | None,
        max_bulk: int,
        what: str,
        bulk_crc: int | LaterCrc | None = None,
    ) -> None:
        """Write (deferred: queue) this rank's pieces and its bulk run, whose CRC32 ``bulk_crc`` may be known already.

        Collective (deferred: not).

        Raises
        ------
        ScdaError
            On every rank, the agreed error of any rank's write (not deferred).
        """
        if self._defer:  # written by fclose; CRCed by the helper thread meanwhile
            self._plan.add(pieces, bulk, bulk_crc)
            return
        assert self._backend is not None
        err = self._plan.write_now(self._backend, pieces, bulk, max_bulk)
        if err is not None:
            self.call.fail(err)
        with self._unusable_on():
            self.call.agree(what)

    # -- sections ---------------------------------------------------------

    @collective_method("scda.fwrite_inline")
    def fwrite_inline(self, data: Any, user_string: bytes | str, *, root: int = 0, allow_magic: bool = False) -> SectionRecord:
        """Write an inline section I (paper 2.3, Fig. 2; libsc ``sc_scda_fwrite_inline``).

        Collective.

        Parameters
        ----------
        data : bytes-like of 32 bytes, or None
            Exactly 32 bytes on ``root``; ignored (may be None) elsewhere.
        user_string : bytes or str
            At most 58 bytes (str is UTF-8 encoded).  Collective.
        root : int, optional
            The rank that holds ``data``.  Collective.
        allow_magic : bool, optional
            Allow the user strings ``"B compressed scda 00"`` and ``"A
            compressed scda 00"``, which the compression convention reserves
            for inline sections (paper 3): a file with such a section must
            continue with a conforming partner section, or it cannot be
            read with ``decode=True``.  For tools that copy raw sections.

        Returns
        -------
        SectionRecord

        Raises
        ------
        ScdaArgumentError
            On every rank: data not 32 bytes on root, user string too long
            or reserved, root out of range, or collective arguments that
            differ.
        ScdaIOError
            On every rank, if the root cannot write.
        """
        what = "fwrite_inline"
        digest, ustr, view = 0, b"", _EMPTY
        try:
            self._check_open(what)
            ustr = self._user_string(user_string)
            _reserved(ustr, (MAGIC_B, MAGIC_A), allow_magic, "inline")
            root = to_rank(root, self.comm.size)
            if self.comm.rank == root:
                view = _local_view(data, INLINE_DATA_NBYTES, "inline data")
            digest = digest_of("I", ustr, root)
        except ScdaError as exc:
            self._note(exc)
        self._begin(what, digest)
        off = self.offset
        pieces = []
        if self.comm.rank == root:
            pieces = [(off, memoryview(section_header(b"I", ustr, self.style))), (off + SECTION_HEADER_NBYTES, view)]
        self._io(pieces, None, 0, what)
        return self._section_end(SectionRecord("I", ustr, off, off + SECTION_HEADER_NBYTES + INLINE_DATA_NBYTES, False))

    @collective_method("scda.fwrite_block")
    def fwrite_block(
        self, data: Any, user_string: bytes | str, *, root: int = 0, encode: bool = False, level: int = 9
    ) -> SectionRecord:
        """Write a block section B (paper 2.4, Fig. 3; libsc ``sc_scda_fwrite_block``).

        Collective.  The block size E is taken from ``data`` on the root.

        Parameters
        ----------
        data : bytes-like or None
            The block (any number of bytes, E) on ``root``; ignored elsewhere.
        user_string : bytes or str
            At most 58 bytes.  Collective.
        root : int, optional
            The rank that holds ``data``.  Collective.
        encode : bool, optional
            Write by the compression convention (paper 3.2): an inline
            section with the magic ``"B compressed scda 00"`` and the
            uncompressed size, then the block of the encoded data.
        level : int, optional
            zlib level (0-9) for ``encode``.

        Returns
        -------
        SectionRecord

        Raises
        ------
        ScdaArgumentError
            On every rank, as for :meth:`fwrite_inline`, and if ``data`` is None on the root (on any rank of a
            writer opened with ``defer=True``).
        ScdaIOError
            On every rank, as for :meth:`fwrite_inline`.
        """
        what = "fwrite_block"
        digest, ustr, view = 0, b"", _EMPTY
        enc = np.empty(0, np.uint8)
        try:
            self._check_open(what)
            ustr = self._user_string(user_string)
            root = to_rank(root, self.comm.size)
            level = _level(level)
            if self.comm.rank == root or self._defer:  # a deferred writer needs the size E on every rank
                if data is None:
                    raise ScdaArgumentError(
                        "fwrite_block: a writer opened with defer=True needs the block on every rank"
                        if self._defer
                        else "fwrite_block: data is None on the root"
                    )
                view = byte_view(data, "block data")
                if encode:
                    enc, _ = encode_elements(view, np.array([0, view.nbytes]), level=level, style=self.style)
            digest = digest_of("B", ustr, root, bool(encode), level)
        except ScdaError as exc:
            self._note(exc)
        E, Ec = self._begin(what, digest, root_value=(view.nbytes, enc.size), root=root)
        off = self.offset
        pieces: list[tuple[int, memoryview]] = []
        me = self.comm.rank == root
        if encode:
            if me:
                pieces.append((off, memoryview(section_header(b"I", MAGIC_B, self.style) + count_entry(b"U", E, self.style))))
            off_b = off + SECTION_HEADER_NBYTES + INLINE_DATA_NBYTES
            body, nbody = memoryview(enc), Ec
        else:
            off_b, body, nbody = off, view, E
        data_off = off_b + SECTION_HEADER_NBYTES + COUNT_ENTRY_NBYTES
        end = data_off + nbody + data_padding_nbytes(nbody)
        if me:
            head = section_header(b"B", ustr, self.style) + count_entry(b"E", nbody, self.style)
            last = body[-1] if nbody else None
            pieces += [
                (off_b, memoryview(head)),
                (data_off, body),
                (data_off + nbody, memoryview(data_padding(nbody, last, self.style))),
            ]
        self._io(pieces, None, 0, what)
        return self._section_end(SectionRecord("B", ustr, off, end, bool(encode)))

    @collective_method("scda.fwrite_array")
    def fwrite_array(
        self,
        data: Any,
        elem_counts: Sequence[int] | np.ndarray | Share,
        elem_size: int,
        user_string: bytes | str,
        *,
        encode: bool = False,
        level: int = 9,
        allow_magic: bool = False,
    ) -> SectionRecord:
        """Write a fixed-size array section A (paper 2.5, Fig. 4; libsc ``sc_scda_fwrite_array``).

        Collective; follows the semantics of ``MPI_Allgather`` with the file
        as receive buffer (paper A.4.3).  Every rank writes its own bytes.

        Parameters
        ----------
        data : bytes-like or numpy.ndarray, Checksummed, or None
            This rank's N_p elements of E bytes each, contiguous
            (``N_p * E`` bytes; any dtype, read as raw bytes).  None where
            ``N_p * E == 0``.  A :class:`~amrckpt.scda.Checksummed` brings
            their CRC32: a deferred writer with ``checksum`` takes it
            instead of CRCing the bytes (unless ``encode``).
        elem_counts : (P,) sequence of int, or Share
            N_p, the elements of every rank (paper A.1), or this rank's
            :class:`~amrckpt.scda.Share` of them (no P-length list).  Collective.
        elem_size : int
            E, bytes per element.  Collective.
        user_string : bytes or str
            At most 58 bytes.  Collective.
        encode : bool, optional
            Compress every element (paper 3.3): an inline section with the
            magic ``"A compressed scda 00"`` and U = E, then a V section of
            encoded elements.
        level : int, optional
            zlib level (0-9) for ``encode``.
        allow_magic : bool, optional
            Allow the user string ``"V compressed scda 00"``, reserved for
            the U-entry arrays of the compression convention (see
            :meth:`fwrite_inline`).

        Returns
        -------
        SectionRecord

        Raises
        ------
        ScdaArgumentError
            On every rank: elem_counts not of length P, data of the wrong
            size on some rank, a reserved user string, collective arguments
            that differ.
        ScdaIOError, ScdaCountError
            On every rank, if any rank cannot write its bytes.
        """
        what = "fwrite_array"
        digest, ustr, view = 0, b"", _EMPTY
        share = Share(0, 0, 0, 0, 0)
        E = 0
        data, known = unwrap(data)
        bulk: memoryview | Produced = _EMPTY
        try:
            self._check_open(what)
            ustr = self._user_string(user_string)
            if not encode:
                _reserved(ustr, (MAGIC_V,), allow_magic, "array")
            share, cdig = self._share(elem_counts, "elem_counts")
            E = to_count(elem_size, "elem_size")
            self._check_count(share.total, "N")
            self._check_count(E, "E")
            level = _level(level)
            if isinstance(data, Produced) and (encode or not self._defer):
                data, known = data.view(), None  # encoded or written now: made now
            if isinstance(data, Produced):  # made while the bytes that exist are written (a deferred writer's plan)
                if data.nbytes != share.count * E:
                    want = share.count * E
                    raise ScdaArgumentError(f"array data: {data.nbytes} bytes to come on this rank, not N_p * E = {want}")
                bulk = data
            else:
                bulk = view = _local_view(data, share.count * E, "array data")
            digest = digest_of("A", ustr, cdig, E, bool(encode), level)
        except ScdaError as exc:
            self._note(exc)
        self._begin(what, digest)
        off = self.offset
        if encode:
            n = share.count
            offsets = np.arange(n + 1, dtype=np.int64) * E
            magic = section_header(b"I", MAGIC_A, self.style) + count_entry(b"U", E, self.style)
            end = self._write_encoded_v(off, magic, ustr, share, view, offsets, level)
            return self._section_end(SectionRecord("A", ustr, off, end, True))
        N = share.total
        total = N * E
        data_off = off + SECTION_HEADER_NBYTES + 2 * COUNT_ENTRY_NBYTES
        r = self.comm.rank
        pieces = []
        if r == 0:
            head = section_header(b"A", ustr, self.style) + count_entry(b"N", N, self.style) + count_entry(b"E", E, self.style)
            pieces.append((off, memoryview(head)))
        if r == (share.last if E else 0):
            last = bulk.last if isinstance(bulk, Produced) else bulk[-1] if bulk.nbytes else None
            pieces.append((data_off + total, memoryview(data_padding(total, last, self.style))))
        self._io(pieces, (data_off + share.offset * E, bulk), share.max * E, what, known)
        return self._section_end(SectionRecord("A", ustr, off, data_off + total + data_padding_nbytes(total), False))

    @collective_method("scda.fwrite_varray")
    def fwrite_varray(
        self,
        data: Any,
        elem_counts: Sequence[int] | np.ndarray | Share,
        elem_sizes: Any,
        proc_sizes: Sequence[int] | np.ndarray | Share,
        user_string: bytes | str,
        *,
        encode: bool = False,
        level: int = 9,
    ) -> SectionRecord:
        """Write a variable-size array section V (paper 2.6, Fig. 5; libsc ``sc_scda_fwrite_varray``).

        Collective.  Every rank writes its own bytes, its own E_i entries
        included; only the O(P) ``proc_sizes`` are needed by all ranks, and
        nothing that grows with N is communicated.

        Parameters
        ----------
        data : bytes-like or numpy.ndarray, Checksummed, or None
            This rank's elements, concatenated: ``proc_sizes[rank]`` bytes;
            a :class:`~amrckpt.scda.Checksummed` brings their CRC32 (as for
            :meth:`fwrite_array`).
        elem_counts : (P,) sequence of int, or Share
            N_p, the elements of every rank (paper A.1), or this rank's
            :class:`~amrckpt.scda.Share` of them (no P-length list).  Collective.
        elem_sizes : (N_p,) array_like of int
            E_i, the byte size of each of this rank's elements (paper A.1);
            local, not collective.
        proc_sizes : (P,) sequence of int, or Share
            S_p, the bytes of every rank (paper eq. 12), or this rank's
            :class:`~amrckpt.scda.Share` of them.  Collective.
        user_string : bytes or str
            At most 58 bytes.  Collective.
        encode : bool, optional
            Compress every element (paper 3.4): an array of U entries with
            the magic ``"V compressed scda 00"``, then a V section of
            encoded elements.
        level : int, optional
            zlib level (0-9) for ``encode``.

        Returns
        -------
        SectionRecord

        Raises
        ------
        ScdaArgumentError
            On every rank: elem_sizes not of length N_p or not summing to
            ``proc_sizes[rank]``, data of the wrong size, collective
            arguments that differ.
        ScdaIOError, ScdaCountError
            On every rank, if any rank cannot write its bytes.
        """
        what = "fwrite_varray"
        digest, ustr, view = 0, b"", _EMPTY
        share = Share(0, 0, 0, 0, 0)
        S = Share(0, 0, 0, 0, 0)
        sizes = np.zeros(0, np.uint64)
        r = self.comm.rank
        data, known = unwrap(data)
        try:
            self._check_open(what)
            ustr = self._user_string(user_string)
            share, cdig = self._share(elem_counts, "elem_counts")
            S, sdig = self._share(proc_sizes, "proc_sizes")
            self._check_count(share.total, "N")
            level = _level(level)
            sizes = _sizes_array(elem_sizes, share.count)
            local = int(sizes.sum(dtype=np.uint64)) if sizes.size else 0
            if sizes.size and (int(sizes.max()) > S.count or local != S.count):
                raise ScdaArgumentError(f"elem_sizes of this rank sum to {local}; proc_sizes[{r}] is {S.count}")
            if not sizes.size and S.count:
                raise ScdaArgumentError(f"this rank owns no elements but proc_sizes[{r}] is {S.count}")
            view = _local_view(data, S.count, "varray data")
            digest = digest_of("V", ustr, cdig, sdig, bool(encode), level)
        except ScdaError as exc:
            self._note(exc)
        self._begin(what, digest)
        off = self.offset
        N = share.total
        if encode:
            a_data = off + SECTION_HEADER_NBYTES + 2 * COUNT_ENTRY_NBYTES
            a_total = COUNT_ENTRY_NBYTES * N
            uents = format_entries(b"U", sizes, self.style)
            pieces = []
            if r == 0:
                head = section_header(b"A", MAGIC_V, self.style) + count_entry(b"N", N, self.style)
                head += count_entry(b"E", COUNT_ENTRY_NBYTES, self.style)
                # Every U entry ends in a line feed: the padding is known without data.
                pad = data_padding(a_total, 0x0A, self.style)
                pieces = [(off, memoryview(head)), (a_data + a_total, memoryview(pad))]
            bulk = (a_data + COUNT_ENTRY_NBYTES * share.offset, byte_view(uents, "entries"))
            self._io(pieces, bulk, COUNT_ENTRY_NBYTES * share.max, what)
            v_off = a_data + a_total + data_padding_nbytes(a_total)
            offsets = np.zeros(sizes.size + 1, dtype=np.int64)
            np.cumsum(sizes, out=offsets[1:])
            end = self._write_encoded_v(v_off, b"", ustr, share, view, offsets, level)
            return self._section_end(SectionRecord("V", ustr, off, end, True))
        end = self._write_v(off, b"", ustr, share, sizes, S, view, known)
        return self._section_end(SectionRecord("V", ustr, off, end, False))

    def _share(self, counts: Any, what: str) -> tuple[Share, Any]:
        """Return this rank's :class:`Share` of ``counts`` (a P-length sequence or a Share) and what to digest of it.

        Raises
        ------
        ScdaArgumentError
            On this rank, if ``counts`` is a Share that is no share of a partition (a negative count or offset, or
            beyond its total).
        """
        if isinstance(counts, Share):
            if counts.count < 0 or counts.offset < 0 or counts.total < counts.offset + counts.count:
                raise ScdaArgumentError(f"{what}: {counts} is not a share of a partition")
            return counts, counts.collective()
        c, C = partition_offsets(counts, self.comm.size, what)
        r = self.comm.rank
        return Share(c[r], C[r], C[-1], max(c), last_owner(c)), tuple(c)

    def _write_v(
        self,
        off: int,
        prefix: bytes,
        ustr: bytes,
        share: Share,
        sizes: np.ndarray,
        S: Share,
        view: memoryview,
        crc: int | LaterCrc | None = None,
    ) -> int:
        """Write a raw V section at ``off`` (after ``prefix``, written by rank 0); ``crc`` is the CRC32 of ``view``, if known."""
        r = self.comm.rank
        N = share.total
        v_off = off + len(prefix)
        entries = v_off + SECTION_HEADER_NBYTES + COUNT_ENTRY_NBYTES
        data_off = entries + COUNT_ENTRY_NBYTES * N
        total = S.total
        pieces = []
        if r == 0:
            head = prefix + section_header(b"V", ustr, self.style) + count_entry(b"N", N, self.style)
            pieces.append((off, memoryview(head)))
        ents = format_entries(b"E", sizes, self.style)
        self._io(
            pieces,
            (entries + COUNT_ENTRY_NBYTES * share.offset, byte_view(ents, "entries")),
            COUNT_ENTRY_NBYTES * share.max,
            "fwrite_varray",
        )
        pieces = []
        if r == S.last:
            last = view[-1] if view.nbytes else None
            pieces.append((data_off + total, memoryview(data_padding(total, last, self.style))))
        self._io(pieces, (data_off + S.offset, view), S.max, "fwrite_varray", crc)
        return data_off + total + data_padding_nbytes(total)

    def _write_encoded_v(
        self,
        off: int,
        prefix: bytes,
        ustr: bytes,
        share: Share,
        view: memoryview,
        offsets: np.ndarray,
        level: int,
    ) -> int:
        """Encode this rank's elements and write them as a raw V section.

        Collective: the encoded sizes are known only after encoding, so
        their share is agreed on here (one gather of one number per rank).

        Raises
        ------
        ScdaError
            On every rank, the agreed error of the gather of the encoded sizes (any rank's error in encoding, for
            one).
        """
        call = self.call
        if self._defer and self._pending is not None:
            call.fail(self._pending)
        got = call.run(encode_elements, view, offsets, level=level, style=self.style)
        enc, esizes = got if got is not None else (np.empty(0, np.uint8), np.empty(0, np.uint64))
        with self._unusable_on():
            S = call.allgather_int(enc.size, what="encode")  # S_p: libsc's P-long proc_sizes
        return self._write_v(off, prefix, ustr, share, esizes, Share.of(S.tolist(), self.comm.rank, "proc_sizes"), memoryview(enc))

    # -- small helpers ----------------------------------------------------

    def _user_string(self, user_string: bytes | str) -> bytes:
        u = to_bytes(user_string, "user_string")
        check_user_string(u)
        return u

    @staticmethod
    def _check_count(value: int, name: str) -> None:
        if value > MAX_COUNT:
            raise ScdaArgumentError(f"{name} = {value} has more than 26 digits")

    @collective_method("scda.sync")
    def sync(self) -> None:
        """Flush the written bytes to stable storage (``fsync``; ``MPI_File_sync``). Collective.

        A file overwritten in place (``truncate=False``) is first cut to what
        was written, so that its size is synced with its bytes.
        """
        self._check_open("sync")
        if self._defer:  # after the write, in fclose
            self._sync_at_close = True
            return
        assert self._backend is not None
        self._backend.sync(None if self._truncate else self.offset)

    @collective_method("scda.fclose")
    def fclose(self) -> None:
        """Close the file (libsc ``sc_scda_fclose``). Collective; closing twice is a no-op.

        Raises
        ------
        ScdaIOError
            On every rank, if any rank cannot close.
        ScdaError
            On every rank, if a writer opened with ``defer=True`` cannot open its file now.
        """
        if not self._is_open:
            return
        self._is_open = False
        size = None if self._truncate else self.offset
        if not self._defer:
            assert self._backend is not None
            backend, self._backend = self._backend, None
            backend.close(size)
            return
        sink, self._sink = self._sink, None
        call = self.call
        if sink is not None and self._failed is not None:  # failed after flush() opened it, agreed: close it together
            call.run(sink.close, size, always=True)
            return
        if not self._plan.settled or self._failed is not None:
            return  # deferred but not settled, or failed: the file was never opened
        if sink is None:
            with self._unusable_on():
                sink = open_sink(self.path, self.comm, access=self.access)
        if self._pending is not None:
            call.fail(self._pending)
        self._plan.execute(sink, call)  # a failed rank joins with nothing
        if self._sync_at_close:
            sink.sync(size)  # errors kept by the call
        sink.close(size)  # closes on every rank, whatever failed; errors kept by the call
        with self._unusable_on(BaseException):
            call.agree("fclose")

    def __enter__(self) -> ScdaWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fclose()

    def __repr__(self) -> str:
        state = "closed" if not self._is_open else f"offset={self.offset}"
        return f"<ScdaWriter {self.path!r} {state} P={self.comm.size}>"


def fopen_write(
    path: str | os.PathLike[str],
    user_string: bytes | str = b"",
    *,
    comm: Any = None,
    style: Style = "unix",
    vendor: bytes | str = b"amrckpt",
    info: Any = None,
    backend: str | None = None,
    checksum: bool = False,
    truncate: bool = False,
    defer: bool = False,
    access: FileAccess | None = None,
) -> ScdaWriter:
    r"""Create an scda file and write its header section F (libsc ``sc_scda_fopen_write``).

    Collective.  An existing file is overwritten (paper A.3), in place unless ``truncate``.

    Parameters
    ----------
    path : str or os.PathLike
        The file to create.
    user_string : bytes or str, optional
        The file header's user string, at most 58 bytes.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        ``None`` writes serially without MPI.
    style : {"unix", "mime"}, optional
        Line breaks of the padding: ``"\\n"`` or ``"\\r\\n"`` (paper 2.1).
    vendor : bytes or str, optional
        The vendor string, at most 20 bytes (libsc writes ``b"libsc"``).
    info : dict or mpi4py.MPI.Info, optional
        MPI-IO hints (e.g. ``{"striping_factor": "16"}``).
    backend : {None, "posix", "mpiio"} or BackendOpener, optional
        Default: MPI-IO for an MPI communicator, POSIX otherwise.
    checksum : bool, optional
        CRC32 every byte written, for :meth:`ScdaWriter.section_crcs` (one
        extra pass over the data in memory, by zlib-ng).
    truncate : bool, optional
        False (default): overwrite an existing file in place and cut it to
        its final size when closing: the same bytes in the end as libsc's,
        but the file's pages are reused (faster on file systems where
        allocating them costs, e.g. a tmpfs).  Until then, a crash leaves
        old bytes behind the new ones.  True: empty an existing file when
        opening (libsc, C's ``fopen(.., "w")``).
    defer : bool, optional
        Defer every agreement and every byte: the ``fwrite_*`` calls check
        their arguments locally and queue their bytes (CRCed meanwhile by a
        helper thread); :meth:`ScdaWriter.settle` agrees once on all of them
        (every rank raises the same error, before the file is even opened)
        and combines the CRC32s; :meth:`ScdaWriter.fclose` opens (creates,
        overwrites) the file, writes every rank's bytes of the whole file in
        one collective call (MPI-IO: a file view and ``MPI_File_write_all``)
        and agrees on its errors.  Block data must then be passed on every
        rank.  The bytes are the same.  With ``checksum``, the CRC32 of an
        array's data passed as a :class:`~amrckpt.scda.Checksummed` is taken
        from it, not computed again.
    access : FileAccess, optional
        ``style``, ``info``, ``backend`` and ``truncate`` as one value (the
        keyword arguments given override it); its ``sync`` is the caller's
        (:meth:`ScdaWriter.sync`).

    Returns
    -------
    ScdaWriter
        A context manager; leaving it closes the file.

    Raises
    ------
    ScdaArgumentError
        For a vendor or user string that is too long or a bad style.
    ScdaIOError
        If the file cannot be created (subclasses for a missing directory or
        a permission problem); errno ``ELOOP`` if ``path`` is a symbolic
        link (a file is never written through a link).
    """
    a = FileAccess.of(access, style=style, info=info, backend=backend, truncate=truncate)
    return ScdaWriter(path, user_string, comm=comm, vendor=vendor, checksum=checksum, defer=defer, access=a)
