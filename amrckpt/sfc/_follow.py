"""Whether leaves in curve order are in range and each starts where the one before it ends, from their coordinates.

Not collective, vectorized: passes over uint32 columns (unsigned copies of a
chunk's coordinates and levels), without curve keys.  :func:`_successors`
says exactly whether each pair follows (trees given); :func:`_window_ok`
answers both questions at once, in fewer passes, for leaves of one tree.
"""

from __future__ import annotations

import numpy as np

from ._keys import MAXLEVEL, QMAXLEVEL

__all__ = ["_copied", "_in_range", "_successors", "_window_ok"]


def _in_range(cols: np.ndarray, tmp: np.ndarray, dim: int) -> bool:
    """Whether the leaves are in range (:meth:`Forest.check`'s ranges, without the trees). Vectorized.

    ``cols``: (dim + 1, k) uint32, the coordinates and the level of each
    leaf (unsigned copies: a negative value is huge); ``tmp``: (>= 1, >= k)
    uint32, scratch.
    """
    k = cols.shape[1]
    if k == 0:
        return True
    root = (1 << MAXLEVEL[dim]) - 1
    lv = cols[dim]
    u = np.bitwise_or(cols[0], cols[1], out=tmp[0, :k])
    if dim == 3:
        u |= cols[2]
    if int(lv.max()) > QMAXLEVEL[dim] or int(np.bitwise_or.reduce(u)) & ~root:
        return False
    np.left_shift(u, lv, out=u)
    return not int(np.bitwise_or.reduce(u)) & root


def _window_ok(cols: np.ndarray, tmp: np.ndarray, dim: int) -> bool:
    """Whether leaves of one tree are in range and each starts where the one before it ends. Vectorized, ~20 passes.

    ``cols``: (dim + 1, k) uint32, the coordinates and the level of each
    leaf (unsigned copies); ``tmp``: (5, >= k) uint32, scratch.  False
    says that a check fails, not which (:func:`_in_range` and
    :func:`_successors` say).

    A leaf of side ``h`` at ``(x, y, z)``, in range: ``t``, its bits below
    ``h`` and those where all of ``x``, ``y``, ``z`` are set; ``b``, the
    lowest bit of ``t`` not set, is where the Morton key's increment stops
    carrying (:func:`_successors`).  The next leaf is at ``x ^ F``, ``y ^
    (F & x)``, ``z ^ (F & x & y)``, with ``F = (2 b - 1) ^ (h - 1)`` (bits
    ``h`` to ``b``; ``x`` and ``y`` hold the bits from ``h`` to ``b - 1``).
    ``b = 2**L`` (the leaf ends its tree) puts bit ``L`` into the next
    ``x``, which no leaf in range has.
    """
    k = cols.shape[1]
    if k == 0:
        return True
    root = np.uint32((1 << MAXLEVEL[dim]) - 1)
    x, y, lv = cols[0], cols[1], cols[dim]
    if int(lv.max()) > QMAXLEVEL[dim]:
        return False
    hm1, u, f, ex, d = (r[:k] for r in tmp)
    np.right_shift(root, lv, out=hm1)  # h - 1
    np.bitwise_or(x, y, out=u)
    np.bitwise_and(x, y, out=f)
    if dim == 3:
        u |= cols[2]
        f &= cols[2]
    if int(np.bitwise_or.reduce(u)) & ~int(root):  # outside the root
        return False
    u &= hm1  # misaligned where not 0
    f |= hm1  # t
    np.add(f, np.uint32(1), out=d)
    f ^= d  # 2 b - 1
    f ^= hm1  # F: the bits of x that flip
    e, d = ex[: k - 1], d[: k - 1]
    np.bitwise_xor(x[:-1], x[1:], out=e)
    e ^= f[:-1]
    e |= u[:-1]
    for c, nxt in ((x, y), (y, cols[2] if dim == 3 else None)):
        if nxt is None:
            break
        f &= c  # the bits of the next coordinate that flip
        np.bitwise_xor(nxt[:-1], nxt[1:], out=d)
        d ^= f[:-1]
        e |= d
    return not int(np.bitwise_or.reduce(e)) and not int(u[-1])


def _successors(
    t: int | np.ndarray, c: list[np.ndarray], lv: np.ndarray, dim: int, prev: tuple[int, list[int], int] | None
) -> bool:
    """Whether each leaf starts where the one before it ends (``prev``: the leaf before the first, if any). Vectorized.

    ``t``: the leaves' trees (int32), or their one tree; ``c``: their
    coordinates, ``lv`` their levels (unsigned); leaves in range.

    For leaves in range (aligned to their level): the Morton successor of a
    leaf of side ``h`` at ``(x, y, z)`` is found without curve keys.  ``b``,
    the lowest bit at or above ``h`` where not all of ``x``, ``y``, ``z`` are
    set, is where the key's increment stops carrying; the bits below ``b``
    clear; ``x`` flips bit ``b``, ``y`` flips it if ``x`` had it, ``z`` if
    both had it.  ``b = 2**L``: the leaf ends its tree, and the next leaf
    must be the next tree's first, at the origin.  About 20 passes over
    uint32, against the ~70 of the keys (uint64).
    """
    if prev is not None:  # the pair across the chunk's start: the same test on two leaves
        pt, pc, pl = prev
        two = [np.array([p, int(x[0])], dtype=np.uint32) for p, x in zip(pc, c, strict=True)]
        first = t if isinstance(t, int) else int(t[0])
        if not _successors(np.array([pt, first], np.int32), two, np.array([pl, int(lv[0])], np.uint8), dim, None):
            return False
    if len(lv) < 2:
        return True
    L = MAXLEVEL[dim]
    x, y = c[0][:-1], c[1][:-1]
    w = np.right_shift(np.uint32((1 << L) - 1), lv[:-1], dtype=np.uint32)  # h - 1: the bits below the leaf's side
    full = x & y
    if dim == 3:
        full &= c[2][:-1]
    w |= full
    np.invert(w, out=w)  # the bits at or above h where not all coordinates are set
    b = np.negative(w)
    b &= w  # the lowest of them
    keep = np.negative(b)  # b and the bits above it
    # Where a coordinate differs from the successor's: (c & keep) ^ flip ^ next, or-ed over the coordinates.
    off = x & keep
    off ^= b
    off ^= c[0][1:]
    carry = x & b
    tmp = y & keep
    tmp ^= carry
    tmp ^= c[1][1:]
    off |= tmp
    if dim == 3:
        carry &= y
        np.bitwise_and(c[2][:-1], keep, out=tmp)
        tmp ^= carry
        tmp ^= c[2][1:]
        off |= tmp
    if isinstance(t, int):  # one tree: every leaf's successor is the next one, and none but the last ends the tree
        return not int(np.bitwise_or.reduce(off)) and int(b.max()) < 1 << L
    ends = b == np.uint32(1 << L)
    origin = c[0][1:] | c[1][1:]
    if dim == 3:
        origin |= c[2][1:]
    t64 = t.astype(np.int64)
    ok = np.where(ends, (t64[1:] == t64[:-1] + 1) & (origin == 0), (t64[1:] == t64[:-1]) & (off == 0))
    return bool(ok.all())


def _copied(out: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Copy ``a`` into ``out`` (as its unsigned bits, or its values if wider) and return ``out``."""
    np.copyto(out, a.view(out.dtype) if a.dtype.itemsize == out.dtype.itemsize else a, casting="unsafe")
    return out
