"""Between p4est's quadrants (``p4est_inflate``'s arrays) and a :class:`Forest`, vectorized."""

from __future__ import annotations

import itertools
import sys
import threading
from typing import Any, NamedTuple

import numpy as np

from .._crc import crc32, crc32_combine
from .._threads import default_threads, map_shared, pool
from ..comm import Call, as_comm, collective
from ..errors import SchemaError
from ._connectivity import Connectivity
from ._follow import _copied, _in_range, _successors, _window_ok
from ._keys import MAXLEVEL, QMAXLEVEL, morton_keys
from ._tables import _CHECK_CHUNK as _CHUNK
from ._tables import mesh_record_dtype

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


def _columns(quadrants: Any) -> tuple[int, list[np.ndarray], np.ndarray]:
    """Return ``(dim, [x, y(, z)], level)`` of quadrants given as (n, dim + 1) integers or ``p4est_quadrant_t`` records.

    Raises
    ------
    SchemaError
        On this rank, for quadrants of another shape or dtype.
    """
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
    return d, coords, level


def _piece(q: np.ndarray) -> _Piece | None:
    """Return ``(dim, leading bytes, level, coordinates)`` of quadrants whose records :func:`_pack` copies whole, or None.

    Two layouts qualify on a little-endian host: p4est's (n, dim + 1) int32
    rows (the last axis contiguous), and 1-D records whose first ``4 dim + 4``
    bytes are ``x``, ``y`` [, ``z``] (int32) and ``level`` (int8), as in
    ``p4est_quadrant_t`` (:func:`quadrant_dtype`; a tree's quadrant array,
    viewed, C-contiguous).  The leading bytes: one ``V(4 dim + 4)`` item
    per quadrant; they, the level and the coordinates (int32) are views (no copy).
    """
    if sys.byteorder != "little":
        return None
    if q.dtype == np.int32 and q.ndim == 2 and q.shape[1] in (3, 4) and q.strides[1] == 4:
        d = q.shape[1] - 1
        return _Piece(d, q.view(f"V{4 * d + 4}")[:, 0], q[:, d], [q[:, k] for k in range(d)])
    fields = q.dtype.fields
    if fields is None or q.ndim != 1 or not q.flags.c_contiguous or not {"x", "y", "level"} <= set(fields):
        return None
    d = 3 if "z" in fields else 2
    want = {c: (np.dtype("<i4"), 4 * k) for k, c in enumerate("xyz"[:d])} | {"level": (np.dtype("i1"), 4 * d)}
    if any(fields[c][:2] != want[c] for c in want) or q.dtype.itemsize < 4 * d + 4:
        return None
    lead = q.view(np.uint8).reshape(q.shape[0], q.dtype.itemsize)[:, : 4 * d + 4].view(f"V{4 * d + 4}")[:, 0]
    return _Piece(d, lead, q["level"], [q[c] for c in "xyz"[:d]])


class _Piece(NamedTuple):
    """Quadrants that :func:`_pack` copies whole (:func:`_piece`): views of a p4est array."""

    dim: int
    lead: np.ndarray  # (n,) V(4 dim + 4): x, y [, z], level and what follows it
    level: np.ndarray  # (n,) int32 (rows) or int8 (records)
    coords: list[np.ndarray]  # (n,) int32 each


def _in_pieces(quadrants: Any) -> bool:
    """Whether ``quadrants`` is a list or tuple of pieces: arrays of (n, dim + 1) rows or of records (not nested rows)."""
    return (
        isinstance(quadrants, (list, tuple))
        and len(quadrants) > 0
        and all(isinstance(a, np.ndarray) and (a.ndim == 2 or (a.ndim == 1 and a.dtype.names is not None)) for a in quadrants)
    )


def forest_from_p4est(
    cls: Any, quadrants: Any, pertree: Any, global_first_quadrant: Any, rank: int, connectivity: Connectivity | None, check: bool
) -> Any:
    """Implement :meth:`Forest.from_p4est` (not collective, vectorized).

    p4est's layouts, (n, dim + 1) int32 rows or ``p4est_quadrant_t``
    records, given whole or as a sequence of pieces (each local tree's
    quadrant array), are packed straight into the mesh records the forest
    then views (:func:`_pack`); other layouts go through :func:`_columns`.

    Raises
    ------
    SchemaError
        On this rank, as :meth:`Forest.from_p4est` says.
    """
    arrays = list(quadrants) if _in_pieces(quadrants) else [np.asarray(quadrants)]
    pieces = [_piece(a) for a in arrays]
    packable = bool(arrays) and all(pc is not None for pc in pieces) and len({pc[0] for pc in pieces if pc is not None}) == 1
    if packable:
        dim = pieces[0][0]  # type: ignore[index]
        n = sum(a.shape[0] for a in arrays)
    else:
        q = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        dim, coords, level = _columns(q)
        n = level.shape[0]
    if connectivity is not None and dim != connectivity.dim:
        raise SchemaError(f"Forest.from_p4est: {dim}D quadrants, a {connectivity.dim}D connectivity")
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
            rec, valid, crc = _pack([pc for pc in pieces if pc is not None], dim, n, pt, g0, check)
            forest = cls._viewing(rec, num_trees=K)
            if crc is not None:  # complete, hence in Morton order without overlaps: what amrckpt.save would check
                forest._ordered = (crc, n, "morton", K)
        else:
            forest, valid = cls(_trees(pt, g0, g1), level, *coords[:2], coords[2] if dim == 3 else None, num_trees=K), False
        if check and not valid:
            forest.check()  # names the first bad leaf
    except SchemaError as exc:
        raise SchemaError(f"Forest.from_p4est: {exc}") from exc
    return forest


def _pack(pieces: list[_Piece], dim: int, n: int, pertree: np.ndarray, g0: int, check: bool) -> tuple[np.ndarray, bool, int | None]:
    """Pack p4est's quadrants and their trees into mesh records (:func:`amrckpt.sfc.mesh_record_dtype`).

    Not collective, vectorized, chunk by chunk (cache-sized): the chunk's
    leading bytes of each quadrant (``x``, ``y`` [, ``z``], ``level``,
    little-endian, and what follows the level in its row or record) copied
    whole, one ``V(4 dim + 4)`` item per leaf just after the record's tree
    (the 3 bytes after a level spill onto the next record's tree), then the
    chunk's trees (one ``np.repeat`` of the trees it meets, from
    ``pertree``) written over them (:meth:`_Into.pack`).  With ``check``,
    each chunk apart from the others (:func:`_check_chunk`): the ranges of
    :meth:`Forest.check` and whether each quadrant starts where the one
    before it ends (then the forest is complete, as ``p4est_is_valid``
    requires, and so in Morton order without overlaps), and the CRC32 of
    its records, combined in order.  Where this rank may use two threads
    (:func:`amrckpt._threads.default_threads`) and there are four chunks or
    more, the helper thread packs and CRCs the chunks while this one checks
    them, or (unchecked) both threads pack (numpy and the CRC32 release the
    GIL); else each chunk is packed, checked and CRC'd in turn, while in the
    cache.

    Parameters
    ----------
    pieces : list of _Piece
        The quadrants in curve order, in pieces (:func:`_piece`): global
        quadrants ``g0 .. g0 + n - 1`` in all.
    dim, n : int
    pertree : (num_trees + 1,) numpy.ndarray of numpy.int64
        p4est's ``pertree``, checked to start at 0, not decrease and hold
        ``g0 + n`` quadrants or more.
    g0 : int
        The global index of the first quadrant (``global_first_quadrant[rank]``).
    check : bool

    Returns
    -------
    records : (n,) numpy.ndarray of mesh records
    valid : bool
        With ``check``, whether every leaf is in range (if not,
        :meth:`Forest.check` names the first bad one); False without ``check``.
    crc : int or None
        With ``check``, the CRC32 of the records if every leaf is in range
        and each starts where the one before it ends (within a tree, or at
        the origin of the next tree); else None.

    Raises
    ------
    SchemaError
        If a level does not fit the records' int8 (no silent wrap-around);
        :meth:`Forest.check` checks the range that p4est allows.
    """
    dtype = mesh_record_dtype(dim)
    size, isz = 4 * dim + 4, dtype.itemsize
    # Whole leading bytes are copied (numpy's copy of 16-byte items beats the generic one of 13): the 3 bytes
    # after each level land on the next record's tree, written after them, and the last on spare bytes.
    raw = np.empty(n * isz + 4, dtype=np.uint8)
    rec = raw[: n * isz].view(dtype)
    packed = np.ndarray((n,), dtype=f"V{size}", buffer=raw, offset=4, strides=(isz,))
    tree = rec["tree"]
    chunks = _chunks(pieces, pertree, g0)
    into = _Into(raw, isz, packed, tree, dim, min(n, _CHUNK))
    if len(chunks) < 4 or default_threads() < 2:
        done = [_one_chunk(c, into, check) for c in chunks]
    elif check:  # the helper packs and CRCs while this thread checks (the checks' short passes in two threads would
        # wait on each other for the GIL; the packing's long copies do not)
        fut = pool(1).submit(lambda: [into.pack(c, crc=True) for c in chunks])
        try:
            judged = [_check_chunk(c, into, check) for c in chunks]
        finally:
            crcs = fut.result()
        done = [(*j, crc) for j, crc in zip(judged, crcs, strict=True)]
    else:  # two threads pack; then the first tree of each chunk again (the chunk before may have spilled on it later)
        done = map_shared(lambda c: _one_chunk(c, into, check), chunks, 2)
        tree[[c.a for c in chunks]] = [c.t0 for c in chunks]
    valid = check and all(r[0] for r in done)
    complete = valid and all(r[1] for r in done)
    crc = 0
    for c, r in zip(chunks, done, strict=True) if complete else ():  # the chunks' CRC32s, in order
        crc = crc32_combine(crc, r[3], (c.b - c.a) * isz)
    if max((r[2] for r in done), default=0) > 127:
        lo, hi = min(int(pc[2].min()) for pc in pieces if len(pc[2])), max(int(pc[2].max()) for pc in pieces if len(pc[2]))
        if lo < -128 or hi > 127:
            raise SchemaError(f"Forest: level holds {lo if lo < -128 else hi}, beyond the range of int8")
    return rec, valid, crc if complete else None


class _Chunk(NamedTuple):
    """Quadrants ``s:e`` of a piece, records ``a:b``, in trees ``t0`` to ``t1``: what :func:`_pack` handles at once.

    ``before``: the piece that holds the quadrant before the chunk (at
    ``s - 1`` of ``piece``, or the last of an earlier piece), or None for
    the first; ``tb``: its tree.
    """

    piece: _Piece
    s: int
    e: int
    a: int
    b: int
    t0: int
    t1: int
    before: _Piece | None
    tb: int
    pertree: np.ndarray
    g0: int

    def trees(self, with_before: bool = False) -> np.ndarray:
        """Return the tree of each record ``a:b`` (int32; with ``with_before``, of record ``a - 1`` first), from ``pertree``."""
        return _trees(self.pertree, self.g0 + self.a - int(with_before), self.g0 + self.b)


def _chunks(pieces: list[_Piece], pertree: np.ndarray, g0: int) -> list[_Chunk]:
    """Cut the pieces into chunks of at most ``_CHUNK`` quadrants, each with its trees (one ``searchsorted``)."""
    cuts: list[tuple[_Piece, int, int, int, _Piece | None]] = []
    at, last = 0, None
    for pc in pieces:
        m = pc.lead.shape[0]
        cuts += [(pc, s, min(m, s + _CHUNK), at, pc if s else last) for s in range(0, m, _CHUNK)]
        at, last = at + m, pc if m else last
    ends = np.array([[at + s - 1, at + s, at + e - 1] for _, s, e, at, _ in cuts], dtype=np.int64).reshape(-1, 3)
    trees = (np.searchsorted(pertree, ends + g0, side="right") - 1).tolist()
    return [
        _Chunk(pc, s, e, at + s, at + e, t[1], t[2], before, t[0], pertree, g0)
        for (pc, s, e, at, before), t in zip(cuts, trees, strict=True)
    ]


class _Into:
    """Where :func:`_one_chunk` packs, and each thread's scratch for the checks (:meth:`scratch`).

    ``raw``: the records (``isz`` bytes each) and 4 spare bytes; ``packed``,
    ``tree``: views of them (:func:`_pack`).
    """

    def __init__(self, raw: np.ndarray, isz: int, packed: np.ndarray, tree: np.ndarray, dim: int, m: int) -> None:
        self.raw, self.isz, self.packed, self.tree, self.dim, self.m = raw, isz, packed, tree, dim, m
        self.local = threading.local()

    def pack(self, c: _Chunk, crc: bool = False) -> int:
        """Pack the chunk ``c`` into its records; return their CRC32 with ``crc`` (else 0).

        The leading bytes are copied whole, their spill landing on the trees
        of records ``a + 1 .. b``, then the chunk's trees written over them:
        the tree of record ``b`` (the next chunk's first, or spare bytes) is
        right once the next chunk is packed after this one.
        """
        self.packed[c.a : c.b] = c.piece.lead[c.s : c.e]
        self.tree[c.a : c.b] = c.t0 if c.t0 == c.t1 else c.trees()
        return self.crc(c) if crc else 0

    def crc(self, c: _Chunk) -> int:
        """Return the CRC32 of the chunk's records (packed)."""
        return crc32(self.raw[c.a * self.isz : c.b * self.isz])

    def scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """Return this thread's ``(dim + 1, m + 1)`` columns (x, y [, z], level) and ``(5, m + 1)`` temporaries, uint32."""
        bufs: tuple[np.ndarray, np.ndarray] | None = getattr(self.local, "bufs", None)
        if bufs is None:
            bufs = self.local.bufs = (
                np.empty((self.dim + 1, self.m + 1), dtype=np.uint32),
                np.empty((5, self.m + 1), dtype=np.uint32),
            )
        return bufs


def _one_chunk(c: _Chunk, into: _Into, check: bool) -> tuple[bool, bool, int, int]:
    """Pack the chunk ``c`` (:meth:`_Into.pack`), check it (:func:`_check_chunk`) and CRC its records if it passes."""
    into.pack(c)
    valid, complete, beyond = _check_chunk(c, into, check)
    return valid, complete, beyond, into.crc(c) if complete else 0


def _check_chunk(c: _Chunk, into: _Into, check: bool) -> tuple[bool, bool, int]:
    """Check the chunk ``c`` from p4est's quadrants, apart from the other chunks (in any thread).

    On unsigned copies of the chunk's columns (in the cache), with the
    quadrant before the chunk in column 0: the pair across the chunk's
    start is one more pair of the window (:func:`_window_ok`;
    :func:`_in_range` and :func:`_successors` say which check failed, or
    judge pairs across trees).

    Returns
    -------
    in_range, follows : bool
        Every quadrant of the chunk in range; each starts where the one
        before it ends (False without ``check``).
    beyond : int
        The largest level as uint32, of (n, dim + 1) int32 rows (else 0).
    """
    level, coords, dim = c.piece.level, c.piece.coords, into.dim
    wide = level.dtype == np.int32
    if not check:
        return False, False, int(level[c.s : c.e].view(np.uint32).max()) if wide else 0
    buf, tmp = into.scratch()
    k, w = c.e - c.s, 1 if c.before is None else 0
    for i, col in enumerate([*coords, level]):
        if c.before is c.piece:
            _copied(buf[i, : k + 1], col[c.s - 1 : c.e])
        else:
            if c.before is not None:
                _copied(buf[i, :1], [*c.before.coords, c.before.level][i][-1:])
            _copied(buf[i, 1 : k + 1], col[c.s : c.e])
    one = c.t0 == c.t1
    if one and not w and c.tb != c.t0:  # a tree's first chunk: the pair across, then the chunk alone
        two = buf[:, :2]
        w = 1 if _successors(np.array([c.tb, c.t0], np.int32), list(two[:dim]), two[dim], dim, None) else 0
        one = w == 1
    valid = complete = True
    if not (one and _window_ok(buf[:, w : k + 1], tmp, dim)):  # the exact checks say which failed
        valid = _in_range(buf[:, 1 : k + 1], tmp, dim)
        t = c.t0 if one else c.trees(with_before=w == 0)
        complete = valid and _successors(t, list(buf[:dim, w : k + 1]), buf[dim, w : k + 1], dim, None)
    return valid, complete, int(buf[dim, 1 : k + 1].max()) if wide else 0


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
    quads = np.empty((n, dim + 1), dtype=np.int32)

    def local() -> tuple[int, int, int, int, int]:
        bounds = (0, -1, 0, -1, 0)
        if forest.curve != "morton":
            raise SchemaError(f"Forest.to_p4est: p4est orders leaves along its Morton curve, not {forest.curve!r}")
        if connectivity is not None and (connectivity.num_trees != K or connectivity.dim != dim):
            raise SchemaError(
                f"Forest.to_p4est: a {dim}D forest of {K} trees, a {connectivity.dim}D connectivity of {connectivity.num_trees}"
            )
        if n:
            starts, complete = _rows(forest, quads, check)
            if check and not complete:
                _name_the_gap(forest)  # raises, naming the first leaf that is out of range or not where it should be
            tree = forest.tree
            lv = forest.level[[0, -1]].astype(np.int64)
            ke = morton_keys(*(x[[0, -1]] for x in forest.coords()), level=forest.level[[0, -1]], check=False)
            first_key, last_end = int(ke[0]), int(ke[1]) + (1 << (dim * (L - int(lv[1]))))
            bounds = (n, int(tree[0]), first_key, int(tree[-1]), last_end)
            # A tree's first leaf (the forest is complete) is the one at its origin: its local index, made global below.
            firsts[tree[starts]] = starts
        return bounds

    with collective(as_comm(comm), "Forest.to_p4est") as call:  # None: this process alone (no file is touched)
        gathered = call.allgather_ints(call.run(local) or (0, -1, 0, -1, 0), what="Forest.to_p4est").tolist()
        return _quadrants(call, forest, gathered, firsts, quads, K, full)


def _rows(forest: Any, quads: np.ndarray, check: bool) -> tuple[np.ndarray, bool]:
    """Fill ``quads`` ((n, dim + 1) int32) with the leaves' rows; return the leaves at their tree's origin, and whether complete.

    Not collective, vectorized, chunk by chunk (cache-sized).  A forest that
    views its records (loaded, or from :meth:`Forest.from_p4est`) gives each
    row as one 16-byte (12 in 2D) copy from its record, the 3 bytes after the
    level (the next record's tree) then overwritten by the level, sign-extended.
    With ``check``, while the chunk is in the cache: the ranges of
    :meth:`Forest.check` and whether each leaf starts where the one before
    it ends (:func:`_successors`), which makes the local leaves a complete
    forest in Morton order (the ends of each rank's part are checked across
    ranks).  The bool is False if a check fails (or True without ``check``).
    """
    n, width = quads.shape
    dim = width - 1
    root = (1 << MAXLEVEL[dim]) - 1
    own = forest._own_records() if sys.byteorder == "little" else None
    lead = None
    if own is not None and n > 1:  # the leading bytes of records 0 .. n - 2 (the last one's would read past the end)
        lead = np.ndarray((n - 1,), dtype=f"V{4 * width}", buffer=own, offset=4, strides=(own.itemsize,))
    rows_lead = quads.view(f"V{4 * width}")[:, 0]
    coords, level, tree = forest.coords(), forest.level, forest.tree
    tbuf = np.empty(min(n, _CHUNK), dtype=np.int32)
    starts: list[np.ndarray] = []
    ok = check
    prev: tuple[int, list[int], int] | None = None
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        rows = quads[s:e]
        if lead is not None:
            e1 = min(e, n - 1)
            rows_lead[s:e1] = lead[s:e1]
            if e == n:
                quads[n - 1, :dim] = [int(c[n - 1]) for c in coords]
            rows[:, dim] = level[s:e]  # over the next record's tree bytes: the level's int8, sign-extended
        else:
            for axis, col in enumerate(coords):
                rows[:, axis] = col[s:e]
            rows[:, dim] = level[s:e]
        cols = [rows[:, k].view(np.uint32) for k in range(dim)]
        u = cols[0] | cols[1]
        if dim == 3:
            u |= cols[2]
        starts.append(np.flatnonzero(u == 0) + s)
        if not ok:
            continue
        t = tbuf[: e - s]
        t[...] = tree[s:e]
        lv = rows[:, dim].view(np.uint32)
        t_lo, t_hi = int(t.min()), int(t.max())
        ok = 0 <= t_lo and t_hi < forest.num_trees and int(lv.max()) <= QMAXLEVEL[dim]
        ok = ok and not int(np.bitwise_or.reduce(u)) & ~root
        if ok:
            np.left_shift(u, lv, out=u)
            ok = not int(np.bitwise_or.reduce(u)) & root
        if ok:
            ok = _successors(t_lo if t_lo == t_hi else t, cols, lv, dim, prev)  # one tree: its number will do
            prev = (int(t[-1]), [int(c[-1]) for c in cols], int(lv[-1]))
    return (np.concatenate(starts) if starts else np.empty(0, np.intp)), ok or not check


def _name_the_gap(forest: Any) -> None:
    """Raise SchemaError naming the first leaf that is out of range, or that does not start where the one before it ends.

    Not collective: the exact check behind :func:`_rows`' fast one, by curve
    keys (uint64), run only when that one fails.

    Raises
    ------
    SchemaError
        Always, on this rank: that is what it is for.
    """
    try:
        forest.check()
    except SchemaError as exc:
        raise SchemaError(f"Forest.to_p4est: {exc}") from exc
    dim = forest.dim
    L = MAXLEVEL[dim]
    full = 1 << (dim * L)
    tree = forest.tree
    keys = morton_keys(*forest.coords(), level=forest.level, check=False)
    ends = keys + np.left_shift(np.uint64(1), (dim * (L - forest.level.astype(np.int64))).astype(np.uint64))
    t64 = tree.astype(np.int64)
    same = t64[1:] == t64[:-1]
    ok_same = same & (keys[1:] == ends[:-1])
    ok_next = (t64[1:] == t64[:-1] + 1) & (ends[:-1] == np.uint64(full)) & (keys[1:] == 0)
    bad = np.flatnonzero(~(ok_same | ok_next))
    if not len(bad):
        return  # (the curve keys are the reference: complete after all)
    i = int(bad[0])
    raise SchemaError(
        f"Forest.to_p4est: the leaves are not a complete forest in Morton order: leaf {i + 1} (tree "
        f"{int(tree[i + 1])}) does not start where leaf {i} (tree {int(tree[i])}) ends "
        "(p4est needs every tree covered)"
    )


def _quadrants(
    call: Call, forest: Any, gathered: list[list[int]], firsts: np.ndarray, quads: np.ndarray, K: int, full: int
) -> P4estQuadrants:
    """Build the quadrants of :func:`forest_to_p4est` from every rank's bounds (the same on every rank).

    Raises
    ------
    SchemaError
        On this rank, for leaves that are not a complete forest in Morton order (what p4est requires).
    """
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
    n = len(forest)
    first_tree, last_tree = (int(forest.tree[0]), int(forest.tree[-1])) if n else (-1, -2)
    return P4estQuadrants(quads, gfq, pertree, first_tree, last_tree)
