"""The leaves of a forest that one rank owns (:class:`Forest`) and their packed on-disk record."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import SchemaError
from ._keys import CURVES, MAXLEVEL, QMAXLEVEL, sfc_keys
from ._linear import check_linear_forest
from ._p4est import P4estQuadrants, forest_from_p4est, forest_to_p4est
from ._tables import _CHECK_CHUNK, mesh_record_dtype

if TYPE_CHECKING:
    from ._connectivity import Connectivity

__all__ = ["Forest", "mesh_record_dtype"]


def _int_array(values: Any, dtype: Any, name: str) -> np.ndarray:
    """``values`` as a contiguous array of ``dtype``, refusing what would not fit (no silent wrap-around).

    Raises
    ------
    SchemaError
        On this rank, for values that are not integers or do not fit ``dtype``.
    """
    a = np.asarray(values)
    if a.dtype == dtype:
        return np.ascontiguousarray(a)
    if a.size == 0:
        return np.zeros(a.shape, dtype=dtype)
    if a.dtype.kind not in "iu":
        raise SchemaError(f"Forest: {name} must hold integers, not {a.dtype}")
    info = np.iinfo(dtype)
    lo, hi = int(a.min()), int(a.max())
    if lo < info.min or hi > info.max:
        raise SchemaError(f"Forest: {name} holds {lo if lo < info.min else hi}, beyond the range of {np.dtype(dtype)}")
    return np.ascontiguousarray(a, dtype=dtype)


class _Records:
    """The packed records (:func:`mesh_record_dtype`) whose fields a :class:`Forest`'s arrays are views of.

    A cache of the forest's own storage, not part of its value: a deep copy of
    the forest drops it (its arrays are copied into arrays of their own, and
    :meth:`Forest.to_records` packs them again).
    """

    __slots__ = ("records",)

    def __init__(self, records: np.ndarray) -> None:
        self.records = records

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        return None


class Forest:
    """The leaves of a forest of quadtrees or octrees that this rank owns.

    Leaves are described as in p4est (:mod:`amrckpt.sfc`): tree index,
    refinement level and the integer coordinates of the leaf's anchor at the
    maximum level (``2**30`` per tree side in 2D, ``2**19`` in 3D).  The local
    leaves of all ranks, concatenated by rank, are in the curve's order.

    Parameters
    ----------
    tree : (n,) array_like of int
        Tree of each leaf, ``0 <= tree < num_trees`` (stored as int32).
    level : (n,) array_like of int
        Refinement level, ``0 <= level <= QMAXLEVEL[dim]`` (int8).
    x, y : (n,) array_like of int
        Anchor coordinates (int32).
    z : (n,) array_like of int, optional
        Third coordinate of an octree forest; None for quadtrees.
    num_trees : int
        The number of trees of the forest (e.g. 2 for a 2x1 brick).
    curve : {"morton", "hilbert"}, optional
        The order of the leaves.

    Raises
    ------
    SchemaError
        If the arrays differ in length or hold values out of range.
    """

    __slots__ = ("_ordered", "_records", "curve", "level", "num_trees", "tree", "x", "y", "z")

    def __init__(self, tree: Any, level: Any, x: Any, y: Any, z: Any = None, *, num_trees: int, curve: str = "morton") -> None:
        self.tree = _int_array(tree, np.int32, "tree")
        self.level = _int_array(level, np.int8, "level")
        self.x = _int_array(x, np.int32, "x")
        self.y = _int_array(y, np.int32, "y")
        self.z = None if z is None else _int_array(z, np.int32, "z")
        try:
            self.num_trees = operator.index(num_trees)
        except TypeError as exc:
            raise SchemaError(f"Forest: num_trees must be an int, not {type(num_trees).__name__}") from exc
        self.curve = curve
        self._ordered: tuple[int, int, str, int] | None = None  # what check_order last passed (amrckpt.save's cache)
        self._records: _Records | None = None  # the records the arrays are views of (from_p4est), or None
        n = self.tree.shape[0]
        for name in ("tree", "level", "x", "y", "z"):
            a = getattr(self, name)
            if a is not None and a.shape != (n,):
                raise SchemaError(f"Forest: {name} has shape {a.shape}; tree has ({n},)")
        if self.num_trees < 1:
            raise SchemaError(f"Forest: num_trees must be positive, not {self.num_trees}")
        if curve not in CURVES:
            raise SchemaError(f"Forest: curve must be one of {CURVES}, not {curve!r}")

    @property
    def dim(self) -> int:
        """2 for quadtrees, 3 for octrees."""
        return 2 if self.z is None else 3

    def __len__(self) -> int:
        return int(self.tree.shape[0])

    def check(self) -> None:
        """Check ranges: trees, levels, coordinates inside the root and aligned to the level.

        Not collective, vectorized (a few passes over int32 and uint8 arrays).
        (:meth:`check_order` checks the curve order.)

        Raises
        ------
        SchemaError
            Naming the first bad leaf.
        """
        n = len(self)
        for s in range(0, n, _CHECK_CHUNK):  # cache-sized chunks
            self._check_chunk(s, min(n, s + _CHECK_CHUNK))

    def _check_chunk(self, s: int, e: int) -> None:
        """Check leaves ``s:e``: reductions over the chunk, and an exact search only when one fails.

        Raises
        ------
        SchemaError
            On this rank, naming the first leaf out of range, misaligned or out of curve order.
        """
        L = MAXLEVEL[self.dim]
        tree, level = self.tree[s:e].view(np.uint32), self.level[s:e].view(np.uint8)
        if e == s:
            return
        # Unsigned views fold "< 0" into ">= bound": a negative value is huge.
        if int(tree.max()) >= self.num_trees or int(level.max()) > QMAXLEVEL[self.dim]:
            bad = (tree >= np.uint32(self.num_trees)) | (level > np.uint8(QMAXLEVEL[self.dim]))
            i = s + int(np.flatnonzero(bad)[0])
            raise SchemaError(f"Forest: leaf {i} (tree {int(self.tree[i])}, level {int(self.level[i])}) is out of range")
        u = self.x[s:e].view(np.uint32) | self.y[s:e].view(np.uint32)
        if self.z is not None:
            u |= self.z[s:e].view(np.uint32)
        # Inside the root: no bit at or above L in any coordinate.  Aligned to level l: the low
        # L - l bits are zero, that is, the low L bits of u << l are (bits shifted past 32 drop off).
        root = np.uint32((1 << L) - 1)
        outside = int(np.bitwise_or.reduce(u)) & ~int(root)
        np.left_shift(u, level, out=u)
        misaligned = int(np.bitwise_or.reduce(u)) & int(root)
        if outside or misaligned:
            u = self.x[s:e].view(np.uint32) | self.y[s:e].view(np.uint32)
            if self.z is not None:
                u |= self.z[s:e].view(np.uint32)
            out_mask = (u & ~root) != 0
            bad = out_mask | (((u << level) & root) != 0)
            i = int(np.flatnonzero(bad)[0])
            if out_mask[i]:
                raise SchemaError(f"Forest: leaf {s + i} has coordinates outside its tree")
            raise SchemaError(f"Forest: leaf {s + i} has coordinates not aligned to its level {int(level[i])}")

    def check_order(self) -> None:
        """Check that the local leaves are in curve order and do not overlap (p4est ``p4est_tree_is_linear``).

        Not collective.

        Raises
        ------
        SchemaError
            Naming the first offending leaf.
        """
        try:
            check_linear_forest(self.tree, self.level, self.x, self.y, self.z, curve=self.curve)  # type: ignore[arg-type]
        except Exception as exc:  # PartitionError from sfc
            raise SchemaError(f"Forest: {exc}") from exc

    def coords(self) -> list[np.ndarray]:
        """Return the coordinate arrays ``[x, y]`` or ``[x, y, z]``."""
        return [self.x, self.y] if self.z is None else [self.x, self.y, self.z]

    def keys(self) -> np.ndarray:
        """Return the curve key of each leaf ((n,) uint64; :func:`amrckpt.sfc_keys`)."""
        return sfc_keys(self.x, self.y, self.z, level=self.level, curve=self.curve, check=False)  # type: ignore[arg-type]

    def to_records(self, *, check: bool = False) -> np.ndarray:
        """Return the leaves as packed little-endian records (:func:`mesh_record_dtype`), as in the file.

        Not collective.  With ``check=True`` the leaves are also checked as
        :meth:`check` does, in the same pass over cache-sized chunks (one
        trip through memory instead of two).  A forest whose arrays are
        views of records (:meth:`from_p4est` packs p4est's quadrants
        straight into them) returns those records without a copy, read-only.

        Returns
        -------
        (n,) numpy.ndarray of :func:`mesh_record_dtype` records
            A new array, or a read-only view of the forest's own records.

        Raises
        ------
        SchemaError
            With ``check=True``, naming the first leaf out of range.
        """
        own = self._own_records()
        if own is not None:
            if check:
                self.check()
            out = own.view()
            out.flags.writeable = False
            return out
        n = len(self)
        rec = np.empty(n, dtype=mesh_record_dtype(self.dim))
        names = ("tree", "x", "y", "z", "level") if self.z is not None else ("tree", "x", "y", "level")
        for s in range(0, n, _CHECK_CHUNK):
            e = min(n, s + _CHECK_CHUNK)
            if check:
                self._check_chunk(s, e)
            chunk = rec[s:e]
            for name in names:
                chunk[name] = getattr(self, name)[s:e]
        return rec

    def _own_records(self) -> np.ndarray | None:
        """Return the records this forest's arrays are exactly the fields of, or None (arrays of their own, or replaced)."""
        holder = self._records
        if holder is None:
            return None
        rec = holder.records
        fields = rec.dtype.fields
        assert fields is not None
        if (self.z is None) != ("z" not in fields):
            return None
        start = rec.ctypes.data  # (a structured array's __array_interface__ builds its descr: slower)
        for name, field in fields.items():
            dtype, offset = field[0], field[1]
            a = getattr(self, name)
            if not isinstance(a, np.ndarray):
                return None
            view = a.__array_interface__
            # The same bytes: where it starts, its steps, its length and type (rec, held here, owns them).
            if view["data"][0] != start + offset or a.strides != (rec.itemsize,) or a.shape != rec.shape or a.dtype != dtype:
                return None
        return rec

    @classmethod
    def _viewing(cls, rec: np.ndarray, *, num_trees: int, curve: str = "morton") -> Forest:
        """Build a forest whose arrays are the fields of ``rec`` (:func:`mesh_record_dtype`), not copied.

        Not collective, no check: :meth:`from_p4est` packs p4est's quadrants
        into ``rec`` and checks them, :meth:`from_records` checks them after.
        :meth:`to_records` then returns ``rec`` itself; the arrays are
        strided views (17 or 13 bytes apart).

        Raises
        ------
        SchemaError
            On this rank, for records of another dimension's layout.
        """
        if curve not in CURVES:
            raise SchemaError(f"Forest: curve must be one of {CURVES}, not {curve!r}")
        out = cls.__new__(cls)
        out.tree, out.level, out.x, out.y = rec["tree"], rec["level"], rec["x"], rec["y"]
        out.z = rec["z"] if "z" in (rec.dtype.names or ()) else None
        out.num_trees = operator.index(num_trees)
        out.curve = curve
        out._ordered = None
        out._records = _Records(rec)
        if out.num_trees < 1:
            raise SchemaError(f"Forest: num_trees must be positive, not {out.num_trees}")
        return out

    @classmethod
    def from_records(
        cls, rec: np.ndarray, *, num_trees: int, curve: str = "morton", check: bool = False, copy: bool = True
    ) -> Forest:
        """Build from packed records as :meth:`to_records` gives them.

        Not collective.  With ``check=True`` the leaves are checked as
        :meth:`check` does, chunk by chunk while they are unpacked.

        Parameters
        ----------
        rec : (n,) numpy.ndarray of :func:`mesh_record_dtype` records
        num_trees : int
        curve : {"morton", "hilbert"}, optional
        check : bool, optional
        copy : bool, optional
            True (default): the forest's arrays are contiguous arrays of
            their own.  False: they are views of the fields of ``rec`` (no
            pass over the leaves; strided, 17 or 13 bytes apart, as p4est's
            quadrant array is), which the forest keeps alive and
            :meth:`to_records` returns without packing; ``rec`` must then be
            the caller's to give away.  Records of another byte order are
            copied either way.

        Raises
        ------
        SchemaError
            As :class:`Forest` and, with ``check=True``, :meth:`check` do.
        """
        names = rec.dtype.names or ()
        if "tree" not in names or "level" not in names:
            raise SchemaError(f"Forest.from_records: records {rec.dtype} are not mesh records")
        layout = rec.dtype.fields
        assert layout is not None
        if (
            not copy
            and rec.ndim == 1
            and all(f[0].isnative for f in layout.values())
            and rec.dtype == mesh_record_dtype(3 if "z" in names else 2)
        ):
            out = cls._viewing(rec, num_trees=num_trees, curve=curve)
            if check:
                out.check()
            return out
        n = rec.shape[0]
        dim = 3 if "z" in names else 2
        out = cls(
            np.empty(n, np.int32),
            np.empty(n, np.int8),
            np.empty(n, np.int32),
            np.empty(n, np.int32),
            np.empty(n, np.int32) if dim == 3 else None,
            num_trees=num_trees,
            curve=curve,
        )
        fields = ("tree", "x", "y", "z", "level") if dim == 3 else ("tree", "x", "y", "level")
        for s in range(0, n, _CHECK_CHUNK):
            e = min(n, s + _CHECK_CHUNK)
            chunk = rec[s:e]
            for name in fields:
                getattr(out, name)[s:e] = chunk[name]
            if check:
                out._check_chunk(s, e)
        return out

    @classmethod
    def from_p4est(
        cls,
        quadrants: Any,
        *,
        pertree: Any,
        global_first_quadrant: Any,
        rank: int = 0,
        connectivity: Connectivity | None = None,
        check: bool = True,
    ) -> Forest:
        """Build this rank's leaves from p4est's quadrants (the arrays of ``p4est_inflate``).

        Not collective, vectorized (no loop over quadrants or trees): the
        tree of each quadrant follows from its global index
        ``global_first_quadrant[rank] + i`` and ``pertree``.

        Parameters
        ----------
        quadrants : (n, dim + 1) array_like of int, or (n,) p4est_quadrant_t records, or a list of them
            ``x``, ``y`` [, ``z``], ``level`` of each local quadrant in curve
            order: the layout of ``p4est_save_ext``'s records and of
            ``p4est_inflate``'s ``quadrants`` (``P4EST_DIM + 1``
            ``p4est_qcoord_t`` each), or the 24-byte ``p4est_quadrant_t``
            (:func:`amrckpt.sfc.quadrant_dtype`) of a tree's quadrant array.
            A list (or tuple) gives them in pieces, concatenated in order:
            each local tree's quadrant array, viewed where p4est holds it,
            is packed without a concatenation.
        pertree : (num_trees + 1,) array_like of int
            p4est's ``pertree`` (``p4est_comm_count_pertree``): the global index
            of each tree's first quadrant, then N.
        global_first_quadrant : (P + 1,) array_like of int
            p4est's ``global_first_quadrant``.
        rank : int, optional
            The rank these quadrants belong to (p4est's ``mpirank``).
        connectivity : amrckpt.sfc.Connectivity, optional
            The forest's connectivity: its dimension and number of trees are checked.
        check : bool, optional
            Check levels and coordinates (:meth:`check`), and whether each
            quadrant starts where the one before it ends, as in p4est's
            complete forests: such a forest is in Morton order, and
            :func:`amrckpt.save` does not check it again while its records
            are unchanged (their CRC32).  Chunk by chunk while packing (in
            amrckpt's helper thread where this rank may use two threads).

        Returns
        -------
        Forest
            Of ``len(pertree) - 1`` trees, Morton curve.

        Raises
        ------
        SchemaError
            If the arrays do not fit together (counts, ranges, dimension).
        """
        out: Forest = forest_from_p4est(cls, quadrants, pertree, global_first_quadrant, rank, connectivity, check)
        return out

    def to_p4est(self, *, comm: Any = None, connectivity: Connectivity | None = None, check: bool = True) -> P4estQuadrants:
        """Return this rank's leaves as p4est's quadrants, with ``global_first_quadrant`` and ``pertree``.

        Collective: one allgather of five int64 per rank (the counts and
        the ends of each rank's leaves, which also agrees on errors), one
        allreduce of ``num_trees + 1`` int64.  Vectorized.  The arrays are
        what ``p4est_inflate`` takes to build the forest in C.

        Parameters
        ----------
        comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
            The communicator the leaves are distributed over (default serial).
        connectivity : amrckpt.sfc.Connectivity, optional
            Checked against the forest's dimension and number of trees.
        check : bool, optional
            Check the leaves' ranges and that they are a complete forest in
            Morton order (each leaf starts where the one before it ends,
            from the coordinates, while the rows are built); across ranks it
            is always checked.
            ``False`` for leaves known to be p4est's (e.g. just loaded and
            verified against their CRC32s, written from a p4est).

        Returns
        -------
        P4estQuadrants
            ``quadrants`` ((n, dim + 1) int32), ``global_first_quadrant``,
            ``pertree``, ``first_local_tree``, ``last_local_tree``.

        Raises
        ------
        SchemaError
            On every rank: a Hilbert forest, or leaves that are not a
            complete forest in Morton order (p4est's forests cover every tree).
        """
        return forest_to_p4est(self, comm, connectivity, check)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Forest):
            return NotImplemented
        same = (self.dim, self.num_trees, self.curve) == (other.dim, other.num_trees, other.curve)
        return same and all(np.array_equal(a, b) for a, b in zip(self._arrays(), other._arrays(), strict=True))

    __hash__ = None  # type: ignore[assignment]

    def _arrays(self) -> list[np.ndarray]:
        return [self.tree, self.level, *self.coords()]

    def __repr__(self) -> str:
        return f"Forest(dim={self.dim}, num_trees={self.num_trees}, leaves={len(self)}, curve={self.curve!r})"
