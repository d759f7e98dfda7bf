"""Between p4est's quadrants (``p4est_inflate``'s arrays) and a :class:`Forest`, vectorized."""

from __future__ import annotations

import itertools
import sys
from typing import Any, NamedTuple

import numpy as np

from ..comm import Call, as_comm, collective
from ..errors import SchemaError
from ._connectivity import Connectivity
from ._forest import _CHECK_CHUNK as _CHUNK
from ._forest import mesh_record_dtype
from ._keys import MAXLEVEL, QMAXLEVEL, morton_keys

__all__ = ["P4estQuadrants", "forest_from_p4est", "forest_to_p4est", "quadrant_dtype"]


def quadrant_dtype(dim: int) -> np.dtype[Any]:
    """Return numpy's view of p4est's ``p4est_quadrant_t`` (``p8est_quadrant_t``) on a 64-bit little-endian machine.

    24 bytes: ``x``, ``y`` [, ``z``] (``p4est_qcoord_t``, int32), ``level``
    (int8), ``pad8``, ``pad16``, and the 8-byte union ``p`` (user data
    pointer, or ``which_tree``...), so that a tree's ``quadrants``
    ``sc_array_t`` of a running p4est can be viewed without a copy.
    """
    names = [*["x", "y", "z"][:dim], "level", "pad8", "pad16", "p"]
    formats = ["<i4"] * dim + ["i1", "i1", "<i2", "<u8"]
    return np.dtype(
        {"names": names, "formats": formats, "offsets": [*[0, 4, 8][:dim], 4 * dim, 4 * dim + 1, 4 * dim + 2, 16], "itemsize": 24}
    )


class P4estQuadrants(NamedTuple):
    """A rank's quadrants as ``p4est_inflate`` takes them (what :meth:`Forest.to_p4est` returns).

    Attributes
    ----------
    quadrants : (n, dim + 1) numpy.ndarray of numpy.int32
        ``x``, ``y`` [, ``z``], ``level`` of each local quadrant, in curve
        order: ``p4est_inflate``'s ``quadrants`` array (``P4EST_DIM + 1``
        ``p4est_qcoord_t`` per quadrant) and the records of
        ``p4est_save_ext`` without data.
    global_first_quadrant : (P + 1,) numpy.ndarray of numpy.int64
        p4est's ``global_first_quadrant``: rank p holds global quadrants
        ``[global_first_quadrant[p], global_first_quadrant[p + 1])``.
    pertree : (num_trees + 1,) numpy.ndarray of numpy.int64
        p4est's ``pertree`` (``p4est_comm_count_pertree``): the global index
        of the first quadrant of each tree, and N last.
    first_local_tree, last_local_tree : int
        p4est's ``first_local_tree`` and ``last_local_tree`` of this rank
        (-1 and -2 on a rank without quadrants).
    """

    quadrants: np.ndarray
    global_first_quadrant: np.ndarray
    pertree: np.ndarray
    first_local_tree: int
    last_local_tree: int


def _columns(quadrants: Any, dim: int | None) -> tuple[int, list[np.ndarray], np.ndarray]:
    """Return ``(dim, [x, y(, z)], level)`` of quadrants given as (n, dim + 1) integers or ``p4est_quadrant_t`` records."""
    q = np.asarray(quadrants)
    if q.dtype.names is not None:
        names = q.dtype.names
        d = 3 if "z" in names else 2
        if q.ndim != 1 or not {"x", "y", "level"} <= set(names):
            raise SchemaError(f"Forest.from_p4est: records {q.dtype} are not p4est quadrants (x, y[, z], level)")
        coords = [q[c] for c in ("x", "y", "z")[:d]]
        level = q["level"]
    else:
        if q.ndim != 2 or q.shape[1] not in (3, 4) or (q.dtype.kind not in "iu" and q.size):
            raise SchemaError(
                f"Forest.from_p4est: quadrants of shape {q.shape} and dtype {q.dtype}: give (n, dim + 1) integers "
                "(x, y[, z], level), as p4est_save_ext and p4est_inflate lay them out, or p4est_quadrant_t records"
            )
        d = q.shape[1] - 1
        if q.dtype == np.int32:  # p4est's own: one blocked transpose, then contiguous rows that Forest keeps
            rows = np.empty((d + 1, q.shape[0]), dtype=np.int32)
            rows[...] = q.T
            coords, level = [rows[a] for a in range(d)], rows[d]
        else:  # views: Forest copies them once, checking that they fit
            coords, level = [q[:, a] for a in range(d)], q[:, d]
    if dim is not None and d != dim:
        raise SchemaError(f"Forest.from_p4est: {d}D quadrants, a {dim}D connectivity")
    return d, coords, level


def forest_from_p4est(
    cls: Any, quadrants: Any, pertree: Any, global_first_quadrant: Any, rank: int, connectivity: Connectivity | None, check: bool
) -> Any:
    """Implement :meth:`Forest.from_p4est` (not collective, vectorized).

    p4est's own layout, (n, dim + 1) int32 rows of ``x``, ``y`` [, ``z``],
    ``level``, is packed straight into the mesh records the forest then views
    (:func:`_pack`); other layouts go through :func:`_columns`.
    """
    q = np.asarray(quadrants)
    packable = sys.byteorder == "little" and q.dtype == np.int32 and q.ndim == 2 and q.shape[1] in (3, 4) and q.strides[1] == 4
    if packable:
        dim = q.shape[1] - 1
        if connectivity is not None and dim != connectivity.dim:
            raise SchemaError(f"Forest.from_p4est: {dim}D quadrants, a {connectivity.dim}D connectivity")
        n = q.shape[0]
    else:
        dim, coords, level = _columns(q, None if connectivity is None else connectivity.dim)
        n = level.shape[0]
    pt = np.asarray(pertree, dtype=np.int64)
    gfq = np.asarray(global_first_quadrant, dtype=np.int64)
    if pt.ndim != 1 or pt.shape[0] < 2 or pt[0] != 0 or (pt[1:] < pt[:-1]).any():
        raise SchemaError("Forest.from_p4est: pertree must start at 0 and not decrease (p4est_comm_count_pertree)")
    K = pt.shape[0] - 1
    if connectivity is not None and connectivity.num_trees != K:
        raise SchemaError(f"Forest.from_p4est: pertree has {K} trees, the connectivity {connectivity.num_trees}")
    if gfq.ndim != 1 or gfq.shape[0] < 2 or gfq[0] != 0 or (gfq[1:] < gfq[:-1]).any() or gfq[-1] != pt[-1]:
        raise SchemaError("Forest.from_p4est: global_first_quadrant must start at 0, not decrease and end at pertree[-1]")
    if not 0 <= rank < gfq.shape[0] - 1:
        raise SchemaError(f"Forest.from_p4est: rank {rank} is outside [0, {gfq.shape[0] - 1})")
    g0, g1 = int(gfq[rank]), int(gfq[rank + 1])
    if g1 - g0 != n:
        raise SchemaError(f"Forest.from_p4est: {n} quadrants; global_first_quadrant gives rank {rank} {g1 - g0}")
    try:
        if packable:
            rec, valid = _pack(q, pt, g0, check)
            forest = cls._viewing(rec, num_trees=K)
        else:
            forest, valid = cls(_trees(pt, g0, g1), level, *coords[:2], coords[2] if dim == 3 else None, num_trees=K), False
        if check and not valid:
            forest.check()  # names the first bad leaf
    except SchemaError as exc:
        raise SchemaError(f"Forest.from_p4est: {exc}") from exc
    return forest


def _pack(quadrants: np.ndarray, pertree: np.ndarray, g0: int, check: bool) -> tuple[np.ndarray, bool]:
    """Pack p4est's quadrants and their trees into mesh records (:func:`amrckpt.sfc.mesh_record_dtype`).

    Not collective, vectorized, chunk by chunk (cache-sized): the chunk's
    quadrant rows (``x``, ``y`` [, ``z``], ``level``, little-endian) copied
    whole, one ``V(4 dim + 4)`` item per leaf just after the record's tree
    (the high bytes of a row's level spill onto the next record's tree),
    then the chunk's trees (one ``np.repeat`` of the trees it meets, from
    ``pertree``) written over them.

    Parameters
    ----------
    quadrants : (n, dim + 1) numpy.ndarray of numpy.int32
        ``x``, ``y`` [, ``z``], ``level`` rows of global quadrants
        ``g0 .. g0 + n - 1`` (little-endian host, the last axis contiguous).
    pertree : (num_trees + 1,) numpy.ndarray of numpy.int64
        p4est's ``pertree``, checked to start at 0, not decrease and hold
        ``g0 + n`` quadrants or more.
    g0 : int
        The global index of the first quadrant (``global_first_quadrant[rank]``).
    check : bool
        Also check levels and coordinates as :meth:`Forest.check` does, on
        each chunk of quadrants while it is in the cache (the trees are in
        range by construction).

    Returns
    -------
    records : (n,) numpy.ndarray of mesh records
    valid : bool
        With ``check``, whether every leaf passed (if not, :meth:`Forest.check`
        names the first bad one); False without ``check``.

    Raises
    ------
    SchemaError
        If a level does not fit the records' int8 (no silent wrap-around);
        :meth:`Forest.check` checks the range that p4est allows.
    """
    n, width = quadrants.shape
    dim = width - 1
    dtype = mesh_record_dtype(dim)
    # Whole rows are copied (numpy's copy of 16-byte items beats the generic one of 13): the 3 high bytes
    # of each row's level land on the next record's tree, written after them, and the last on 3 spare bytes.
    raw = np.empty(n * dtype.itemsize + 3, dtype=np.uint8)
    rec = raw[: n * dtype.itemsize].view(dtype)
    src = quadrants.view(f"V{4 * width}")[:, 0]
    packed = np.ndarray((n,), dtype=f"V{4 * width}", buffer=raw, offset=4, strides=(dtype.itemsize,))
    tree, level = rec["tree"], quadrants[:, dim]
    beyond = 0  # the largest level as uint32: above 127 if one is outside [0, 127]
    valid, root = check, (1 << MAXLEVEL[dim]) - 1
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        t0 = int(np.searchsorted(pertree, g0 + s, side="right")) - 1
        t1 = int(np.searchsorted(pertree, g0 + e - 1, side="right")) - 1
        packed[s:e] = src[s:e]  # first: its rows spill onto the trees of records s + 1 .. e
        if t0 == t1:  # the chunk in one tree
            tree[s:e] = t0
        else:
            counts = np.diff(np.clip(pertree[t0 : t1 + 2], g0 + s, g0 + e))
            tree[s:e] = np.repeat(np.arange(t0, t1 + 1, dtype=np.int32), counts)
        top = int(level[s:e].view(np.uint32).max())
        beyond = max(beyond, top)
        if valid:  # the ranges of Forest._check_chunk, on the quadrants' uint32 columns
            cols = quadrants[s:e].view(np.uint32)
            u = cols[:, 0] | cols[:, 1]
            if dim == 3:
                u |= cols[:, 2]
            valid = top <= QMAXLEVEL[dim] and not int(np.bitwise_or.reduce(u)) & ~root
            if valid:
                np.left_shift(u, cols[:, dim], out=u)
                valid = not int(np.bitwise_or.reduce(u)) & root
    if beyond > 127:
        lo, hi = int(level.min()), int(level.max())
        if lo < -128 or hi > 127:
            raise SchemaError(f"Forest: level holds {lo if lo < -128 else hi}, beyond the range of int8")
    return rec, valid


def _trees(pertree: np.ndarray, g0: int, g1: int) -> np.ndarray:
    """Return the tree of each global quadrant ``g0 <= g < g1`` ((g1 - g0,) int32), from p4est's ``pertree`` (one ``np.repeat``)."""
    tree = np.empty(g1 - g0, dtype=np.int32)
    if g1 > g0:
        t0 = int(np.searchsorted(pertree, g0, side="right")) - 1
        t1 = int(np.searchsorted(pertree, g1 - 1, side="right")) - 1
        counts = np.diff(np.clip(pertree[t0 : t1 + 2], g0, g1))
        tree[:] = np.repeat(np.arange(t0, t1 + 1, dtype=np.int32), counts)
    return tree


def forest_to_p4est(forest: Any, comm: Any, connectivity: Connectivity | None, check: bool = True) -> P4estQuadrants:
    """Implement :meth:`Forest.to_p4est` (collective: one allgather and one allreduce of num_trees + 1 int64)."""
    n = len(forest)
    K = forest.num_trees
    dim = forest.dim
    L = MAXLEVEL[dim]
    full = 1 << (dim * L)
    firsts = np.full(K + 1, -1, dtype=np.int64)

    def local() -> tuple[int, int, int, int, int]:
        bounds = (0, -1, 0, -1, 0)
        if forest.curve != "morton":
            raise SchemaError(f"Forest.to_p4est: p4est orders leaves along its Morton curve, not {forest.curve!r}")
        if connectivity is not None and (connectivity.num_trees != K or connectivity.dim != dim):
            raise SchemaError(
                f"Forest.to_p4est: a {dim}D forest of {K} trees, a {connectivity.dim}D connectivity of {connectivity.num_trees}"
            )
        if n:
            tree = forest.tree
            if check:
                keys = morton_keys(*forest.coords(), level=forest.level, check=False)
                ends = keys + np.left_shift(np.uint64(1), (dim * (L - forest.level.astype(np.int64))).astype(np.uint64))
                t64 = tree.astype(np.int64)
                same = t64[1:] == t64[:-1]
                ok_same = same & (keys[1:] == ends[:-1])
                ok_next = (t64[1:] == t64[:-1] + 1) & (ends[:-1] == np.uint64(full)) & (keys[1:] == 0)
                bad = ~(ok_same | ok_next)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise SchemaError(
                        f"Forest.to_p4est: the leaves are not a complete forest in Morton order: leaf {i + 1} (tree "
                        f"{int(tree[i + 1])}) does not start where leaf {i} (tree {int(tree[i])}) ends "
                        "(p4est needs every tree covered)"
                    )
                first_key, last_end = int(keys[0]), int(ends[-1])
            else:  # trusted: only the ends, for the bounds
                lv = forest.level[[0, -1]].astype(np.int64)
                ke = morton_keys(*(x[[0, -1]] for x in forest.coords()), level=forest.level[[0, -1]], check=False)
                first_key, last_end = int(ke[0]), int(ke[1]) + (1 << (dim * (L - int(lv[1]))))
            bounds = (n, int(tree[0]), first_key, int(tree[-1]), last_end)
            # A tree's first leaf (the forest is complete) is the one at its origin: its local index, made global below.
            origin = forest.x == 0
            for x in forest.coords()[1:]:
                origin &= x == 0
            starts = np.flatnonzero(origin)
            firsts[tree[starts]] = starts

        return bounds

    with collective(as_comm(comm), "Forest.to_p4est") as call:  # None: this process alone (no file is touched)
        gathered = call.allgather_ints(call.run(local) or (0, -1, 0, -1, 0), what="Forest.to_p4est").tolist()
        return _quadrants(call, forest, gathered, firsts, n, K, dim, full)


def _quadrants(
    call: Call, forest: Any, gathered: list[list[int]], firsts: np.ndarray, n: int, K: int, dim: int, full: int
) -> P4estQuadrants:
    """Build the quadrants of :func:`forest_to_p4est` from every rank's bounds (the same on every rank)."""
    c = call.comm
    counts = np.array([b[0] for b in gathered], dtype=np.int64)
    gfq = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    err: Exception | None = None
    nonempty = [b for b in gathered if b[0]]
    if not nonempty:
        err = SchemaError("Forest.to_p4est: the forest has no leaves; a p4est forest covers every tree")
    else:
        # Sentinels: a tree -1 that ends before tree 0, a tree K that starts after the last tree.
        chain = [(0, 0, 0, -1, full), *nonempty, (0, K, 0, 0, 0)]
        for a, b in itertools.pairwise(chain):
            prev_tree, prev_end, next_tree, next_key = a[3], a[4], b[1], b[2]
            joined = (prev_tree == next_tree and prev_end == next_key) or (
                next_tree == prev_tree + 1 and prev_end == full and next_key == 0
            )
            if not joined:
                err = SchemaError(
                    f"Forest.to_p4est: the ranks' leaves do not join into a complete forest (tree {prev_tree} to tree "
                    f"{next_tree}): p4est needs every tree covered, in Morton order across ranks"
                )
                break
    if err is not None:  # from the gathered bounds: the same on every rank
        raise call.agreed(err)
    local = firsts >= 0
    firsts[local] += gfq[c.rank]
    firsts[K] = gfq[-1]
    pertree = call.allreduce_array(firsts, "max")
    if (pertree < 0).any():  # every tree holds leaves (checked above): cannot happen
        raise SchemaError("Forest.to_p4est: a tree without leaves")
    quads = np.empty((n, dim + 1), dtype=np.int32)
    for axis, col in enumerate(forest.coords()):
        quads[:, axis] = col
    quads[:, dim] = forest.level
    first_tree, last_tree = (int(forest.tree[0]), int(forest.tree[-1])) if n else (-1, -2)
    return P4estQuadrants(quads, gfq, pertree, first_tree, last_tree)
