"""Checkpoint a discretize TreeMesh and a cell model with amrckpt, restore it on another process count.

A client of amrckpt as a SimPEG user would write it.  It builds a
:class:`discretize.TreeMesh` (an octree in 3D, a quadtree with ``--dim 2``)
on a padded base grid, refined around a topography-like surface and a buried
sphere, attaches a conductivity model (one float64 per cell, in S/m,
computed from the cell centres), saves both as ONE amrckpt checkpoint from P
MPI processes and restores them on Q processes, rebuilds a TreeMesh from the
restored leaves and checks that mesh and model are identical, bit for bit.

Usage::

    python examples/treemesh_checkpoint.py                  # save and restore in this job (temporary file)
    python examples/treemesh_checkpoint.py --roundtrip model.scda [--restore-ranks Q]
    mpiexec -n 2 python -m mpi4py examples/treemesh_checkpoint.py --save model.scda [--dim 2] [--base 32,32,16]
    mpiexec -n 3 python -m mpi4py examples/treemesh_checkpoint.py --restore model.scda [--partition weighted]

It prints a short report (cells, levels, file size, the sha256 of the model
in TreeMesh's cell order before and after, ``IDENTICAL`` or ``DIFFERENT``) and
exits with status 1 on any difference.  ``--restore`` needs no mesh
parameters: it reads them from the checkpoint, rebuilds the reference mesh
and model from them and compares the restored ones with it.

From TreeMesh cells to amrckpt leaves
-------------------------------------
discretize 0.12 describes every cell, through the public ``mesh.cell_state``
(what ``TreeMesh(h, origin, cell_indexes=..., cell_levels=...)`` rebuilds a
mesh from), by

- its **level** ``t``: a cell of level ``t`` spans ``2**(max_level - t)``
  base cells per side, ``max_level`` being ``mesh.max_level`` (the same as
  ``mesh.cell_levels_by_index``, which the example cross-checks);
- its **index**: the integer coordinates of its centre in units of **half a
  base cell** (a cell of the base tensor grid ``h``).  Its lower corner in
  base cells is therefore ``a = (index - 2**(max_level - t)) // 2``, exactly.

The integer index space counts base cells, whatever their physical widths:
``h`` may be non-uniform (the example pads the core with cells that grow by
a factor 1.3), the mapping does not use coordinates in metres at all.

Trees.  Each axis of the base grid has a power-of-two number of cells
``shape = mesh.shape_cells``.  discretize splits the base grid into cubic
**roots** of ``r = min(shape)`` base cells per side:

- a cubic base grid (``2**k`` cells per side) is one root, of TreeMesh level
  0, and becomes **one tree** (``num_trees=1``): p4est level = TreeMesh level;
- otherwise (e.g. 32 x 32 x 16) discretize has ``shape / r`` roots per axis,
  of TreeMesh level 1 (its ``max_level`` is then ``log2(r) + 1``), and every
  root becomes one tree of a **brick** of trees, as p4est's
  ``p8est_connectivity_new_brick(shape[0]/r, shape[1]/r, shape[2]/r)``:
  the trees are numbered along the Morton curve of the root positions
  (which, for a brick of power-of-two sides, is p4est's numbering), and
  p4est level = TreeMesh level - 1.

In general ``root_level = max_level - log2(r)`` and, for a cell of TreeMesh
level ``t`` with lower corner ``a`` (base cells),

- ``tree``  = Morton rank of the root ``a // r``;
- ``level`` = ``t - root_level`` (the base cell, ``t = max_level``, is p4est
  level ``log2(r)``, at most ``QMAXLEVEL`` = 18 in 3D and 29 in 2D);
- ``x, y[, z]`` = ``(a - r * (a // r)) * 2**(MAXLEVEL - log2(r))``, the anchor
  in p4est's integer coordinates (``2**19`` per tree side in 3D, ``2**30``
  in 2D).

The leaves cover every tree exactly (a complete forest, which the example
checks with ``amrckpt.sfc.check_linear_forest(..., complete=True)``).  The
physical box, which the leaves do not know, is stored in a ``Block`` field
of the schema (``treemesh``): the base cell widths ``h`` of every axis (the
extent is their sum), the ``origin``, ``diagonal_balance``, ``max_level``,
``root_level`` and the roots per axis, with the sha256 of the model as saved
and the parameters the mesh was built from.  Floats are stored as JSON and
read back bit for bit (shortest round-trip repr), which the check verifies.

Order.  amrckpt stores leaves in forest order: tree major, then Morton order
inside a tree.  The permutation from TreeMesh's cell order is
``amrckpt.sfc.sfc_order(tree, level, x, y[, z])``, computed and applied every
time, never assumed.  What it shows with discretize 0.12 (and the report says
for each run): inside a root TreeMesh's cells are already in Morton order
(the permutation is the identity for a cubic base grid), but TreeMesh takes
its roots with x fastest, then y, then z, which is not Morton order as soon
as there are several roots along two axes (e.g. 32 x 16 x 8: 4 x 2 x 1 roots).

Saving on P processes: every rank builds the same TreeMesh (it is serial),
computes the leaves in forest order and keeps the contiguous range
``Partition.uniform(N, P).local_range(rank)`` of leaves and their model
values.  Restoring on Q processes: every rank reads its own range of the
new partition straight from the file; the check gathers the leaves and
values on rank 0 and rebuilds the TreeMesh there (again, TreeMesh is serial;
a real parallel client would keep its slice and use it as it is).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
from discretize import TreeMesh
from pydantic import BaseModel

import amrckpt as ac
from amrckpt import sfc

# --------------------------------------------------------------------------- the schema


class BuildParams(BaseModel):
    """The parameters :func:`build_mesh` was called with (to rebuild the reference when restoring)."""

    dim: int
    base: list[int]
    diagonal_balance: bool


class TreeMeshInfo(BaseModel):
    """The physical box of a TreeMesh and its mapping to trees: the JSON block ``treemesh`` of the checkpoint."""

    h: list[list[float]]  # base cell widths, one list per axis (the extent is their sum)
    origin: list[float]
    diagonal_balance: bool
    max_level: int  # TreeMesh.max_level
    root_level: int  # TreeMesh level of a root (0 for a cubic base grid, else 1)
    roots: list[int]  # roots (trees) per axis: a brick of trees numbered in Morton order
    n_cells: int
    model_sha256: str  # of the model in TreeMesh's cell order, as saved
    build: BuildParams


class TreeMeshModel3D(ac.CheckpointSchema, name="treemesh-model-3d", version=1):
    """An octree TreeMesh and a conductivity model."""

    treemesh: TreeMeshInfo = ac.Block()
    mesh: ac.Forest = ac.Mesh(dim=3)
    sigma: ac.CellData = ac.Cells("<f8", units="S/m", description="electrical conductivity at the cell centres")


class TreeMeshModel2D(ac.CheckpointSchema, name="treemesh-model-2d", version=1):
    """A quadtree TreeMesh and a conductivity model."""

    treemesh: TreeMeshInfo = ac.Block()
    mesh: ac.Forest = ac.Mesh(dim=2)
    sigma: ac.CellData = ac.Cells("<f8", units="S/m", description="electrical conductivity at the cell centres")


SCHEMAS: dict[int, type[ac.CheckpointSchema]] = {3: TreeMeshModel3D, 2: TreeMeshModel2D}

# --------------------------------------------------------------------------- the mesh and the model


def padded_widths(n: int, core: float = 10.0, factor: float = 1.3) -> np.ndarray:
    """Return ``n`` base cell widths: a uniform core padded on both sides by cells growing geometrically.

    Parameters
    ----------
    n : int
        The number of base cells, a power of two (at least 8).
    core : float, optional
        The width of a core cell, in metres.
    factor : float, optional
        The growth factor of the padding cells.

    Returns
    -------
    (n,) numpy.ndarray of float64
    """
    npad = n // 8
    pad = core * factor ** np.arange(1, npad + 1)
    return np.concatenate([pad[::-1], np.full(n - 2 * npad, core), pad])


def topography(xy: np.ndarray, extent: np.ndarray) -> np.ndarray:
    """Return the height of the surface above the horizontal points ``xy`` (metres).

    Parameters
    ----------
    xy : (N, dim - 1) numpy.ndarray
        Horizontal coordinates (x, or x and y).
    extent : (dim - 1,) numpy.ndarray
        The horizontal extent of the core, which sets the wavelengths.

    Returns
    -------
    (N,) numpy.ndarray
    """
    k = 2 * np.pi / extent
    z = 0.08 * extent[0] * np.sin(k[0] * xy[:, 0])
    if xy.shape[1] == 2:
        z = z * np.cos(0.5 * k[1] * xy[:, 1]) + 0.02 * xy[:, 1]
    return z


def build_mesh(dim: int = 3, base: list[int] | None = None, diagonal_balance: bool = False) -> TreeMesh:
    """Build the example's TreeMesh: refined to the finest level along a topography surface, and around a sphere.

    Deterministic: every rank (and every later job) builds the same mesh from the same arguments.

    Parameters
    ----------
    dim : {2, 3}
        Dimension.
    base : list of int, optional
        Base cells per axis, powers of two (default 32 per axis in 3D, 64 in 2D).
    diagonal_balance : bool, optional
        Passed to TreeMesh.

    Returns
    -------
    discretize.TreeMesh
        Finalized.
    """
    base = list(base or [32 if dim == 3 else 64] * dim)
    h = [padded_widths(n) for n in base]
    mesh = TreeMesh(h, origin="C" * dim, diagonal_balance=diagonal_balance)
    core = np.array([10.0 * (n - 2 * (n // 8)) for n in base])
    # The surface, sampled over the core, a little beyond the finest cells.
    axes = [np.linspace(-c / 2, c / 2, 33) for c in core[:-1]]
    xy = np.stack([a.ravel() for a in np.meshgrid(*axes, indexing="ij")], axis=1)
    surface = np.column_stack([xy, topography(xy, core[:-1])])
    mesh.refine_surface(surface, level=-1, padding_cells_by_level=[1, 1, 2], finalize=False)
    centre = np.zeros((1, dim))
    centre[0, -1] = -0.25 * core[-1]  # a buried sphere
    mesh.refine_ball(centre, [0.12 * core.min()], [mesh.max_level - 1], finalize=False)
    mesh.finalize()
    return mesh


def conductivity(mesh: TreeMesh) -> np.ndarray:
    """Return a conductivity model (S/m) at the cell centres: air, a ground getting more resistive with depth, a sphere.

    Parameters
    ----------
    mesh : discretize.TreeMesh

    Returns
    -------
    (n_cells,) numpy.ndarray of float64
        In TreeMesh's cell order.
    """
    cc = mesh.cell_centers
    core = np.array([10.0 * (len(h) - 2 * (len(h) // 8)) for h in mesh.h])
    depth = topography(cc[:, :-1], core[:-1]) - cc[:, -1]
    sigma = np.where(depth > 0, 10.0 ** (-1.5 - depth / 300.0), 1e-8)
    centre = np.zeros(mesh.dim)
    centre[-1] = -0.25 * core[-1]
    sigma[np.linalg.norm(cc - centre, axis=1) < 0.12 * core.min()] = 0.5
    return sigma.astype("<f8")


def model_sha256(model: np.ndarray) -> str:
    """Return the sha256 of a model's little-endian float64 bytes.

    Parameters
    ----------
    model : numpy.ndarray

    Returns
    -------
    str
        Hex digest.
    """
    return hashlib.sha256(np.ascontiguousarray(model, dtype="<f8").tobytes()).hexdigest()


# --------------------------------------------------------------------------- TreeMesh cells <-> amrckpt leaves


@dataclass(frozen=True)
class Layout:
    """How a TreeMesh's base grid maps onto a brick of p4est trees (see the module docstring).

    Attributes
    ----------
    shape : tuple of int
        Base cells per axis, powers of two.
    max_level : int
        ``TreeMesh.max_level``: the TreeMesh level of a base cell.
    root_level : int
        The TreeMesh level of a root, ``max_level - log2(min(shape))``.
    """

    shape: tuple[int, ...]
    max_level: int
    root_level: int

    @classmethod
    def of(cls, mesh: TreeMesh) -> Layout:
        """Return the layout of a TreeMesh.

        Parameters
        ----------
        mesh : discretize.TreeMesh

        Returns
        -------
        Layout
        """
        shape = tuple(int(n) for n in mesh.shape_cells)
        r = min(shape)
        return cls(shape, int(mesh.max_level), int(mesh.max_level) - (r.bit_length() - 1))

    @property
    def dim(self) -> int:
        """2 or 3."""
        return len(self.shape)

    @property
    def root_side(self) -> int:
        """Base cells per side of a root (tree)."""
        return min(self.shape)

    @property
    def tree_level(self) -> int:
        """The p4est level of a base cell, ``log2(root_side)``."""
        return self.root_side.bit_length() - 1

    @property
    def roots(self) -> tuple[int, ...]:
        """Roots (trees) per axis."""
        return tuple(n // self.root_side for n in self.shape)

    @property
    def num_trees(self) -> int:
        """The number of trees."""
        return int(np.prod(self.roots))

    def root_positions(self) -> np.ndarray:
        """Return the root of every tree, in tree order: the Morton order of the root positions.

        Returns
        -------
        (num_trees, dim) numpy.ndarray of int64
            Root positions in units of roots.
        """
        grid = np.indices(self.roots).reshape(self.dim, -1)  # every root position
        keys = sfc.morton_keys(*grid.astype(np.int32))
        return np.ascontiguousarray(grid[:, np.argsort(keys, kind="stable")].T, dtype=np.int64)

    def tree_of_root(self) -> np.ndarray:
        """Return the tree of every root, indexed by ``numpy.ravel_multi_index(root, roots)``.

        Returns
        -------
        (num_trees,) numpy.ndarray of int32
        """
        tree = np.empty(self.num_trees, dtype=np.int32)
        tree[np.ravel_multi_index(tuple(self.root_positions().T), self.roots)] = np.arange(self.num_trees, dtype=np.int32)
        return tree


def treemesh_leaves(mesh: TreeMesh, layout: Layout | None = None) -> sfc.Leaves:
    """Return the p4est leaves of a TreeMesh's cells, in TreeMesh's cell order.

    Parameters
    ----------
    mesh : discretize.TreeMesh
        Finalized.
    layout : Layout, optional
        ``Layout.of(mesh)`` by default.

    Returns
    -------
    amrckpt.sfc.Leaves
        ``tree``, ``level``, ``x``, ``y`` [, ``z``]: leaf ``i`` is the cell ``i`` of the mesh.

    Raises
    ------
    ValueError
        If the cells do not map onto leaves (a TreeMesh that breaks the conventions this mapping relies on).
    """
    lay = layout or Layout.of(mesh)
    state = mesh.cell_state  # public: lists of the cells' centre indexes (half base cells) and levels
    index = np.asarray(state["indexes"], dtype=np.int64).reshape(-1, lay.dim)
    t = np.asarray(state["levels"], dtype=np.int64)
    if not np.array_equal(t, mesh.cell_levels_by_index(np.arange(mesh.n_cells))):
        raise ValueError("cell_state levels differ from cell_levels_by_index")
    if lay.tree_level > sfc.QMAXLEVEL[lay.dim] or (t.size and (t.min() < lay.root_level or t.max() > lay.max_level)):
        raise ValueError(f"levels {t.min()}..{t.max()} do not fit trees of root level {lay.root_level}")
    side = np.left_shift(1, lay.max_level - t)[:, None]  # base cells per side of each cell
    twice = index - side
    if (twice & 1).any():
        raise ValueError("a cell centre index is not a cell's centre (half base cell units)")
    anchor = twice >> 1  # lower corner, in base cells
    root = anchor // lay.root_side
    local = anchor - root * lay.root_side
    tree = lay.tree_of_root()[np.ravel_multi_index(tuple(root.T), lay.roots)]
    coords = [(local[:, k] << (sfc.MAXLEVEL[lay.dim] - lay.tree_level)).astype(np.int32) for k in range(lay.dim)]
    return sfc.Leaves(tree, (t - lay.root_level).astype(np.int8), *coords)


def cell_state_of(leaves: sfc.Leaves, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Return the TreeMesh cell indexes and levels of p4est leaves: the inverse of :func:`treemesh_leaves`.

    Parameters
    ----------
    leaves : amrckpt.sfc.Leaves
        In any order.
    layout : Layout

    Returns
    -------
    indexes : (N, dim) numpy.ndarray of int64
        Cell centres in half base cells, for ``TreeMesh(..., cell_indexes=...)``.
    levels : (N,) numpy.ndarray of int64
        TreeMesh levels, for ``TreeMesh(..., cell_levels=...)``.
    """
    coords = np.stack([np.asarray(c, dtype=np.int64) for c in leaves[2:] if c is not None], axis=1)
    root = layout.root_positions()[np.asarray(leaves.tree, dtype=np.int64)]
    anchor = root * layout.root_side + (coords >> (sfc.MAXLEVEL[layout.dim] - layout.tree_level))
    t = np.asarray(leaves.level, dtype=np.int64) + layout.root_level
    return 2 * anchor + np.left_shift(1, layout.max_level - t)[:, None], t


def forest_order(leaves: sfc.Leaves) -> np.ndarray:
    """Return the permutation from TreeMesh's cell order to amrckpt's (tree major, Morton inside a tree).

    Parameters
    ----------
    leaves : amrckpt.sfc.Leaves
        In TreeMesh's cell order (:func:`treemesh_leaves`).

    Returns
    -------
    (N,) numpy.ndarray of intp
        ``order``: leaf ``j`` of the checkpoint is the cell ``order[j]`` of the mesh.
    """
    return sfc.sfc_order(*leaves, curve="morton")


def permuted(leaves: sfc.Leaves, order: np.ndarray) -> sfc.Leaves:
    """Return the leaves taken in ``order``.

    Parameters
    ----------
    leaves : amrckpt.sfc.Leaves
    order : (N,) numpy.ndarray of int

    Returns
    -------
    amrckpt.sfc.Leaves
    """
    return sfc.Leaves(*(None if a is None else a[order] for a in leaves))


# --------------------------------------------------------------------------- communicators


def world() -> Any:
    """Return MPI.COMM_WORLD, or None (serial) if mpi4py is not installed.

    Returns
    -------
    mpi4py.MPI.Comm or None
    """
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


def rank_of(comm: Any) -> int:
    """Return the rank, 0 when serial.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None

    Returns
    -------
    int
    """
    return 0 if comm is None else int(comm.rank)


def size_of(comm: Any) -> int:
    """Return the number of ranks, 1 when serial.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None

    Returns
    -------
    int
    """
    return 1 if comm is None else int(comm.size)


def bcast(comm: Any, obj: Any) -> Any:
    """Broadcast ``obj`` from rank 0.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
    obj : object

    Returns
    -------
    object
    """
    return obj if comm is None else comm.bcast(obj, root=0)


def gather(comm: Any, obj: Any) -> list[Any] | None:
    """Gather ``obj`` on rank 0 (a list by rank there, None elsewhere).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
    obj : object

    Returns
    -------
    list or None
    """
    return [obj] if comm is None else comm.gather(obj, root=0)


def say(comm: Any, *lines: str) -> None:
    """Write lines to stdout on rank 0.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
    *lines : str
    """
    if rank_of(comm) == 0:
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()


def describe(mesh: TreeMesh, layout: Layout, order: np.ndarray) -> list[str]:
    """Return report lines about a mesh: cells per level, trees, whether TreeMesh's order is amrckpt's.

    Parameters
    ----------
    mesh : discretize.TreeMesh
    layout : Layout
    order : numpy.ndarray
        :func:`forest_order` of its leaves.

    Returns
    -------
    list of str
    """
    levels = mesh.cell_levels_by_index(np.arange(mesh.n_cells))
    counts = np.bincount(levels)
    per_level = ", ".join(f"{t}: {int(counts[t])}" for t in np.flatnonzero(counts))
    same = np.array_equal(order, np.arange(order.size))
    return [
        f"  mesh: {'Oc' if mesh.dim == 3 else 'Quad'}TreeMesh, base {' x '.join(map(str, layout.shape))} cells, "
        f"max_level {layout.max_level}, {layout.num_trees} tree(s) ({' x '.join(map(str, layout.roots))}), "
        f"p4est level = TreeMesh level - {layout.root_level}",
        f"  cells: {mesh.n_cells} (TreeMesh level: count  {per_level})",
        f"  TreeMesh cell order is amrckpt's (tree major, Morton): {'yes' if same else 'no'}"
        + ("" if same else f" ({int((order != np.arange(order.size)).sum())} cells move)"),
    ]


# --------------------------------------------------------------------------- save and restore


def save(mesh: TreeMesh, model: np.ndarray, path: str, build: BuildParams, comm: Any = None) -> ac.schema.SaveResult:
    """Save a TreeMesh and its model as one checkpoint; every rank passes the same (serial) mesh and keeps its slice.

    Collective.

    Parameters
    ----------
    mesh : discretize.TreeMesh
        The same on every rank.
    model : (n_cells,) numpy.ndarray of float64
        In TreeMesh's cell order, the same on every rank.
    path : str
        The checkpoint to write.
    build : BuildParams
        How the mesh was built (stored, to rebuild the reference when restoring).
    comm : mpi4py.MPI.Comm or None, optional

    Returns
    -------
    amrckpt.schema.SaveResult
    """
    layout = Layout.of(mesh)
    leaves = treemesh_leaves(mesh, layout)
    order = forest_order(leaves)
    forest = permuted(leaves, order)
    sfc.check_linear_forest(*forest, num_trees=layout.num_trees, complete=True)
    # This rank's contiguous range of leaves along the curve.
    lo, hi = ac.Partition.uniform(mesh.n_cells, size_of(comm)).local_range(rank_of(comm))
    mine = order[lo:hi]
    info = TreeMeshInfo(
        h=[np.asarray(h, dtype=np.float64).tolist() for h in mesh.h],
        origin=np.asarray(mesh.origin, dtype=np.float64).tolist(),
        diagonal_balance=build.diagonal_balance,
        max_level=layout.max_level,
        root_level=layout.root_level,
        roots=list(layout.roots),
        n_cells=int(mesh.n_cells),
        model_sha256=model_sha256(model),
        build=build,
    )
    schema = SCHEMAS[mesh.dim]
    state = schema(
        treemesh=info,
        mesh=ac.Forest(*(a[lo:hi] for a in forest if a is not None), num_trees=layout.num_trees),
        sigma=np.ascontiguousarray(model[mine], dtype="<f8"),
    )
    return ac.save(state, path, comm=comm, run_record=True)  # the run record keeps the writing partition beside the file


@dataclass
class Restored:
    """A restored checkpoint, on rank 0.

    Attributes
    ----------
    mesh : discretize.TreeMesh
        Rebuilt from the leaves.
    model : numpy.ndarray
        In the rebuilt mesh's cell order.
    info : TreeMeshInfo
        The ``treemesh`` block.
    leaves_per_rank : list of int
        The reading partition.
    writers : list of int
        The leaves of each rank that wrote the file.
    problems : list of str
        Inconsistencies found while rebuilding.
    """

    mesh: TreeMesh
    model: np.ndarray
    info: TreeMeshInfo
    leaves_per_rank: list[int]
    writers: list[int]
    problems: list[str]


def restore(path: str, comm: Any = None, partition: str = "uniform") -> Restored | None:
    """Load a checkpoint on any number of ranks and rebuild the TreeMesh and its model on rank 0.

    Collective.  Every rank reads its own range of leaves and values; they
    are then gathered on rank 0 because TreeMesh is serial (a parallel
    client would keep its slice).

    Parameters
    ----------
    path : str
    comm : mpi4py.MPI.Comm or None, optional
    partition : {"uniform", "weighted"}, optional
        How the leaves are split over the reading ranks.

    Returns
    -------
    Restored or None
        On rank 0; None on the other ranks.
    """
    name = bcast(comm, ac.read_info(path).manifest.schema_name if rank_of(comm) == 0 else None)
    schema = next(s for s in SCHEMAS.values() if s.__amrckpt_name__ == name)
    loaded = ac.load(path, schema, comm=comm, partition=partition)
    state = loaded.state
    m = state.mesh
    # Gathered on rank 0 for the check only: TreeMesh is serial.
    parts = gather(comm, (m.tree, m.level, *m.coords(), state.sigma))
    if parts is None:
        return None
    *columns, sigma = (np.concatenate(column) for column in zip(*parts, strict=True))
    leaves = sfc.Leaves(*columns)  # tree, level, x, y[, z]: in amrckpt's order, as read
    info: TreeMeshInfo = state.treemesh
    layout = Layout(tuple(len(h) for h in info.h), info.max_level, info.root_level)
    problems = []
    if list(layout.roots) != info.roots:
        problems.append(f"roots per axis {layout.roots} differ from the stored {info.roots}")
    indexes, levels = cell_state_of(leaves, layout)
    h = [np.array(v, dtype=np.float64) for v in info.h]
    mesh = TreeMesh(h, np.array(info.origin), diagonal_balance=info.diagonal_balance, cell_indexes=indexes, cell_levels=levels)
    # The rebuilt mesh's leaves, in amrckpt's order, must be the leaves read; then the model goes back by the permutation.
    new_leaves = treemesh_leaves(mesh)
    order = forest_order(new_leaves)
    same = len(order) == len(sigma) and all(
        a is None or np.array_equal(a[order], b) for a, b in zip(new_leaves, leaves, strict=True)
    )
    model = np.full(mesh.n_cells, np.nan)
    if same:
        model[order] = sigma
    else:
        problems.append("the rebuilt TreeMesh's leaves differ from the leaves read")
    counts = np.diff(loaded.partition.global_first_quadrant).tolist()
    wp = loaded.info.writer_partition  # from the run record beside the file
    writers = np.diff(wp.global_first_quadrant).tolist() if wp is not None else []
    return Restored(mesh, model, info, counts, writers, problems)


def compare(reference: TreeMesh, model: np.ndarray, restored: TreeMesh, restored_model: np.ndarray) -> list[str]:
    """Compare two meshes and models bit for bit.

    Parameters
    ----------
    reference, restored : discretize.TreeMesh
    model, restored_model : numpy.ndarray
        In the cell order of their mesh.

    Returns
    -------
    list of str
        The differences (empty if identical).
    """

    def same(a: Any, b: Any) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()

    problems = []
    if not (len(reference.h) == len(restored.h) and all(same(a, b) for a, b in zip(reference.h, restored.h, strict=True))):
        problems.append("h differs")
    if not same(reference.origin, restored.origin):
        problems.append("origin differs")
    if reference.n_cells != restored.n_cells:
        return [*problems, f"number of cells differs: {reference.n_cells} != {restored.n_cells}"]
    every = np.arange(reference.n_cells)
    checks = {
        "cell centres": (reference.cell_centers, restored.cell_centers),
        "cell levels": (reference.cell_levels_by_index(every), restored.cell_levels_by_index(every)),
        "h_gridded": (reference.h_gridded, restored.h_gridded),
        "model (TreeMesh order)": (model, restored_model),
    }
    problems += [f"{what} differ" for what, (a, b) in checks.items() if not same(a, b)]
    return problems


# --------------------------------------------------------------------------- the command line


def run_save(path: str, build: BuildParams, comm: Any) -> None:
    """Build the mesh and model on every rank and save them (collective).

    Parameters
    ----------
    path : str
    build : BuildParams
    comm : mpi4py.MPI.Comm or None
    """
    mesh = build_mesh(build.dim, build.base, build.diagonal_balance)
    model = conductivity(mesh)
    layout = Layout.of(mesh)
    result = save(mesh, model, path, build, comm)
    say(
        comm,
        f"saved on {size_of(comm)} process(es): {path}",
        *describe(mesh, layout, forest_order(treemesh_leaves(mesh, layout))),
        f"  file: {result.nbytes} bytes, {result.num_leaves} leaves",
        f"  model sha256 (TreeMesh order), saved:    {model_sha256(model)}",
    )


def run_restore(path: str, comm: Any, partition: str) -> bool:
    """Restore a checkpoint (collective), rebuild the reference on rank 0, compare and report.

    Parameters
    ----------
    path : str
    comm : mpi4py.MPI.Comm or None
    partition : {"uniform", "weighted"}

    Returns
    -------
    bool
        True if identical (on every rank).
    """
    restored = restore(path, comm, partition)
    ok = False
    if restored is not None:
        info = restored.info
        reference = build_mesh(info.build.dim, info.build.base, info.build.diagonal_balance)
        model = conductivity(reference)
        problems = restored.problems + compare(reference, model, restored.mesh, restored.model)
        if info.model_sha256 != model_sha256(model):
            problems.append("the model rebuilt from the stored parameters differs from the model saved")
        layout = Layout.of(restored.mesh)
        ok = not problems
        say(
            comm,
            f"restored on {size_of(comm)} process(es) ({partition} partition, leaves per rank {restored.leaves_per_rank}); "
            f"written by {len(restored.writers)} (leaves per rank {restored.writers})",
            *describe(restored.mesh, layout, forest_order(treemesh_leaves(restored.mesh, layout))),
            f"  file: {os.path.getsize(path)} bytes",
            f"  checked: h, origin, number of cells, cell centres, cell levels, h_gridded, model bits; against "
            f"the mesh rebuilt from the stored parameters ({info.build.dim}D, base {info.build.base})",
            f"  model sha256 (TreeMesh order), before:   {model_sha256(model)}"
            + ("" if info.model_sha256 == model_sha256(model) else f" (stored: {info.model_sha256})"),
            f"  model sha256 (TreeMesh order), after:    {model_sha256(restored.model)}",
            *(f"  DIFFERENT: {p}" for p in problems),
            "IDENTICAL" if ok else "DIFFERENT",
        )
    return bool(bcast(comm, ok))


def parse_base(text: str) -> list[int]:
    """Parse ``--base``: one count for every axis, or one per axis (``32,32,16``).

    Parameters
    ----------
    text : str

    Returns
    -------
    list of int
    """
    return [int(v) for v in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    """Run the example.

    Parameters
    ----------
    argv : list of str, optional
        The command line (``sys.argv[1:]`` by default).

    Returns
    -------
    int
        The exit status: 0 if identical (or after ``--save``), 1 otherwise.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--save", metavar="PATH", help="build the mesh and model on every rank and save them to PATH")
    mode.add_argument("--restore", metavar="PATH", help="restore PATH on this job's ranks and check it")
    mode.add_argument("--roundtrip", metavar="PATH", nargs="?", const="", help="save then restore in this job (the default)")
    parser.add_argument("--dim", type=int, choices=(2, 3), default=3)
    parser.add_argument("--base", type=parse_base, help="base cells per axis, powers of two: 32 or 32,32,16")
    parser.add_argument("--diagonal-balance", action="store_true", help="TreeMesh(diagonal_balance=True)")
    parser.add_argument("--partition", choices=("uniform", "weighted"), default="uniform", help="how restoring splits the leaves")
    parser.add_argument("--restore-ranks", type=int, help="with --roundtrip: restore on the first Q ranks only")
    args = parser.parse_args(argv)

    base = args.base or [32 if args.dim == 3 else 64]
    if len(base) == 1:
        base = base * args.dim
    if len(base) != args.dim or any(n < 8 or n & (n - 1) for n in base):
        parser.error(f"--base needs {args.dim} powers of two >= 8, not {base}")
    build = BuildParams(dim=args.dim, base=base, diagonal_balance=args.diagonal_balance)
    comm = world()

    if args.save:
        run_save(args.save, build, comm)
        return 0
    if args.restore:
        return 0 if run_restore(args.restore, comm, args.partition) else 1

    # Both in this job.
    Q = args.restore_ranks or size_of(comm)
    if not 1 <= Q <= size_of(comm):
        parser.error(f"--restore-ranks must be in 1..{size_of(comm)}")
    tmp = bcast(comm, tempfile.mkdtemp(prefix="treemesh-") if rank_of(comm) == 0 and not args.roundtrip else None)
    path = args.roundtrip or os.path.join(tmp, "treemesh.scda")
    try:
        run_save(path, build, comm)
        sub, member = comm, True
        if comm is not None and Q < comm.size:
            from mpi4py import MPI  # only to split off the restoring ranks

            member = comm.rank < Q
            sub = comm.Split(0 if member else MPI.UNDEFINED, comm.rank)
        ok = run_restore(path, sub, args.partition) if member else True
        if member and sub is not comm:
            sub.Free()
        ok = bool(bcast(comm, ok))  # rank 0 restores and checks: its verdict is everyone's
    finally:
        if tmp is not None:
            if comm is not None:
                comm.Barrier()
            if rank_of(comm) == 0:
                shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
