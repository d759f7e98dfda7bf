"""Corner points shared by the leaves of a block: each distinct vertex of a tree once, found on an integer lattice.

The corners of a leaf at level ``l`` with anchor ``(x, y[, z])`` (p4est's
integer coordinates, in units of ``2**-maxlevel`` of its tree) are ``x + b
2**(maxlevel - l)`` per axis, ``b`` in {0, 1}.  Within a block of leaves
they all lie on the lattice of spacing ``2**(maxlevel - L)``, ``L`` the
block's finest level; a vertex is its tree and its lattice cell, one
integer ``key`` (tree-major, then x, y, z).  The distinct keys, in
increasing order, are the block's points; each leaf corner is the rank of
its key among them.  They are found in a dense table of the lattice where
it is small (a uniform block is a dilation of its anchors by one cell per
axis), else by sorting the keys (each axis in bits of its own, decoded by
shifts), else (keys of more than 62 bits) by sorting rows: the result is
the same.  Points of different trees
are never merged (a vertex shared by two trees, where the geometry joins
them, appears once per tree).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ._geometry import _CORNERS

__all__ = ["POINT_BLOCK_LEAVES", "CornerMethod", "count_shared_corners", "shared_corners"]

POINT_BLOCK_LEAVES = 1 << 17
"""Leaves per block: leaves ``[k B, (k + 1) B)`` of a mesh share their corner points (:func:`shared_corners`).

Blocks are global positions along the curve, so that the points of a step
depend neither on the chunk size of an export nor on its number of ranks.
A uniform block of ``2**17`` quadrants is a 512 x 256 rectangle of them:
513 x 257 points, 0.6 % more than leaves."""

DENSE_CELLS_PER_CORNER = 4
"""A block's lattice is held as a dense table when it has at most this many cells per leaf corner."""

CornerMethod = Literal["auto", "dense", "sort", "rows"]
"""How :func:`shared_corners` finds the distinct vertices (the result is the same)."""

_MAX_KEY_BITS = 62


@dataclass(frozen=True)
class _Lattice:
    """The lattice of one block: spacing ``2**shift`` (p4est units), tree ``t0 + t`` and cell ``lo + i`` per axis."""

    shift: int
    t0: int
    lo: tuple[int, ...]
    ext: tuple[int, ...]  # trees, then cells per axis
    size: int

    @property
    def strides(self) -> tuple[int, ...]:
        """Of the tree and of each axis in a key of the dense table (keys ``0 .. size - 1``)."""
        out = [1]
        for e in self.ext[:0:-1]:
            out.append(out[-1] * e)
        return tuple(out[::-1])

    @property
    def bits(self) -> tuple[int, ...]:
        """Bits of the tree and of each axis in a key to sort (each its own bits: decoded by shifts)."""
        return tuple((e - 1).bit_length() for e in self.ext)

    @property
    def bit_strides(self) -> tuple[int, ...]:
        """Of the tree and of each axis in a key to sort: powers of two."""
        b = self.bits
        return tuple(1 << sum(b[i + 1 :]) for i in range(len(b)))


def _anchors(mesh: np.ndarray, dim: int, maxlevel: int) -> tuple[_Lattice, list[np.ndarray], Any, np.ndarray]:
    """Return the block's lattice, its leaves' anchor cells per axis, their sides in cells (1: uniform), and trees."""
    level = np.ascontiguousarray(mesh["level"])
    finest, coarsest = int(level.max()), int(level.min())
    shift = maxlevel - finest
    side: Any = 1 if coarsest == finest else np.left_shift(1, (finest - level).astype(np.int64))
    tree = np.ascontiguousarray(mesh["tree"])
    t0, t1 = int(tree.min()), int(tree.max())
    cells = [np.right_shift(mesh[c], shift) for c in ("x", "y", "z")[:dim]]
    lo = tuple(int(c.min()) for c in cells)
    hi = tuple(int((c + side).max()) if isinstance(side, np.ndarray) else int(c.max()) + 1 for c in cells)
    ext = (t1 - t0 + 1, *(h - low + 1 for h, low in zip(hi, lo, strict=True)))
    return _Lattice(shift, t0, lo, ext, math.prod(ext)), cells, side, tree


def _key(lat: _Lattice, cells: list[np.ndarray], tree: np.ndarray, strides: tuple[int, ...], dt: Any) -> np.ndarray:
    """Anchor keys: the sum over the tree and the axes of (value - lowest) * stride, in one pass per axis."""
    key: np.ndarray = cells[0].astype(dt, copy=False) * dt(strides[1])
    for c, stride in zip(cells[1:], strides[2:], strict=True):
        if stride == 1:
            key += c
        else:
            key += c.astype(dt, copy=False) * dt(stride)
    if lat.ext[0] > 1:
        key += (tree - lat.t0).astype(dt) * dt(strides[0])
    low = sum(v * stride for v, stride in zip(lat.lo, strides[1:], strict=True))
    if low:
        key -= dt(low)
    return key


def _corner_keys(key: np.ndarray, side: Any, strides: tuple[int, ...], dim: int) -> np.ndarray:
    """Keys of every leaf corner, ``(n, 2**dim)``, in VTK order: one strided pass per corner, or per two.

    Keys of int32 (lattices below ``2**31`` cells) are written two at a
    time, as the int64 ``key (2**32 + 1) + side (o_0 + o_1 2**32)`` that
    holds both on a little-endian machine (no carry: each half is a key).
    """
    offs = [sum(st for st, b in zip(strides[1:], corner, strict=True) if b) for corner in _CORNERS[dim]]
    n, nv = len(key), 1 << dim
    out = np.empty((n, nv), dtype=key.dtype)
    s = side if isinstance(side, np.ndarray) else None
    if key.dtype == np.int32 and sys.byteorder == "little":
        k2 = key.astype(np.int64) * np.int64(0x100000001)
        pairs = out.view(np.int64)  # (n, nv // 2): corners 2 j and 2 j + 1 in column j
        for j in range(nv // 2):
            both = np.int64(offs[2 * j] + (offs[2 * j + 1] << 32))
            if s is None:
                np.add(k2, both, out=pairs[:, j])
            else:
                np.multiply(s, both, out=pairs[:, j], casting="unsafe")
                pairs[:, j] += k2
        return out
    t = s.astype(key.dtype, copy=False) if s is not None else None
    for c, off in enumerate(offs):
        if not off:
            out[:, c] = key
        elif t is None:
            np.add(key, off, out=out[:, c])
        else:
            np.multiply(t, off, out=out[:, c])
            out[:, c] += key
    return out


def _table(key: np.ndarray, keys: np.ndarray | None, lat: _Lattice) -> np.ndarray:
    """Return the dense table of the lattice: True at the block's vertices (``keys``: corners of a block not uniform)."""
    table = np.zeros(lat.size, dtype=bool)
    if keys is not None:
        table[keys.reshape(-1)] = True
    else:  # a uniform block: its vertices are its anchors dilated by one cell along each axis
        table[key] = True
        for st in lat.strides[1:]:
            table[st:] |= table[:-st]
    return table


def _dense(key: np.ndarray, side: Any, lat: _Lattice, dim: int, first: int, dt: Any) -> tuple[list[np.ndarray] | None, np.ndarray]:
    """Distinct keys by a table of the lattice: (None if every cell is a point, else tree and cells of the points), corners."""
    uniform = not isinstance(side, np.ndarray)
    keys = None if uniform else _corner_keys(key, side, lat.strides, dim)
    table = _table(key, keys, lat)
    k = int(np.count_nonzero(table))
    if k == lat.size:  # every cell of the lattice is a point: a corner's key is its point
        if keys is None:
            return None, _corner_keys(key.astype(dt, copy=False) + dt(first), side, lat.strides, dim)
        conn = keys.astype(dt, copy=False)
        return None, np.add(conn, first, out=conn) if first else conn
    rank = np.empty(lat.size, dtype=dt)
    rank[table] = np.arange(first, first + k, dtype=dt)
    if keys is None:
        keys = _corner_keys(key, side, lat.strides, dim)
    return list(np.nonzero(table.reshape(lat.ext))), rank.take(keys)


def _sort(keys: np.ndarray, lat: _Lattice, first: int, dt: Any) -> tuple[list[np.ndarray], np.ndarray]:
    """Distinct keys (of :attr:`_Lattice.bit_strides`) by one sort of the keys packed with their positions.

    Returns the tree and cells of the points, and the corners (from ``first``).
    """
    m = keys.size
    idx_bits = max(1, (m - 1).bit_length())
    if sum(lat.bits) + idx_bits > 63:
        u, inv = np.unique(keys.reshape(-1).astype(np.int64, copy=False), return_inverse=True)
        return _cells_of(u, lat), (inv.reshape(keys.shape) + first).astype(dt, copy=False)
    packed = np.left_shift(keys.reshape(-1), idx_bits, dtype=np.int64)
    packed |= np.arange(m, dtype=np.int64)
    packed.sort()
    sk = packed >> idx_bits
    new = np.empty(m, dtype=bool)
    new[0] = True
    np.not_equal(sk[1:], sk[:-1], out=new[1:])
    ranks = np.cumsum(new, dtype=dt)
    np.add(ranks, first - 1, out=ranks)
    conn = np.empty(m, dtype=dt)
    conn[packed & ((1 << idx_bits) - 1)] = ranks
    return _cells_of(sk[np.flatnonzero(new)], lat), conn.reshape(keys.shape)


def _rows(cells: list[np.ndarray], tree: np.ndarray, side: Any, lat: _Lattice, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct vertices as rows ``(tree - t0, cell per axis - lo)`` sorted lexicographically: rows, corner ranks."""
    n, nv = len(tree), 1 << dim
    rows = np.empty((n, nv, dim + 1), dtype=np.int64)
    rows[:, :, 0] = (tree.astype(np.int64) - lat.t0)[:, None]
    s = np.asarray(side, dtype=np.int64)
    for a, c in enumerate(cells):
        cell = c.astype(np.int64) - lat.lo[a]
        rows[:, :, a + 1] = cell[:, None] + (s[:, None] if s.ndim else s) * _CORNERS[dim][:, a].astype(np.int64)[None, :]
    u, inv = np.unique(rows.reshape(-1, dim + 1), axis=0, return_inverse=True)
    return u, inv.reshape(n, nv)


def _place(cells: list[np.ndarray], trees: np.ndarray, lat: _Lattice, geometry: Any, maxlevel: int, dtype: Any) -> np.ndarray:
    """Points ``(k, 3)`` of ``dtype`` of lattice cells (per axis, relative to ``lat.lo``) of trees ``t0 + trees``."""
    k, dim = len(trees), len(cells)
    out = np.empty((k, 3), dtype=dtype)
    one_tree = lat.ext[0] == 1
    t = np.full(k, lat.t0, dtype=np.intp) if one_tree else trees.astype(np.intp) + lat.t0
    unit = 2.0 ** (lat.shift - maxlevel)  # one lattice cell, in trees
    if not geometry.boxes_exact:
        ref = np.empty((k, dim), dtype=np.float64)
        for a, c in enumerate(cells):
            np.multiply(c + lat.lo[a], unit, out=ref[:, a])
        out[:] = geometry.map_points(t, ref)
        return out
    lower, upper = geometry.tree_lower, geometry.tree_upper
    out[:, dim:] = 0.0
    for a, c in enumerate(cells):
        ext = upper[:, a] - lower[:, a]
        if one_tree:
            out[:, a] = (c + lat.lo[a]) * (ext[lat.t0] * unit) + lower[lat.t0, a]
        else:
            out[:, a] = (c + lat.lo[a]) * (ext[t] * unit) + lower[t, a]
    return out


def _place_all(lat: _Lattice, geometry: Any, maxlevel: int, dtype: Any) -> np.ndarray:
    """Points of every cell of the lattice, in key order (a block whose vertices fill it), by broadcasting."""
    dim = len(lat.lo)
    if not geometry.boxes_exact:
        grids = np.indices(lat.ext).reshape(dim + 1, -1)
        return _place(list(grids[1:]), grids[0], lat, geometry, maxlevel, dtype)
    out = np.empty((*lat.ext, 3), dtype=dtype)
    out[..., dim:] = 0.0
    trees = np.arange(lat.t0, lat.t0 + lat.ext[0])
    unit = 2.0 ** (lat.shift - maxlevel)
    lower, upper = geometry.tree_lower, geometry.tree_upper
    for a in range(dim):
        scale = (upper[trees, a] - lower[trees, a]) * unit  # (T,)
        cell = np.arange(lat.lo[a], lat.lo[a] + lat.ext[a + 1], dtype=np.float64)  # (n_a,)
        coord = cell[None, :] * scale[:, None] + lower[trees, a][:, None]  # (T, n_a)
        shape = [lat.ext[0]] + [lat.ext[b + 1] if b == a else 1 for b in range(dim)]
        out[..., a] = coord.reshape(shape)
    return out.reshape(-1, 3)


def _cells_of(u: np.ndarray, lat: _Lattice) -> list[np.ndarray]:
    """Tree (relative to ``t0``), then cell per axis (relative to ``lo``), of sort keys ``u`` (shifts and masks)."""
    bits = lat.bits
    out = []
    for i, b in enumerate(bits):
        below = sum(bits[i + 1 :])
        part = u >> below if below else u
        out.append(part & ((1 << b) - 1) if i else part)
    return out


def shared_corners(
    mesh: np.ndarray,
    geometry: Any,
    maxlevel: int,
    dtype: Any = np.float64,
    *,
    first: int = 0,
    method: CornerMethod = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Return the distinct corner points of a block of leaves, and each leaf's corners as indices of them.

    Vectorized, not collective: a handful of numpy passes over the leaves.
    Every corner lies on the lattice of the block's finest leaves (spacing
    ``2**(maxlevel - L)``, ``L`` their level); a vertex is its tree and its
    lattice cell, one integer key, and the block's points are its distinct
    keys in increasing order.  A vertex that leaves of one tree share (a
    face, an edge, a hanging node on a coarser leaf's side) is one point;
    leaves of different trees never share one, even where the geometry
    joins their trees.

    Parameters
    ----------
    mesh : (n,) numpy.ndarray of mesh records
        Fields ``tree``, ``level``, ``x``, ``y`` [, ``z``]: integer anchor
        coordinates in units of ``2**-maxlevel`` of a tree (p4est's).
    geometry : amrckpt.container.Geometry
        Where the trees lie (:func:`mesh_geometry`): boxes, or p4est's
        vertex map (and analytic map) of a connectivity.
    maxlevel : int
        p4est's ``MAXLEVEL`` of the coordinates.
    dtype : numpy dtype, optional
        Of the points (float64, or float32 where :func:`float32_exact`).
    first : int, optional
        The index of the first point: added to every corner (where the
        block's points go in a longer list).
    method : {"auto", "dense", "sort", "rows"}, optional
        How distinct keys are found: a table of the block's whole lattice
        (``"auto"`` where it has at most 4 cells per leaf corner; a uniform
        block's vertices are its anchors dilated by one cell per axis), one
        sort of the keys packed with their positions, or a sort of rows
        (``"auto"`` for keys of more than 62 bits).  The result
        does not depend on it.

    Returns
    -------
    points : (k, 3) numpy.ndarray of ``dtype``
        Each distinct vertex once, ordered by tree, then x, y, z; in the
        mesh's length units, z = 0 for a 2D mesh of boxes.
    corners : (n, 2**dim) numpy.ndarray of int32 (int64 from ``2**31``)
        Row ``i``: the points of leaf ``i``'s corners (``first`` + their
        index in ``points``) in VTK_QUAD / VTK_HEXAHEDRON order, as
        :func:`leaf_corners` orders them.
    """
    dim = geometry.dim
    n, nv = len(mesh), 1 << dim
    if n == 0:
        return np.zeros((0, 3), dtype=dtype), np.zeros((0, nv), dtype=np.int32)
    lat, cells, side, tree = _anchors(mesh, dim, maxlevel)
    dt: Any = np.int32 if first + min(lat.size, n * nv) < 1 << 31 else np.int64
    if method == "auto":
        method = "dense" if lat.size <= DENSE_CELLS_PER_CORNER * n * nv else "sort"
    if method == "rows" or sum(lat.bits) > _MAX_KEY_BITS:
        rows, inv = _rows(cells, tree, side, lat, dim)
        pts = _place(list(rows[:, 1:].T), rows[:, 0], lat, geometry, maxlevel, dtype)
        return pts, (inv + first).astype(dt, copy=False)
    if method == "dense":
        key = _key(lat, cells, tree, lat.strides, np.int64 if lat.size >= 1 << 31 else np.int32)
        where, conn = _dense(key, side, lat, dim, first, dt)
    else:
        kdt = np.int64 if sum(lat.bits) >= 31 else np.int32
        key = _key(lat, cells, tree, lat.bit_strides, kdt)
        where, conn = _sort(_corner_keys(key, side, lat.bit_strides, dim), lat, first, dt)
    if where is None:
        pts = _place_all(lat, geometry, maxlevel, dtype)
    else:
        pts = _place(where[1:], where[0], lat, geometry, maxlevel, dtype)
    return pts, conn


def count_shared_corners(mesh: np.ndarray, dim: int, maxlevel: int) -> int:
    """Return how many points :func:`shared_corners` gives a block of leaves (without placing them). Not collective."""
    if len(mesh) == 0:
        return 0
    lat, cells, side, tree = _anchors(mesh, dim, maxlevel)
    nv = 1 << dim
    if sum(lat.bits) > _MAX_KEY_BITS:
        return len(_rows(cells, tree, side, lat, dim)[0])
    if lat.size <= DENSE_CELLS_PER_CORNER * len(mesh) * nv:
        key = _key(lat, cells, tree, lat.strides, np.int64 if lat.size >= 1 << 31 else np.int32)
        keys = None if not isinstance(side, np.ndarray) else _corner_keys(key, side, lat.strides, dim)
        return int(np.count_nonzero(_table(key, keys, lat)))
    key = _key(lat, cells, tree, lat.bit_strides, np.int64 if sum(lat.bits) >= 31 else np.int32)
    flat = np.sort(_corner_keys(key, side, lat.bit_strides, dim).reshape(-1).astype(np.int64, copy=False))
    return int(np.count_nonzero(flat[1:] != flat[:-1])) + 1
