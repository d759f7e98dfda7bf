"""What the exporters write per leaf: the plan of cell arrays, and their values for a range of leaves."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._logging import get_logger
from ..container import Manifest, MeshSpec, dtype_from_json, handler_for
from ..errors import CheckpointError
from ..manager import StepNames
from ..partition import Partition

__all__ = [
    "POSITION_NAMES",
    "CellArray",
    "HpSummary",
    "PointSet",
    "checkpoint_paths",
    "leaf_values",
    "mesh_spec",
    "plan_arrays",
    "plan_points",
    "point_values",
]

logger = get_logger(__name__)

HpSummary = Literal["first", "mean"]
"""How an hp field becomes one value per leaf: its first value (the first
coefficient of a modal expansion: the leaf mean for Legendre or Taylor bases)
or the mean of its values; both NaN for a leaf without values."""


@dataclass(frozen=True)
class CellArray:
    """One array of per-leaf values in an export.

    Attributes
    ----------
    name : str
        The array's name in the export (``q``, ``velocity``, ``recon.count``,
        ``rho.real``, ``state.p``, ``level``, ``tree``, ``rank``).
    source : str
        ``level``, ``tree``, ``rank``, ``cells``, ``hp.count``, ``hp.first`` or
        ``hp.mean``.
    field : str or None
        The checkpoint field it comes from (None for ``level``, ``tree`` and
        ``rank``).
    dtype : numpy.dtype
        The stored dtype (native byte order).
    ncomp : int
        Components per leaf (``prod(shape)`` of the field's value).
    units : str or None
        The field's units.
    pick : callable or None
        Turns the field's values for a range of leaves, ``(count, *shape)``,
        into ``(count, ncomp)`` (``cells`` arrays).
    ranks : int or None
        The number of ranks of a ``rank`` array.
    """

    name: str
    source: str
    field: str | None
    dtype: np.dtype[Any]
    ncomp: int
    units: str | None = None
    pick: Callable[[np.ndarray], np.ndarray] | None = None
    ranks: int | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        """What must agree between the steps of a series: name, dtype, components."""
        return (self.name, self.dtype.str, self.ncomp)


def _stored(dt: np.dtype[Any]) -> np.dtype[Any] | None:
    """Return the dtype that a numeric scalar dtype is stored as (None: not numeric)."""
    if dt.kind == "b":
        return np.dtype(np.uint8)
    if dt.kind in "iu":
        return dt.newbyteorder("=")
    if dt.kind == "f":
        return np.dtype(np.float32) if dt.itemsize < 4 else np.dtype(np.float64) if dt.itemsize > 8 else dt.newbyteorder("=")
    return None


def _number(v: Any, kind: type) -> Any:
    return kind(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class _Pick:
    """Turn a field's values ``(count, *shape)`` into ``(count, ncomp)``: a record member, a complex part, or all.

    A small object rather than a closure, so that plans travel between ranks (pickle).
    """

    member: str | None = None
    part: str | None = None

    def __call__(self, a: np.ndarray) -> np.ndarray:
        if self.member is not None:
            a = a[self.member]
        if self.part is not None:
            a = a.real if self.part == "real" else a.imag
        return a.reshape(a.shape[0], math.prod(a.shape[1:]))


def _cells_arrays(name: str, dt: np.dtype[Any], shape: Sequence[int], units: str | None) -> list[CellArray]:
    per = math.prod(shape)
    if per == 0:
        return []
    stored = _stored(dt)
    if stored is not None:
        return [CellArray(name, "cells", name, stored, per, units, _Pick())]
    if dt.kind == "c":
        part = np.dtype(f"f{dt.itemsize // 2}") if dt.itemsize <= 16 else np.dtype(np.float64)
        return [
            CellArray(f"{name}.real", "cells", name, part, per, units, _Pick(part="real")),
            CellArray(f"{name}.imag", "cells", name, part, per, units, _Pick(part="imag")),
        ]
    out: list[CellArray] = []
    if dt.names is not None:
        for member in dt.names:
            sub = dt.fields[member][0] if dt.fields else None
            if sub is None:
                continue
            base, sub_shape = sub.base, sub.shape
            st = _stored(base)
            if st is None:
                logger.info("field %s: member %s of dtype %s has no numeric value; not exported", name, member, sub)
                continue
            out.append(CellArray(f"{name}.{member}", "cells", name, st, per * math.prod(sub_shape), units, _Pick(member=member)))
        return out
    logger.info("field %s of dtype %s has no numeric value; not exported", name, dt)
    return []


def mesh_spec(manifest: Manifest, mesh: str | None = None) -> MeshSpec:
    """Return the mesh ``mesh`` of a checkpoint (its first mesh by default).

    Raises
    ------
    CheckpointError
        If the checkpoint holds no mesh.
    ValueError
        If it holds no mesh named ``mesh`` (the message lists its meshes).
    """
    if not manifest.meshes:
        raise CheckpointError(f"the checkpoint (schema {manifest.schema_name}) holds no mesh: nothing to place")
    if mesh is None:
        return manifest.meshes[0]
    for ms in manifest.meshes:
        if ms.field == mesh:
            return ms
    raise ValueError(f"the checkpoint has no mesh {mesh!r}; its meshes: {', '.join(m.field for m in manifest.meshes)}")


def plan_arrays(
    manifest: Manifest, *, hp: HpSummary = "first", ranks: int | None = None, mesh: str | None = None
) -> list[CellArray]:
    """Return the cell arrays an export of this checkpoint holds, in order.

    ``level`` (uint8) and ``tree`` (int32) first; then every ``cells`` field
    in declaration order (numeric values as they are, bool as uint8, float16
    as float32, complex as ``NAME.real`` and ``NAME.imag``, records as one
    array per numeric member ``NAME.MEMBER``; other dtypes are left out and
    logged); every ``hp`` field as ``NAME.count`` (int64, values per leaf)
    and ``NAME.first`` or ``NAME.mean`` (float64, NaN where a leaf has no
    value; for numeric real values only); and ``rank`` (int32) if ``ranks``
    is given.

    Parameters
    ----------
    manifest : Manifest
        The checkpoint's manifest (with a mesh).
    hp : {"first", "mean"}, optional
        The per-leaf summary of hp fields (:data:`HpSummary`).
    ranks : int, optional
        Add ``rank``: the owner of each leaf under the uniform partition on
        this many ranks (p4est's ``floor(N p / P)`` split).
    mesh : str, optional
        The mesh whose leaves are the cells (the first by default): only the
        fields on its leaves are planned.

    Returns
    -------
    list of CellArray

    Raises
    ------
    ValueError
        On this rank, if ``hp`` is neither "first" nor "mean", or ``ranks`` is below 1.
    CheckpointError
        On this rank, if two arrays of the export would have one name (a field named like level, tree, rank or
        NAME.count).
    """
    if hp not in ("first", "mean"):
        raise ValueError(f"hp must be 'first' or 'mean', not {hp!r}")
    if ranks is not None and ranks < 1:
        raise ValueError(f"ranks must be at least 1, not {ranks}")
    arrays = [
        CellArray("level", "level", None, np.dtype(np.uint8), 1, None),
        CellArray("tree", "tree", None, np.dtype(np.int32), 1, None),
    ]
    ms = mesh_spec(manifest, mesh)
    for fs in manifest.fields:
        h = handler_for(fs.kind)
        on = manifest.mesh_of(fs) if h.per_leaf and not h.is_mesh else None
        if on is None or on.field != ms.field:
            continue
        dt = dtype_from_json(fs.dtype, f"field {fs.name!r}")
        if h.reads_as == "values":  # one value per leaf; else a run of values per leaf (hp)
            arrays += _cells_arrays(fs.name, dt, fs.shape, fs.units)
            continue
        arrays.append(CellArray(f"{fs.name}.count", "hp.count", fs.name, np.dtype(np.int64), 1, None))
        if _stored(dt) is not None and dt.kind != "b" and math.prod(fs.shape) > 0:
            arrays.append(CellArray(f"{fs.name}.{hp}", f"hp.{hp}", fs.name, np.dtype(np.float64), math.prod(fs.shape), fs.units))
    if ranks is not None:
        arrays.append(CellArray("rank", "rank", None, np.dtype(np.int32), 1, None, ranks=ranks))
    names = [a.name for a in arrays]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise CheckpointError(f"the export would hold arrays {dup} twice (a field named like level, tree, rank or NAME.count)")
    return arrays


def _hp_summary(counts: np.ndarray, values: np.ndarray, how: str) -> np.ndarray:
    """Per-leaf first value or mean of hp values, ``(count, ncomp)`` float64, NaN for empty leaves."""
    n = len(counts)
    flat = values.reshape(values.shape[0], math.prod(values.shape[1:]))
    starts = np.zeros(n, dtype=np.int64)  # where each leaf's values begin
    if n > 1:
        np.cumsum(counts[:-1], out=starts[1:])
    every = n == 0 or int(counts.min()) > 0
    if how == "first" and every:  # one gather; only the first values are converted
        got = flat[:, 0].take(starts)[:, None] if flat.shape[1] == 1 else flat.take(starts, axis=0)
        return got.astype(np.float64, copy=False)
    out = np.full((n, flat.shape[1]), np.nan)
    has = counts > 0
    first = starts if every else starts[has]
    if how == "first":
        out[has] = flat.take(first, axis=0)
    elif len(first):
        out[has] = np.add.reduceat(flat.astype(np.float64, copy=False), first, axis=0) / counts[has, None]
    return out


def leaf_values(arrays: Sequence[CellArray], reader: Any, mesh: np.ndarray, start: int, num_leaves: int) -> list[np.ndarray]:
    """Return the values of each planned array for leaves ``start .. start + len(mesh) - 1``.

    Parameters
    ----------
    arrays : sequence of CellArray
        From :func:`plan_arrays`.
    reader : amrckpt.container.CheckpointReader
        The open checkpoint; each field is read once for the range.
    mesh : (count,) numpy.ndarray of mesh records
        The range's leaves (``reader.read_mesh(start, count)``).
    start : int
        Global index of the first leaf.
    num_leaves : int
        Global number of leaves (for ``rank``).

    Returns
    -------
    list of numpy.ndarray
        One per array: ``(count,)`` if it has one component, else
        ``(count, ncomp)``, of the array's dtype.
    """
    count = len(mesh)
    cells: dict[str, np.ndarray] = {}
    hps: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    out = []
    for a in arrays:
        if a.source == "level":
            v = mesh["level"]
        elif a.source == "tree":
            v = mesh["tree"]
        elif a.source == "rank":
            assert a.ranks is not None
            v = Partition.uniform(num_leaves, a.ranks).owner(np.arange(start, start + count, dtype=np.int64))
        elif a.source == "cells":
            assert a.field is not None and a.pick is not None
            if a.field not in cells:
                cells[a.field] = reader.read_cells(a.field, start, count)
            v = a.pick(cells[a.field])
        else:
            assert a.field is not None
            if a.field not in hps:
                hps[a.field] = reader.read_hp(a.field, start, count)
            counts, values = hps[a.field]
            v = counts if a.source == "hp.count" else _hp_summary(counts, values, a.source[3:])
        v = np.asarray(v).astype(a.dtype, copy=False)
        out.append(v.reshape(count) if a.ncomp == 1 else v.reshape(count, a.ncomp))
    return out


POSITION_NAMES = ("x", "pos", "position", "positions", "xyz", "coords", "r")
"""Record members that hold a point's position (float, shape (2,) or (3,)), for :func:`plan_points`, first match wins."""


@dataclass(frozen=True)
class PointSet:
    """An ``Array`` field whose elements are points (particles), exported beside the leaves.

    Attributes
    ----------
    field : str
        The Array field.
    count : int
        Its global number of elements.
    ncoord : int
        Components of a position (2 or 3).
    member : str or None
        The record member that holds the positions (None: the element is the position).
    arrays : tuple of CellArray
        The field's values as cell arrays of the point cells (named as for
        :func:`plan_arrays`: ``NAME``, ``NAME.MEMBER``...).
    """

    field: str
    count: int
    ncoord: int
    member: str | None
    arrays: tuple[CellArray, ...]

    @property
    def key(self) -> tuple[Any, ...]:
        """What must agree between the steps of a series."""
        return (self.field, self.ncoord, self.member, tuple(a.key for a in self.arrays))


def _position(dt: np.dtype[Any], shape: Sequence[int]) -> tuple[str | None, int] | None:
    if dt.names is None:
        return (None, int(shape[0])) if dt.kind == "f" and len(shape) == 1 and shape[0] in (2, 3) else None
    if math.prod(shape) != 1:
        return None
    for member in POSITION_NAMES:
        sub = dt.fields[member][0] if dt.fields and member in dt.fields else None
        if sub is not None and sub.base.kind == "f" and len(sub.shape) == 1 and sub.shape[0] in (2, 3):
            return member, int(sub.shape[0])
    return None


def plan_points(manifest: Manifest) -> list[PointSet]:
    """Return the ``Array`` fields of a checkpoint that are points, in declaration order.

    An Array field is a point set when its element is a float vector of 2 or
    3 components (shape ``(2,)`` or ``(3,)``), or a record with such a
    member named one of :data:`POSITION_NAMES` (``x``, ``pos``,
    ``position``...); e.g. ``Array([("id", "<i8"), ("x", "<f8", (3,))])``.
    Its values become cell arrays of the points (as :func:`plan_arrays`
    decomposes cells fields).  Other Array fields are not exported.
    """
    out = []
    for fs in manifest.fields:
        h = handler_for(fs.kind)
        if not h.partitioned or h.per_leaf:  # the elements of a distributed array, not per leaf
            continue
        dt = dtype_from_json(fs.dtype, f"field {fs.name!r}")
        pos = _position(dt, fs.shape)
        if pos is None:
            logger.info("Array field %s of dtype %s has no positions: not exported as points", fs.name, dt)
            continue
        out.append(PointSet(fs.name, fs.count or 0, pos[1], pos[0], tuple(_cells_arrays(fs.name, dt, fs.shape, fs.units))))
    return out


def point_values(ps: PointSet, reader: Any, start: int, count: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Return the positions ``(count, 3)`` float64 (z = 0 for 2 components) and each array's values of elements ``start ..``."""
    raw = reader.read_cells(ps.field, start, count)
    pos = raw[ps.member] if ps.member is not None else raw
    xyz = np.zeros((count, 3), dtype=np.float64)
    xyz[:, : ps.ncoord] = np.asarray(pos, dtype=np.float64).reshape(count, ps.ncoord)
    vals = []
    for a in ps.arrays:
        assert a.pick is not None
        v = np.asarray(a.pick(raw)).astype(a.dtype, copy=False)
        vals.append(v.reshape(count) if a.ncomp == 1 else v.reshape(count, a.ncomp))
    return xyz, vals


def checkpoint_paths(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], prefix: str = "ckpt"
) -> tuple[list[Path], bool]:
    """Return the checkpoints to export, and whether they form a time series.

    Parameters
    ----------
    source : path or sequence of paths
        A checkpoint file (one step, no series), a directory written by a
        :class:`~amrckpt.CheckpointManager` (its ``PREFIX-<step>.scda`` files
        in step order: a series), or a list of checkpoint files (a series, in
        the given order).
    prefix : str, optional
        The manager's file prefix.

    Returns
    -------
    paths : list of pathlib.Path
    series : bool

    Raises
    ------
    FileNotFoundError
        If ``source`` does not exist or a directory holds no checkpoint.
    """
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if p.is_dir():
            found = sorted((s, p / name) for s, name in StepNames(prefix).find_all(os.listdir(p)).items() if (p / name).is_file())
            if not found:
                raise FileNotFoundError(f"{p}: no checkpoints named {prefix}-<step>.scda")
            return [q for _, q in found], True
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        return [p], False
    paths = [Path(q) for q in source]
    if not paths:
        raise FileNotFoundError("no checkpoints given")
    return paths, True
