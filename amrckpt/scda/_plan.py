"""Read plans: this rank's byte ranges of many sections of one file, read by one collective call per phase.

A reader that knows where every section of a file is (its headers, read
once by the root and broadcast) plans what each rank reads, then hands the
plan to an executor:

1. :meth:`ReadPlan.read` adds this rank's pieces of fixed size (array
   elements, 32-byte size entries of a V section, counts);
2. the executor fills them all, in one collective read
   (:class:`GatheredExecutor`: ``MPI_File_read_all`` through a file view),
   or on this rank alone (:class:`LocalExecutor`: ``preadv``);
3. :meth:`ReadPlan.scan` steps turn what was read into a sum per rank (of
   sizes, of counts); the executor gives each the sum over the ranks below
   (one ``MPI_Exscan`` for all of them; on one rank alone, the step's own
   ``prefix``) and the step plans the pieces of variable size;
4. a second read fills those;
5. with ``verify``, the CRC32 of every section the plan :meth:`covers
   <ReadPlan.cover>` is compared with the one expected: one
   ``MPI_Allreduce(MPI_BXOR)`` of every rank's terms (:mod:`amrckpt._crc`).

No rank raises an error of its own pieces in between: it takes part in
every collective call, and its error is kept in :attr:`ReadPlan.error` for
the caller's single agreement.  The plan is data; an executor of another
strategy (contiguous runs, aggregation) plugs in by implementing
:class:`PlanExecutor`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .._crc import CHUNK_NBYTES, SectionCrc
from ..comm import Call, Comm, current_call
from ..errors import AmrckptError, ChecksumError, ScdaCountError
from . import _backend
from ._access import FileAccess, open_source
from ._backend import ByteSource
from ._io import byte_view, open_read, os_error, pread, preadv

__all__ = ["GatheredExecutor", "LocalExecutor", "LocalFile", "PlanExecutor", "ReadPlan", "checksum_error"]

Read = Callable[[int, int], bytes]
"""``read(offset, nbytes)``: exactly ``nbytes`` bytes of the file from byte ``offset``."""


def checksum_error(name: str, offset: int, end: int | None, path: str) -> ChecksumError:
    """Return the error for a section whose bytes do not match their CRC32 (section, offset, end attached). Not collective."""
    where = f"bytes {offset}..{end}" if end is not None else f"at byte {offset}"
    err = ChecksumError(f"{path!r}: section {name!r} ({where}) does not match its CRC32: the file is damaged")
    err.section, err.offset, err.end = name, offset, end if end is not None else -1
    return err


@dataclass
class _Covered:
    name: str
    offset: int
    end: int
    crc32: int
    crc: SectionCrc


@dataclass
class _Scan:
    local: Callable[[], int]
    then: Callable[[int], None]
    prefix: Callable[[Read], int] | None
    value: int | None = 0


@dataclass
class ReadPlan:
    """What this rank reads of one file: pieces, prefix-sum steps and the sections whose CRC32 is checked.

    Planning is not collective; every rank plans the same sections (the
    same :meth:`cover` calls, in the same order) and its own pieces.  Not
    thread-safe.

    Attributes
    ----------
    path : str
        Names the file in messages.
    verify : bool
        CRC every byte read and compare each covered section with its CRC32.
    file_size : int or None
        The file's size, if known: a piece past it is this rank's
        ScdaCountError, found before anything is read (MPI-IO does not
        report a read past the end through a file view).
    nbytes : int
        The bytes of every section covered (the same on every rank): past
        ``MAX_CALL_NBYTES``, a collective read asks every rank how many
        bytes it reads (one more allreduce per read).
    error : BaseException or None
        This rank's first error (a read that failed, sizes that do not fit),
        or the CRC32 mismatch of a section (on every rank).
    checked : list of str
        The sections whose CRC32 matched.
    compares_sections : bool
        Whether the CRC32 of every covered section is compared when the plan
        runs (a collective plan: its ranks read every section whole).  False
        for a range read on one rank (:class:`LocalExecutor`), which may read
        a section in part: decoders then keep their own checks (the Adler-32
        of each zlib stream), since no CRC32 vouches for the bytes.
    """

    path: str
    verify: bool = True
    file_size: int | None = None
    compares_sections: bool = True
    nbytes: int = 0
    error: BaseException | None = None
    checked: list[str] = field(default_factory=list)
    _pieces: list[tuple[int, memoryview]] = field(default_factory=list)
    _covered: dict[int, _Covered] = field(default_factory=dict)
    _scans: list[_Scan] = field(default_factory=list)
    _todo: dict[int, tuple[SectionCrc, memoryview]] = field(default_factory=dict)  # by file offset
    _read_failed: bool = False

    # -- planning (not collective) ----------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        """Record this rank's first error; the rank still takes part in every collective call."""
        if self.error is None:
            self.error = exc

    def cover(self, name: str, offset: int, end: int, crc32: int, known: Sequence[tuple[int, int, int]] = ()) -> None:
        """Check the CRC32 of the section ``name`` at bytes ``offset .. end`` against ``crc32`` (with ``verify``).

        Every rank covers the same sections.  ``known`` are pieces
        ``(offset, nbytes, crc)`` whose CRC32 this rank knows without reading
        them in the plan (the headers and paddings the root read); the
        pieces of all ranks must partition the section.  Covering a section
        twice changes nothing.
        """
        if offset in self._covered:
            return
        crc = SectionCrc()
        for off, n, c in known:
            crc.add_crc(off, n, c)
        self._covered[offset] = _Covered(name, offset, end, crc32, crc)
        self.nbytes += end - offset

    def read(self, section: int, offset: int, buf: Any, *, crc: bool = True) -> None:
        """Fill ``buf`` (any writable buffer) from file byte ``offset`` in the next read.

        ``section`` is the offset of the covered section the bytes belong
        to; ``crc=False`` for bytes another rank covers as well (the head of
        a chunk that starts on a rank below).
        """
        mv = byte_view(buf, "buffer")
        if not mv.nbytes:
            return
        check = self.verify and crc
        step = CHUNK_NBYTES
        # A large piece is read (and CRC'd) in parts: the helper thread CRCs one while the next is read.
        parts = (
            [(offset + k, mv[k : k + step]) for k in range(0, mv.nbytes, step)]
            if check and mv.nbytes > 2 * step
            else [(offset, mv)]
        )
        self._pieces.extend(parts)
        if check:
            c = self._covered[section].crc
            for off, part in parts:
                self._todo[off] = (c, part)

    def scan(self, local: Callable[[], int], then: Callable[[int], None], prefix: Callable[[Read], int] | None = None) -> None:
        """After the first read: ``local()`` gives this rank's sum (of sizes, of counts); ``then(before)`` plans the second read.

        ``before`` is the sum of ``local()`` over the ranks below this one
        (one exscan for every step of the plan).  On one rank alone
        (:class:`LocalExecutor`) it is ``prefix(read)``: the same sum over
        the elements before this rank's first, read with ``read``.  ``then``
        does not run where ``local`` raised.
        """
        self._scans.append(_Scan(local, then, prefix))

    # -- what executors call ----------------------------------------------------------------------------

    def take_pieces(self) -> list[tuple[int, memoryview]]:
        """Return the pieces planned since the last call (the next read's); none if one lies past the end of the file.

        A piece past :attr:`file_size` is this rank's ScdaCountError (:meth:`read_failed`).
        """
        pieces, self._pieces = self._pieces, []
        end = max((off + b.nbytes for off, b in pieces), default=0)
        if self.file_size is not None and end > self.file_size and not self._read_failed:
            start = min(off for off, b in pieces if off + b.nbytes > self.file_size)
            self.read_failed(
                ScdaCountError(f"file {self.path!r} ends at byte {self.file_size}: bytes {start}..{end} were requested")
            )
        return [] if self._read_failed else pieces

    def crc_read(self, pieces: Sequence[tuple[int, memoryview]] | None = None, *, now: bool = False) -> None:
        """CRC pieces just read in the helper thread (while the caller plans and reads on): ``pieces``, or all read so far.

        With ``now``, here instead: for the last read of a plan whose caller
        waits for the CRC32s at once (no hand-over to the helper thread and back).
        """
        if pieces is None:
            todo, self._todo = self._todo, {}
            items = list(todo.items())
        else:
            items = [(off, got) for off, _ in pieces if (got := self._todo.pop(off, None)) is not None]
        for off, (crc, mv) in items:
            if now:
                crc.add(off, mv)
            else:
                crc.add_later([(off, mv)])

    def read_failed(self, exc: BaseException) -> None:
        """Record that this rank's read failed: its pieces hold nothing, the next steps are skipped."""
        self.fail(exc)
        self._read_failed = True
        self._todo = {}

    @property
    def failed_read(self) -> bool:
        """Whether a read of this rank failed."""
        return self._read_failed

    def try_(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """Run ``fn``; on an exception keep it (:meth:`fail`) and return ``default``."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - agreed on by the caller
            self.fail(exc)
            return default

    @property
    def scans(self) -> list[_Scan]:
        """The prefix-sum steps planned, in order."""
        return self._scans

    def release(self) -> None:
        """Drop the prefix-sum steps once run: their closures refer to the plan and to the buffers they filled.

        Without this the plan and its steps form a reference cycle that
        keeps every array read alive until Python's cyclic collector runs
        (a second load would allocate fresh pages beside the first's).
        """
        self._scans = []

    def terms(self) -> list[tuple[_Covered, int]]:
        """Return this rank's CRC32 term of every covered section, in file order (0 where it cannot be computed)."""
        out = []
        for c in sorted(self._covered.values(), key=lambda c: c.offset):
            out.append((c, self.try_(functools.partial(c.crc.term, c.end), 0)))
        return out

    def piece_crcs(self) -> dict[int, list[tuple[int, int, int]]]:
        """Return, by covered section (its first byte), ``(offset, nbytes, crc32)`` of each piece CRC'd.

        The pieces read with ``crc=True`` (with :attr:`verify`) and the
        ``known`` pieces given to :meth:`cover`, once the helper thread has
        CRC'd them.  A reader of ranges keeps them to check a section it
        reads in many plans, without reading it again.  Not collective.
        """
        return {off: c.crc.known() for off, c in sorted(self._covered.items())}

    def compare_whole(self) -> None:
        """Compare the CRC32 of each covered section whose pieces on this rank tile it; leave the others unchecked.

        For a plan run on one rank alone (:class:`LocalExecutor`): a section
        that the plan reads only in part cannot be checked by it (the caller
        combines its :meth:`piece_crcs` over several plans).
        """
        for c in sorted(self._covered.values(), key=lambda c: c.offset):
            pos = c.offset
            for off, n, _ in sorted(c.crc.known()):
                if off != pos:
                    break
                pos += n
            if pos != c.end:
                continue
            if self.try_(functools.partial(c.crc.term, c.end), None) != c.crc32:
                if self.error is None or isinstance(self.error, ValueError):
                    self.error = checksum_error(c.name, c.offset, c.end, self.path)
                return
            if c.name not in self.checked:
                self.checked.append(c.name)

    def compare(self, got: Sequence[int], someone_failed: bool) -> None:
        """Compare the combined CRC32 of each covered section with the expected one; keep the first mismatch.

        The mismatch replaces a rank's own error of values that do not fit
        (damage explains them).  It is no error where a rank's read failed:
        the pieces that rank did not read are missing, and its I/O error is
        the one to raise.
        """
        for c, v in zip(sorted(self._covered.values(), key=lambda c: c.offset), got, strict=True):
            if v != c.crc32:
                if someone_failed:
                    return
                if self.error is None or isinstance(self.error, ValueError):
                    self.error = checksum_error(c.name, c.offset, c.end, self.path)
                return
            if c.name not in self.checked:
                self.checked.append(c.name)


class PlanExecutor(Protocol):
    """Runs a :class:`ReadPlan`: its reads, its prefix sums, its CRC32 comparison.

    :meth:`run` keeps every error in the plan (nothing raises), so that the
    caller agrees once; :meth:`close` releases the file.
    """

    def run(self, plan: ReadPlan) -> None:
        """Read everything ``plan`` asks for (collective for a collective executor)."""
        ...

    def close(self) -> None:
        """Close the file if it was opened (collective for a collective executor)."""
        ...


_AGREE_CALLS_NBYTES = _backend.CONTIGUOUS_NBYTES
"""Plans covering at least this many bytes (those that may hold a large piece) agree on their calls (one allreduce
per read), so that large pieces move by contiguous calls of their own
(:data:`amrckpt.scda._backend.CONTIGUOUS_NBYTES`); smaller plans read in one call through a file view, with no
exchange.  A large piece read through a file view costs ROMIO several times a contiguous read (a load of 1e6 leaves,
21 MB: 36 ms through one view against 10 ms by contiguous calls at P = 1, 26 ms against 4 ms at P = 2)."""


class GatheredExecutor:
    """Runs read plans on every rank of a communicator: two collective reads around one exscan, one CRC32 allreduce.

    The file is opened (``MPI_File_open``; only collective reads follow)
    by the first :meth:`run` that reads anything, and closed by
    :meth:`close`.  Every method is collective and runs inside a
    collective call (:func:`amrckpt.comm.collective`); every rank makes the
    same collective calls whatever its errors, since the sections covered
    and their sizes are the same on every rank.

    Parameters
    ----------
    path : str
        The file.
    comm : Comm
        The communicator.
    access : FileAccess, optional
        Backend and MPI-IO hints.
    """

    def __init__(self, path: str, comm: Comm, access: FileAccess | None = None) -> None:
        self.path = path
        self.comm = comm
        self.access = FileAccess() if access is None else access
        self._backend: ByteSource | None = None

    def _call(self) -> Call:
        call = current_call(self.comm)
        assert call is not None, "GatheredExecutor.run outside a collective call"
        return call

    def run(self, plan: ReadPlan) -> None:
        """Read every piece of ``plan`` on every rank: read, exscan, read, CRC32 allreduce. Collective."""
        if plan.nbytes and self._backend is None:
            self._backend = open_source(self.path, self.comm, access=self.access)  # agrees
        self._phase(plan)
        if plan.scans:
            sums = []
            for s in plan.scans:  # a field whose sizes do not fit is not read on; the others are
                s.value = plan.try_(s.local) if not plan.failed_read else None  # no sizes from a failed read
                sums.append(s.value or 0)
            below = self._call().reduction("read: offsets").sum("sizes", sums).below().sum("sizes")
            for s, before in zip(plan.scans, below, strict=True):
                if s.value is not None:
                    plan.try_(functools.partial(s.then, before))
            self._phase(plan)
        if plan.verify and plan.nbytes:
            terms = plan.terms()
            # One more word: nonzero if a rank's read failed (a 32-bit odd mix of its rank: XORs of several cancel
            # with probability 2**-32).  Then the sections it did not read cannot match, and its error is the one to raise.
            failed = ((self.comm.rank + 1) * 0x9E3779B1 | 1) & 0xFFFFFFFF if plan.failed_read else 0
            words = np.array([t for _, t in terms] + [failed], dtype=np.uint32)
            *got, someone = (int(v) for v in self._call().allreduce_array(words, "bxor"))
            plan.compare(got, bool(someone))
        plan.release()

    def _phase(self, plan: ReadPlan) -> None:
        """Read the pieces planned so far: in one collective read, or (a large plan) one per large piece.

        A plan of :data:`_AGREE_CALLS_NBYTES` or more is read in groups,
        each of small pieces and at most one large one (a part of at most
        :data:`amrckpt._crc.CHUNK_NBYTES` of a large piece), as many groups
        on every rank as on the rank with the most (one allreduce agrees);
        the helper thread CRCs each group while the next is read.  A backend
        that ``reports_filled`` (a node cache's pieces, read in one call)
        hands over each part as soon as it is filled, to the same effect.
        """
        pieces = plan.take_pieces()
        if self._backend is None:
            return  # nothing covered: nothing planned on any rank
        groups, nrounds, ncontig = [pieces], 1, 0
        # Large: the largest rank decides the calls (plan.nbytes and the backend are the same on every rank).
        caps = _backend.capabilities_of(self._backend)
        if plan.nbytes >= _AGREE_CALLS_NBYTES and caps.collective_io:
            groups = _groups(pieces)
            mine = np.array(
                [
                    max((sum(b.nbytes for _, b in g) for g in groups), default=0),
                    len(groups),
                    max((_backend.contiguous_calls(g) for g in groups), default=0),
                ],
                dtype=np.int64,
            )
            most = self._call().allreduce_array(mine, "max")
            nrounds, ncontig = max(1, -(-int(most[0]) // _backend.MAX_CALL_NBYTES)), int(most[2])
            groups += [[] for _ in range(int(most[1]) - len(groups))]
        for group in groups:
            todo = [] if plan.failed_read else group  # after a failed read, this rank joins the others' calls with nothing
            try:
                if caps.reports_filled:  # a node cache's pieces: each CRC'd once copied
                    self._backend.read_gathered(todo, nrounds, filled=plan.crc_read)  # type: ignore[call-arg]
                elif ncontig:
                    self._backend.read_gathered(todo, nrounds, ncontig)
                else:
                    self._backend.read_gathered(todo, nrounds)
            except Exception as exc:  # noqa: BLE001 - agreed on by the caller
                plan.read_failed(exc)
                continue
            plan.crc_read(todo)

    def close(self) -> None:
        """Close the file if a plan opened it; its errors are kept by the open collective call. Collective."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()


def _groups(pieces: Sequence[tuple[int, memoryview]]) -> list[list[tuple[int, memoryview]]]:
    """Split pieces, in file order, into groups that each end with the next piece of :data:`CONTIGUOUS_NBYTES` or more."""
    out: list[list[tuple[int, memoryview]]] = []
    cur: list[tuple[int, memoryview]] = []
    for off, b in sorted(pieces, key=lambda p: p[0]):
        cur.append((off, b))
        if b.nbytes >= _backend.CONTIGUOUS_NBYTES:
            out.append(cur)
            cur = []
    if cur or not out:
        out.append(cur)
    return out


class LocalFile:
    """A file opened for reading on this rank alone (POSIX ``pread``/``preadv``); a context manager. Not collective.

    For what one rank reads by itself: the root's metadata, a tool's leaf
    ranges (:class:`LocalExecutor`).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    short : type of AmrckptError, optional
        Raised where the file ends before the bytes asked for
        (default :class:`~amrckpt.errors.ScdaCountError`).

    Raises
    ------
    ScdaIOError
        If the file cannot be opened (with its errno), or is not a regular
        file: a symbolic link (never followed), a FIFO (never waited on), a
        device, a directory (:func:`~amrckpt.scda.open_read`).
    """

    def __init__(self, path: str | os.PathLike[str], short: type[AmrckptError] = ScdaCountError) -> None:
        self.path = os.fspath(path)
        self._short = short
        self._fd = open_read(self.path)

    @property
    def size(self) -> int:
        """The file's size in bytes (``fstat``).

        Raises
        ------
        ScdaIOError
            On this rank, if ``fstat`` fails (with its errno).
        """  # noqa: DOC501 (os_error() returns the ScdaIOError)
        try:
            return os.fstat(self._fd).st_size
        except OSError as exc:
            raise os_error(exc, self.path, "cannot get the size of") from exc

    def read(self, offset: int, nbytes: int) -> bytes:
        """Return exactly ``nbytes`` bytes from byte ``offset``.

        Short reads are continued until the request is done or the file
        ends (:func:`amrckpt._files.pread_exact`).

        Raises
        ------
        AmrckptError
            ``short`` where the file ends first; :class:`~amrckpt.errors.ScdaIOError` where ``pread`` fails.
        """
        return pread(self._fd, self.path, offset, nbytes, self._short)

    def readv(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Fill every ``(offset, buffer)`` piece, one ``preadv`` per contiguous run."""
        preadv(self._fd, self.path, pieces)

    def close(self) -> None:
        """Close the file (twice is a no-op).

        Raises
        ------
        ScdaIOError
            If ``close(2)`` fails (with its errno; the descriptor is released all the same).
        """  # noqa: DOC501 (os_error() returns the ScdaIOError)
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                os.close(fd)
            except OSError as exc:
                raise os_error(exc, self.path, "cannot close") from exc

    def __enter__(self) -> LocalFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor:
    """Runs read plans on this rank alone: the reads with ``preadv``, each prefix sum by its step's own ``prefix``.

    Not collective.  For ranges of a partitioned section that one rank
    reads by itself (a viewer streaming a file); a covered section is
    checked only if the plan reads all of it (:meth:`ReadPlan.compare_whole`),
    the others by the caller from :meth:`ReadPlan.piece_crcs`.

    Parameters
    ----------
    file : LocalFile
        The open file.
    """

    def __init__(self, file: LocalFile) -> None:
        self.file = file

    def run(self, plan: ReadPlan) -> None:
        """Read every piece of ``plan`` on this rank. Not collective."""
        self._phase(plan, last=not plan.scans)
        if plan.scans:
            for s in plan.scans:
                if plan.failed_read:
                    break
                s.value = plan.try_(s.local)
                if s.value is None:
                    continue
                before = plan.try_(functools.partial(s.prefix, self.file.read)) if s.prefix is not None else 0
                if before is not None:
                    plan.try_(functools.partial(s.then, before))
            self._phase(plan, last=True)
        if plan.verify and not plan.failed_read:
            plan.compare_whole()
        plan.release()

    def _phase(self, plan: ReadPlan, last: bool) -> None:
        pieces = plan.take_pieces()
        if plan.failed_read:
            return
        try:
            self.file.readv(pieces)
        except Exception as exc:  # noqa: BLE001 - kept in the plan
            plan.read_failed(exc)
            return
        plan.crc_read(now=last)  # the last read's CRC32s are waited for at once: computed on this thread

    def close(self) -> None:
        """Nothing to close: the file is the caller's."""
