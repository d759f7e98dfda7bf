"""Curve keys: Morton and Hilbert indices of leaves at maximum level, vectorized (see :mod:`amrckpt.sfc`)."""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np

from ..errors import PartitionError

MAXLEVEL: dict[int, int] = {2: 30, 3: 19}
"""Maximum level of the integer coordinates by dimension (``P4EST_MAXLEVEL``, ``P8EST_MAXLEVEL``)."""
QMAXLEVEL: dict[int, int] = {2: 29, 3: 18}
"""Maximum level of a leaf by dimension (``P4EST_QMAXLEVEL``, ``P8EST_QMAXLEVEL``)."""
ROOT_LEN: dict[int, int] = {d: 1 << L for d, L in MAXLEVEL.items()}
"""Side length of a tree in integer coordinates, ``2**MAXLEVEL[dim]`` (``P4EST_ROOT_LEN``)."""
CURVES: tuple[str, ...] = ("morton", "hilbert")
"""The space-filling curves known to :func:`sfc_keys`."""

Curve = Literal["morton", "hilbert"]

_BLOCK = 1 << 16
"""Elements per block in the key computations: the temporaries of one block stay in cache."""

_U64 = np.uint64


# --------------------------------------------------------------------------- validation


def _int_array(a: Any, what: str) -> np.ndarray:
    """Return ``a`` as a 1-D integer numpy array (no copy if it already is one).

    Raises
    ------
    PartitionError
        On this rank, for values that are not integers.
    """
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise PartitionError(f"{what} must be a 1-D array, not of shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind in "fb":
            return arr.astype(np.int64)
        raise PartitionError(f"{what} must have an integer dtype, not {arr.dtype}")
    return arr


def _first(mask: np.ndarray) -> int:
    """Index of the first True of a boolean array."""
    return int(np.argmax(mask))


def _coords(x: Any, y: Any, z: Any, level: Any, check: bool) -> tuple[int, list[np.ndarray], np.ndarray | None]:
    """Validate coordinates (and levels); return ``(dim, coords, level)``.

    Raises
    ------
    PartitionError
        On this rank, for coordinates of different lengths, of a dimension other than 2 or 3, or levels out of range.
    """
    dim = 2 if z is None else 3
    names = ("x", "y", "z")
    coords = [_int_array(c, names[i]) for i, c in enumerate((x, y) if z is None else (x, y, z))]
    n = coords[0].shape[0]
    for name, c in zip(names, coords, strict=False):
        if c.shape[0] != n:
            raise PartitionError(f"{name} has {c.shape[0]} entries but x has {n}")
    lev = None
    if level is not None:
        lev = _int_array(level, "level")
        if lev.shape[0] != n:
            raise PartitionError(f"level has {lev.shape[0]} entries but x has {n}")
    if not check or n == 0:
        return dim, coords, lev
    L = MAXLEVEL[dim]
    for name, c in zip(names, coords, strict=False):
        if c.min() < 0 or c.max() >= ROOT_LEN[dim]:
            i = _first((c < 0) | (c >= ROOT_LEN[dim]))
            raise PartitionError(f"leaf {i}: {name} = {int(c[i])} is outside the tree [0, 2**{L}) ({dim}D)")
    if lev is not None:
        if lev.min() < 0 or lev.max() > QMAXLEVEL[dim]:
            i = _first((lev < 0) | (lev > QMAXLEVEL[dim]))
            raise PartitionError(f"leaf {i}: level {int(lev[i])} is outside [0, {QMAXLEVEL[dim]}] ({dim}D QMAXLEVEL)")
        i = _first_misaligned(coords, lev, L)
        if i >= 0:
            xyz = ", ".join(str(int(c[i])) for c in coords)
            raise PartitionError(
                f"leaf {i}: coordinates ({xyz}) are not multiples of 2**{L - int(lev[i])}, as a leaf of level {int(lev[i])} needs"
            )
    return dim, coords, lev


def _first_misaligned(coords: list[np.ndarray], lev: np.ndarray, maxlevel: int) -> int:
    """Return the first leaf whose coordinates are not multiples of ``2**(maxlevel - level)``, or -1."""
    n = lev.shape[0]
    b = min(n, _BLOCK)
    bits = np.empty(b, dtype=np.int64)
    mask = np.empty(b, dtype=np.int64)
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        m = hi - lo
        bb, mb = bits[:m], mask[:m]
        np.copyto(bb, coords[0][lo:hi], casting="unsafe")
        for c in coords[1:]:
            np.bitwise_or(bb, c[lo:hi], out=bb, casting="unsafe")
        np.subtract(maxlevel, lev[lo:hi], out=mb, casting="unsafe")
        np.left_shift(1, mb, out=mb)
        np.subtract(mb, 1, out=mb)
        np.bitwise_and(bb, mb, out=bb)
        if bb.any():
            return lo + _first(bb != 0)
    return -1


def _check_curve(curve: str) -> None:
    if curve not in CURVES:
        raise PartitionError(f"curve must be one of {CURVES}, not {curve!r}")


# --------------------------------------------------------------------------- Morton

# Magic numbers that spread the low bits of a word to every dim-th bit.
_SPREAD: dict[int, tuple[tuple[int, int], ...]] = {
    2: (
        (16, 0x0000FFFF0000FFFF),
        (8, 0x00FF00FF00FF00FF),
        (4, 0x0F0F0F0F0F0F0F0F),
        (2, 0x3333333333333333),
        (1, 0x5555555555555555),
    ),
    3: (
        (32, 0x001F00000000FFFF),
        (16, 0x001F0000FF0000FF),
        (8, 0x100F00F00F00F00F),
        (4, 0x10C30C30C30C30C3),
        (2, 0x1249249249249249),
    ),
}
_LOWMASK = {2: 0xFFFFFFFF, 3: 0x1FFFFF}


def _spread(v: np.ndarray, dim: int, tmp: np.ndarray) -> None:
    """Spread the bits of uint64 ``v`` in place to every ``dim``-th bit (magic numbers)."""
    np.bitwise_and(v, _U64(_LOWMASK[dim]), out=v)
    for shift, mask in _SPREAD[dim]:
        np.left_shift(v, _U64(shift), out=tmp)
        np.bitwise_or(v, tmp, out=v)
        np.bitwise_and(v, _U64(mask), out=v)


def _compact(v: np.ndarray, dim: int, tmp: np.ndarray) -> None:
    """Inverse of :func:`_spread`: gather every ``dim``-th bit of uint64 ``v`` in place."""
    steps = _SPREAD[dim]
    np.bitwise_and(v, _U64(steps[-1][1]), out=v)
    for k in range(len(steps) - 1, -1, -1):
        shift = steps[k][0]
        np.right_shift(v, _U64(shift), out=tmp)
        np.bitwise_or(v, tmp, out=v)
        np.bitwise_and(v, _U64(steps[k - 1][1] if k else _LOWMASK[dim]), out=v)


def _morton_block(coords: list[np.ndarray], lo: int, hi: int, out: np.ndarray, tmp: np.ndarray, acc: np.ndarray) -> None:
    """Morton keys of ``coords[:][lo:hi]`` into ``out`` (uint64 buffers of length ``hi - lo``)."""
    dim = len(coords)
    for j, c in enumerate(coords):
        dst = out if j == 0 else acc
        np.copyto(dst, c[lo:hi], casting="unsafe")
        _spread(dst, dim, tmp)
        if j:
            np.left_shift(acc, _U64(j), out=acc)
            np.bitwise_or(out, acc, out=out)


def _morton_unchecked(coords: list[np.ndarray]) -> np.ndarray:
    n = coords[0].shape[0]
    keys = np.empty(n, dtype=np.uint64)
    b = min(n, _BLOCK)
    tmp = np.empty(b, dtype=np.uint64)
    acc = np.empty(b, dtype=np.uint64)
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        m = hi - lo
        _morton_block(coords, lo, hi, keys[lo:hi], tmp[:m], acc[:m])
    return keys


def morton_keys(x: Any, y: Any, z: Any = None, *, level: Any = None, check: bool = True) -> np.ndarray:
    """Morton (Z-order) keys of leaf anchors at maximum level, as p4est interleaves them.

    Bit ``i`` of ``x``, ``y`` and ``z`` becomes bit ``dim*i``, ``dim*i + 1``
    and ``dim*i + 2`` of the key, so that for a leaf of level ``l`` the key
    shifted right by ``dim * (MAXLEVEL[dim] - l)`` equals p4est's
    ``p4est_quadrant_linear_id(q, l)``.  Vectorized with the classic
    magic-number bit spreading.

    Parameters
    ----------
    x, y : (N,) array_like of int
        Anchor coordinates at maximum level, ``0 <= x < ROOT_LEN[dim]``.
    z : (N,) array_like of int, optional
        Third coordinate; selects 3D (``MAXLEVEL[3]`` = 19).
    level : (N,) array_like of int, optional
        Leaf levels; the key does not depend on them, but when given (and
        ``check``) they are validated and the coordinates must be multiples
        of ``2**(MAXLEVEL[dim] - level)``.
    check : bool, optional
        Validate the inputs (default).  With ``check=False`` coordinates
        outside the tree give meaningless keys.

    Returns
    -------
    (N,) numpy.ndarray of numpy.uint64
        The keys, below ``2**60`` (2D) or ``2**57`` (3D).  Not collective.

    Raises
    ------
    PartitionError
        If the arrays are not 1-D integer arrays of one length, a coordinate
        is outside the tree, or (with ``level``) a level is outside
        ``[0, QMAXLEVEL[dim]]`` or a coordinate is not aligned to its level.

    """
    _, coords, _ = _coords(x, y, z, level, check)
    return _morton_unchecked(coords)


def morton_decode(keys: Any, dim: int) -> tuple[np.ndarray, ...]:
    """Anchor coordinates from Morton keys: the inverse of :func:`morton_keys`.

    Parameters
    ----------
    keys : (N,) array_like of numpy.uint64
        Morton keys at maximum level, below ``2**(dim * MAXLEVEL[dim])``.
    dim : {2, 3}
        The dimension.

    Returns
    -------
    tuple of (N,) numpy.ndarray of numpy.int32
        ``(x, y)`` or ``(x, y, z)``.  Not collective.

    Raises
    ------
    PartitionError
        If ``dim`` is not 2 or 3, or a key is out of range.

    """
    if dim not in MAXLEVEL:
        raise PartitionError(f"dim must be 2 or 3, not {dim!r}")
    k = np.asarray(keys)
    if k.size == 0 and k.ndim == 1:
        k = k.astype(np.uint64)
    if k.ndim != 1 or k.dtype.kind not in "iu":
        raise PartitionError(f"keys must be a 1-D integer array, not {k.dtype} of shape {k.shape}")
    if k.dtype.kind == "i":
        if (k < 0).any():
            raise PartitionError(f"key {_first(k < 0)} is negative")
    top = 1 << (dim * MAXLEVEL[dim])
    if k.size and int(k.max()) >= top:
        i = _first(k >= top)
        raise PartitionError(f"key {i} = {int(k[i])} is not below 2**{dim * MAXLEVEL[dim]}")
    k = k.astype(np.uint64, copy=False)
    n = k.shape[0]
    out = [np.empty(n, dtype=np.int32) for _ in range(dim)]
    b = min(n, _BLOCK)
    v = np.empty(b, dtype=np.uint64)
    tmp = np.empty(b, dtype=np.uint64)
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        m = hi - lo
        for j in range(dim):
            np.right_shift(k[lo:hi], _U64(j), out=v[:m])
            _compact(v[:m], dim, tmp[:m])
            np.copyto(out[j][lo:hi], v[:m], casting="unsafe")
    return tuple(out)


# --------------------------------------------------------------------------- Hilbert


def _build_hilbert_tables(dim: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """State tables of Hamilton's Hilbert curve, ``chunk`` levels per lookup.

    Returns ``(digits, nxt)``, both int64 arrays indexed by
    ``state * 2**(dim*chunk) + u`` where ``u`` is ``chunk`` levels of Morton
    digits (the child ids, x in the lowest bit, top level first):
    ``digits`` holds the ``dim*chunk`` Hilbert digits and ``nxt`` the next
    state already multiplied by ``2**(dim*chunk)``.
    """
    n = dim
    full = (1 << n) - 1

    def rotr(b: int, r: int) -> int:
        r %= n
        return ((b >> r) | (b << (n - r))) & full

    def rotl(b: int, r: int) -> int:
        r %= n
        return ((b << r) | (b >> (n - r))) & full

    def gcinv(g: int) -> int:
        i, s = g, 1
        while g >> s:
            i ^= g >> s
            s += 1
        return i

    def trailing_ones(i: int) -> int:
        c = 0
        while i & 1:
            i >>= 1
            c += 1
        return c

    def entry(w: int) -> int:
        if w == 0:
            return 0
        g = 2 * ((w - 1) // 2)
        return g ^ (g >> 1)

    def direction(w: int) -> int:
        if w == 0:
            return 0
        return (trailing_ones(w - 1) if w % 2 == 0 else trailing_ones(w)) % n

    # One level: (entry corner e, intra direction d) -> child id c -> (digit w, next state).
    states: dict[tuple[int, int], int] = {(0, 0): 0}
    order: list[tuple[int, int]] = [(0, 0)]
    rows: list[list[tuple[int, tuple[int, int]]]] = []
    while len(rows) < len(order):
        e, d = order[len(rows)]
        row = []
        for c in range(1 << n):
            w = gcinv(rotr(c ^ e, d + 1))
            nxt = (e ^ rotl(entry(w), d + 1), (d + direction(w) + 1) % n)
            if nxt not in states:
                states[nxt] = len(order)
                order.append(nxt)
            row.append((w, nxt))
        rows.append(row)
    S = len(order)
    dig1 = np.array([[w for w, _ in row] for row in rows], dtype=np.int64)
    nxt1 = np.array([[states[s] for _, s in row] for row in rows], dtype=np.int64)
    # Compose `chunk` levels, vectorized over every (state, chunk of digits).
    width = n * chunk
    st0 = np.repeat(np.arange(S, dtype=np.int64), 1 << width)
    u = np.tile(np.arange(1 << width, dtype=np.int64), S)
    st = st0.copy()
    h = np.zeros_like(u)
    for t in range(chunk):
        child = (u >> (n * (chunk - 1 - t))) & full
        h = (h << n) | dig1[st, child]
        st = nxt1[st, child]
    return h, st << width


# Levels per table lookup (chunk) and zero levels appended below the key so
# that the chunks divide it: 2D 30 = 5 x 6, 3D 19 + 1 = 5 x 4.
_HCHUNK = {2: (6, 0), 3: (4, 1)}


@functools.cache
def _hilbert_tables(dim: int) -> tuple[np.ndarray, np.ndarray]:
    return _build_hilbert_tables(dim, _HCHUNK[dim][0])


def _hilbert_unchecked(coords: list[np.ndarray], lev: np.ndarray | None) -> np.ndarray:
    dim = len(coords)
    L = MAXLEVEL[dim]
    chunk, pad = _HCHUNK[dim]
    width = dim * chunk
    steps = (L + pad) // chunk
    digits, nxt = _hilbert_tables(dim)
    n = coords[0].shape[0]
    keys = np.empty(n, dtype=np.uint64)
    b = min(n, _BLOCK)
    tmp = np.empty(b, dtype=np.uint64)
    acc = np.empty(b, dtype=np.uint64)
    m64 = np.empty(b, dtype=np.uint64)
    st = np.empty(b, dtype=np.int64)
    idx = np.empty(b, dtype=np.int64)
    h = np.empty(b, dtype=np.int64)
    g = np.empty(b, dtype=np.int64)
    cmask = np.int64((1 << width) - 1)
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        m = hi - lo
        _morton_block(coords, lo, hi, m64[:m], tmp[:m], acc[:m])
        mk = m64[:m].view(np.int64)
        if pad:
            np.left_shift(mk, dim * pad, out=mk)
        s, hb, ib, gb = st[:m], h[:m], idx[:m], g[:m]
        s.fill(0)
        hb.fill(0)
        for t in range(steps):
            shift = width * (steps - 1 - t)
            np.right_shift(mk, shift, out=ib)
            np.bitwise_and(ib, cmask, out=ib)
            np.add(ib, s, out=ib)
            np.take(digits, ib, out=gb)
            np.left_shift(hb, width, out=hb)
            np.bitwise_or(hb, gb, out=hb)
            np.take(nxt, ib, out=s)
        if pad:
            np.right_shift(hb, dim * pad, out=hb)
        if lev is not None:
            # Clear the digits below each leaf's level: the key of its first cell.
            np.subtract(L, lev[lo:hi], out=gb, casting="unsafe")
            np.multiply(gb, dim, out=gb)
            np.right_shift(hb, gb, out=hb)
            np.left_shift(hb, gb, out=hb)
        np.copyto(keys[lo:hi], hb, casting="unsafe")
    return keys


def hilbert_keys(x: Any, y: Any, z: Any = None, *, level: Any = None, check: bool = True) -> np.ndarray:
    """Hilbert keys of leaves: the curve index of each leaf's first max-level cell.

    For a leaf of level ``l`` with anchor ``(x, y[, z])`` the key is
    ``hilbert_l(x >> (L - l), ...) << dim * (L - l)`` with ``L =
    MAXLEVEL[dim]``: the ``2**(dim*(L - l))`` max-level cells of the leaf are
    the contiguous key range that starts there, so sorting the leaves of a
    tree by ``(key, level)`` gives the Hilbert order of an adaptive leaf set.
    The curve is Hamilton's (module docstring); it is computed top-down from
    the Morton key, several levels per table lookup, vectorized over leaves.

    Parameters
    ----------
    x, y : (N,) array_like of int
        Anchor coordinates at maximum level, ``0 <= x < ROOT_LEN[dim]``.
    z : (N,) array_like of int, optional
        Third coordinate; selects 3D.
    level : (N,) array_like of int, optional
        Leaf levels, ``0 <= level <= QMAXLEVEL[dim]``.  Without it every
        point is taken as a max-level cell (level ``MAXLEVEL[dim]``).
    check : bool, optional
        Validate the inputs (default).

    Returns
    -------
    (N,) numpy.ndarray of numpy.uint64
        The keys, below ``2**60`` (2D) or ``2**57`` (3D).  Not collective.

    Raises
    ------
    PartitionError
        As :func:`morton_keys`.

    """
    _, coords, lev = _coords(x, y, z, level, check)
    return _hilbert_unchecked(coords, lev)


def sfc_keys(x: Any, y: Any, z: Any = None, *, level: Any = None, curve: Curve = "morton", check: bool = True) -> np.ndarray:
    """Keys of leaves along ``curve``: :func:`morton_keys` or :func:`hilbert_keys`.

    Parameters
    ----------
    x, y, z, level, check
        As :func:`hilbert_keys`.
    curve : {"morton", "hilbert"}, optional
        The space-filling curve.

    Returns
    -------
    (N,) numpy.ndarray of numpy.uint64
        Not collective.

    Raises
    ------
    PartitionError
        For an unknown curve, or as :func:`morton_keys`.

    """
    _check_curve(curve)
    _, coords, lev = _coords(x, y, z, level, check)
    return _keys(coords, lev, curve)


def _keys(coords: list[np.ndarray], lev: np.ndarray | None, curve: str) -> np.ndarray:
    return _morton_unchecked(coords) if curve == "morton" else _hilbert_unchecked(coords, lev)


def leaf_ranges(
    x: Any, y: Any, z: Any = None, *, level: Any, curve: Curve = "morton", check: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Return the max-level key range ``[first, stop)`` of each leaf along ``curve``.

    Parameters
    ----------
    x, y, z : (N,) array_like of int
        Anchor coordinates at maximum level (``z`` only in 3D).
    level : (N,) array_like of int
        Leaf levels, ``0 <= level <= QMAXLEVEL[dim]``.
    curve : {"morton", "hilbert"}, optional
        The space-filling curve.
    check : bool, optional
        Validate the inputs (default).

    Returns
    -------
    first, stop : (N,) numpy.ndarray of numpy.uint64
        ``first`` is the leaf's key, ``stop = first + 2**(dim * (MAXLEVEL[dim]
        - level))``; ``stop`` may equal ``2**(dim * MAXLEVEL[dim])``.  Not
        collective.

    Raises
    ------
    PartitionError
        As :func:`sfc_keys`.

    """
    _check_curve(curve)
    if level is None:
        raise PartitionError("leaf_ranges needs the leaf levels")
    dim, coords, lev = _coords(x, y, z, level, check)
    assert lev is not None
    first = _keys(coords, lev, curve)
    return first, first + _volumes(lev, dim)


def _volumes(lev: np.ndarray, dim: int) -> np.ndarray:
    """Return the max-level cells per leaf, ``2**(dim*(L - level))``, as uint64."""
    vol: np.ndarray = np.left_shift(_U64(1), (dim * (MAXLEVEL[dim] - lev.astype(np.int64))).astype(np.uint64))
    return vol
