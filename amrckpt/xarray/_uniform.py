"""A covering grid: the leaves of a brick of trees resampled onto a regular grid at one level."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from ..container import Geometry, MeshSpec
from ..errors import CheckpointError
from ._dataset import AXES

__all__ = ["AmrAccessor", "to_uniform"]


@dataclass(frozen=True)
class _Grid:
    """The regular grid: ``dim`` axes of cells of side ``h`` from ``origin``; its window ``lo .. hi`` (cell indices) is kept."""

    dim: int
    level: int
    maxlevel: int
    tree_index: np.ndarray  # (num_trees, dim) int64: each tree's place in the brick
    origin: np.ndarray  # (dim,) float64
    h: np.ndarray  # (dim,) float64: the side of a cell
    lo: np.ndarray  # (dim,) int64
    hi: np.ndarray  # (dim,) int64

    @property
    def shape(self) -> tuple[int, ...]:
        """Cells per axis of the window, x first."""
        return tuple(int(v) for v in self.hi - self.lo)


def _grid(ds: xr.Dataset, level: int, bbox: Sequence[tuple[float, float]] | None) -> _Grid:
    spec = ds.attrs.get("amrckpt_mesh_spec")
    if spec is None:
        raise CheckpointError("to_uniform needs a mesh dataset of the amrckpt engine (its attribute amrckpt_mesh_spec)")
    ms = MeshSpec.model_validate_json(spec)
    if not 0 <= level <= ms.maxlevel:
        raise ValueError(f"level must be in 0..{ms.maxlevel}, not {level}")
    g = Geometry.of(ms)
    if not g.boxes_exact:
        raise CheckpointError(f"mesh {ms.field!r}: its trees are not axis-aligned boxes (a vertex map or a map): no covering grid")
    size = g.tree_upper - g.tree_lower
    if not np.allclose(size, size[0], rtol=1e-12, atol=0.0):
        raise CheckpointError(f"mesh {ms.field!r}: its trees are not all of one size: no covering grid")
    origin = g.tree_lower.min(axis=0)
    pos = (g.tree_lower - origin) / size[0]
    tree_index = np.rint(pos).astype(np.int64)
    if not np.allclose(pos, tree_index, rtol=0.0, atol=1e-9):
        raise CheckpointError(f"mesh {ms.field!r}: its trees do not lie on a brick: no covering grid")
    h = size[0] / 2.0**level
    full = (tree_index.max(axis=0) + 1) << level
    lo, hi = np.zeros(ms.dim, dtype=np.int64), full.astype(np.int64)
    if bbox is not None:
        b = np.asarray(bbox, dtype=np.float64)
        if b.shape != (ms.dim, 2):
            raise ValueError(f"bbox must give (lower, upper) along each of the {ms.dim} axes, not {bbox!r}")
        lo = np.clip(np.ceil((b[:, 0] - origin) / h - 0.5), 0, full).astype(np.int64)  # cells whose centre is inside
        hi = np.clip(np.floor((b[:, 1] - origin) / h - 0.5) + 1, lo, full).astype(np.int64)
    return _Grid(ms.dim, level, ms.maxlevel, tree_index, origin, h, lo, hi)


def _accumulate(grid: _Grid, tree: np.ndarray, lev: np.ndarray, anchors: list[np.ndarray], values: np.ndarray) -> np.ndarray:
    """Volume-weighted sums of ``values`` ((n, ncomp)) and the covered fraction per cell: ``(ncells, ncomp + 1)`` float64/complex.

    A leaf at or below ``grid.level`` adds ``2**(-dim (level_leaf - level))``
    of its value to the one cell it lies in; a coarser leaf adds its value
    to every cell it covers.  A loop over the coarser levels (at most
    ``grid.level``), never over leaves.
    """
    dim, L, M = grid.dim, grid.level, grid.maxlevel
    ncells = math.prod(grid.shape)
    dt = np.result_type(values.dtype, np.float64)
    out = np.zeros((ncells, values.shape[1] + 1), dtype=dt)
    lev = lev.astype(np.int64)
    # The cell of each leaf's lower corner, along each axis, in the window.
    cell = [
        (grid.tree_index[tree, d] << L) + (anchors[d].astype(np.int64) >> (M - L)) - grid.lo[d] for d in range(dim)
    ]  # fmt: skip
    for span_level in np.unique(np.minimum(lev, L)):
        sel = np.flatnonzero(np.minimum(lev, L) == span_level)
        s = 1 << (L - int(span_level))  # cells per axis a leaf of this level covers (1: the leaf is at or below L)
        offs = np.stack(np.meshgrid(*([np.arange(s)] * dim), indexing="ij"), axis=-1).reshape(-1, dim)
        idx = np.zeros((sel.size, offs.shape[0]), dtype=np.int64)
        inside = np.ones(idx.shape, dtype=bool)
        for d in reversed(range(dim)):  # flat index: x fastest
            c = cell[d][sel, None] + offs[None, :, d]
            inside &= (c >= 0) & (c < grid.shape[d])
            idx = idx * grid.shape[d] + c
        w = np.ldexp(1.0, -dim * (lev[sel] - L)) if s == 1 else np.ones(sel.size)
        flat = idx[inside]
        rows = np.broadcast_to(np.arange(sel.size)[:, None], idx.shape)[inside]
        wr = w[rows]
        for k in range(values.shape[1]):
            v = values[sel, k][rows] * wr
            if np.iscomplexobj(v):
                out[:, k] += np.bincount(flat, v.real, ncells) + 1j * np.bincount(flat, v.imag, ncells)
            else:
                out[:, k] += np.bincount(flat, v, ncells)
        out[:, -1] += np.bincount(flat, wr, ncells)
    return out


def _finish(sums: np.ndarray) -> np.ndarray:
    """Averages from volume-weighted sums and covered fractions (NaN where no leaf covers a cell)."""
    cover = sums[:, -1].real
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cover[:, None] > 0, sums[:, :-1] / cover[:, None], np.nan)


def _leaf_vars(ds: xr.Dataset, variables: Sequence[Hashable] | None) -> list[Hashable]:
    if variables is not None:
        return list(variables)
    return [
        n for n, v in ds.data_vars.items()
        if v.dims[:1] == ("leaf",) and v.attrs.get("amrckpt_kind") == "cells" and v.dtype.kind in "biufc"
    ]  # fmt: skip


def to_uniform(
    ds: xr.Dataset, level: int, bbox: Sequence[tuple[float, float]] | None = None, *, variables: Sequence[Hashable] | None = None
) -> xr.Dataset:
    """Resample the leaves of a brick of trees onto a regular grid at ``level``: a covering grid. Serial.

    Each cell of the grid (a leaf of ``level`` everywhere) gets the volume
    average of the leaves finer than ``level`` inside it, or the value of
    the leaf at or above ``level`` that holds it (injection): the volume
    integral of every field is kept.  Vectorized (a loop over the coarser
    levels, never over leaves); lazy where the dataset's variables are dask
    arrays: one task per chunk of leaves (a partial grid of sums) and a
    tree of additions, so that no worker holds more than a few grids.

    Parameters
    ----------
    ds : xarray.Dataset
        A mesh dataset of the ``amrckpt`` engine (coordinates ``tree``,
        ``level``, ``x``, ``y`` [, ``z``] and the attribute ``amrckpt_mesh_spec``).
    level : int
        The grid's level: cells of ``2**-level`` of a tree's side.
    bbox : sequence of (float, float), optional
        ``(lower, upper)`` along each axis in the geometry's units: only the
        cells whose centre lies inside are kept.
    variables : sequence of str, optional
        The per-leaf variables to resample (default: every numeric cells field).

    Returns
    -------
    xarray.Dataset
        Each variable on dims ``("y", "x")`` (2D) or ``("z", "y", "x")``
        (3D) and its component dims, float64 (complex128 for complex
        fields), NaN where no leaf lies; coordinates ``x``, ``y`` [, ``z``]:
        the cell centres in the geometry's units.

    Raises
    ------
    CheckpointError
        If the trees are not boxes of one size on a brick (a connectivity
        with a vertex map or an analytic map), or ``ds`` is not a mesh dataset.
    ValueError
        If ``level`` is not in ``0 .. maxlevel`` or ``bbox`` does not have one pair per axis.
    """
    grid = _grid(ds, level, bbox)
    dim = grid.dim
    names = _leaf_vars(ds, variables)
    coords_names = ["tree", "level", *AXES[:dim]]
    out_dims = tuple(reversed(AXES[:dim]))
    shape_zyx = tuple(reversed(grid.shape))
    lazy = any(ds[n].chunks is not None for n in [*names, *coords_names])
    result: dict[Hashable, xr.Variable] = {}
    for n in names:
        da = ds[n]
        comp_dims = da.dims[1:]
        ncomp = math.prod(da.shape[1:])
        dt = np.result_type(da.dtype, np.float64)
        if lazy:
            data: Any = _lazy(ds, n, coords_names, grid, ncomp, dt)
        else:
            leaves = [np.asarray(ds[c].values) for c in coords_names]
            vals = np.asarray(da.values).reshape(da.shape[0], ncomp)
            data = _finish(_accumulate(grid, leaves[0], leaves[1], leaves[2:], vals))
        data = data.reshape(*shape_zyx, *da.shape[1:])
        result[n] = xr.Variable(out_dims + comp_dims, data, attrs=dict(da.attrs))
    centres = {
        AXES[d]: grid.origin[d] + (np.arange(grid.lo[d], grid.hi[d]) + 0.5) * grid.h[d] for d in range(dim)
    }  # fmt: skip
    attrs = {k: v for k, v in ds.attrs.items()} | {"amrckpt_uniform_level": level}
    return xr.Dataset(result, coords={a: (a, c) for a, c in centres.items()}, attrs=attrs)


def _lazy(ds: xr.Dataset, name: Hashable, coords_names: list[str], grid: _Grid, ncomp: int, dt: np.dtype[Any]) -> Any:
    """Return the resampled variable as a dask array: a partial grid per chunk of leaves, added up in a tree."""
    import dask.array as darr
    from dask.delayed import delayed

    def dask(a: Any, chunks: tuple[Any, ...]) -> Any:
        """Return ``a`` if it is a dask array, else ``a`` as one of ``chunks``."""
        return a if isinstance(a, darr.Array) else darr.from_array(np.asarray(a), chunks=chunks)  # type: ignore[no-untyped-call]

    v = ds[name].data
    v = dask(v, (ds.sizes["leaf"], *v.shape[1:]))
    v = v.rechunk({k: -1 for k in range(1, v.ndim)})
    leaf_chunks = v.chunks[0]
    cs = [dask(ds[c].data, (leaf_chunks,)).rechunk((leaf_chunks,)).to_delayed().ravel() for c in coords_names]
    vb = v.to_delayed().ravel()
    part = delayed(_partial, pure=True)
    parts = [part(grid, cs[0][i], cs[1][i], [c[i] for c in cs[2:]], vb[i], ncomp) for i in range(len(vb))]
    add = delayed(np.add, pure=True)
    while len(parts) > 1:
        parts = [add(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    done = delayed(_finish, pure=True)(parts[0])
    return darr.from_delayed(  # type: ignore[no-untyped-call]
        done, shape=(math.prod(grid.shape), ncomp), dtype=dt
    )


def _partial(grid: _Grid, tree: np.ndarray, lev: np.ndarray, anchors: list[np.ndarray], v: np.ndarray, ncomp: int) -> np.ndarray:
    return _accumulate(grid, tree, lev, anchors, np.asarray(v).reshape(len(tree), ncomp))


@xr.register_dataset_accessor("amr")  # type: ignore[no-untyped-call]
class AmrAccessor:
    """``ds.amr``: covering grids of a mesh dataset of the ``amrckpt`` engine (registered by ``import amrckpt.xarray``)."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def to_uniform(
        self, level: int, bbox: Sequence[tuple[float, float]] | None = None, *, variables: Sequence[Hashable] | None = None
    ) -> xr.Dataset:
        """As :func:`to_uniform` of this dataset."""
        return to_uniform(self._ds, level, bbox, variables=variables)
