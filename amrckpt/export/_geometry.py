"""Where each leaf of a forest lies: tree boxes from the checkpoint (or a brick), leaf boxes, cell corners."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["cell_corners", "float32_exact", "leaf_boxes", "leaf_corners", "mesh_geometry", "tree_boxes"]

# Corners of a cell, as VTK_QUAD (9) and VTK_HEXAHEDRON (12) order them (and yt's Quad4 and Hex8):
# counter-clockwise around the bottom face, then the same around the top face.  Row c is corner c;
# column d is 1 where the corner takes the upper bound along axis d.
_CORNERS = {
    2: np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=bool),
    3: np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], dtype=bool),
}
VTK_CELL_TYPE = {2: 9, 3: 12}
"""VTK cell type of a leaf: VTK_QUAD in 2D, VTK_HEXAHEDRON in 3D."""


def mesh_geometry(reader: Any, brick: tuple[int, ...] | None = None, mesh: str | None = None) -> Any:
    """Return the :class:`amrckpt.container.Geometry` of a checkpoint's mesh: how its trees lie in space.

    The one place where the exporters decide it: the geometry stored in
    the checkpoint (p4est's connectivity, placing each tree by its vertex
    map; or a box per tree, formats 1 and 2), a row of unit trees without
    one, or a ``brick`` of unit trees, row-major, given by the caller (for
    files written before geometry was stored).

    Raises
    ------
    CheckpointError
        If the checkpoint has no mesh, or its geometry is not valid.
    ValueError
        If it has no mesh ``mesh``, or ``brick`` does not hold the trees.
    """
    from ..container import Geometry
    from ._arrays import mesh_spec

    m = mesh_spec(reader.manifest, mesh)
    if brick is not None:
        brick = tuple(int(b) for b in brick) + (1,) * (m.dim - len(brick))
    return Geometry.of(m, brick)


def tree_boxes(reader: Any, brick: tuple[int, ...] | None = None, mesh: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return the physical box of every tree of a checkpoint's forest.

    The one place where the exporters decide where trees lie, through
    :meth:`amrckpt.container.Geometry.of`: the geometry stored in the
    checkpoint (a row of unit trees, tree i at x in [i, i + 1), when the
    file stores none), or, for files written before geometry was stored, a
    brick given by the caller.

    Parameters
    ----------
    reader : amrckpt.container.CheckpointReader
        An open checkpoint with a mesh.
    brick : tuple of int, optional
        ``(nx, ny)`` in 2D, ``(nx, ny, nz)`` in 3D (a missing ``nz`` is 1):
        unit trees laid out row-major, tree ``t = (k * ny + j) * nx + i`` at
        ``[i, i + 1) x [j, j + 1) x [k, k + 1)``, as p4est's brick
        connectivity and ``examples/advection_amr.py`` number them.
        Overrides the stored geometry.
    mesh : str, optional
        Which mesh of the checkpoint (the first by default).

    Returns
    -------
    lower, upper : (num_trees, dim) numpy.ndarray of float64
        Lower and upper corner of each tree, in the checkpoint's length unit
        (with a p4est connectivity: the box around the tree's vertices;
        :func:`leaf_corners` places leaves by the vertex map).

    Raises
    ------
    CheckpointError
        If the checkpoint has no mesh.
    ValueError
        If it has no mesh ``mesh``; if ``brick`` has the wrong length, a size below 1, or fewer trees
        than the forest.
    """
    g = mesh_geometry(reader, brick, mesh)
    return np.asarray(g.tree_lower, dtype=np.float64), np.asarray(g.tree_upper, dtype=np.float64)


def leaf_boxes(mesh: np.ndarray, lower: np.ndarray, upper: np.ndarray, maxlevel: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the physical box of each leaf.

    Parameters
    ----------
    mesh : (n,) numpy.ndarray of mesh records
        Fields ``tree``, ``level``, ``x``, ``y`` [, ``z``]: integer anchor
        coordinates in units of ``2**-maxlevel`` of a tree (p4est's).
    lower, upper : (num_trees, dim) numpy.ndarray of float64
        The tree boxes (:func:`tree_boxes`).
    maxlevel : int
        p4est's ``MAXLEVEL`` of the coordinates.

    Returns
    -------
    lo, hi : (n, dim) numpy.ndarray of float64
        Lower and upper corner of each leaf: ``lower[tree] + (x / 2**maxlevel)
        * (upper - lower)[tree]``, and a side of ``2**-level`` of its tree's.
    """
    dim = lower.shape[1]
    tree = mesh["tree"]
    one_tree = lower.shape[0] == 1
    side = np.ldexp(1.0, -np.arange(maxlevel + 1))[mesh["level"]]  # 2**-level, by table
    lo = np.empty((dim, len(mesh)), dtype=np.float64).T  # axis-major underneath: each axis is contiguous
    hi = np.empty((dim, len(mesh)), dtype=np.float64).T
    for d, c in enumerate(("x", "y", "z")[:dim]):  # a loop over axes; every axis is one vector operation
        ext = upper[:, d] - lower[:, d]
        if one_tree or (ext == ext[0]).all():
            e: Any = ext[0]
            base = lower[0, d] if one_tree else np.take(lower[:, d], tree)
        else:
            e = np.take(ext, tree)
            base = np.take(lower[:, d], tree)
        np.multiply(mesh[c], e * 2.0**-maxlevel, out=lo[:, d])
        lo[:, d] += base
        np.multiply(side, e, out=hi[:, d])
        hi[:, d] += lo[:, d]
    return lo, hi


def cell_corners(lo: np.ndarray, hi: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """Return the corners of each box as 3D points, in VTK_QUAD / VTK_HEXAHEDRON order.

    Parameters
    ----------
    lo, hi : (n, dim) numpy.ndarray of float64
        The boxes (:func:`leaf_boxes`), ``dim`` 2 or 3.
    dtype : numpy dtype, optional
        Of the points (float64, or float32 where :func:`float32_exact`).

    Returns
    -------
    (n * 2**dim, 3) numpy.ndarray of ``dtype``
        Corner ``c`` of box ``i`` in row ``i * 2**dim + c``; z = 0 in 2D.
    """
    n, dim = lo.shape
    sel = _CORNERS[dim]
    pts = np.empty((n, len(sel), 3), dtype=dtype)
    for c, corner in enumerate(sel):  # 4 or 8 corners, 2 or 3 axes: each a strided copy of n values
        for d in range(dim):
            pts[:, c, d] = hi[:, d] if corner[d] else lo[:, d]
        if dim == 2:
            pts[:, c, 2] = 0.0
    return pts.reshape(-1, 3)


def leaf_corners(mesh: np.ndarray, geometry: Any, maxlevel: int, dtype: Any = np.float64) -> np.ndarray:
    """Return the corners of each leaf placed by the geometry's map, as 3D points in VTK_QUAD / VTK_HEXAHEDRON order.

    With a p4est connectivity each corner is placed by p4est's
    (bi/tri)linear map of its tree's vertices (and the geometry's analytic
    map, p8est's shell), so that a star's, a Moebius strip's or a shell's
    leaves lie where p4est's own VTK output puts them; for trees that are
    boxes it equals :func:`cell_corners` of :func:`leaf_boxes`.
    Vectorized: one vertex map per corner of the leaves.

    Parameters
    ----------
    mesh : (n,) numpy.ndarray of mesh records
        Fields ``tree``, ``level``, ``x``, ``y`` [, ``z``].
    geometry : amrckpt.container.Geometry
        From :func:`mesh_geometry`.
    maxlevel : int
        p4est's ``MAXLEVEL`` of the coordinates.
    dtype : numpy dtype, optional
        Of the points.

    Returns
    -------
    (n * 2**dim, 3) numpy.ndarray of ``dtype``
        Corner ``c`` of leaf ``i`` in row ``i * 2**dim + c``.
    """
    dim = geometry.dim
    n = len(mesh)
    sel = _CORNERS[dim]
    side = np.ldexp(1.0, -np.arange(maxlevel + 1))[mesh["level"]]  # the leaf's side in reference units, by table
    anchor = [np.ldexp(mesh[c].astype(np.float64), -maxlevel) for c in ("x", "y", "z")[:dim]]
    pts = np.empty((n, len(sel), 3), dtype=dtype)
    ref = np.empty((n, dim), dtype=np.float64)
    for c, corner in enumerate(sel):
        for d in range(dim):
            ref[:, d] = anchor[d] + side if corner[d] else anchor[d]
        pts[:, c, :] = geometry.map_points(mesh["tree"], ref)
    return pts.reshape(-1, 3)


def float32_exact(lower: np.ndarray, upper: np.ndarray, max_level: int) -> bool:
    """Return whether every corner of every leaf up to ``max_level`` is exactly a float32.

    True when the tree sides are integer multiples of ``2**f`` (``2**f`` the
    largest power of two not above the smallest side), the tree corners are
    multiples of ``q = 2**(f - max_level)``, and no coordinate reaches
    ``2**24 q``: every corner is then an integer multiple of ``q`` below
    ``2**24`` of them (a row of unit trees: leaves up to level 20 or so).

    Parameters
    ----------
    lower, upper : (num_trees, dim) numpy.ndarray of float64
        The tree boxes (:func:`tree_boxes`).
    max_level : int
        The finest level of a leaf.
    """
    ext = upper - lower
    if ext.size == 0:
        return True
    if not (np.isfinite(lower).all() and np.isfinite(upper).all() and (ext > 0).all()):
        return False
    f = float(np.floor(np.log2(ext.min())))
    q = 2.0 ** (f - max_level)
    whole = [ext / 2.0**f, lower / q]
    if not all((w == np.round(w)).all() for w in whole):
        return False
    return bool(max(float(np.abs(lower).max()), float(np.abs(upper).max())) / q < 2.0**24)
