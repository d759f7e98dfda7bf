"""Export a checkpoint to VTKHDF's ``HyperTreeGrid`` (VTKHDF 2.4): the forest as VTK's octrees, values on every node.

A forest whose trees are axis-aligned boxes on a rectilinear grid (bricks,
the unit square and cube, a row of unit trees, p4est's ``brick``,
``periodic`` and other connectivities whose trees are their boxes) is a
``vtkHyperTreeGrid``: one hyper tree per tree, branch factor 2, the tree's
nodes in breadth-first order (depth by depth, each depth in Morton order,
which is the order of p4est's child ids: x fastest).  Everything is
computed from the leaves' levels and their curve order, vectorized over
leaves, with a loop over depths: the nodes of depth ``d`` are the leaves of
level ``d`` merged, by their first leaf, with the parents of the nodes of
depth ``d + 1`` (every ``2**dim`` consecutive ones: a complete forest has
every child of a refined node).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._files import replacing
from .._logging import get_logger
from .._threads import Pool
from ..comm import Call
from ..errors import CheckpointError, UnsupportedFormatError
from ._arrays import CellArray, HpSummary, _number, leaf_values, mesh_spec, plan_arrays, plan_points
from ._geometry import mesh_geometry
from ._reader import open_reader
from ._sink import RowSink, cell_dataset

__all__ = ["HtgGrid", "HtgLayout", "HtgOptions", "htg_grid", "htg_layout", "htg_values", "write_htg"]

logger = get_logger(__name__)

HTG_VERSION = (2, 4)
"""The VTKHDF version that specifies the HyperTreeGrid."""


@dataclass(frozen=True)
class HtgGrid:
    """Where the trees of a forest lie on VTK's grid of hyper trees.

    Attributes
    ----------
    coordinates : tuple of (n_a + 1,) numpy.ndarray of float64
        The grid lines along x, y (and z in 3D), in the mesh's length units:
        ``XCoordinates``... of the file.
    tree_index : (num_trees,) numpy.ndarray of int64
        The hyper tree of each tree: ``i + nx (j + ny k)`` for the grid
        cell ``(i, j, k)`` that the tree fills (VTK's root indexing,
        ``TransposedRootIndexing`` 0).
    """

    coordinates: tuple[np.ndarray, ...]
    tree_index: np.ndarray

    @property
    def dimensions(self) -> tuple[int, int, int]:
        """The ``Dimensions`` attribute: grid points per axis, 1 along z in 2D."""
        d = [len(c) for c in self.coordinates]
        return (d[0], d[1], d[2] if len(d) == 3 else 1)


def htg_grid(geometry: Any) -> HtgGrid:
    """Return the grid of hyper trees of a forest geometry, or say why its trees are not boxes on a grid.

    Not collective.  The trees must be their boxes
    (:attr:`amrckpt.container.Geometry.boxes_exact`: no vertex map that
    bends, turns or mirrors a tree, no analytic map), and each tree must
    fill exactly one cell of the rectilinear grid that the trees' box
    faces draw, one tree per cell (cells without a tree are allowed).

    Parameters
    ----------
    geometry : amrckpt.container.Geometry
        From :func:`amrckpt.export.mesh_geometry`.

    Returns
    -------
    HtgGrid

    Raises
    ------
    UnsupportedFormatError
        If a tree is not its box, spans several grid cells, or shares one.
    """
    if not geometry.boxes_exact:
        what = "an analytic map places the trees" if geometry.map is not None else "a tree's corners are not its box's"
        raise UnsupportedFormatError(
            f"the trees are not axis-aligned boxes ({what}: a p4est connectivity that turns, bends or mirrors trees); "
            "a HyperTreeGrid needs a brick of box trees: this checkpoint allows --format unstructured only"
        )
    lo, hi = np.asarray(geometry.tree_lower, dtype=np.float64), np.asarray(geometry.tree_upper, dtype=np.float64)
    dim = lo.shape[1]
    coords, cell = [], []
    for a in range(dim):
        c = np.unique(np.concatenate([lo[:, a], hi[:, a]]))
        i, j = np.searchsorted(c, lo[:, a]), np.searchsorted(c, hi[:, a])
        bad = np.flatnonzero(j != i + 1)
        if len(bad):
            t = int(bad[0])
            raise UnsupportedFormatError(
                f"tree {t} spans grid lines {c[i[t] : j[t] + 1].tolist()} along axis {'xyz'[a]}: the trees are not boxes on one "
                "grid; a HyperTreeGrid needs a brick of box trees: this checkpoint allows --format unstructured only"
            )
        coords.append(c)
        cell.append(i.astype(np.int64))
    n = [len(c) - 1 for c in coords]
    index = cell[0] + n[0] * (cell[1] + (n[1] * cell[2] if dim == 3 else 0))
    if len(np.unique(index)) != len(index):
        raise UnsupportedFormatError(
            "two trees fill one grid cell: a HyperTreeGrid needs a brick of box trees: "
            "this checkpoint allows --format unstructured only"
        )
    return HtgGrid(tuple(coords), index)


RUNS_MAX = 16
"""Trees of a batch up to which the nodes of a depth are copied to their rows as slices (one per tree), not scattered."""


@dataclass(frozen=True)
class _Depth:
    leaves: np.ndarray | slice  # leaves of this level (indices into the batch, or a range of them), in curve order
    parents: int  # nodes that are refined (parents of the next depth's nodes, in groups of 2**dim)
    perm: np.ndarray | None  # the nodes, in curve order, in concat(parents, leaves); None: one of them is empty
    dest: np.ndarray  # the row of each node (in curve order) in the batch's rows (empty where ``runs`` say it)
    runs: tuple[tuple[int, int, int], ...] | None  # with few trees: (first node, first row, nodes) of each tree


@dataclass(frozen=True)
class HtgLayout:
    """The hyper trees of a batch of whole trees: rows of every node, descriptors, depths.

    Attributes
    ----------
    dim : int
        2 or 3.
    rows : int
        Nodes of the batch (leaves and coarse nodes): rows of each cell array.
    descriptor : (bits,) numpy.ndarray of bool
        The trees' ``Descriptors`` bits, tree after tree: one per node in
        row order (1: refined), each tree's deepest depth left out.
    depth_per_tree : (trees,) numpy.ndarray of int64
        Depths of each tree (its finest leaf level + 1).
    cells_per_tree_depth : (sum(depth_per_tree),) numpy.ndarray of int64
        Nodes of each depth of each tree.
    depths : tuple
        How the rows of each depth are made (:func:`htg_values`).
    """

    dim: int
    rows: int
    descriptor: np.ndarray
    depth_per_tree: np.ndarray
    cells_per_tree_depth: np.ndarray
    depths: tuple[_Depth, ...]


def htg_layout(level: np.ndarray, tree_starts: np.ndarray, dim: int) -> HtgLayout:
    """Return the hyper trees of whole trees from their leaves' levels, in curve order. Not collective; vectorized.

    Each tree's rows are its nodes in breadth-first order: depth 0 (the
    root), then depth 1..., each depth in Morton order (VTK's child order
    ``x + 2 y + 4 z`` is p4est's).  Nodes are found from the finest depth
    up: those of depth ``d`` are the leaves of level ``d`` merged, by their
    first leaf, with the parents of the nodes of depth ``d + 1``.

    Parameters
    ----------
    level : (n,) numpy.ndarray of int
        The level of each leaf of the batch, in curve order (trees in order).
    tree_starts : (trees + 1,) numpy.ndarray of int64
        The first leaf of each tree of the batch, and ``n``.
    dim : int
        2 or 3.

    Returns
    -------
    HtgLayout

    Raises
    ------
    CheckpointError
        If the leaves are not a complete forest of these trees (a tree not
        covered by its leaves, or leaves out of curve order).
    """
    C = 1 << dim
    lev = np.asarray(level)
    n = len(lev)
    T = len(tree_starts) - 1
    per_level = np.bincount(lev, minlength=1) if n else np.zeros(1, dtype=np.int64)  # one pass: the levels present
    D = len(per_level)
    raw: list[tuple[np.ndarray | slice, int, np.ndarray | None, np.ndarray]] = []
    first: np.ndarray | None = None  # first leaf of each node of the depth below
    for d in range(D - 1, -1, -1):
        k = int(per_level[d])
        leaves: np.ndarray | slice
        if k == n:  # every leaf of the batch has this level (a uniform batch): no search
            leaves, ids = slice(0, n), np.arange(n, dtype=np.int64)
        elif k:
            ids = np.flatnonzero(lev == d)
            whole = int(ids[-1]) - int(ids[0]) + 1 == k
            leaves = slice(int(ids[0]), int(ids[-1]) + 1) if whole else ids
        else:
            leaves, ids = slice(0, 0), np.empty(0, dtype=np.int64)
        if first is not None and len(first) % C:
            raise CheckpointError(
                f"the leaves are not a complete forest: {len(first)} nodes of level {d + 1} are not whole families"
            )
        parents = first[::C] if first is not None else np.empty(0, dtype=np.int64)
        perm: np.ndarray | None = None
        if len(parents) and k:
            every = np.concatenate([parents, ids])
            perm = np.argsort(every, kind="stable")  # two sorted runs: one merge
            nodes = every[perm]
        else:
            nodes = parents if len(parents) else ids
        raw.append((leaves, len(parents), perm, nodes))
        first = nodes
    raw.reverse()
    # counts[t, d]: nodes of depth d in tree t (a node's tree is its first leaf's)
    bounds = np.stack([np.searchsorted(r[3], tree_starts) for r in raw], axis=1)  # (T + 1, D)
    counts = np.diff(bounds, axis=0).astype(np.int64)  # (T, D)
    if (T and not (counts[:, 0] == 1).all()) or len(raw[0][3]) != T or (T and not np.array_equal(raw[0][3], tree_starts[:-1])):
        raise CheckpointError("the leaves are not a complete forest of their trees in curve order: a tree is not one hyper tree")
    base = np.zeros(T * D + 1, dtype=np.int64)
    np.cumsum(counts.reshape(-1), out=base[1:])
    rows = int(base[-1])
    base2 = base[:-1].reshape(T, D)
    depth_per_tree = (counts > 0).sum(axis=1).astype(np.int64)
    bits = np.zeros(rows, dtype=bool)
    depths = []
    for d, (leaves, n_parents, perm, nodes) in enumerate(raw):
        has = np.flatnonzero(counts[:, d])
        runs: tuple[tuple[int, int, int], ...] | None = None
        if len(has) <= RUNS_MAX:  # few trees: the nodes of each tree are a slice of its rows
            runs = tuple((int(bounds[t, d]), int(base2[t, d]), int(counts[t, d])) for t in has)
            dest = np.empty(0, dtype=np.int64)
            if n_parents:
                refined = perm < n_parents if perm is not None else None
                for node, row, m in runs:
                    bits[row : row + m] = True if refined is None else refined[node : node + m]
        else:
            dest = np.repeat(base2[:, d] - bounds[:-1, d], counts[:, d]) + np.arange(len(nodes), dtype=np.int64)
            if n_parents:
                bits[dest] = perm < n_parents if perm is not None else True
        depths.append(_Depth(leaves, n_parents, perm, dest, runs))
    # each tree's deepest depth has no bits: its rows are the end of the tree's rows
    if T <= RUNS_MAX:
        ends = base2[np.arange(T), depth_per_tree - 1] if T else np.zeros(0, dtype=np.int64)
        descriptor = np.concatenate([bits[base[t * D] : ends[t]] for t in range(T)]) if T else bits[:0]
    else:
        tree_end = base[D::D]
        last = counts[np.arange(T), depth_per_tree - 1]
        keep_len = np.diff(np.concatenate([[0], tree_end])) - last
        lengths = np.stack([keep_len, last], axis=1).reshape(-1)
        descriptor = bits[np.repeat(np.tile([True, False], T), lengths)]
    return HtgLayout(dim, rows, descriptor, depth_per_tree, counts[counts > 0], tuple(depths))


def htg_values(layout: HtgLayout, values: np.ndarray, source: str = "cells", out: np.ndarray | None = None) -> np.ndarray:
    """Return an array's value on every node of the layout: the leaves' own, each coarse node's the mean of its children.

    Not collective; vectorized (a loop over depths).  The children of a
    node have equal volumes: their mean is the node's volume average, and a
    node's value is the volume average of its leaves.  Floating-point
    arrays are averaged in float64 and stored in their dtype; integer
    arrays hold the mean rounded to the nearest integer, ``tree`` each
    node's tree and ``level`` each node's depth.

    Parameters
    ----------
    layout : HtgLayout
        From :func:`htg_layout`.
    values : (n,) or (n, ncomp) numpy.ndarray
        The array's values on the batch's leaves, in curve order.
    source : str, optional
        The :class:`CellArray` source (``"level"``: the depth of each node;
        ``"tree"``: each node's tree).
    out : (layout.rows,) or (layout.rows, ncomp) numpy.ndarray of ``values.dtype``, optional
        Where the rows go (a slice of a larger buffer); a new array by default.

    Returns
    -------
    (layout.rows,) or (layout.rows, ncomp) numpy.ndarray of ``values.dtype``
        ``out``, if given.
    """
    C = 1 << layout.dim
    rest = values.shape[1:]
    if out is None:
        out = np.empty((layout.rows, *rest), dtype=values.dtype)
    integer = values.dtype.kind in "iub"
    child: np.ndarray | None = None
    for d in range(len(layout.depths) - 1, -1, -1):
        dep = layout.depths[d]
        lv = values[dep.leaves]
        if dep.parents:
            assert child is not None
            if source == "level":
                pv: np.ndarray = np.full((dep.parents, *rest), d, dtype=values.dtype)
            elif source == "tree":  # a family's tree is its parent's: no mean to take
                pv = child[::C]
            else:
                pv = _family_means(child, dep.parents, C)
            cur = pv if dep.perm is None else np.concatenate([pv, lv.astype(pv.dtype, copy=False)])[dep.perm]
        else:
            cur = lv
        put = np.rint(cur) if integer and cur.dtype.kind == "f" else cur
        if dep.runs is not None:
            for first, row, n in dep.runs:
                out[row : row + n] = put[first : first + n]
        else:
            out[dep.dest] = put
        child = cur
    return out


def _family_means(child: np.ndarray, parents: int, C: int) -> np.ndarray:
    """Return the float64 mean of each family of ``C`` consecutive rows of ``child``, ``(parents, *child.shape[1:])``.

    ``2**dim`` strided sums, one component at a time (each a long 1-D loop:
    faster than a reduction over an axis of 4 or 8, or than rows of a few
    components), in the order ``((c_0 + c_1) + c_2) + ...``, then times ``1 / C``.
    """
    flat = child.reshape(len(child), -1)
    pv = np.empty((parents, flat.shape[1]), dtype=np.float64)
    for j in range(flat.shape[1]):
        fam = flat[:, j].reshape(parents, C)
        col = pv[:, j]
        np.add(fam[:, 0], fam[:, 1], out=col, dtype=np.float64)
        for c in range(2, C):
            col += fam[:, c]
    pv *= 1.0 / C
    return pv.reshape(parents, *child.shape[1:])


@dataclass(frozen=True)
class _Plan:
    path: Path
    dim: int
    num_leaves: int
    num_trees: int
    grid: HtgGrid
    arrays: list[CellArray]
    step: int | None
    time: float | None
    units: str | None
    mesh: str


def _plan(path: Path, hp: HpSummary, ranks: int | None, verify: bool, brick: Any, mesh: str | None) -> _Plan:
    with open_reader(path, verify=verify) as r:
        m = r.manifest
        ms = mesh_spec(m, mesh)
        grid = htg_grid(mesh_geometry(r, brick, ms.field))
        if plan_points(m):
            logger.warning("%s: the Array fields of positions (particles) are not in a HyperTreeGrid; not exported", path)
        return _Plan(
            path,
            ms.dim,
            ms.num_leaves,
            ms.num_trees,
            grid,
            plan_arrays(m, hp=hp, ranks=ranks, mesh=ms.field),
            _number(m.values.get("step"), int),
            _number(m.values.get("time"), float),
            ms.geometry.units if ms.geometry is not None else None,
            ms.field,
        )


def _create(h5: Any, plan: _Plan, names: Sequence[str]) -> dict[str, Any]:
    """Create the file's root, grid and cell datasets; return the cell datasets by array name."""
    C = 1 << plan.dim
    rows = plan.num_leaves + (plan.num_leaves - plan.num_trees) // (C - 1)  # every refinement adds 2**dim - 1 leaves
    root = h5.create_group("VTKHDF")
    root.attrs["Version"] = np.array(HTG_VERSION, dtype=np.int64)
    root.attrs.create("Type", np.bytes_(b"HyperTreeGrid"))
    root.attrs["BranchFactor"] = np.int64(2)
    root.attrs["Dimensions"] = np.array(plan.grid.dimensions, dtype=np.int64)
    root.attrs["TransposedRootIndexing"] = np.int64(0)
    coords = [*plan.grid.coordinates, np.zeros(1)] if plan.dim == 2 else list(plan.grid.coordinates)
    for axis, c in zip("XYZ", coords, strict=True):
        root.create_dataset(f"{axis}Coordinates", data=np.asarray(c, dtype=np.float64))
    cd = root.create_group("CellData")
    d: dict[str, Any] = {"root": root}
    for a, name in zip(plan.arrays, names, strict=True):
        d[a.name] = cell_dataset(cd, name, a, rows)
    fd = root.create_group("FieldData")
    fd.create_dataset("step", data=np.array([-1 if plan.step is None else plan.step], dtype=np.int64))
    fd.create_dataset("time", data=np.array([np.nan if plan.time is None else plan.time], dtype=np.float64))
    meta = h5.create_group("amrckpt")
    meta.attrs["source"] = os.fspath(plan.path)
    meta.attrs["mesh"] = plan.mesh
    meta.attrs["node_values"] = (
        "leaves: the checkpoint's values; a coarse node: the mean of its children (its volume average), "
        "integers rounded, level the node's depth"
    )
    if plan.units:
        meta.attrs["length_units"] = plan.units
    return d


def _join(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate contiguous 1-D record arrays as bytes (numpy copies records field by field, several times slower)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([np.ascontiguousarray(p).view(np.uint8) for p in parts]).view(parts[0].dtype)


def _tree_batches(reader: Any, plan: _Plan, chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(first leaf, leaves)`` of batches of whole trees, about ``chunk`` leaves each (a larger tree whole)."""
    pending: list[np.ndarray] = []  # leaves read and not yielded: start .. s - 1
    start = 0
    N = plan.num_leaves
    for s in range(0, N, chunk):
        got = reader.read_mesh(s, min(chunk, N - s), plan.mesh)
        tree = got["tree"]
        if s + len(got) == N:
            yield start, _join([*pending, got])
            return
        # up to the last tree that starts in this chunk (it may go on)
        k = int(np.searchsorted(tree, tree[-1]))
        if k == 0 and (not pending or pending[-1]["tree"][-1] == tree[0]):  # one tree since start: read on
            pending.append(got)
            continue
        yield start, _join([*pending, got[:k]]) if k else _join(pending)
        pending = [got[k:]]
        start = s + k


WRITE_CHUNKS = 2
"""Rows of a HyperTreeGrid export staged per write: this many times ``chunk_leaves`` (or one larger batch of trees)."""


@dataclass
class _Staging:
    """Rows ``first .. first + rows - 1`` of every cell array, made and not yet written (a buffer of each array)."""

    buffers: dict[str, np.ndarray]
    first: int = 0
    rows: int = 0


class _Rows:
    """Makes the rows of every cell array, batch of trees after batch, into staging buffers (on one thread).

    Keeps what the file's tree datasets need (descriptor bits, depths,
    nodes per depth, tree ids) as it goes.  A batch goes whole into one
    staging: a staging holds about ``capacity`` rows, or one larger batch.
    ``read()`` gives the next batch of trees and their leaves' values, or
    None after the last.
    """

    def __init__(self, plan: _Plan, read: Callable[[], tuple[int, np.ndarray, list[np.ndarray]] | None], capacity: int) -> None:
        self.plan, self.read, self.capacity = plan, read, max(1, capacity)
        self.row = 0  # rows made so far
        self.held: tuple[HtgLayout, list[np.ndarray]] | None = None  # a batch that did not fit in the last staging
        self.bits: list[np.ndarray] = []
        self.depths: list[np.ndarray] = []
        self.per_depth: list[np.ndarray] = []
        self.tree_ids: list[np.ndarray] = []

    def staging(self, rows: int | None = None) -> _Staging:
        """Return empty buffers of ``rows`` rows (``capacity`` by default) for every cell array."""
        n = self.capacity if rows is None else rows
        return _Staging({a.name: np.empty((n,) if a.ncomp == 1 else (n, a.ncomp), dtype=a.dtype) for a in self.plan.arrays})

    def _next(self) -> tuple[HtgLayout, list[np.ndarray]] | None:
        """Take the next batch of trees and lay out its hyper trees; keep its tree datasets."""
        got = self.read()
        if got is None:
            return None
        _, leaves, values = got
        tree = leaves["tree"]
        starts = np.concatenate([[0], np.flatnonzero(tree[1:] != tree[:-1]) + 1, [len(leaves)]]).astype(np.int64)
        layout = htg_layout(leaves["level"], starts, self.plan.dim)
        self.bits.append(layout.descriptor)
        self.depths.append(layout.depth_per_tree)
        self.per_depth.append(layout.cells_per_tree_depth)
        self.tree_ids.append(self.plan.grid.tree_index[tree[starts[:-1]]])
        return layout, values

    def fill(self, st: _Staging) -> _Staging:
        """Make the rows of the next batches into ``st`` until it is full or the trees end (``st.rows == 0``: none left)."""
        st.first, st.rows = self.row, 0
        cap = len(next(iter(st.buffers.values()))) if st.buffers else 0
        while True:
            batch, self.held = (self.held, None) if self.held is not None else (self._next(), None)
            if batch is None:
                return st
            layout, values = batch
            if st.rows and st.rows + layout.rows > cap:  # does not fit: the next staging takes it
                self.held = batch
                return st
            if layout.rows > cap:  # a batch larger than a staging: buffers of its own (replace these)
                st.buffers = self.staging(layout.rows).buffers
                cap = layout.rows
            for a, v in zip(self.plan.arrays, values, strict=True):
                htg_values(layout, v, a.source, out=st.buffers[a.name][st.rows : st.rows + layout.rows])
            st.rows += layout.rows
            self.row += layout.rows


@dataclass(frozen=True)
class HtgOptions:
    """What :func:`to_vtkhdf` passes on to a HyperTreeGrid export (its parameters of the same names)."""

    hp: HpSummary = "first"
    ranks: int | None = None
    verify: bool = True
    brick: tuple[int, ...] | None = None
    mesh: str | None = None
    chunk: int = 1 << 17
    names: Callable[[CellArray], str] = lambda a: a.name  # an array's dataset name in the file


def write_htg(call: Call, h5py: Any, path: Path, out: Path, opts: HtgOptions) -> tuple[_Plan, list[str], int]:
    """Write checkpoint ``path`` as a HyperTreeGrid into ``out``: rank 0 of ``call`` writes, the others wait. Collective.

    Returns
    -------
    plan : _Plan
        What was exported (leaves, trees, step, time, arrays).
    names : list of str
        The datasets of the cell arrays, in order.
    rows : int
        The nodes of the hyper trees (rows of each cell array).

    Raises
    ------
    UnsupportedFormatError
        If the trees are not boxes on a grid (:func:`htg_grid`).
    CheckpointError, ChecksumError
        If the checkpoint cannot be read, is not a complete forest, or a
        byte read does not match its CRC32 (the file is not kept).
    """
    verify, chunk = opts.verify, opts.chunk

    def work() -> tuple[_Plan, list[str], int]:
        plan = _plan(path, opts.hp, opts.ranks, verify, opts.brick, opts.mesh)
        names = [opts.names(a) for a in plan.arrays]
        C = 1 << plan.dim
        with replacing(out) as tmp, h5py.File(tmp, "w") as h5, open_reader(path, verify=verify) as r:
            sink = RowSink(_create(h5, plan, names))
            batches = _tree_batches(r, plan, chunk)

            def read_next() -> tuple[int, np.ndarray, list[np.ndarray]] | None:
                """Read the next batch of trees and their leaves' values (on the making thread)."""
                got = next(batches, None)
                if got is None:
                    return None
                s, leaves = got
                return s, leaves, leaf_values(plan.arrays, r, leaves, s, plan.num_leaves)

            # Three threads: one reads the next batch of trees (preadv and the CRC32s release the GIL), one makes the
            # rows of the batch before into one of two staging buffers, this one writes the other.
            with Pool(1, "amrckpt-htg-read") as reading, Pool(1, "amrckpt-htg-rows") as making:
                ahead = [reading.submit(read_next)]

                def read_ahead() -> tuple[int, np.ndarray, list[np.ndarray]] | None:
                    """Return the batch read ahead, and start reading the next."""
                    got: tuple[int, np.ndarray, list[np.ndarray]] | None = ahead[0].result()
                    if got is not None:
                        ahead[0] = reading.submit(read_next)
                    return got

                rows = _Rows(plan, read_ahead, WRITE_CHUNKS * chunk)
                spare: _Staging | None = rows.staging()
                todo = making.submit(rows.fill, rows.staging())
                while (done := todo.result()).rows:
                    assert spare is not None
                    todo = making.submit(rows.fill, spare)
                    for a in plan.arrays:
                        sink.put(a.name, done.first, done.buffers[a.name][: done.rows])
                    spare = done
            row = rows.row
            expect = plan.num_leaves + (plan.num_leaves - plan.num_trees) // (C - 1)
            if row != expect:
                raise CheckpointError(f"{path}: the leaves make {row} nodes, a complete forest of its size {expect}")
            root = sink.d["root"]
            desc = np.concatenate(rows.bits) if rows.bits else np.zeros(0, dtype=bool)
            root.create_dataset("Descriptors", data=np.packbits(desc))  # vtkBitArray: the first bit is the highest
            root.create_dataset("DescriptorsSize", data=np.array([len(desc)], dtype=np.int64))
            ids = np.concatenate(rows.tree_ids).astype(np.int64) if rows.tree_ids else np.zeros(0, dtype=np.int64)
            dpt = np.concatenate(rows.depths) if rows.depths else np.zeros(0, dtype=np.int64)
            root.create_dataset("TreeIds", data=ids)
            root.create_dataset("DepthPerTree", data=dpt)
            root.create_dataset("NumberOfCellsPerTreeDepth", data=np.concatenate(rows.per_depth) if rows.per_depth else dpt)
            root.create_dataset("NumberOfTrees", data=np.array([len(ids)], dtype=np.int64))
            root.create_dataset("NumberOfDepths", data=np.array([int(dpt.sum())], dtype=np.int64))
            root.create_dataset("NumberOfCells", data=np.array([row], dtype=np.int64))
            r.check_crcs()  # every byte read, against the index (verify=True), before the file is kept
        return plan, names, row

    return work() if call.comm.size == 1 else call.on_root(work, what="export: HyperTreeGrid")
