"""The trees of a mesh in physical space, from the manifest's :class:`GeometrySpec`: boxes, or p4est's connectivity."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import CheckpointError, ConnectivityError
from ..sfc import Connectivity, shell_map
from ._convention import GeometryMap, GeometrySpec, MeshSpec

__all__ = ["Geometry"]


@dataclass(frozen=True)
class Geometry:
    """The trees of a mesh in physical space (from the manifest's :class:`GeometrySpec`).

    Attributes
    ----------
    tree_lower, tree_upper : (num_trees, dim) numpy.ndarray of float64
        The box of each tree: with a connectivity, the box around its
        vertices (or its mapped corners).  Without a geometry in the file:
        unit trees in a row (tree ``k`` at ``[k, k + 1) x [0, 1)``), or a
        ``brick`` layout given by the caller (row-major: tree = (k * ny + j)
        * nx + i).
    brick : tuple of int or None
    units : str or None
    connectivity : amrckpt.sfc.Connectivity or None
        p4est's connectivity (format 3): trees are placed by its vertex map
        (:meth:`map_points`).
    map : GeometryMap or None
        An analytic map after the vertex map (p8est's shell).
    """

    tree_lower: np.ndarray
    tree_upper: np.ndarray
    brick: tuple[int, ...] | None = None
    units: str | None = None
    connectivity: Connectivity | None = None
    map: GeometryMap | None = None

    @classmethod
    def of(cls, mesh: MeshSpec, brick: tuple[int, ...] | None = None) -> Geometry:
        """Return the geometry of ``mesh``: stored in the file, else a ``brick`` of unit trees, else a row of unit trees.

        Raises
        ------
        CheckpointError
            If the stored geometry does not have one box per tree, or its
            connectivity is not valid (p4est ``p4est_connectivity_is_valid``)
            or has another number of trees or dimension.
        ValueError
            If ``brick`` does not have ``dim`` positive entries holding the trees.
        """
        g = mesh.geometry
        if g is not None and brick is None:
            if g.connectivity is not None:
                try:
                    conn = g.connectivity.to_connectivity(mesh.dim)
                    conn.check()
                except ConnectivityError as exc:
                    raise CheckpointError(f"the geometry of mesh {mesh.field!r}: {exc}") from exc
                if conn.num_trees != mesh.num_trees:
                    raise CheckpointError(
                        f"the connectivity of mesh {mesh.field!r} has {conn.num_trees} trees, the mesh {mesh.num_trees}"
                    )
                return cls.of_connectivity(conn, g.units, g.map, tuple(g.brick) if g.brick else None)
            lo, hi = np.asarray(g.tree_lower, dtype=np.float64), np.asarray(g.tree_upper, dtype=np.float64)
            if lo.shape != (mesh.num_trees, mesh.dim) or hi.shape != lo.shape:
                raise CheckpointError(f"the geometry of mesh {mesh.field!r} does not give one box per tree")
            return cls(lo, hi, tuple(g.brick) if g.brick else None, g.units)
        if brick is None:
            brick = (mesh.num_trees, *([1] * (mesh.dim - 1)))
        return cls.brick_of(brick, mesh.num_trees, mesh.dim)

    @classmethod
    def of_connectivity(
        cls, conn: Connectivity, units: str | None = None, map: GeometryMap | None = None, brick: tuple[int, ...] | None = None
    ) -> Geometry:
        """Return the geometry of a p4est connectivity (boxes around each tree's mapped corners)."""
        if map is not None:
            # Mapped trees bulge: their boxes are taken around a grid of 5 points per axis, widened a little.
            g = np.linspace(0.0, 1.0, 5)
            ref = np.stack(np.meshgrid(*([g] * conn.dim), indexing="ij"), axis=-1).reshape(-1, conn.dim)
            t = np.repeat(np.arange(conn.num_trees), ref.shape[0])
            pts = _mapped(conn, map, t, np.tile(ref, (conn.num_trees, 1)))[:, : conn.dim].reshape(conn.num_trees, -1, conn.dim)
            lo, hi = pts.min(axis=1), pts.max(axis=1)
            pad = 0.02 * (hi - lo)
            lo, hi = lo - pad, hi + pad
        else:
            lo, hi = conn.bounding_boxes()
        return cls(lo, hi, brick, units, conn, map)

    @classmethod
    def brick_of(cls, brick: tuple[int, ...], num_trees: int, dim: int, lower: Any = None, upper: Any = None) -> Geometry:
        """Return a brick of ``brick`` trees per axis, row-major, the trees of size ``(upper - lower) / brick`` (formats 1, 2).

        Raises
        ------
        ValueError
            On this rank, if ``brick`` is not ``dim`` positive tree counts that hold ``num_trees`` trees.
        """
        b = tuple(int(x) for x in brick)
        if len(b) != dim or min(b) < 1 or math.prod(b) < num_trees:
            raise ValueError(f"brick {b}: give {dim} positive tree counts per axis, holding {num_trees} trees")
        k = np.arange(num_trees)
        ijk = np.stack([(k // math.prod(b[:a])) % b[a] for a in range(dim)], axis=1).astype(np.float64)
        lo = np.zeros(dim) if lower is None else np.asarray(lower, dtype=np.float64)
        hi = np.asarray(b, dtype=np.float64) if upper is None else np.asarray(upper, dtype=np.float64)
        size = (hi - lo) / np.asarray(b, dtype=np.float64)
        return cls(lo + ijk * size, lo + (ijk + 1) * size, b)

    @property
    def dim(self) -> int:
        """2 or 3."""
        return int(self.tree_lower.shape[1])

    @property
    def boxes_exact(self) -> bool:
        """Whether every tree is its box (no connectivity; or vertices at the box corners, z = 0 in 2D, no map).

        Then a tree's integer coordinates map affinely onto its box, and
        the exporters use the boxes (:func:`amrckpt.export.leaf_boxes`).
        """
        conn = self.connectivity
        if conn is None:
            return True
        if self.map is not None:
            return False
        pts = conn.tree_corners()
        c = np.arange(1 << conn.dim)
        bits = np.stack([(c >> a) & 1 for a in range(conn.dim)], axis=1).astype(bool)
        want = np.where(bits[None], self.tree_upper[:, None, :], self.tree_lower[:, None, :])
        flat = conn.dim == 3 or not pts[:, :, 2].any()
        return bool(flat and np.array_equal(pts[:, :, : conn.dim], want))

    def map_points(self, tree: Any, ref: Any) -> np.ndarray:
        """Place points of trees in space: the vertex map of the connectivity (and its map), else the boxes.

        Not collective, vectorized.

        Parameters
        ----------
        tree : (n,) array_like of int
        ref : (n, dim) array_like of float
            Reference coordinates in ``[0, 1]`` per axis.

        Returns
        -------
        (n, 3) numpy.ndarray of numpy.float64
            Points in the mesh's length units (z = 0 for a 2D mesh of boxes).
        """
        t = np.asarray(tree, dtype=np.intp)
        r = np.asarray(ref, dtype=np.float64)
        if self.connectivity is not None:
            return _mapped(self.connectivity, self.map, t, r)
        out = np.zeros((t.shape[0], 3), dtype=np.float64)
        out[:, : self.dim] = self.tree_lower[t] + r * (self.tree_upper[t] - self.tree_lower[t])
        return out

    def spec(self) -> GeometrySpec:
        """Return this geometry as the manifest stores it."""
        if self.connectivity is not None:
            return GeometrySpec.of_connectivity(self.connectivity, units=self.units, map=self.map, brick=self.brick)
        return GeometrySpec(
            brick=list(self.brick) if self.brick else None,
            tree_lower=self.tree_lower.tolist(),
            tree_upper=self.tree_upper.tolist(),
            units=self.units,
        )


def _mapped(conn: Connectivity, map: GeometryMap | None, tree: np.ndarray, ref: np.ndarray) -> np.ndarray:
    if map is None:
        return conn.map_points(tree, ref)
    try:
        return shell_map(conn, tree, ref, map.R1, map.R2)
    except ConnectivityError as exc:
        raise CheckpointError(f"the geometry's map {map.kind!r}: {exc}") from exc
