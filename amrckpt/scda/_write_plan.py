"""Write plans: every byte one rank writes of one file, agreed on once and written by one collective call.

The write side of :class:`~amrckpt.scda.ReadPlan`.  A writer opened with
``defer=True`` (:func:`amrckpt.scda.fopen_write`) adds the pieces of each
call to a :class:`WritePlan` instead of writing them:

1. :meth:`WritePlan.add` queues this rank's pieces of a section at their
   file offsets and hands them to the helper thread for their CRC32s, or
   takes a piece's CRC32 from its :class:`~amrckpt.scda.Checksummed` data;
2. :meth:`WritePlan.settle` agrees once, with one named reduction, on
   every rank's errors and collective arguments, the largest number of
   bytes and of contiguous calls of any rank, and the CRC32 terms of every
   section (:mod:`amrckpt._crc`);
3. :meth:`WritePlan.execute` writes every rank's pieces of the whole file
   through the sink's ``write_gathered`` (:class:`~amrckpt.scda.ByteSink`), in as many rounds as agreed.

A plan settled with ``stream=True`` streams instead: :meth:`WritePlan.settle`
agrees without waiting for any CRC32, :meth:`WritePlan.flush` writes the
pieces that exist while the helper thread CRCs them and makes the
:class:`~amrckpt.scda._checksummed.Produced` ones (a mesh packed into its
records), then agrees on the CRC32s (one more reduction); the sections
added then (an index that holds the CRC32s, a footer) and the produced
pieces are written by :meth:`WritePlan.execute`, a second gathered write.

Sections added after :meth:`~WritePlan.settle` (an index and a footer,
written by one rank) have their terms at once and are written by the same
:meth:`~WritePlan.execute`.

A writer opened without ``defer`` executes its plan after each call
instead (:meth:`WritePlan.write_now`): the call's pieces are written at
once, in rounds of ``_crc.CHUNK_NBYTES`` for a large bulk run, each round
CRC'd by the helper thread while the next one is written, and the call
agrees on its own errors.
"""

from __future__ import annotations

from typing import Any

from .. import _crc
from .._crc import LaterCrc, SectionCrc
from ..comm import Call
from ..errors import ScdaError
from . import _backend
from ._backend import Backend, ByteSink, capabilities_of
from ._checksummed import Produced
from ._io import Piece, rounds

__all__ = ["WritePlan"]


class WritePlan:
    """What one rank writes of one file: its pieces at their offsets, and the CRC32 terms of each section.

    Adding is not collective; :meth:`settle`, :meth:`flush` and
    :meth:`execute` are (every rank calls them, in this order; :meth:`flush`
    only after ``settle(stream=True)``).  Not thread-safe.

    Parameters
    ----------
    checksum : bool
        CRC32 every piece (in the helper thread), for the sections' CRC32s.
    immediate : bool, optional
        Pieces are written by :meth:`write_now` as each call gives them
        (a writer opened without ``defer``); there is nothing to settle,
        and each section's term is taken when it ends.

    Attributes
    ----------
    pieces : list of (int, memoryview)
        This rank's pieces so far, as ``(file offset, bytes)``.
    produced : list of (int, Produced)
        This rank's pieces still being made, as ``(file offset, bytes to come)``.
    terms : list of int
        This rank's CRC32 term of every section settled, and of every
        section added after :meth:`settle` (empty without ``checksum``).
    crcs : list of int or None
        The CRC32 of every section, as agreed by :meth:`settle` (by
        :meth:`flush` when streaming); None before.
    settled : bool
        Whether :meth:`settle` has agreed.
    nrounds : int
        Collective write calls through a file view (agreed: the same on every rank).
    ncontiguous : int
        Contiguous collective calls of large pieces (agreed: the same on every rank).
    """

    __slots__ = (
        "_cur",
        "_end",
        "_later_nbytes",
        "_open",
        "_tail_start",
        "checksum",
        "crcs",
        "ncontiguous",
        "nrounds",
        "pieces",
        "produced",
        "settled",
        "terms",
    )

    def __init__(self, checksum: bool, *, immediate: bool = False) -> None:
        self.checksum = bool(checksum)
        self.pieces: list[Piece] = []
        self.produced: list[tuple[int, Produced]] = []
        self.terms: list[int] = []
        self.crcs: list[int] | None = [] if immediate else None  # immediate: each call agrees on its own
        self.settled = bool(immediate)
        self.nrounds = 1
        self.ncontiguous = 0
        self._open: list[tuple[SectionCrc | None, int]] = []  # each section's CRC32 pieces and end, until agreed
        self._cur: SectionCrc | None = None
        self._end = 0  # where the last section ended
        self._tail_start: int | None = None  # streaming: where the sections added after flush() start
        self._later_nbytes = 0  # streaming: the most bytes of produced pieces of any rank (agreed by flush())

    def begin_section(self) -> None:
        """Start the next section: the pieces added until :meth:`end_section` are its bytes."""
        self._cur = SectionCrc() if self.checksum else None

    def add(self, pieces: list[Piece], bulk: tuple[int, Any] | None = None, bulk_crc: int | LaterCrc | None = None) -> None:
        """Add this rank's ``pieces`` and ``bulk`` run of the current section; ``bulk_crc`` is the bulk's CRC32, if known.

        The bytes must stay unchanged until :meth:`execute`; those whose
        CRC32 is not known are CRC'd by the helper thread meanwhile.  A bulk
        whose bytes are a :class:`Produced` (its own CRC32) is written after
        the others.
        """
        made = bulk is not None and isinstance(bulk[1], Produced)
        if made and bulk is not None and bulk[1].nbytes:
            self.produced.append(bulk)
        added = [p for p in (*pieces, *([bulk] if bulk is not None and not made else [])) if p[1].nbytes]
        self.pieces.extend(added)
        if self._cur is None:
            return
        rest = added
        if bulk_crc is not None and bulk is not None and bulk[1].nbytes:
            self._cur.add_crc(bulk[0], bulk[1].nbytes, bulk_crc)  # the caller's buffer, CRC'd before it got here
            rest = [p for p in added if p is not bulk]
        if rest:
            self._cur.add_later(rest)

    def end_section(self, end: int) -> None:
        """End the current section at file byte ``end``; once the CRC32s are agreed, its term is taken at once."""
        if self.crcs is None:
            self._open.append((self._cur, end))  # the helper thread may still be CRCing it
        elif self._cur is not None:
            self.terms.append(self._cur.term(end))
        self._cur = None
        self._end = end

    def settle(self, call: Call, digest: int, *, stream: bool = False) -> bool:
        """Agree once on every rank's plan: one reduction, named ``"write"``. Collective.

        It carries the errors kept by ``call``, the largest bytes and
        contiguous calls of any rank, this rank's CRC32 terms (XOR) and the
        ``digest`` of this rank's collective arguments.  With ``stream``
        (the same on every rank), the CRC32s are not waited for: they are
        agreed on by :meth:`flush`, after the pieces that exist are written,
        and the produced pieces are left for :meth:`execute`.

        Returns
        -------
        bool
            Whether every rank passed the same ``digest``; only then are
            :attr:`settled`, :attr:`crcs` (unless ``stream``), :attr:`terms`,
            :attr:`nrounds` and :attr:`ncontiguous` set.

        Raises
        ------
        AmrckptError
            On every rank, the agreed error of any rank (kept by ``call``, or in waiting for a CRC32).
        """
        terms = [] if stream else call.run(lambda: [c.term(end) if c is not None else 0 for c, end in self._open]) or []
        now: list[tuple[int, Any]] = [*self.pieces] if stream else [*self.pieces, *self.produced]
        nbytes = sum(b.nbytes for _, b in now)
        red = call.reduction("write").max("bytes", nbytes).max("contiguous calls", _backend.contiguous_calls(now))
        got = red.xor("crc terms", terms if self.checksum and not stream else []).equal("arguments", digest).run()
        if not got.equal("arguments"):
            return False
        self.nrounds = max(1, -(-got.max("bytes") // _backend.MAX_CALL_NBYTES))
        self.ncontiguous = got.max("contiguous calls")
        self.settled = True
        if not stream:
            self.terms = terms
            self.crcs = got.xor("crc terms")
        return True

    def flush(self, sink: ByteSink, call: Call) -> list[int]:
        """Write the pieces that exist, then agree on every section's CRC32: one gathered write, one reduction. Collective.

        For a plan settled with ``stream=True``.  While the sink writes, the
        helper thread CRCs those pieces and makes the produced ones; the
        reduction (named ``"write: crc32s"``) carries every rank's errors
        (of the write, of making or CRCing a piece), its CRC32 terms and the
        largest bytes and contiguous calls of its produced pieces, for
        :meth:`execute`.

        Returns
        -------
        list of int
            The CRC32 of every section so far (:attr:`crcs`).

        Raises
        ------
        AmrckptError
            On every rank, the agreed error of any rank.
        """
        self.execute(sink, call)
        terms = call.run(lambda: [c.term(end) if c is not None else 0 for c, end in self._open]) or []
        red = call.reduction("write: crc32s").xor("crc terms", terms if self.checksum else [])
        red.max("bytes", sum(b.nbytes for _, b in self.produced))
        got = red.max("contiguous calls", _backend.contiguous_calls(self.produced)).run()
        self.terms = terms
        self.crcs = got.xor("crc terms")
        self._later_nbytes = got.max("bytes")
        self.ncontiguous = got.max("contiguous calls")
        self._tail_start = self._end
        return self.crcs

    def execute(self, sink: ByteSink, call: Call) -> None:
        """Write this rank's pieces in the agreed calls; a rank whose ``call`` failed joins with none. Collective.

        Once the CRC32s are agreed, the produced pieces go first (their
        bytes made here if the helper thread has not made them).  A sink
        that CRCs what it writes (``takes_piece_crcs``) is given the CRC32
        of every piece first.  Errors are kept by ``call``.
        """
        queue, self.pieces = self.pieces, []
        if self.crcs is not None and self.produced:
            made, self.produced = self.produced, []
            views = call.run(lambda: [(off, p.view()) for off, p in made]) or []
            queue = [*views, *queue]
        if self._tail_start is not None:  # after flush(): the produced pieces, and the sections added since
            tail = self._end - self._tail_start  # the same on every rank: section ends are collective
            self.nrounds = max(1, -(-(self._later_nbytes + tail) // _backend.MAX_CALL_NBYTES))
        mine = [] if call.failed else queue
        if capabilities_of(sink).takes_piece_crcs and self.checksum and mine:
            call.run(lambda: sink.take_piece_crcs([k for c, _ in self._open if c is not None for k in c.known()]))  # type: ignore[attr-defined]
        if self.ncontiguous:  # pieces large enough for contiguous calls of their own
            call.run(sink.write_gathered, mine, self.nrounds, self.ncontiguous, always=True)
        else:
            call.run(sink.write_gathered, mine, self.nrounds, always=True)

    def write_now(self, backend: Backend, pieces: list[Piece], bulk: Piece | None, max_bulk: int) -> ScdaError | None:
        """Write this rank's ``pieces`` and ``bulk`` run of the current section now (an immediate plan). Collective.

        Every rank makes the same calls: one of the pieces and the bulk run
        (``max_bulk`` is the largest bulk of any rank), or, for a bulk
        larger than two CRC chunks, one of the pieces and
        ``ceil(max_bulk / _crc.CHUNK_NBYTES)`` rounds of the bulk.  The
        helper thread CRCs what was written while the next call writes;
        every CRC32 is done when this returns (the caller's buffers are
        free again).

        Returns
        -------
        ScdaError or None
            This rank's first error; after one, the rank joins the
            remaining rounds with nothing to write, so that no rank waits.
        """
        cur = self._cur
        if cur is None or max_bulk <= 2 * _crc.CHUNK_NBYTES:
            # CRC the bytes in a helper thread while the backend writes them (both release the GIL).
            later = cur.add_later([*pieces, *([bulk] if bulk is not None else [])]) if cur is not None else None
            try:
                backend.write(pieces, bulk, max_bulk)
            except ScdaError as exc:
                return exc
            finally:
                if later is not None:
                    later.result()
            return None
        chunk = _crc.CHUNK_NBYTES
        err: ScdaError | None = None
        futures = [f for f in [cur.add_later(list(pieces))] if f is not None] if pieces else []
        try:
            backend.write(pieces, None, 0)
        except ScdaError as exc:
            err = exc
        for part in rounds(bulk, max_bulk, chunk):
            if err is not None:
                part = None  # after an error, join the remaining rounds with nothing
            try:
                backend.write([], part, chunk)
            except ScdaError as exc:
                err = err or exc
                continue
            if part is not None:
                fut = cur.add_later([part])
                if fut is not None:
                    futures.append(fut)
        for f in futures:
            f.result()
        return err
