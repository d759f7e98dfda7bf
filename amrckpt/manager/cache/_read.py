"""A restart straight from the node caches: each rank reads the file's bytes from its pieces (SCR's restart from cache).

A cached step holds, for every rank, the exact ``(offset, bytes)`` pieces of
the final scda file that the rank would have written to the shared file
(:mod:`amrckpt.manager.cache`).  A load on the same process count and node
layout reads the step through them, with no shared file:

- :class:`CachedFile` serves the root's own reads (the file header, the
  section headers and the index it wrote; the data paddings that end the
  sections, which the rank of a section's last element wrote, are sent to
  the root first: :func:`root_extra`);
- :class:`CachedBackend` serves the load's collective reads: each rank
  copies what its pieces hold, and the bytes it lacks (a compressed chunk
  of its leaves that a neighbour wrote, leaves of another rank under
  another partition) are sent by the ranks that hold them.

Bytes that no rank holds raise :class:`NotInPiecesError`, agreed by the
load on every rank; the manager then flushes the step and loads it from
the shared directory.  Every byte is checked against its CRC32 by the load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._crc import CHUNK_NBYTES
from ...comm import Call, Comm
from ...errors import ManagerError, ScdaUsageError
from ...scda import ByteSource, Capabilities, FileAccess
from ._pieces import Pieces

MAX_PADDING = 38  # scda's largest data padding (paper eq. 2: 7 <= p <= 38)

__all__ = ["CachedBackend", "CachedFile", "NotInPiecesError", "PieceMap", "pieces_access", "root_extra"]


class NotInPiecesError(ManagerError):
    """A load asked for bytes of the file that no rank's cached pieces hold (the step is incomplete)."""


class PieceMap:
    """One rank's pieces of a cached step, sorted by offset, as a map from file bytes to mapped bytes. Not collective.

    Parameters
    ----------
    pieces : Pieces
        This rank's pieces (its own pieces file, or a partner's copy), mapped.
    size : int
        The size of the file in bytes (the largest end of any rank's
        pieces: the same on every rank, found by one allreduce).
    path : str
        The name in messages.
    rank : int
        This rank (in messages).
    extra : sequence of (int, bytes), optional
        Other ranks' pieces that this rank reads too (the root: the data
        paddings at the ends of sections, written by the rank of the last
        element; :func:`root_extra`).
    """

    def __init__(self, pieces: Pieces, size: int, path: str, rank: int, extra: Sequence[tuple[int, bytes]] = ()) -> None:
        self.size = int(size)
        self.path = path
        self.rank = rank
        given = [*pieces.pieces, *((o, memoryview(b)) for o, b in extra)]
        ordered = sorted(given, key=lambda p: p[0])  # one entry per piece (a few per section): not per element
        self._views = [memoryview(b).cast("B") for _, b in ordered]
        self._starts = np.fromiter((o for o, _ in ordered), dtype=np.int64, count=len(ordered))
        self._ends = self._starts + np.fromiter((v.nbytes for v in self._views), dtype=np.int64, count=len(ordered))

    def fill(self, offset: int, buf: Any) -> list[tuple[int, int]]:
        """Copy the file's bytes ``[offset, offset + len(buf))`` that this rank holds into ``buf``; return the others.

        Returns
        -------
        list of (int, int)
            The ``(offset, nbytes)`` runs of the range that are not among
            this rank's pieces (empty: all copied).
        """
        out = memoryview(buf).cast("B")
        pos, n = 0, out.nbytes
        lacking: list[tuple[int, int]] = []
        i = int(np.searchsorted(self._ends, offset, side="right"))  # the first piece ending after ``offset``
        while pos < n:  # over the pieces that cover the range (adjacent pieces are joined): a few
            at = offset + pos
            if i >= len(self._views):
                lacking.append((at, n - pos))
                break
            if self._starts[i] > at:
                k = min(n - pos, int(self._starts[i]) - at)
                lacking.append((at, k))
                pos += k
                continue
            k = min(n - pos, int(self._ends[i]) - at)
            s = at - int(self._starts[i])
            out[pos : pos + k] = self._views[i][s : s + k]
            pos += k
            i += 1
        return lacking

    def held(self, offset: int, nbytes: int) -> list[tuple[int, memoryview]]:
        """Return the parts of the file's bytes ``[offset, offset + nbytes)`` among this rank's pieces (views)."""
        got: list[tuple[int, memoryview]] = []
        end = offset + nbytes
        i = int(np.searchsorted(self._ends, offset, side="right"))
        while i < len(self._views) and self._starts[i] < end:
            a, b = max(offset, int(self._starts[i])), min(end, int(self._ends[i]))
            got.append((a, self._views[i][a - int(self._starts[i]) : b - int(self._starts[i])]))
            i += 1
        return got

    def not_held(self, lacking: Sequence[tuple[int, int]]) -> NotInPiecesError:
        """Return the error for bytes that no rank served."""
        at, n = lacking[0]
        return NotInPiecesError(
            f"{self.path}: bytes {at}..{at + n} of the file are not among the cached pieces of rank {self.rank} "
            "or of any other rank (the step is incomplete)"
        )

    def close(self) -> None:
        """Drop the views into the mapping (the :class:`Pieces` owner unmaps it)."""
        self._views = []


def _pack(parts: Sequence[tuple[int, memoryview]]) -> bytes:
    """``(offset, bytes)`` parts as one message: count, table of (offset, nbytes) uint64, the bytes."""
    table = np.array([(o, v.nbytes) for o, v in parts], dtype="<u8").reshape(-1, 2)
    return b"".join([np.array([len(parts)], dtype="<u8").tobytes(), table.tobytes(), *(bytes(v) for _, v in parts)])


def _unpack(raw: bytes) -> list[tuple[int, memoryview]]:
    """Invert :func:`_pack`."""
    if not raw:
        return []
    view = memoryview(raw)
    n = int(np.frombuffer(view[:8], dtype="<u8")[0])
    table = np.frombuffer(view[8 : 8 + 16 * n], dtype="<u8").reshape(-1, 2)
    out, at = [], 8 + 16 * n
    for o, k in table.tolist():
        out.append((int(o), view[at : at + int(k)]))
        at += int(k)
    return out


class CachedFile:
    """A rank's own reads of a cached step (the root's metadata, leaf ranges), as :class:`amrckpt.scda.LocalFile` reads a file.

    Not collective.  ``read`` and ``readv`` raise :class:`NotInPiecesError`
    for bytes that are not among this rank's pieces.
    """

    def __init__(self, pieces: PieceMap) -> None:
        self._map = pieces
        self.path = pieces.path

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self._map.size

    def read(self, offset: int, nbytes: int) -> bytes:
        """Return exactly ``nbytes`` bytes from byte ``offset``."""
        buf = bytearray(nbytes)
        self.readv([(offset, memoryview(buf))])
        return bytes(buf)

    def readv(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Fill every ``(offset, buffer)`` piece (raises :class:`NotInPiecesError` for bytes this rank does not hold)."""
        for off, b in pieces:
            lacking = self._map.fill(off, b)
            if lacking:
                raise self._map.not_held(lacking)

    def close(self) -> None:
        """Nothing to close (the pieces are the manager's)."""


class CachedBackend:
    """A :class:`~amrckpt.scda.ByteSource` over one rank's pieces of a cached step (read only): no collective call in it.

    Every rank reads what it asks for from its own :class:`PieceMap`;
    ``nrounds`` and ``ncontiguous`` (the shared file's collective calls) do not apply.
    """

    # A read plan's phase in one call (each call exchanges what ranks lack); read_gathered hands each piece filled
    # from this rank's own to ``filled`` at once.
    capabilities = Capabilities(collective_io=False, reports_filled=True)

    def __init__(self, pieces: PieceMap, comm: Comm) -> None:
        self.comm = comm
        self.path = pieces.path
        self._map = pieces

    def read(self, pieces: Sequence[tuple[int, Any]], bulk: tuple[int, Any] | None, max_bulk_nbytes: int) -> None:
        """Fill the pieces and the bulk run from this rank's pieces only (the scda reader's independent reads).

        Raises
        ------
        NotInPiecesError
            Some bytes asked for are not among them.
        """
        CachedFile(self._map).readv([*pieces, *([bulk] if bulk is not None else [])])  # as this rank's own reads

    def read_gathered(
        self,
        pieces: Sequence[tuple[int, Any]],
        nrounds: int,
        ncontiguous: int = 0,
        filled: Callable[[list[tuple[int, Any]]], None] | None = None,
    ) -> None:
        """Fill the pieces: from this rank's pieces, and the bytes other ranks hold from them. Collective.

        ``nrounds`` and ``ncontiguous`` (the shared file's calls) do not
        apply.  ``filled``, if given, takes the pieces filled whole from
        this rank's own as soon as about :data:`amrckpt._crc.CHUNK_NBYTES`
        of them are (a read plan CRCs them in the helper thread while the
        next are copied); the caller still gets every piece when the call
        returns.  A rank lacks bytes where a compressed chunk of its leaves
        was written by a neighbour, or under another partition than the
        save's: the ranges lacking are allgathered (a few per rank), the
        ranks holding them send them, one ``sendrecv`` per rank distance
        needed (one allreduce of P bytes finds them; usually the
        neighbours).  Restart only: never on a save's path.

        Raises
        ------
        NotInPiecesError
            Some bytes asked for are on no rank (after every rank took part).
        """
        comm, me, P = self.comm, self.comm.rank, self.comm.size
        lacking: list[tuple[int, int, memoryview]] = []  # (file offset, nbytes, where they go)
        error: BaseException | None = None  # raised after taking part in every collective call (the Backend contract)
        done: list[tuple[int, Any]] = []
        done_nbytes = 0
        try:
            for off, b in pieces:
                view = memoryview(b).cast("B")
                missing = self._map.fill(off, view)
                lacking.extend((at, n, view[at - off : at - off + n]) for at, n in missing)
                if filled is not None and not missing:
                    done.append((off, b))
                    done_nbytes += view.nbytes
                    if done_nbytes >= CHUNK_NBYTES:
                        filled(done)
                        done, done_nbytes = [], 0
            if done and filled is not None:
                filled(done)
        except Exception as exc:  # noqa: BLE001 - raised below, after the exchanges
            error, lacking = exc, []
        if P > 1:
            self._exchange(lacking, comm, me, P)
        if error is not None:
            raise error
        still = [(a, n) for a, n, dst in lacking if dst is not None]
        if still:
            raise self._map.not_held(still)

    def _exchange(self, lacking: list[tuple[int, int, Any]], comm: Comm, me: int, P: int) -> None:
        """Receive the ``lacking`` ranges from the ranks that hold them, and send what others lack. Collective.

        One allgather of the ranges lacking, one allreduce of P bytes (the
        rank distances needed), one ``sendrecv`` per distance.  A range
        filled whole is marked by setting its destination to None.
        """
        asked = comm.allgather([(a, n) for a, n, _ in lacking])
        send: dict[int, list[tuple[int, memoryview]]] = {}
        for q, ranges in enumerate(asked):
            if q != me and ranges:
                got = [part for a, n in ranges for part in self._map.held(a, n)]
                if got:
                    send[q] = got
        mask = np.zeros(P, dtype=np.uint8)
        mask[[(q - me) % P for q in send]] = 1
        shifts = np.flatnonzero(comm.allreduce_array(mask, "max")).tolist()
        covered = [np.zeros(n, dtype=bool) for _, n, _ in lacking]
        for d in shifts:
            raw = comm.sendrecv(_pack(send.get((me + d) % P, [])), (me + d) % P, (me - d) % P)
            for at, part in _unpack(raw or b""):
                for j, (a, n, dst) in enumerate(lacking):  # a few ranges: not per element
                    lo, hi = max(a, at), min(a + n, at + part.nbytes)
                    if lo < hi:
                        dst[lo - a : hi - a] = part[lo - at : hi - at]
                        covered[j][lo - a : hi - a] = True
        for j, c in enumerate(covered):
            if c.all():
                a, n, _ = lacking[j]
                lacking[j] = (a, n, None)

    def file_size(self) -> int:
        """Return the file's size in bytes (the same on every rank)."""
        return self._map.size

    def close(self, size: int | None = None) -> None:
        """Nothing to close (the pieces are the manager's)."""


def root_extra(call: Call, pieces: Pieces) -> tuple[int, list[tuple[int, bytes]]]:
    """Return the file's size and, on the root, the other ranks' pieces it reads when opening the file. Collective.

    The root reads the headers it wrote and, to check their CRC32s, the
    data paddings (at most :data:`MAX_PADDING` (38)
    bytes) that end the array sections, which the rank of a section's last
    element wrote: every rank's pieces of at most that size go to the root
    (one allgather of a few dozen bytes per section and rank, once per
    restart), with the size (one allreduce).
    """
    size = int(call.reduction("cache: file size").max("end", pieces.end).run().max("end"))
    small = [] if call.comm.rank == 0 else [(o, bytes(b)) for o, b in pieces.pieces if b.nbytes <= MAX_PADDING]
    got = call.allgather(small, what="cache: the paddings to the root")
    return size, [p for some in got[1:] for p in some] if call.comm.rank == 0 else []


def pieces_access(pieces: Pieces, size: int, path: str, rank: int, extra: Sequence[tuple[int, bytes]] = ()) -> FileAccess:
    """Return the :class:`~amrckpt.scda.FileAccess` through which :func:`amrckpt.load` reads a cached step. Not collective.

    Both the collective reads (``backend``) and this rank's own reads
    (``local_file``: the root's metadata) are served from ``pieces`` (and ``extra``, see :class:`PieceMap`).
    """
    m = PieceMap(pieces, size, path, rank, extra)

    def open_cached(path: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> ByteSource:
        if mode != "r":
            raise ScdaUsageError("a cached step is read only")
        return CachedBackend(m, comm)

    def open_local(path: str, short: Any = None) -> CachedFile:
        return CachedFile(m)

    return FileAccess(backend=open_cached, local_file=open_local)
