"""Reading many fields at once: every rank's bytes by two collective reads, one prefix sum, one CRC reduction.

A load asks for every field under a known partition.  Section by section
through the scda API (:class:`amrckpt.scda.ScdaReader`, libsc's calling
convention) that costs a broadcast of each header and agreements on each
call: O(fields) collectives.  Here the root reads every wanted section's
header once when the checkpoint is opened (:meth:`CheckpointReader._metadata_on_root`)
and broadcasts them with the index, so each rank knows where its bytes are
without asking:

1. each field's handler (:meth:`~amrckpt.container.FieldHandler.plan`)
   adds this rank's pieces of fixed size (mesh records, cells, arrays, the
   counts of an hp field, the size entries of a V section) to the plan;
2. one collective read (``MPI_File_read_all`` through a file view) fills
   them all;
3. one exclusive prefix sum over the ranks (``MPI_Exscan``) of the sizes
   just read gives each rank where its variable-size values begin;
4. a second collective read fills those values;
5. one ``MPI_Allreduce(MPI_BXOR)`` of each section's CRC32 terms (see
   :mod:`amrckpt._crc`) checks every byte read against the index.

No rank raises an error of its own pieces in between: it still joins every
collective call, and its error is returned for the caller's single
agreement (:meth:`CheckpointReader.close`), so a load agrees once.
Sections that need the per-element compression of the paper (section 3)
or the chunked layout are read by their handlers' collective :meth:`read`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._crc import SectionCrc
from ..comm import Call, Comm, current_call
from ..scda._backend import MAX_CALL_NBYTES, Backend, byte_view
from ..scda._layout import RawSection
from ._convention import IndexEntry

__all__ = ["GatheredRead", "Section", "Span"]


@dataclass(frozen=True)
class Section:
    """One section of a wanted field as the root found it (broadcast with the index).

    Attributes
    ----------
    raw : RawSection
        Its header: type, counts, where its entries and data begin.
    entry : IndexEntry
        Its index entry (offset, end, CRC32).
    tail_crc : int
        A, B, I: the CRC32 of its bytes after the data (the padding), read
        by the root; -1 for V (the rank of the last element reads them).
    data : bytes or None
        I, B: the section's data (the root checked its CRC32); else None.
    """

    raw: RawSection
    entry: IndexEntry
    tail_crc: int = -1
    data: bytes | None = None


@dataclass(frozen=True)
class Span:
    """A rank's part of a partitioned section: ``count`` elements from global element ``offset``; ``N`` in all."""

    count: int
    offset: int
    N: int

    @property
    def holds_last(self) -> bool:
        """Whether this rank holds the section's last element (rank 0 of an empty section holds none)."""
        return self.count > 0 and self.offset + self.count == self.N


@dataclass
class _Scan:
    local: Callable[[], int]
    then: Callable[[int], None]
    value: int | None = 0


@dataclass
class GatheredRead:
    """A rank's part of a read of many fields (see the module's description). Not thread-safe.

    Attributes
    ----------
    comm : Comm
    verify : bool
        CRC every byte read and compare each section with its index entry.
    path : str
        Names the file in messages.
    nbytes : int
        The bytes of every section planned (the same on every rank): if
        more than one MPI-IO call moves, each read first asks every rank
        how many bytes it reads (one more allreduce per read).
    error : BaseException or None
        This rank's first error (a read that failed, sizes that do not fit
        the section), or the CRC32 mismatch of a section (on every rank).
    checked : list of str
        The sections whose CRC32 matched the index.
    """

    comm: Comm
    verify: bool
    path: str
    nbytes: int = 0
    error: BaseException | None = None
    checked: list[str] = field(default_factory=list)
    _pieces: list[tuple[int, memoryview]] = field(default_factory=list)
    _crcs: dict[int, tuple[IndexEntry, SectionCrc]] = field(default_factory=dict)
    _scans: list[_Scan] = field(default_factory=list)
    _todo: list[tuple[SectionCrc, int, memoryview]] = field(default_factory=list)
    _read_failed: bool = False

    # -- what handlers call while planning (not collective) -------------------

    def fail(self, exc: BaseException) -> None:
        """Record this rank's first error; the rank still takes part in every collective call."""
        if self.error is None:
            self.error = exc

    def cover(self, sec: Section) -> SectionCrc:
        """Return this rank's CRC32 pieces of ``sec``: on the root, first its header and (A) the padding the root read."""
        got = self._crcs.get(sec.raw.offset)
        if got is not None:
            return got[1]
        crc = SectionCrc()
        if self.comm.rank == 0:
            crc.add_crc(sec.raw.offset, sec.raw.head_nbytes, sec.raw.head_crc)
            if sec.tail_crc >= 0:
                start = sec.raw.data_offset + sec.raw.elem_count * sec.raw.elem_size
                crc.add_crc(start, sec.entry.end - start, sec.tail_crc)
        self.nbytes += sec.entry.end - sec.entry.offset
        self._crcs[sec.raw.offset] = (sec.entry, crc)
        return crc

    def read(self, sec: Section, offset: int, buf: Any) -> None:
        """Fill ``buf`` (any writable buffer) from file byte ``offset`` of ``sec`` in the next collective read."""
        crc = self.cover(sec)
        mv = byte_view(buf, "buffer")
        if mv.nbytes:
            self._pieces.append((offset, mv))
            if self.verify:
                self._todo.append((crc, offset, mv))

    def scan(self, local: Callable[[], int], then: Callable[[int], None]) -> None:
        """After the first read: ``local()`` gives this rank's sum (of sizes, of counts); ``then(prefix)`` plans the second read.

        ``prefix`` is the sum of ``local()`` over the ranks below this one
        (one exscan for all fields); ``then`` does not run where ``local`` raised.
        """
        self._scans.append(_Scan(local, then))

    # -- running (collective) -------------------------------------------------

    def run(self, backend: Backend) -> None:
        """Read every piece planned: two collective reads around one exscan; then one CRC32 allreduce. Collective.

        Nothing raises: errors are kept in :attr:`error` for the caller's
        agreement.  Every rank makes the same collective calls whatever
        its errors (the plans, the sections and :attr:`nbytes` are the same on every rank).
        """
        self._phase(backend)
        if self._scans:
            sums = []
            for s in self._scans:  # a field whose sizes do not fit is not read on; the others are
                s.value = self._try(s.local, None) if not self._read_failed else None  # no sizes from a failed read
                sums.append(s.value or 0)
            prefix = self._call().exscan(sums=sums).sums
            for s, before in zip(self._scans, prefix, strict=True):
                if s.value is not None:
                    self._try(lambda s=s, before=before: s.then(before), None)  # type: ignore[misc]
            self._phase(backend)
        if self.verify:
            self._check()

    def _call(self) -> Call:
        """Return the collective call this read belongs to (a load, or a method of the reader)."""
        call = current_call(self.comm)
        assert call is not None, "GatheredRead.run outside a collective call"
        return call

    def _try(self, fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - agreed on by the caller
            self.fail(exc)
            return default

    def _phase(self, backend: Backend) -> None:
        """One collective read of the pieces planned so far."""
        pieces, self._pieces = self._pieces, []
        nrounds = 1
        if self.nbytes > MAX_CALL_NBYTES:  # more than one call may be needed: the largest rank decides
            most = int(self._call().allreduce_array(np.array([sum(b.nbytes for _, b in pieces)], dtype=np.int64), "max")[0])
            nrounds = max(1, -(-most // MAX_CALL_NBYTES))
        todo, self._todo = self._todo, []
        try:
            backend.read_gathered(pieces, nrounds)
        except Exception as exc:  # noqa: BLE001 - agreed on by the caller
            self.fail(exc)
            self._read_failed = True
            return
        for crc, off, mv in todo:  # in the helper thread, while this one plans and reads on
            crc.add_later([(off, mv)])

    def _check(self) -> None:
        """One allreduce of every section's CRC32 terms; a section that does not match is an error on every rank.

        The mismatch replaces a rank's own error of values that do not fit
        (damage explains them).  It is no error where a rank's read failed
        (the same allreduce says so): the pieces that rank did not read are
        missing from the terms, and its I/O error is the one to raise.
        """
        from ._reader import checksum_error

        entries = sorted(self._crcs.values(), key=lambda t: t[0].offset)
        if not entries:
            return
        terms = [self._try(lambda e=e, crc=crc: crc.term(e.end), 0) for e, crc in entries]  # type: ignore[misc]
        # One more word: nonzero if a rank's read failed (a 32-bit odd mix of its rank: XORs of several cancel
        # with probability 2**-32).  Then the sections it did not read cannot match, and its error is the one to raise.
        failed = ((self.comm.rank + 1) * 0x9E3779B1 | 1) & 0xFFFFFFFF if self._read_failed else 0
        *got, someone_failed = (int(v) for v in self._call().allreduce_array(np.array([*terms, failed], dtype=np.uint32), "bxor"))
        for (e, _), c in zip(entries, got, strict=True):
            if c != e.crc32:
                if someone_failed:
                    return  # the ranks whose reads failed raise their errors; this is not damage
                if self.error is None or isinstance(self.error, ValueError):  # damage explains what did not fit
                    self.error = checksum_error(e.name, e.offset, e.end, self.path)
                return
            if e.name not in self.checked:
                self.checked.append(e.name)
