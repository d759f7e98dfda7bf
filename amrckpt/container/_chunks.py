"""Layout ``chunks``: fixed-size values compressed per chunk of K consecutive leaves (shuffle, then deflate).

The field is one V section of ceil(N / K) elements: element j is a zlib
stream (RFC 1950, readable by any zlib) of the values of leaves
``j K .. min((j + 1) K, N) - 1`` after HDF5's byte shuffle (byte b of every
value, then byte b + 1, ...: for an (n, E) array of bytes, its transpose).
Chunk boundaries are global, so the file does not depend on the number of
writing processes; a reader decompresses only the chunks that overlap its
leaves.  Writers encode their chunks in threads, with libdeflate
(``deflate``) or ISA-L (``isal``) where installed, else zlib-ng; the bytes of
a chunk depend on that choice and on the level, not on the partition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from zlib_ng import zlib_ng

from .._threads import default_threads, pool
from ..comm import collective
from ..errors import CheckpointError, ScdaArgumentError
from ..scda import ReadPlan, Share
from ._sections import FieldSource, Section, Span
from ._varray import plan_varray

if TYPE_CHECKING:
    from ._sections import SectionSink

__all__ = ["DEFAULT_CHUNK", "deflate_name", "plan_chunks", "shuffle", "unshuffle", "write_chunks"]

DEFAULT_CHUNK = 16384
"""Leaves per chunk unless the schema says otherwise (128 KiB of float64: a chunk stays in the cache while it is shuffled)."""


def threads() -> int:
    """Threads that encode or decode chunks: the cores this rank has to itself (:func:`amrckpt._threads.default_threads`)."""
    return default_threads()


def _map(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``list(map(fn, items))`` in the shared pool of :func:`threads` threads (serially for one item or one thread)."""
    n = min(len(items), threads())
    return list(pool(n).map(fn, items)) if n > 1 else [fn(x) for x in items]


@functools.cache
def _compressor() -> tuple[str, Callable[[Any, int], Any]]:
    """Return the fastest deflate installed that writes zlib streams no larger than zlib's: libdeflate, ISA-L, else zlib-ng.

    libdeflate's level 1 is ~4x zlib's level 1 and its streams are smaller;
    ISA-L's is faster still but its streams ~10% larger than zlib's on
    shuffled float64 (measured for issue 18), so it comes second.  All
    three release the GIL.
    """
    try:
        import deflate

        return "libdeflate", lambda data, level: deflate.zlib_compress(data, level)
    except ImportError:
        pass
    try:
        from isal import isal_zlib

        # ISA-L has levels 0..3; zlib's 1..9 map onto 1..3.
        return "isal", lambda data, level: bytes(isal_zlib.compress(data, min(3, max(0, (level + 2) // 3))))
    except ImportError:
        pass
    return "zlib-ng", lambda data, level: bytes(zlib_ng.compress(data, level))


@functools.cache
def _decompressor() -> Callable[[Any, int], Any]:
    """Return a zlib-stream decoder given the decoded size: libdeflate where installed (fastest), else zlib-ng.

    The streams and the decoded bytes are bytes-like objects (``bytes`` or
    ``bytearray``), used as they come: no copy.
    """
    try:
        import deflate

        return lambda data, n: deflate.zlib_decompress(data, n)
    except ImportError:
        return lambda data, n: bytes(zlib_ng.decompress(data, bufsize=max(n, 1)))


def deflate_name() -> str:
    """Return the deflate library that encodes chunks here (``isal``, ``libdeflate`` or ``zlib-ng``)."""
    return _compressor()[0]


def shuffle(data: Any, E: int) -> np.ndarray:
    """HDF5's byte shuffle: ``n`` values of ``E`` bytes as their first bytes, then their second bytes, ... ((n E,) uint8)."""
    b = np.frombuffer(data, dtype=np.uint8)
    if E == 1:
        return b
    return np.ascontiguousarray(b.reshape(-1, E).T).reshape(-1)


def unshuffle(data: Any, E: int) -> np.ndarray:
    """Invert :func:`shuffle`: (n, E) uint8, a view of a transpose (copy it where it goes)."""
    b = np.frombuffer(data, dtype=np.uint8)
    return b.reshape(E, -1).T if E > 1 else b.reshape(-1, 1)


def _encode(data: Any, E: int, level: int) -> Any:
    return _compressor()[1](shuffle(data, E), level)


def write_chunks(sink: SectionSink, data: Any, elem_counts: Share, E: int, K: int, user_string: bytes, *, level: int = 1) -> None:
    """Write leaves of ``E`` bytes as a V section of shuffled, deflated chunks of ``K`` leaves. Collective.

    A chunk is encoded by the rank that holds its first leaf.  The leaves
    of a chunk that the next ranks hold (at most K - 1) reach it from
    neighbour to neighbour (:func:`amrckpt.comm.relay_down`: point-to-point,
    each rank sends at most K E bytes to the rank below; a rank whose leaves
    all lie inside one chunk forwards what it received with its own), so
    nothing of size P is sent or allocated.  Collectives: the relay (only
    if some rank's first leaf is inside a chunk: known from a counts list,
    else from ``relay``), one exclusive scan of the compressed sizes (this rank's offset)
    and one allreduce that agrees on errors and gives the totals.

    Parameters
    ----------
    sink : SectionSink
        The scda writer (collective over ``sink.comm``).
    data : bytes-like or numpy.ndarray
        This rank's N_p * E bytes.
    elem_counts : amrckpt.scda.Share
        This rank's share of the leaves (its offset and the total: no P-length list).
    E : int
        Bytes per leaf.
    K : int
        Leaves per chunk.
    user_string : bytes
    level : int, optional
        zlib level (ISA-L: 1..3 mapped to 1, 4..6 to 2, 7..9 to 3).

    Raises
    ------
    ScdaError
        On every rank, as :meth:`ScdaWriter.fwrite_varray`, or the error of
        any rank whose data are not N_p leaves of E bytes.
    """
    comm = sink.comm
    r, P = comm.rank, comm.size
    lo, hi, N = elem_counts.offset, elem_counts.offset + elem_counts.count, elem_counts.total
    relay = P > 1
    first = min(hi, -(-lo // K) * K)  # the first leaf of this rank that starts a chunk (hi if none does)

    def local_view() -> np.ndarray:
        view = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8) if hi > lo else np.zeros(0, np.uint8)
        if view.nbytes != (hi - lo) * E:
            raise ScdaArgumentError(f"chunked data of rank {r}: {view.nbytes} bytes, not {hi - lo} leaves of {E} bytes")
        return view

    def local_chunks(view: np.ndarray, got: bytes | None) -> list[Any]:
        chunks: list[Any] = []
        for a in range(first, hi, K):
            b = min(a + K, N)
            if b <= hi:
                chunks.append(view[(a - lo) * E : (b - lo) * E])
            elif got is not None:  # the last chunk runs into the next ranks' leaves
                if len(got) != (b - hi) * E:
                    raise AssertionError(f"chunks: rank {r} received {len(got)} bytes, not {b - hi} leaves of {E}")
                chunks.append(b"".join([view[(a - lo) * E :].tobytes(), got]))
            else:  # a sender failed (only a failed rank sends nothing): its error, not one of this rank, is agreed on below
                break
        return chunks

    with collective(comm, "write chunks") as call:
        view = call.run(local_view)
        # The relay: rank q sends its leaves before its first chunk start to q - 1 if its first leaf is inside a chunk;
        # it receives the next ranks' if its last chunk runs past its leaves (hi = lo of rank q + 1: the two agree).
        send, receive = lo % K != 0 and lo < N, hi % K != 0 and hi < N
        forward = send and receive and first == hi  # all its leaves lie inside one chunk that started below
        got: bytes | None = None
        if relay:
            head = None if view is None else view[: (first - lo) * E].tobytes()
            got = call.relay_down(head, send=send, receive=receive, forward=forward)
        chunks = call.run(local_chunks, view, got) or []
        enc: list[Any] = call.run(_map, lambda c: _encode(c, E, level), chunks) or []
        sizes = np.fromiter((len(e) for e in enc), dtype=np.uint64, count=len(enc))
        nbytes = int(sizes.sum()) if sizes.size else 0
        below = call.exscan(sums=[nbytes]).sums[0]
        c0, nck = -(-lo // K), -(-hi // K) - -(-lo // K)  # this rank's chunks: those that start among its leaves
        # Totals by maxima: the largest inclusive prefix is the total; the largest count; the last rank with any.
        total, most, last, cmost, clast = call.allreduce(
            maxima=[below + nbytes, nbytes, r if nbytes else 0, nck, r if nck else 0], what="fwrite_varray"
        ).maxima
        sink.fwrite_varray(
            b"".join(enc),
            Share(nck, c0, -(-N // K), cmost, clast),
            sizes,
            Share(nbytes, below, total, most, last),
            user_string,
        )


def _decode_into(out: np.ndarray, c: Any, a: int, b: int, lo: int, hi: int, E: int, what: str) -> None:
    """Decompress chunk of leaves [a, b) and copy its leaves inside [lo, hi) into ``out`` ((hi - lo) * E bytes)."""
    try:
        raw = _decompressor()(c, (b - a) * E)
    except Exception as exc:  # zlib_ng.error: not a (complete) zlib stream
        raise CheckpointError(f"{what}: the chunk of leaves {a}..{b} is not a zlib stream: {exc}") from exc
    if len(raw) != (b - a) * E:
        raise CheckpointError(f"{what}: the chunk of leaves {a}..{b} holds {len(raw)} bytes, not {(b - a) * E}")
    s, t = max(a, lo), min(b, hi)
    dst = out.reshape(-1, E)[s - lo : t - lo]
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(E, -1)[:, s - a : t - a]
    for k in range(E):  # byte plane by byte plane (E copies of t - s bytes): faster than one transposing copy
        dst[:, k] = planes[k]


def plan_chunks(
    src: FieldSource, plan: ReadPlan, sec: Section, span: Span, E: int, K: int, out: np.ndarray, what: str
) -> Callable[[], np.ndarray]:
    """Plan the read of this rank's leaves of a chunked field into ``out`` ((span.count, ...) array); return what decodes them.

    The chunks that start among this rank's leaves are its own (their
    entries and bytes CRC'd here); the one chunk that starts below its
    first leaf, if any, is read too, without its CRC (the rank below covers
    it).  After the plan ran, the returned function decodes the chunks in
    threads and copies this rank's leaves.

    Raises
    ------
    CheckpointError
        If the section does not hold the chunks the manifest describes.
    """
    lo, hi, N = span.offset, span.end, span.N
    if sec.raw.elem_count != -(-N // K):
        raise CheckpointError(f"{what}: the section at byte {sec.entry.offset} is not the chunks the manifest describes")
    c0, c1 = -(-lo // K), -(-hi // K)  # the chunks that start among this rank's leaves
    partial = lo // K if lo % K and hi > lo else None
    got = plan_varray(src, plan, sec, c0, c1, what, partial=partial)

    def build() -> np.ndarray:
        sizes, data = got["sizes"], got["data"]
        jobs: list[tuple[Any, int, int]] = []
        if partial is not None:
            jobs.append((got["pdata"], partial * K, min(partial * K + K, N)))
        ends = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=ends[1:])
        for i in range(sizes.size):
            a = (c0 + i) * K
            jobs.append((data[ends[i] : ends[i + 1]], a, min(a + K, N)))
        flat = out.reshape(-1).view(np.uint8)
        _map(lambda job: _decode_into(flat, job[0], job[1], job[2], lo, hi, E, what), jobs)
        return out

    return build
