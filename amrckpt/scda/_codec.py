r"""The per-element compression of the scda paper, section 3.1.

An element is encoded in two stages, exactly as libsc's ``sc_io_encode_zlib``
writes it (without its trailing NUL; see ``shared/interop/libsc/sc_io_encode``):

1. the uncompressed size as 8-byte big-endian integer, the byte ``z``, and a
   zlib (RFC 1950) stream of the element;
2. standard base64 of stage 1 in lines of 76 characters, every line (the last
   one too) followed by two break bytes: ``=\\n`` in the Unix style, ``\\r\\n``
   in the MIME style.

Many elements are encoded and decoded at once.  The only per-element step is
the zlib-ng call (made through ``map`` over memoryview slices, so no Python
bytecode runs per element); size prefixes, base64, line breaks, padding and
all checks are vectorized over the whole batch with numpy.
"""

from __future__ import annotations

import binascii
import functools
import itertools
import operator
from collections.abc import Callable, Sequence

import numpy as np
from zlib_ng import zlib_ng

from .._threads import default_threads, pool
from ..errors import ScdaDecodeError
from ._format import Style

__all__ = [
    "MAX_INFLATE_RATIO",
    "decode_elements",
    "encode_elements",
    "encoded_nbytes",
]

MAX_INFLATE_RATIO = 1032
"""Deflate cannot expand more than 1032:1; a U size beyond that is corrupt."""

_LINE = 76  # base64 characters per line
_RAW_LINE = 57  # stage-1 bytes per line
_BREAK = {"unix": b"=\n", "mime": b"\r\n"}
_B64_VALID = np.zeros(256, dtype=bool)
_B64_VALID[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)] = True
_BATCH_NBYTES = 8 << 20  # uncompressed bytes per batch: bounds temporaries
_compress = zlib_ng.compress  # (data, level) -> zlib stream; tests substitute libsc's streams


try:  # pybase64 (SIMD) where installed: the same standard base64 as binascii, several times faster
    from pybase64 import b64encode as _b64encode_simd

    _b64encode: Callable[[bytes], bytes] = _b64encode_simd
except ImportError:  # pragma: no cover - pybase64 is optional
    _b64encode = functools.partial(binascii.b2a_base64, newline=False)
_ZlibError: type[Exception] = zlib_ng.error  # type: ignore[assignment]


def encoded_nbytes(stage1_nbytes: np.ndarray) -> np.ndarray:
    """Length of the encoded text of stage-1 lengths ``L``: ``4*ceil(L/3) + 2*ceil(L/57)``."""
    L = np.asarray(stage1_nbytes, dtype=np.int64)
    return 4 * ((L + 2) // 3) + 2 * ((L + _RAW_LINE - 1) // _RAW_LINE)


def _slices(buf: memoryview, starts: Sequence[int], ends: Sequence[int]) -> map:  # type: ignore[type-arg]
    """Memoryview slices buf[starts[i]:ends[i]], produced in C (no bytecode per element)."""
    return map(operator.getitem, itertools.repeat(buf), map(slice, starts, ends))


def encode_elements(
    data: memoryview, offsets: np.ndarray, *, level: int = 9, style: Style = "unix", threads: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Encode elements by the compression convention (paper 3.1).

    Parameters
    ----------
    data : memoryview of bytes
        The concatenated elements (format ``"B"``, contiguous).
    offsets : (n + 1,) numpy.ndarray of int64
        Element i is ``data[offsets[i]:offsets[i+1]]``.
    level : int, optional
        zlib compression level, 0 to 9 (paper: 9 recommended).
    style : {"unix", "mime"}
        Break bytes after every base64 line.
    threads : int, optional
        Threads that encode batches of about 8 MiB at once (zlib-ng
        releases the GIL); default: :func:`amrckpt._threads.default_threads`
        (the cores this rank has to itself) when elements are large enough
        for threads to pay (mean size x 4 at levels 6-9 >= 256 bytes), else
        1.  The output does not depend on it.

    Returns
    -------
    encoded : (sum(sizes),) numpy.ndarray of uint8
        The encoded elements, concatenated.
    sizes : (n,) numpy.ndarray of uint64
        The encoded size of each element (its ``E_i`` in the file).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n = offsets.shape[0] - 1
    if n == 0:
        return np.empty(0, np.uint8), np.empty(0, np.uint64)
    # Batches of about _BATCH_NBYTES bound the temporaries (~5x the output).
    targets = np.arange(_BATCH_NBYTES, int(offsets[-1]), _BATCH_NBYTES)
    cuts = np.searchsorted(offsets, targets).clip(0, n)
    bounds = np.unique(np.concatenate([[0], cuts, [n]]))
    spans = [(lo, hi) for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True) if hi > lo]
    if threads is None:
        # Threads pay when deflate (no GIL) outweighs the per-element set-up (with the GIL): large
        # elements or a slow level.  Measured on 2 cores: 4 KiB x1.5-1.7, 64 B level 9 x1.2, 64 B level 1 x0.86.
        work = int(offsets[-1]) / n * (4 if level >= 6 else 1)
        threads = default_threads() if work >= 256 else 1
    nthreads = min(len(spans), max(1, int(threads)))

    def batch(span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        return _encode_batch(data, offsets[span[0] : span[1] + 1], level, style)

    done = list(pool(nthreads).map(batch, spans)) if nthreads > 1 else [batch(sp) for sp in spans]
    parts = [e for e, _ in done]
    sizes = [s for _, s in done]
    if len(parts) == 1:
        return parts[0], sizes[0]
    return np.concatenate(parts), np.concatenate(sizes)


def _encode_batch(data: memoryview, offsets: np.ndarray, level: int, style: Style) -> tuple[np.ndarray, np.ndarray]:
    n = offsets.shape[0] - 1
    usize = np.diff(offsets)
    starts = offsets[:-1].tolist()
    ends = offsets[1:].tolist()
    compressed = list(map(_compress, _slices(data, starts, ends), itertools.repeat(level)))
    clen = np.fromiter(map(len, compressed), dtype=np.int64, count=n)
    L = clen + 9  # stage-1 length
    nlines = (L + _RAW_LINE - 1) // _RAW_LINE
    # Stage 1, each element zero-padded to whole lines of 57 bytes, so that one
    # base64 call turns every 57-byte group into exactly one 76-char line.
    prefix = np.empty((n, 9), dtype=np.uint8)
    prefix[:, :8] = usize.astype(">u8").view(np.uint8).reshape(n, 8)
    prefix[:, 8] = ord("z")
    pb = memoryview(prefix.tobytes())
    pads = map(bytes, (nlines * _RAW_LINE - L).tolist())
    stage1 = b"".join(
        itertools.chain.from_iterable(zip(_slices(pb, range(0, 9 * n, 9), range(9, 9 * n + 9, 9)), compressed, pads, strict=True))
    )
    del compressed
    text = np.frombuffer(_b64encode(stage1), dtype=np.uint8)
    del stage1
    total_lines = int(nlines.sum())
    lines = np.empty((total_lines, _LINE + 2), dtype=np.uint8)
    lines[:, :_LINE] = text.reshape(total_lines, _LINE)
    del text
    lines[:, _LINE:] = np.frombuffer(_BREAK[style], dtype=np.uint8)
    # The last line of each element: r stage-1 bytes, v = 4*ceil(r/3) chars, '=' pads.
    last = np.cumsum(nlines) - 1
    r = L - (nlines - 1) * _RAW_LINE
    v = 4 * ((r + 2) // 3)
    npad = (3 - r % 3) % 3
    one = npad >= 1
    lines[last[one], v[one] - 1] = ord("=")
    two = npad == 2
    lines[last[two], v[two] - 2] = ord("=")
    keep = np.ones(lines.shape, dtype=bool)
    cols = np.arange(_LINE + 2)
    keep[last] = (cols[None, :] < v[:, None]) | (cols[None, :] >= _LINE)
    encoded = lines[keep]
    sizes = (encoded_nbytes(L)).astype(np.uint64)
    return encoded, sizes


def decode_elements(
    enc: np.ndarray,
    enc_sizes: np.ndarray,
    usizes: np.ndarray,
    *,
    first_index: int = 0,
    offset: int = 0,
    what: str = "",
) -> np.ndarray:
    """Decode elements written by the compression convention (paper 3.1).

    The three redundant checks of the paper are made for every element (the
    ``z`` byte, the 8-byte size against the expected size, zlib's Adler-32),
    and the base64 text's length must match its line structure.  The break
    bytes are not interpreted (the paper calls them arbitrary); bytes after
    the end of a zlib stream are ignored, as libsc's ``sc_io_decode`` does.

    Parameters
    ----------
    enc : (sum(enc_sizes),) numpy.ndarray of uint8
        The encoded elements, concatenated.
    enc_sizes : (n,) numpy.ndarray of uint64
        The encoded size of each element (``E_i`` of the V section).
    usizes : (n,) numpy.ndarray of uint64
        The expected uncompressed size of each element (the U entries).
    first_index, offset : int, optional
        Global index and file offset of the first element, for messages.
    what : str, optional
        Names the section in error messages.

    Returns
    -------
    (sum(usizes),) numpy.ndarray of uint8
        The decoded elements, concatenated (writable).

    Raises
    ------
    ScdaDecodeError
        Naming the first element that fails a check, its global index and
        the file offset of its encoded bytes.
    """  # noqa: DOC501 (fail() returns the ScdaDecodeError)
    T = np.asarray(enc_sizes, dtype=np.int64)
    U = np.asarray(usizes, dtype=np.uint64)
    n = T.shape[0]
    if n == 0:
        return np.empty(0, np.uint8)
    estart = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(T, out=estart[1:])

    def fail(i: int, why: str) -> ScdaDecodeError:
        return ScdaDecodeError(f"{what}element {first_index + i} at byte {offset + int(estart[i])}: {why}")

    # Line structure: k lines, all but the last 78 bytes, the last 6..78.
    k = (T + _LINE + 1) // (_LINE + 2)
    lastlen = T - (k - 1) * (_LINE + 2)
    bad = (T == 0) | (lastlen - 2 < 4) | ((lastlen - 2) % 4 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if T[i] == 0:
            raise fail(i, "empty compressed element (an empty payload encodes to 26 bytes)")
        raise fail(i, f"{int(T[i])} bytes is not the length of base64 lines of 76 characters plus breaks")
    # Drop the two break bytes at the end of every line.
    nl = int(k.sum())
    line_elem = np.repeat(np.arange(n), k)
    first_line = np.cumsum(k) - k
    line_end = estart[line_elem] + (np.arange(nl) - first_line[line_elem] + 1) * (_LINE + 2)
    line_end[np.cumsum(k) - 1] = estart[1:]
    marks = np.zeros(int(estart[-1]) + 1, dtype=np.int8)
    marks[line_end - 2] = 1
    marks[line_end] -= 1
    chars = enc[np.cumsum(marks[:-1], dtype=np.int8) == 0]
    B = T - 2 * k  # base64 characters per element, a multiple of 4
    cend = np.cumsum(B)
    # '=' may only end an element: one or two of them.
    eq = chars == ord("=")
    pad1 = eq[cend - 1]
    pad2 = eq[cend - 2] & pad1
    npad = pad1.astype(np.int64) + pad2
    if int(eq.sum()) != int(npad.sum()) or (eq[cend - 2] & ~pad1).any():
        bad_pos = np.flatnonzero(eq)
        ok_pos = np.concatenate([cend[pad1] - 1, cend[pad2] - 2])
        stray = np.setdiff1d(bad_pos, ok_pos)
        i = int(np.searchsorted(cend, stray[0], side="right")) if stray.size else 0
        raise fail(i, "invalid base64: '=' padding inside the text")
    chars[eq] = ord("A")
    valid = _B64_VALID[chars]
    if not valid.all():
        i = int(np.searchsorted(cend, np.flatnonzero(~valid)[0], side="right"))
        raise fail(i, "invalid base64: a character outside the standard alphabet")
    stage1 = np.frombuffer(binascii.a2b_base64(chars.tobytes(), strict_mode=True), dtype=np.uint8)
    D = (B // 4) * 3 - npad  # stage-1 bytes per element
    dstart = (cend - B) // 4 * 3
    short = D < 9 + 2 + 4
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise fail(i, f"{int(D[i])} decoded bytes are too few for a size, 'z' and a zlib stream")
    head = stage1[dstart[:, None] + np.arange(9)]
    size_field = head[:, :8].copy().view(">u8").reshape(n).astype(np.uint64)
    notz = head[:, 8] != ord("z")
    if notz.any():
        i = int(np.flatnonzero(notz)[0])
        raise fail(i, f"byte 9 of the decoded element is {bytes(head[i, 8:9])!r}, not b'z'")
    mismatch = size_field != U
    if mismatch.any():
        i = int(np.flatnonzero(mismatch)[0])
        raise fail(i, f"element announces {int(size_field[i])} bytes, its U entry says {int(U[i])}")
    zlen = D - 9
    toobig = U > (zlen.astype(np.uint64) + np.uint64(1)) * np.uint64(MAX_INFLATE_RATIO)
    if toobig.any():
        i = int(np.flatnonzero(toobig)[0])
        raise fail(i, f"{int(U[i])} bytes cannot inflate from a {int(zlen[i])}-byte zlib stream")
    zs = (dstart + 9).tolist()
    ze = (dstart + D).tolist()
    outs: list[bytes] = []
    try:
        outs.extend(map(zlib_ng.decompress, _slices(memoryview(stage1), zs, ze), itertools.repeat(15), np.maximum(U, 1).tolist()))
    except _ZlibError as exc:
        raise fail(len(outs), f"zlib: {exc}") from exc
    got = np.fromiter(map(len, outs), dtype=np.uint64, count=n)
    wrong = got != U
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise fail(i, f"inflates to {int(got[i])} bytes, its size says {int(U[i])}")
    return np.frombuffer(bytearray().join(outs), dtype=np.uint8)
