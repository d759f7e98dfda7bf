"""CRC32 of bytes that many ranks hold in pieces, combined without gathering them.

CRC32 (zlib, RFC 1952) is affine in the message, which zlib's
``crc32_combine(crc1, crc2, len2)`` exploits: the CRC of ``A || B`` is
``crc(A) * x**(8 len(B)) mod p  XOR  crc(B)``.  Unrolled over the pieces
``P_0 .. P_k`` of a section, the section's CRC is the XOR of
``crc(P_i) * x**(8 a_i) mod p``, where ``a_i`` is the number of bytes after
piece i to the end of the section.  Each rank computes that term for each
piece it holds, XORs them, and one ``MPI_Allreduce(MPI_BXOR)`` gives the CRC of
every section: O(1) numbers per rank and section, independent of how the
bytes are partitioned.  The polynomial arithmetic is zlib-ng's ``crc32_combine``
(in C, about 100 times as fast as the same GF(2) arithmetic written in Python,
with identical results);
the CRC of a piece is ISA-L's where ``isal`` is installed (the ``fast`` extra),
else zlib-ng's (both SIMD, both the same CRC-32).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from zlib_ng import zlib_ng

from ._threads import Pool

try:  # ISA-L's CRC32 (the `fast` extra): the same CRC, 1.4 x zlib-ng's speed here; both release the GIL
    from isal import isal_zlib as _isal

    _crc32 = _isal.crc32
    CRC32_LIBRARY = "isal"
except ImportError:  # pragma: no cover - without the extra
    _crc32 = zlib_ng.crc32
    CRC32_LIBRARY = "zlib-ng"

_combine = zlib_ng.crc32_combine

__all__ = ["LaterCrc", "SectionCrc", "crc32", "crc32_combine", "crc32_of_pieces", "pool", "shift"]

_POOL: Pool | None = None

#: Bytes per round when a large section is written or read with checksums: the helper thread CRCs
#: each round while the next one moves, on bytes still in the cache (the L3 of a server core holds several).
CHUNK_NBYTES = 16 << 20

#: Below this many bytes, :meth:`SectionCrc.add_later` CRCs at once: zlib-ng CRCs 64 KiB in a few
#: microseconds, about what a hand-over to the helper thread and back costs on an idle core.
INLINE_NBYTES = 64 << 10


def pool() -> Pool:
    """Return the helper thread that CRCs bytes while the caller moves more bytes (ISA-L and zlib-ng release the GIL)."""
    global _POOL
    if _POOL is None:
        _POOL = Pool(1, "amrckpt-crc")
    return _POOL


def crc32(data: Any, value: int = 0) -> int:
    """CRC32 of a buffer (ISA-L's where ``isal`` is installed, else zlib-ng's), continuing from ``value``. Not collective."""
    return int(_crc32(data, value)) & 0xFFFFFFFF


def shift(crc: int, nbytes: int) -> int:
    """Return ``crc * x**(8 nbytes) mod p``: the term of ``crc`` followed by ``nbytes`` more bytes.

    zlib-ng's ``crc32_combine(crc, 0, nbytes)`` (zlib's ``multmodp(x2nmodp(nbytes, 3), crc)``), in C.
    """
    if nbytes == 0 or crc == 0:
        return crc
    return int(_combine(crc, 0, nbytes))


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32 of ``A || B`` from ``crc(A)``, ``crc(B)`` and ``len(B)`` (zlib ``crc32_combine``, zlib-ng's)."""
    return int(_combine(crc1, crc2, len2))


class LaterCrc:
    """The CRC32 of a buffer handed to the helper thread; whoever needs it first and finds it not started computes it.

    :meth:`result` cancels the helper's task if it has not started (then
    CRCs the bytes in the calling thread, which would only have waited) or
    waits for it: with one helper thread, a caller waiting for several
    CRC32s works on the next while the helper finishes the current one.
    """

    __slots__ = ("data", "future")

    def __init__(self, data: Any) -> None:
        self.data = data
        self.future: Future[int] = pool().submit(crc32, data)

    def result(self) -> int:
        """Return the CRC32 (from the helper thread, or computed here if it had not started)."""
        if self.future.cancel():
            return crc32(self.data)
        return self.future.result()


class SectionCrc:
    """The pieces of one section that this rank holds, for a combined CRC32.

    Add each piece with its absolute file offset; :meth:`term` gives this
    rank's XOR term once the section's end is known.  The pieces of all ranks
    must partition the section exactly (no gaps, no overlaps).
    """

    __slots__ = ("complete", "futures", "pending", "pieces")

    def __init__(self) -> None:
        self.pieces: list[tuple[int, int, int]] = []  # (end offset of the piece, its crc, its bytes)
        self.complete = True
        self.futures: list[Future[None]] = []
        self.pending: list[tuple[int, int, LaterCrc]] = []  # (end offset, its bytes, its crc to come)

    def add(self, offset: int, data: Any) -> None:
        """Add the piece ``data`` that starts at file byte ``offset``."""
        n = memoryview(data).nbytes
        if n:
            self.pieces.append((offset + n, crc32(data), n))

    def add_all(self, pieces: Iterable[tuple[int, Any]]) -> None:
        """Add pieces ``(offset, data)``."""
        for offset, data in pieces:
            self.add(offset, data)

    def add_later(self, pieces: list[tuple[int, Any]]) -> Future[None] | None:
        """CRC pieces in the helper thread (the buffers must stay unchanged until :meth:`wait`).

        Pieces of fewer than :data:`INLINE_NBYTES` bytes in all are CRC'd
        here and now (None is returned): handing them to the thread costs
        more than the CRC, most of all with more ranks than cores.
        """
        if sum(memoryview(d).nbytes for _, d in pieces) < INLINE_NBYTES:
            self.add_all(pieces)
            return None
        fut = pool().submit(self.add_all, pieces)
        self.futures.append(fut)
        return fut

    def wait(self) -> None:
        """Wait for the pieces handed to the helper thread (re-raising its errors)."""
        futures, self.futures = self.futures, []
        for f in futures:
            f.result()
        pending, self.pending = self.pending, []
        for stop, n, crc in pending:
            self.pieces.append((stop, crc.result(), n))

    def add_crc(self, offset: int, nbytes: int, crc: int | LaterCrc) -> None:
        """Add a piece of ``nbytes`` at ``offset`` whose CRC32 is known, or to come (:class:`LaterCrc`)."""
        if not nbytes:
            return
        if isinstance(crc, LaterCrc):
            self.pending.append((offset + nbytes, nbytes, crc))
        else:
            self.pieces.append((offset + nbytes, crc, nbytes))

    def known(self) -> list[tuple[int, int, int]]:
        """Return ``(offset, nbytes, crc32)`` of every piece added (after :meth:`wait`)."""
        self.wait()
        return [(stop - n, n, c) for stop, c, n in self.pieces]

    def term(self, end: int) -> int:
        """Return this rank's term of the section that ends at ``end``."""
        self.wait()
        # Horner's scheme over the pieces in file order: shift by the distance to the next piece
        # (often one round's length, whose power of x is cached), then by the distance to the end.
        acc, last = 0, None
        for stop, c, _ in sorted(self.pieces):
            acc = (shift(acc, stop - last) if last is not None else 0) ^ c
            last = stop
        return acc if last is None else shift(acc, end - last)


def crc32_of_pieces(bufs: Iterable[tuple[int, Any]], known: Iterable[tuple[int, int, int]], value: int = 0) -> int:
    """CRC32 of the buffers one after the other, reusing the CRC32s already computed of parts of them. Not collective.

    ``bufs``: ``(file offset, bytes)`` in the order they are concatenated;
    ``known``: ``(file offset, nbytes, crc32)`` of file ranges whose CRC32 is
    known (a writer's :meth:`SectionCrc.known`).  A known range inside a
    buffer is combined (``crc32_combine``) instead of read again; the other
    bytes (headers, paddings) are CRC'd.  The result equals ``crc32`` of
    the concatenation continued from ``value``.
    """
    table = {o: (n, c) for o, n, c in known if n}
    starts = sorted(table)
    crc = value
    for off, buf in bufs:
        view = memoryview(buf).cast("B")
        pos, end = off, off + view.nbytes
        while pos < end:  # over the known parts of the buffer: a few per section
            hit = table.get(pos)
            if hit is not None and pos + hit[0] <= end:
                crc = crc32_combine(crc, hit[1], hit[0])
                pos += hit[0]
                continue
            i = bisect.bisect_right(starts, pos)
            stop = min(end, starts[i]) if i < len(starts) else end
            crc = crc32(view[pos - off : stop - off], crc)
            pos = stop
    return crc
