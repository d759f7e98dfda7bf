"""The backend's lazily indexed arrays: each reads, for a range along its first axis, only that range's bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from ..container import Geometry, Manifest
from ._source import CheckpointSource

__all__ = [
    "CellsRead",
    "GeometryRead",
    "HpCountsRead",
    "HpOffsetsRead",
    "HpValuesRead",
    "LeafArray",
    "MeshRead",
    "RangeRead",
]


class RangeRead:
    """How a variable reads elements ``start .. stop - 1`` along its first axis (a small picklable object)."""

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        """Return the elements ``start .. stop - 1``: ``(stop - start, *rest)``."""
        raise NotImplementedError


@dataclass(frozen=True)
class CellsRead(RangeRead):
    """A cells (or distributed array) field: ``CheckpointReader.read_cells`` of the range."""

    name: str

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        return source.run(lambda r: r.read_cells(self.name, start, stop - start))


@dataclass(frozen=True)
class MeshRead(RangeRead):
    """One member of a mesh's leaf records (``tree``, ``x``, ``y``, ``z``, ``level``): ``CheckpointReader.read_mesh``."""

    mesh: str
    member: str

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        return np.ascontiguousarray(source.run(lambda r: r.read_mesh(start, stop - start, self.mesh))[self.member])


def _geometry(source: CheckpointSource, mesh: str) -> tuple[Geometry, int]:
    """Return the geometry and ``maxlevel`` of mesh ``mesh``, built once per process."""

    def make() -> tuple[Geometry, int]:
        m: Manifest = source.manifest()
        ms = next(x for x in m.meshes if x.field == mesh)
        return Geometry.of(ms), ms.maxlevel

    return source.cached(f"geometry:{mesh}", make)


def leaf_centres(mesh: np.ndarray, geometry: Geometry, maxlevel: int) -> np.ndarray:
    """Return the centre of each leaf in the geometry's units: ``(n, 3)`` float64 (z = 0 for a 2D mesh of boxes).

    The reference centre of the leaf (its anchor plus half its side, in
    units of its tree) placed by the geometry (:meth:`Geometry.map_points`:
    the tree's box, or p4est's vertex map and the geometry's map).
    """
    dim = geometry.dim
    side = np.ldexp(1.0, -np.arange(maxlevel + 1))[mesh["level"]]
    ref = np.empty((len(mesh), dim), dtype=np.float64)
    for d, c in enumerate(("x", "y", "z")[:dim]):  # a loop over axes, each one vector operation
        ref[:, d] = np.ldexp(mesh[c].astype(np.float64), -maxlevel) + 0.5 * side
    return geometry.map_points(mesh["tree"], ref)


@dataclass(frozen=True)
class GeometryRead(RangeRead):
    """A leaf's centre (``what="center"``) or side (``"size"``) along ``axis``, in the geometry's units, from its record."""

    mesh: str
    what: str
    axis: int

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        leaves = source.run(lambda r: r.read_mesh(start, stop - start, self.mesh))
        geometry, maxlevel = _geometry(source, self.mesh)
        if self.what == "center":
            return np.ascontiguousarray(leaf_centres(leaves, geometry, maxlevel)[:, self.axis])
        ext = geometry.tree_upper[:, self.axis] - geometry.tree_lower[:, self.axis]
        side: np.ndarray = np.ldexp(1.0, -np.arange(maxlevel + 1))[leaves["level"]] * ext[leaves["tree"]]
        return side


@dataclass(frozen=True)
class HpCountsRead(RangeRead):
    """Values per leaf of an hp field (int64): ``CheckpointReader.read_hp_counts`` (its values are not read)."""

    name: str

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        return source.run(lambda r: r.read_hp_counts(self.name, start, stop - start)).astype(np.int64, copy=False)


@dataclass(frozen=True)
class HpOffsetsRead(RangeRead):
    """Where each leaf's values begin in the flat values (``num_leaves + 1`` int64), read once per process."""

    name: str
    num_leaves: int

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        return source.hp_offsets(self.name, self.num_leaves)[start:stop]


@dataclass(frozen=True)
class HpValuesRead(RangeRead):
    """Values ``start .. stop - 1`` of an hp field, all leaves' values in curve order: the leaves that hold them, read whole."""

    name: str
    num_leaves: int

    def __call__(self, source: CheckpointSource, start: int, stop: int) -> np.ndarray:
        off = source.hp_offsets(self.name, self.num_leaves)
        a = int(np.searchsorted(off, start, side="right")) - 1  # the leaf that holds value `start`
        b = int(np.searchsorted(off, stop, side="left"))  # the first leaf that begins at or after `stop`
        a, b = max(0, min(a, self.num_leaves)), max(a, min(b, self.num_leaves))
        values = source.run(lambda r: r.read_hp(self.name, a, b - a))[1]
        lo = start - int(off[a])
        return values[lo : lo + (stop - start)]


class LeafArray(BackendArray):
    """A variable of a checkpoint indexed lazily (xarray's basic indexing): only the range along its first axis is read.

    Attributes
    ----------
    shape : tuple of int
    dtype : numpy.dtype
    """

    def __init__(self, source: CheckpointSource, read: RangeRead, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.source = source
        self.read = read
        self.shape = shape
        self.dtype = dtype

    @property
    def nbytes_per_row(self) -> int:
        """Bytes of one element along the first axis."""
        return int(self.dtype.itemsize * math.prod(self.shape[1:]))

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._getitem)

    def _getitem(self, key: tuple[Any, ...]) -> np.ndarray:
        first, rest = key[0], key[1:]
        n = self.shape[0]
        if isinstance(first, slice):
            start, stop, step = first.indices(n)
            rows = range(start, stop, step)
            if len(rows) == 0:
                out = np.empty((0, *self.shape[1:]), dtype=self.dtype)
                return out[(slice(None), *rest)]
            lo, hi = min(rows[0], rows[-1]), max(rows[0], rows[-1]) + 1
            block = self._rows(lo, hi)
            block = block[slice(rows[0] - lo, None if rows[-1] - lo + step < 0 else rows[-1] - lo + step, step)]
            return np.asarray(block[(slice(None), *rest)])
        i = int(first)
        i = i + n if i < 0 else i
        if not 0 <= i < n:
            raise IndexError(f"index {int(first)} is out of bounds for an axis of {n}")
        return np.asarray(self._rows(i, i + 1)[(0, *rest)])

    def _rows(self, lo: int, hi: int) -> np.ndarray:
        got = np.asarray(self.read(self.source, lo, hi))
        return got.astype(self.dtype, copy=False).reshape((hi - lo, *self.shape[1:]))
