"""Layout ``chunks``: values compressed per chunk of K consecutive leaves (shuffle, then deflate).

Cells, arrays and meshes: the field is one V section of ceil(N / K)
elements; element j is a zlib stream (RFC 1950, readable by any zlib) of
the values of leaves ``j K .. min((j + 1) K, N) - 1`` after HDF5's byte
shuffle (byte b of every value, then byte b + 1, ...: for an (n, E) array
of bytes, its transpose).

hp fields: two V sections of ceil(N / K) elements, both with the field's
name as user string.  Element j of the first is the counts of leaves
``j K .. min((j + 1) K, N) - 1`` (``count_dtype``, shuffled, deflated);
element j of the second is the values of the same leaves, leaf after
leaf (shuffled by value, deflated).  The values' chunks follow the leaves'
chunks, so a reader finds every chunk it needs from its leaves alone:
both sections are read in the two phases of a read plan (size entries,
one exscan, data), as one section of cells is.

Chunk boundaries are global, so the file does not depend on the number of
writing processes; a reader decompresses only the chunks that overlap its
leaves.  Writers encode their chunks in threads, with libdeflate
(``deflate``) or ISA-L (``isal``) where installed, else zlib-ng; the bytes
of a chunk depend on that choice and on the level, not on the partition.
Readers decode the chunks of every field of a load in one pass of the
threads (:class:`~amrckpt.container._sections.Deferred`), each chunk
decompressed, then unshuffled straight into the array returned.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from zlib_ng import zlib_ng

from .._threads import default_threads, map_shared
from ..comm import Call, collective
from ..errors import CheckpointError, ScdaArgumentError
from ..scda import MAX_INFLATE_RATIO, ReadPlan, Share
from ._sections import Deferred, FieldSource, Section, Span, resolve
from ._varray import plan_varray

if TYPE_CHECKING:
    from ._sections import SectionSink

__all__ = [
    "DEFAULT_CHUNK",
    "deflate_name",
    "plan_chunks",
    "plan_hp_chunks",
    "plan_hp_counts",
    "shuffle",
    "write_chunks",
    "write_hp_chunks",
]

DEFAULT_CHUNK = 16384
"""Leaves per chunk unless the schema says otherwise (128 KiB of float64: a chunk stays in the cache while it is shuffled)."""


def threads() -> int:
    """Threads that encode or decode chunks: the cores this rank has to itself (:func:`amrckpt._threads.default_threads`)."""
    return default_threads()


@functools.cache
def _compressor() -> tuple[str, Callable[[Any, int], Any]]:
    """Return the fastest deflate installed that writes zlib streams no larger than zlib's: libdeflate, ISA-L, else zlib-ng.

    libdeflate's level 1 is ~4x zlib's level 1 and its streams are smaller;
    ISA-L's is faster still but its streams ~10% larger than zlib's on
    shuffled float64, so it comes second.  All three release the GIL.
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
def _decompressor(checked: bool = False) -> Callable[[Any, int], Any]:
    """Return a zlib-stream decoder given the decoded size: libdeflate where installed (fastest), else zlib-ng.

    ``checked``: the stream's bytes matched the CRC32 of their section, so
    its Adler-32 proves nothing more: the deflate data between the 2-byte
    header and the Adler-32 are decoded raw (about 8% faster), after the
    header is checked (a deflate stream without a preset dictionary).  The
    streams and the decoded bytes are bytes-like objects (``bytes`` or
    ``bytearray``), used as they come: no copy.
    """
    zlib: Callable[[Any, int], Any]
    raw: Callable[[Any, int], Any]
    try:
        import deflate

        zlib, raw = deflate.zlib_decompress, deflate.deflate_decompress
    except ImportError:
        zlib = lambda data, n: bytes(zlib_ng.decompress(data, bufsize=max(n, 1)))  # noqa: E731
        raw = lambda data, n: bytes(zlib_ng.decompress(data, wbits=-15, bufsize=max(n, 1)))  # noqa: E731
    if not checked:
        return zlib

    def decode(data: Any, n: int) -> Any:
        mv = memoryview(data)
        if len(mv) < 6 or mv[0] & 0x0F != 8 or mv[1] & 0x20 or (mv[0] << 8 | mv[1]) % 31:
            return zlib(data, n)  # not a zlib stream of deflate data: zlib says why
        return raw(mv[2:-4], n)

    return decode


# Chosen when the module is imported, never inside a collective call: an import reads files (a failing read there
# would be one rank's raw OSError outside the collective helper), and an import that failed there would pick another
# library on that rank alone.
_compressor()
_decompressor(False)
_decompressor(True)


def deflate_name() -> str:
    """Return the deflate library that encodes chunks here (``isal``, ``libdeflate`` or ``zlib-ng``)."""
    return _compressor()[0]


def shuffle(data: Any, E: int) -> np.ndarray:
    """HDF5's byte shuffle: ``n`` values of ``E`` bytes as their first bytes, then their second bytes, ... ((n E,) uint8)."""
    b = np.frombuffer(data, dtype=np.uint8)
    if E == 1:
        return b
    return np.ascontiguousarray(b.reshape(-1, E).T).reshape(-1)


def _bytes_of(data: Any) -> np.ndarray:
    """Return the bytes of a contiguous array or buffer as (nbytes,) uint8 (a view)."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


# -- writing ---------------------------------------------------------------------------------------------


def _relay(call: Call, lo: int, hi: int, N: int, K: int, head: bytes | None) -> bytes | None:
    """Pass each rank's head (its leaves before its first chunk start) to the rank below; return what this rank got.

    Rank q sends if its first leaf is inside a chunk; it receives the next
    ranks' heads if its last chunk runs past its leaves (hi = lo of rank
    q + 1: the two agree); a rank whose leaves all lie inside one chunk that
    started below forwards what it received after its own.  None stands for
    a failed rank.
    """
    send, receive = lo % K != 0 and lo < N, hi % K != 0 and hi < N
    forward = send and receive and min(hi, -(-lo // K) * K) == hi
    return call.relay_down(head, send=send, receive=receive, forward=forward)


def _write_streams(
    sink: SectionSink, call: Call, lo: int, hi: int, N: int, K: int, streams: list[tuple[list[Any], int, bytes]], level: int
) -> None:
    """Encode this rank's chunks of each stream in threads, then write each stream as a V section. Collective.

    ``streams``: ``(chunks, E, user_string)``, the chunks that start among
    this rank's leaves (the same number in every stream).  One exclusive
    scan of every stream's compressed bytes (this rank's offsets) and one
    allreduce that agrees on errors and gives the totals, whatever the
    number of streams.
    """
    r = call.rank
    jobs = [(c, E) for chunks, E, _ in streams for c in chunks]
    enc: list[Any] = call.run(map_shared, lambda job: _compressor()[1](shuffle(job[0], job[1]), level), jobs, threads()) or []
    per: list[tuple[list[Any], np.ndarray, int]] = []
    at = 0
    for chunks, _, _ in streams:
        e = enc[at : at + len(chunks)]
        at += len(chunks)
        sizes = np.fromiter((len(x) for x in e), dtype=np.uint64, count=len(e))
        per.append((e, sizes, int(sizes.sum()) if sizes.size else 0))
    below = call.reduction("fwrite_varray: offsets").sum("nbytes", [nb for _, _, nb in per]).below().sum("nbytes")
    c0, nck = -(-lo // K), -(-hi // K) - -(-lo // K)  # this rank's chunks: those that start among its leaves
    # Totals by maxima: the largest inclusive prefix is the total; the largest count; the last rank with any.
    red = call.reduction("fwrite_varray")
    for j, ((_, _, nb), b) in enumerate(zip(per, below, strict=True)):
        red.max(f"{j}.total", b + nb).max(f"{j}.most", nb).max(f"{j}.last", r if nb else 0)
    got = red.max("chunks.most", nck).max("chunks.last", r if nck else 0).run()
    cmost, clast = got.max("chunks.most"), got.max("chunks.last")
    for j, ((e, sizes, nb), b, (_, _, ustr)) in enumerate(zip(per, below, streams, strict=True)):
        total, most, last = got.max(f"{j}.total"), got.max(f"{j}.most"), got.max(f"{j}.last")
        sink.fwrite_varray(b"".join(e), Share(nck, c0, -(-N // K), cmost, clast), sizes, Share(nb, b, total, most, last), ustr)


def write_chunks(sink: SectionSink, data: Any, elem_counts: Share, E: int, K: int, user_string: bytes, *, level: int = 1) -> None:
    """Write leaves of ``E`` bytes as a V section of shuffled, deflated chunks of ``K`` leaves. Collective.

    A chunk is encoded by the rank that holds its first leaf.  The leaves
    of a chunk that the next ranks hold (at most K - 1) reach it from
    neighbour to neighbour (:func:`amrckpt.comm.relay_down`: point-to-point,
    each rank sends at most K E bytes to the rank below; a rank whose leaves
    all lie inside one chunk forwards what it received with its own), so
    nothing of size P is sent or allocated.  Collectives: the relay (with
    more than one rank), one exclusive scan of the compressed sizes (this
    rank's offset) and one allreduce that agrees on errors and gives the totals.

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
    first = min(hi, -(-lo // K) * K)  # the first leaf of this rank that starts a chunk (hi if none does)

    def local_view() -> np.ndarray:
        view = _bytes_of(data) if hi > lo else np.zeros(0, np.uint8)
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
        got = None
        if P > 1:
            got = _relay(call, lo, hi, N, K, None if view is None else view[: (first - lo) * E].tobytes())
        chunks = call.run(local_chunks, view, got) or []
        _write_streams(sink, call, lo, hi, N, K, [(chunks, E, user_string)], level)


def _segments(got: bytes, nleaves: int, cdt: np.dtype[Any], E: int, rank: int) -> tuple[bytes, bytes]:
    """Split what the next ranks relayed (each a segment: 8-byte leaf count, counts, values) into counts and values.

    Segments that do not hold ``nleaves`` leaves break an invariant of the relay: an AssertionError.
    """  # noqa: DOC501 (a guard of an internal invariant)
    counts, values = [], []
    pos = n = 0
    while pos < len(got):
        k = int.from_bytes(got[pos : pos + 8], "little")
        c = got[pos + 8 : pos + 8 + k * cdt.itemsize]
        nv = int(np.frombuffer(c, dtype=cdt).sum(dtype=np.uint64)) * E
        pos += 8 + len(c)
        counts.append(c)
        values.append(got[pos : pos + nv])
        pos += nv
        n += k
    if n != nleaves or pos != len(got):
        raise AssertionError(f"hp chunks: rank {rank} received {n} leaves in {len(got)} bytes, not {nleaves} leaves")
    return b"".join(counts), b"".join(values)


def write_hp_chunks(
    sink: SectionSink,
    counts: Any,
    values: Any,
    elem_counts: Share,
    count_dtype: Any,
    E: int,
    K: int,
    user_string: bytes,
    *,
    level: int = 1,
) -> None:
    r"""Write an hp field as two V sections of chunks of ``K`` leaves: their counts, then their values. Collective.

    Chunk j of either section is of leaves ``j K .. min((j + 1) K, N) - 1``,
    encoded by the rank that holds its first leaf: the counts as
    ``count_dtype`` and the values of ``E`` bytes, each shuffled and
    deflated.  The leaves of a chunk that the next ranks hold (at most
    K - 1, with their values) reach it from neighbour to neighbour, as in
    :func:`write_chunks`.  Collectives: the relay (with more than one
    rank), one exclusive scan and one allreduce for both sections.

    Parameters
    ----------
    sink : SectionSink
        The scda writer (collective over ``sink.comm``).
    counts : (N_p,) array_like of int
        Values of each of this rank's leaves.
    values : (sum(counts), \\*shape) numpy.ndarray or bytes-like
        Their values, leaf after leaf, sum(counts) * E bytes.
    elem_counts : amrckpt.scda.Share
        This rank's share of the leaves.
    count_dtype : numpy.dtype or str
        The unsigned integer of a count in the file (``u1``, ``<u2``, ``<u4``, ``<u8``).
    E : int
        Bytes of one value.
    K : int
        Leaves per chunk.
    user_string : bytes
    level : int, optional
        zlib level, as for :func:`write_chunks`.

    Raises
    ------
    ScdaError
        On every rank, as :meth:`ScdaWriter.fwrite_varray`, or the error of
        any rank whose counts are not N_p or whose values are not sum(counts) * E bytes.
    """
    comm = sink.comm
    r, P = comm.rank, comm.size
    lo, hi, N = elem_counts.offset, elem_counts.offset + elem_counts.count, elem_counts.total
    cdt = np.dtype(count_dtype)
    cs = cdt.itemsize
    first = min(hi, -(-lo // K) * K)

    def local_views() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = np.asarray(counts).reshape(-1)
        if c.shape[0] != hi - lo:
            raise ScdaArgumentError(f"hp chunks of rank {r}: {c.shape[0]} counts, not {hi - lo} leaves")
        offs = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(c, out=offs[1:])
        offs *= E
        v = _bytes_of(values) if offs[-1] else np.zeros(0, np.uint8)
        if v.nbytes != offs[-1]:
            raise ScdaArgumentError(f"hp chunks of rank {r}: {v.nbytes} bytes of values, not {offs[-1] // E} values of {E} bytes")
        return np.ascontiguousarray(c.astype(cdt, copy=False)).view(np.uint8), v, offs

    def head(views: tuple[np.ndarray, np.ndarray, np.ndarray]) -> bytes:
        cb, v, offs = views
        n = first - lo
        return b"".join([n.to_bytes(8, "little"), cb[: n * cs].tobytes(), v[: offs[n]].tobytes()]) if n else b""

    def local_chunks(views: tuple[np.ndarray, np.ndarray, np.ndarray], got: bytes | None) -> tuple[list[Any], list[Any]]:
        cb, v, offs = views
        cchunks: list[Any] = []
        vchunks: list[Any] = []
        for a in range(first, hi, K):
            b = min(a + K, N)
            if b <= hi:
                cchunks.append(cb[(a - lo) * cs : (b - lo) * cs])
                vchunks.append(v[offs[a - lo] : offs[b - lo]])
            elif got is not None:  # the last chunk runs into the next ranks' leaves
                rc, rv = _segments(got, b - hi, cdt, E, r)
                cchunks.append(b"".join([cb[(a - lo) * cs :].tobytes(), rc]))
                vchunks.append(b"".join([v[offs[a - lo] :].tobytes(), rv]))
            else:  # a sender failed: its error is agreed on below
                break
        return cchunks, vchunks

    with collective(comm, "write hp chunks") as call:
        views = call.run(local_views)
        got = None
        if P > 1:
            got = _relay(call, lo, hi, N, K, None if views is None else head(views))
        cchunks, vchunks = call.run(local_chunks, views, got) or ([], [])
        _write_streams(sink, call, lo, hi, N, K, [(cchunks, cs, user_string), (vchunks, E, user_string)], level)


# -- reading ---------------------------------------------------------------------------------------------


_Targets = list[tuple[int, int, np.ndarray]]
"""Where decoded values go: ``(b0, b1, flat)``, bytes ``b0 .. b1 - 1`` of each value into ``flat`` ((n (b1 - b0),) uint8)."""


class _Decode:
    """Chunks to decompress and unshuffle into ``targets``: a callable of the chunk's position ``i``.

    Chunk i (the one below this rank's leaves first, if ``pdata``) holds
    ``n[i]`` values of ``E`` bytes; its values ``s[i] .. t[i] - 1`` go to
    value ``o[i]`` of each target ``(b0, b1, flat)``: bytes ``b0 .. b1 - 1``
    of each value, byte plane by byte plane (no decoded chunk is
    transposed whole).  ``a[i]`` and ``b[i]`` are its leaves (for messages).
    """

    __slots__ = ("E", "a", "b", "data", "decode", "ends", "n", "name", "o", "pdata", "s", "sizes", "t", "targets", "what")

    def __init__(
        self, plan: ReadPlan, got: dict[str, Any], a: np.ndarray, b: np.ndarray, E: int, what: str, name: str, targets: Any = ()
    ) -> None:
        self.targets: _Targets = list(targets)
        self.E, self.what, self.name, self.a, self.b = E, what, name, a, b
        self.decode = _decompressor(plan.verify and plan.compares_sections)
        self.data: np.ndarray = got["data"]
        self.pdata: Any = got.get("pdata")  # the chunk below this rank's first leaf, if it reads one (plan_varray)
        sizes = got["sizes"]
        self.ends = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.ends[1:])
        # The compressed sizes of the chunks read, the partial one first.
        self.sizes: np.ndarray = np.concatenate([np.array([got["psize"]], dtype=np.uint64), sizes]) if "pdata" in got else sizes
        empty = np.zeros(0, dtype=np.int64)
        self.n = self.s = self.t = self.o = empty

    def __call__(self, i: int) -> None:
        j = i - (self.pdata is not None)  # the partial chunk, if any, is chunk 0
        c = self.pdata if j < 0 else self.data[self.ends[j] : self.ends[j + 1]]
        E, n = self.E, int(self.n[i])
        try:
            raw = self.decode(c, n * E)
        except Exception as exc:  # deflate.DeflateError, zlib_ng.error: not a (complete) zlib stream
            raise CheckpointError(
                f"{self.what}: the {self.name} of leaves {self.a[i]}..{self.b[i]} is not a zlib stream: {exc}"
            ) from exc
        if len(raw) != n * E:
            raise CheckpointError(
                f"{self.what}: the {self.name} of leaves {self.a[i]}..{self.b[i]} holds {len(raw)} bytes, not {n * E}"
            )
        s, t, o = int(self.s[i]), int(self.t[i]), int(self.o[i])
        if t <= s:
            return
        planes = np.frombuffer(raw, dtype=np.uint8).reshape(E, n)
        for b0, b1, flat in self.targets:
            # One ufunc call per target unshuffles without the GIL, byte plane by byte plane (the planes'
            # contiguous order): faster than numpy's transposing copy, which runs value by value.
            w = b1 - b0
            np.positive(planes[b0:b1, s:t], out=flat[o * w : (o + t - s) * w].reshape(-1, w).T)

    def place(self, n: np.ndarray, s: np.ndarray, t: np.ndarray, o: np.ndarray) -> None:
        """Set ``n``, ``s``, ``t``, ``o``; refuse, before anything is decoded, a chunk whose stream cannot hold its values.

        Deflate expands at most ``MAX_INFLATE_RATIO``-fold: nothing is
        allocated for decoded data that the file cannot hold.

        Raises
        ------
        CheckpointError
            On this rank, if a chunk's stream of ``sizes`` bytes is too short to inflate to its values (more than
            ``MAX_INFLATE_RATIO``-fold).
        """
        self.n, self.s, self.t, self.o = n, s, t, o
        sizes = self.sizes
        bad = self.n.astype(np.float64) * self.E > MAX_INFLATE_RATIO * (sizes.astype(np.float64) + 16)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise CheckpointError(
                f"{self.what}: the {self.name} of leaves {self.a[i]}..{self.b[i]} has {int(sizes[i])} bytes, "
                f"too few for {int(self.n[i])} values of {self.E} bytes"
            )


_Chunks = tuple[int, int, int | None, np.ndarray, np.ndarray]


def _chunks_of(span: Span, K: int) -> _Chunks:
    """Return ``(c0, c1, partial, a, b)``: the chunks a rank reads, and their first and end leaves.

    Chunks ``c0 .. c1 - 1`` start among the rank's leaves; ``partial`` is
    the one below its first leaf (or None); ``a`` and ``b`` ((n,) int64)
    are the leaves of each chunk read, the partial one first.
    """
    lo, hi = span.offset, span.end
    c0, c1 = -(-lo // K), -(-hi // K)
    partial = lo // K if lo % K and hi > lo else None
    a = np.arange(c0 - (partial is not None), c1, dtype=np.int64) * K
    return c0, c1, partial, a, np.minimum(a + K, span.N)


def plan_chunks(
    src: FieldSource, plan: ReadPlan, sec: Section, span: Span, E: int, K: int, out: np.ndarray, what: str
) -> Callable[[], Deferred]:
    """Plan the read of this rank's leaves of a chunked field into ``out`` ((span.count, ...) array); return what decodes them.

    The chunks that start among this rank's leaves are its own (their
    entries and bytes CRC'd here); the one chunk that starts below its
    first leaf, if any, is read too, without its CRC (the rank below covers
    it).  After the plan ran, the returned function gives a
    :class:`Deferred` of one decoding task per chunk (decompress, then
    unshuffle this rank's leaves into ``out``) whose value is ``out``.

    Raises
    ------
    CheckpointError
        If the section does not hold the chunks the manifest describes
        (now), or a chunk is not a zlib stream of its leaves (when decoded).
    """
    lo, hi = span.offset, span.end
    _check_chunks((sec,), span.N, K, what)
    c0, c1, partial, a, b = _chunks_of(span, K)
    got = plan_varray(src, plan, sec, c0, c1, what, partial=partial)

    def build() -> Deferred:
        job = _Decode(plan, got, a, b, E, what, "chunk", [(0, E, out.reshape(-1).view(np.uint8))])
        job.place(b - a, np.maximum(a, lo) - a, np.minimum(b, hi) - a, np.maximum(a, lo) - lo)
        return Deferred([(job, a.size)], lambda: out)

    return build


def _check_chunks(secs: tuple[Section, ...], N: int, K: int, what: str) -> None:
    """Check that the V sections of a chunked field hold ceil(N / K) chunks, before anything is planned by them.

    Raises
    ------
    CheckpointError
        On this rank, if a section does not hold the ceil(N / K) chunks the manifest describes.
    """
    for sec in secs:
        if sec.raw.elem_count != -(-N // K):
            raise CheckpointError(f"{what}: the section at byte {sec.entry.offset} is not the chunks the manifest describes")


def _plan_counts(
    src: FieldSource, plan: ReadPlan, csec: Section, span: Span, cdt: np.dtype[Any], K: int, what: str
) -> tuple[Callable[[], Deferred], np.ndarray, int, _Chunks]:
    """Plan this rank's chunks of hp counts; return (decoding, the counts decoded into, their first leaf, the chunks).

    The decoded counts (of ``cdt``, unchecked) are those of every leaf of
    the chunks read: from the first leaf of the first chunk read (returned)
    to the end of the last; the chunks are :func:`_chunks_of`'s.
    """
    chunks = c0, c1, partial, a, b = _chunks_of(span, K)
    got = plan_varray(src, plan, csec, c0, c1, what, partial=partial)
    base = int(a[0]) if a.size else span.offset
    raw = np.empty(int(b[-1]) - base if b.size else 0, dtype=cdt)

    def decoding() -> Deferred:
        job = _Decode(plan, got, a, b, cdt.itemsize, what, "counts", [(0, cdt.itemsize, raw.view(np.uint8))])
        job.place(b - a, np.zeros_like(a), b - a, a - base)
        return Deferred([(job, a.size)], lambda: None)

    return decoding, raw, base, chunks


def plan_hp_counts(
    src: FieldSource, plan: ReadPlan, csec: Section, vsec: Section, span: Span, cdt: np.dtype[Any], K: int, what: str
) -> Callable[[], np.ndarray]:
    """Plan the counts of this rank's leaves of a chunked hp field; return what decodes them ((span.count,) int64).

    For leaf weights: the values are not read.

    Raises
    ------
    CheckpointError
        If the sections do not hold the chunks the manifest describes, or a chunk does not decode.
    """
    _check_chunks((csec, vsec), span.N, K, what)
    decoding, raw, base, _ = _plan_counts(src, plan, csec, span, cdt, K, what)

    def build() -> np.ndarray:
        d: dict[str, Any] = {"counts": decoding()}
        resolve(d)
        c = raw[span.offset - base : span.end - base].astype(np.int64)
        if c.size and int(c.min()) < 0:  # a count of <u8 at or above 2**63: no file holds that many values
            raise CheckpointError(f"{what} has a leaf of more values than its values section can hold")
        return c

    return build


def plan_hp_chunks(
    src: FieldSource,
    plan: ReadPlan,
    csec: Section,
    vsec: Section,
    span: Span,
    cdt: np.dtype[Any],
    dt: np.dtype[Any],
    shape: tuple[int, ...],
    K: int,
    what: str,
) -> Callable[[], Deferred]:
    r"""Plan the read of this rank's leaves of a chunked hp field; return what decodes ``(values, counts)``.

    Both sections are planned now, for the plan's two phases: the size
    entries of this rank's chunks of counts and of values (the chunks that
    start among its leaves, and the one below its first leaf), then, after
    one exscan, their bytes.  The returned function gives a
    :class:`Deferred` of two stages: the counts' chunks (early: in a pass
    before the other fields'), then (their sums giving each values chunk's
    size and this rank's values) the values' chunks, with the other fields'
    chunks, unshuffled straight into the array returned.

    Returns
    -------
    callable
        Returns a Deferred of ``(values, counts)``: (sum(counts), \\*shape)
        of ``dt`` and (span.count,) int64.

    Raises
    ------
    CheckpointError
        If the sections do not hold the chunks the manifest describes
        (now), or when decoded: a chunk is not a zlib stream of its
        leaves' counts or values, or holds more than its stream can.
    """
    lo, hi = span.offset, span.end
    E = dt.itemsize * int(np.prod(shape, dtype=np.int64))
    _check_chunks((csec, vsec), span.N, K, what)
    decoding, raw, base, (c0, c1, partial, a, b) = _plan_counts(src, plan, csec, span, cdt, K, what)
    gv = plan_varray(src, plan, vsec, c0, c1, what, partial=partial)

    def values_pass() -> Deferred:
        job = _Decode(plan, gv, a, b, E, what, "values")
        vsizes = job.sizes
        most = int(raw.max()) if raw.size else 0
        if most * E > MAX_INFLATE_RATIO * (int(vsizes.max()) + 16 if vsizes.size else 0):  # no chunk holds that leaf's values
            raise CheckpointError(f"{what} has a leaf of more values than its values section can hold")
        if raw.size * most >= 2**62:  # sums that int64 may not hold: their float sum must fit the values section first
            if float(raw.sum(dtype=np.float64)) * E > MAX_INFLATE_RATIO * (float(vsizes.sum(dtype=np.float64)) + 16 * vsizes.size):
                raise CheckpointError(f"{what} has more values than its values section can hold")
        cum = np.zeros(raw.size + 1, dtype=np.int64)
        np.cumsum(raw, dtype=np.int64, out=cum[1:])
        first = np.maximum(a, lo) - base
        job.place(
            cum[b - base] - cum[a - base],
            cum[first] - cum[a - base],
            cum[np.minimum(b, hi) - base] - cum[a - base],
            cum[first] - cum[lo - base],
        )
        values = np.empty((int(cum[hi - base] - cum[lo - base]), *shape), dtype=dt)
        job.targets = [(0, E, values.reshape(-1).view(np.uint8))]
        mine = raw[lo - base : hi - base].astype(np.int64)
        return Deferred([(job, a.size)], lambda: (values, mine))

    def build() -> Deferred:
        first = decoding()
        return Deferred(first.tasks, values_pass, early=True)

    return build
