"""Vectorized formatting and parsing of 32-byte count entries.

A variable-size array stores one ``E`` entry per element (paper Fig. 5), and
the compression convention one ``U`` entry per element (Fig. 7); these costs
grow with N and are done here without a Python loop over elements.

Each entry is treated as four little-endian uint64 lanes.  Eight decimal
digits are produced or consumed with SWAR arithmetic (two table lookups of
four digits to format; three multiply-shift steps to parse), on chunks of
rows small enough to stay in the CPU cache.  Values of nine or more digits
(elements of 100 MB or more, hence rare and each worth far more I/O than a
Python step) take a per-row path.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScdaFormatError
from ._format import Style, count_entry, parse_count_entry

__all__ = ["format_entries", "parse_entries"]

_U64 = np.uint64
_CHUNK = 1 << 14  # rows per step: 16384 * 32 bytes = 512 KiB, cache-sized


def _lane(b: bytes) -> np.uint64:
    return _U64(int.from_bytes(b, "little"))


# Four ASCII digits of every value 0..9999, as little-endian uint64 lanes.
_T4 = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), dtype="<u4").astype(_U64)
# After k digits (0 <= k <= 8) in the 8-byte field at entry byte 2: a space, dashes.
_TAIL = np.array([int.from_bytes((b"\0" * k + b" " + b"-" * 8)[:8], "little") for k in range(9)], dtype=_U64)
# Bytes 8..15 of an entry with k digits: bytes 8, 9 belong to the field; 10..15.
_HI = np.array(
    [int.from_bytes(b"\0\0" + (b" " if k == 8 else b"-") + b"-----", "little") for k in range(9)],
    dtype=_U64,
)
_LOWMASK = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=_U64)
_P10 = [_U64(10**k) for k in range(1, 9)]
_DASHES = _lane(b"-" * 8)
_END = {"unix": _lane(b"-" * 6 + b"-\n"), "mime": _lane(b"-" * 6 + b"\r\n")}
_H = _lane(b"\x80" * 8)
_ZEROS = _lane(b"0" * 8)
_BIG = _U64(10**8)


def format_entries(letter: bytes, values: np.ndarray, style: Style) -> np.ndarray:
    """Format count entries for many values at once.

    Parameters
    ----------
    letter : bytes
        ``b"E"`` for element sizes, ``b"U"`` for uncompressed sizes.
    values : (n,) array_like of uint64
        The counts.
    style : {"unix", "mime"}
        The line-break style.

    Returns
    -------
    (n, 32) numpy.ndarray of uint8
        Entry i is ``letter + b" " + digits + padding('-' to 30)``, exactly
        as :func:`~amrckpt.scda._format.count_entry` writes it.
    """
    v = np.ascontiguousarray(values, dtype=_U64).reshape(-1)
    n = v.shape[0]
    out = np.empty((n, 4), dtype=_U64)
    head = _lane(letter + b" " + b"\0" * 6)
    end = _END[style]
    for s in range(0, n, _CHUNK):
        x = v[s : s + _CHUNK]
        o = out[s : s + _CHUNK]
        big = x >= _BIG
        anybig = bool(big.any())
        if anybig:
            x = np.where(big, _U64(0), x)
        nd = np.ones(x.shape, dtype=np.uint8)
        for p in _P10:
            nd += x >= p
        nd64 = nd.astype(_U64)
        hi = x // _U64(10000)
        digits = _T4[hi] | (_T4[x - hi * _U64(10000)] << _U64(32))
        w = (digits >> ((_U64(8) - nd64) << _U64(3))) | _TAIL[nd]
        o[:, 0] = head | (w << _U64(16))
        o[:, 1] = (w >> _U64(48)) | _HI[nd]
        o[:, 2] = _DASHES
        o[:, 3] = end
        if anybig:
            rows = o.view(np.uint8).reshape(-1, 32)
            for i in np.flatnonzero(big):
                rows[i] = np.frombuffer(count_entry(letter, int(v[s + i]), style), dtype=np.uint8)
    return out.view(np.uint8).reshape(n, 32)


def parse_entries(letter: bytes, raw: np.ndarray, *, first_index: int = 0, offset: int = 0, what: str = "") -> np.ndarray:
    """Parse count entries for many elements at once.

    Parameters
    ----------
    letter : bytes
        The expected letter of every entry (``b"E"`` or ``b"U"``).
    raw : (n * 32,) or (n, 32) array_like of uint8
        The entries as read from the file.
    first_index : int, optional
        Global index of the first entry, for error messages.
    offset : int, optional
        File offset of the first entry, for error messages.
    what : str, optional
        Names the section in error messages.

    Returns
    -------
    (n,) numpy.ndarray of uint64
        The counts.

    Raises
    ------
    ScdaFormatError
        Naming the first malformed entry (global index and file offset):
        wrong letter, no digits, a sign, leading zeros, bad padding, or a
        count that does not fit 64 bits (no file is that large).
    """
    a = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, 32)
    n = a.shape[0]
    lanes = a.view(_U64).reshape(n, 4)
    vals = np.empty(n, dtype=_U64)
    head = _lane(letter + b" " + b"\0" * 6)
    for s in range(0, n, _CHUNK):
        L = lanes[s : s + _CHUNK]
        l0 = L[:, 0]
        l1 = L[:, 1]
        w = (l0 >> _U64(16)) | (l1 << _U64(48))
        # A byte is a digit terminator if it is below '0' (space and dash are).
        ge30 = ((w | _H) - _lane(b"\x30" * 8)) & _H
        nondig = ~ge30 & _H
        lowest = nondig & (~nondig + _U64(1))
        nd = np.bitwise_count(lowest - _U64(1)) >> np.uint8(3)  # 8k+7 -> k; none -> 8
        lm = _LOWMASK[nd]
        gt39 = ((w | _H) - _lane(b"\x3a" * 8)) & _H
        ok = (l0 & _U64(0xFFFF)) == head
        ok &= L[:, 2] == _DASHES
        ok &= (L[:, 3] == _END["unix"]) | (L[:, 3] == _END["mime"])
        ok &= (w & _H) == _U64(0)
        ok &= (gt39 & lm) == _U64(0)
        ok &= (w & ~lm) == (_TAIL[nd] & ~lm)
        ok &= (l1 & ~_U64(0xFFFF)) == _HI[nd]
        ok &= nd >= 1
        ok &= ~((nd > 1) & ((w & _U64(0xFF)) == _U64(0x30)))
        d = ((w & lm) - (_ZEROS & lm)) << ((_U64(8) - nd.astype(_U64)) << _U64(3))
        d = (d * _U64(2561)) >> _U64(8)
        d = ((d & _U64(0x00FF00FF00FF00FF)) * _U64(6553601)) >> _U64(16)
        d = ((d & _U64(0x0000FFFF0000FFFF)) * _U64(42949672960001)) >> _U64(32)
        vals[s : s + _CHUNK] = d
        if not ok.all():
            # Rows that are not 1..8-digit entries: parse one by one (values
            # of 9+ digits, i.e. elements of >= 100 MB, or malformed rows).
            for i in np.flatnonzero(~ok):
                g = s + int(i)
                where = f"{what}entry {first_index + g} at byte {offset + 32 * g}"
                value = parse_count_entry(a[g].tobytes(), letter, where)
                if value >= 2**64:
                    raise ScdaFormatError(f"{where}: count {value} exceeds any file size")
                vals[g] = value
    return vals
