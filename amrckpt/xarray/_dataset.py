"""A checkpoint as xarray datasets: one group of its global fields, one per mesh with the mesh's leaves."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import xarray as xr
from xarray.core import indexing

from ..container import FieldSpec, Geometry, Manifest, MeshSpec, dtype_from_json, handler_for
from ._arrays import CellsRead, GeometryRead, HpCountsRead, HpOffsetsRead, HpValuesRead, LeafArray, MeshRead, RangeRead
from ._source import CheckpointSource

__all__ = ["CHUNK_NBYTES", "ROOT", "checkpoint_groups", "group_name", "leaf_chunk"]

CHUNK_NBYTES = 64 << 20
"""Bytes of the widest variable per preferred dask chunk of leaves (``chunks={}``): 64 MiB."""

ROOT = "/"
"""The group of the checkpoint's global fields (attributes, replicated and distributed arrays)."""

AXES = ("x", "y", "z")


def group_name(mesh: str) -> str:
    """Return the group of a mesh's leaves: ``/<mesh field>``."""
    return f"/{mesh}"


def _scalar_attr(v: Any) -> Any:
    """Return an attribute value that netCDF and zarr store: scalars and strings as they are, anything else as JSON text."""
    if isinstance(v, (bool, int, float, str)):
        return v
    return json.dumps(v)


def _field_attrs(fs: FieldSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"amrckpt_kind": fs.kind}
    if fs.units is not None:
        out["units"] = fs.units
    if fs.description is not None:
        out["long_name"] = fs.description
    if fs.layout is not None:
        out["amrckpt_layout"] = fs.layout
    if fs.chunk is not None:
        out["amrckpt_chunk"] = fs.chunk
    if fs.compressed:
        out["amrckpt_compressed"] = "element"
    return out


def leaf_chunk(row_nbytes: int, K: int | None, chunk_nbytes: int = CHUNK_NBYTES) -> int:
    """Leaves per preferred dask chunk of a variable: contiguous bytes, a whole number of compression chunks.

    The largest power of two of leaves whose rows hold at most
    ``chunk_nbytes`` (at least one); for a field compressed in chunks of
    ``K`` leaves, the largest multiple of ``K`` not above that (at least
    ``K``), so that a dask chunk decodes whole compression chunks only.

    Parameters
    ----------
    row_nbytes : int
        Bytes of one leaf of the dataset's widest variable.
    K : int or None
        Leaves per compression chunk (layout ``chunks``).
    chunk_nbytes : int, optional
        Bytes per dask chunk aimed at.
    """
    n = 1 << max(0, (max(1, chunk_nbytes // max(1, row_nbytes))).bit_length() - 1)
    if K is not None:
        n = max(K, (n // K) * K)
    return n


class _Builder:
    """Collects the variables of one group."""

    def __init__(self, source: CheckpointSource, drop: set[str]) -> None:
        self.source = source
        self.drop = drop
        self.coords: dict[str, xr.Variable] = {}
        self.data: dict[str, xr.Variable] = {}
        self.chunked: list[tuple[xr.Variable, str, int | None, int]] = []  # variable, its first dim, K, row bytes

    def lazy(
        self,
        name: str,
        read: RangeRead,
        dims: tuple[str, ...],
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        attrs: dict[str, Any],
        *,
        coord: bool = False,
        K: int | None = None,
    ) -> None:
        if name in self.drop:
            return
        arr = LeafArray(self.source, read, shape, np.dtype(dtype))
        var = xr.Variable(dims, indexing.LazilyIndexedArray(arr), attrs=attrs)
        (self.coords if coord else self.data)[name] = var
        self.chunked.append((var, dims[0], K, arr.nbytes_per_row))

    def dataset(self, attrs: dict[str, Any], chunk_nbytes: int) -> xr.Dataset:
        widest: dict[str, int] = {}
        for _, dim, _, nb in self.chunked:
            widest[dim] = max(widest.get(dim, 1), nb)
        for var, dim, K, _ in self.chunked:
            var.encoding["preferred_chunks"] = {dim: leaf_chunk(widest[dim], K, chunk_nbytes)}
        return xr.Dataset(self.data, coords=self.coords, attrs=attrs)


def _comp_dims(name: str, shape: Iterable[int]) -> tuple[str, ...]:
    return tuple(f"{name}_dim_{k}" for k, _ in enumerate(shape))


def _root_attrs(m: Manifest, source: CheckpointSource, drop: set[str]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "schema_name": m.schema_name,
        "schema_version": m.schema_version,
        "amrckpt_format_version": m.format_version,
        "amrckpt_version": m.amrckpt_version,
        "source": source.path,
    }
    for fs in m.fields:
        if fs.name in drop:
            continue
        if fs.kind == "inline":
            attrs[fs.name] = _scalar_attr(m.values.get(fs.name))
            if fs.units is not None:
                attrs[f"{fs.name}_units"] = fs.units
        elif fs.kind == "block":
            attrs[fs.name] = json.dumps(source.read_whole(fs.name))
    return attrs


def _root(m: Manifest, source: CheckpointSource, b: _Builder) -> None:
    """Add the global fields: replicated arrays (read now), distributed arrays (lazily, on a dimension of their elements)."""
    for fs in m.fields:
        if fs.name in b.drop:
            continue
        if fs.kind == "ndarray":
            value = np.asarray(source.read_whole(fs.name))
            b.data[fs.name] = xr.Variable(_comp_dims(fs.name, value.shape), value, attrs=_field_attrs(fs))
        elif fs.kind == "array":
            dt = dtype_from_json(fs.dtype, f"field {fs.name!r}")
            shape = (fs.count or 0, *fs.shape)
            dims = (f"{fs.name}_element", *_comp_dims(fs.name, fs.shape))
            b.lazy(fs.name, CellsRead(fs.name), dims, shape, dt, _field_attrs(fs), K=fs.chunk)


def _mesh(m: Manifest, ms: MeshSpec, b: _Builder) -> dict[str, Any]:
    """Add the leaves of mesh ``ms``: their records and placement as coordinates, the fields on them as variables."""
    N = ms.num_leaves
    mfs = m.field(ms.field)
    K = mfs.chunk
    for member, rec_dt in ms.record:
        attrs = {"long_name": f"leaf {member}"}
        if member in AXES:
            attrs |= {"long_name": f"integer {member} of the leaf's lower corner", "units": f"2**-{ms.maxlevel} of a tree"}
        b.lazy(member, MeshRead(ms.field, member), ("leaf",), (N,), np.dtype(rec_dt), attrs, coord=True, K=K)
    geometry = Geometry.of(ms)
    units = geometry.units
    for d in range(ms.dim):
        ax = AXES[d]
        attrs = {"long_name": f"{ax} of the leaf's centre"} | ({"units": units} if units else {})
        b.lazy(f"{ax}_center", GeometryRead(ms.field, "center", d), ("leaf",), (N,), np.dtype(np.float64), attrs, coord=True, K=K)
    for d in range(ms.dim if geometry.boxes_exact else 0):
        ax = AXES[d]
        attrs = {"long_name": f"side of the leaf along {ax}"} | ({"units": units} if units else {})
        b.lazy(f"d{ax}", GeometryRead(ms.field, "size", d), ("leaf",), (N,), np.dtype(np.float64), attrs, coord=True, K=K)
    for fs in m.fields:
        h = handler_for(fs.kind)
        if not h.per_leaf or h.is_mesh or m.mesh_of(fs) is not ms:
            continue
        dt = dtype_from_json(fs.dtype, f"field {fs.name!r}")
        comp = _comp_dims(fs.name, fs.shape)
        attrs = _field_attrs(fs)
        if h.reads_as == "values":
            b.lazy(fs.name, CellsRead(fs.name), ("leaf", *comp), (N, *fs.shape), dt, attrs, K=fs.chunk)
            continue
        b.lazy(
            f"{fs.name}_count", HpCountsRead(fs.name), ("leaf",), (N,), np.dtype(np.int64),
            {"long_name": f"values of {fs.name} per leaf"}, K=fs.chunk,
        )  # fmt: skip
        if f"{fs.name}_offsets" not in b.drop:
            b.lazy(
                f"{fs.name}_offsets", HpOffsetsRead(fs.name, N), ("leaf_offsets",), (N + 1,), np.dtype(np.int64),
                {"long_name": f"where each leaf's values begin in {fs.name}; the last: their number"},
            )  # fmt: skip
        if fs.name not in b.drop:
            total = b.source.hp_total(fs.name, N)
            b.lazy(fs.name, HpValuesRead(fs.name, N), (f"{fs.name}_values", *comp), (total, *fs.shape), dt, attrs)
    spec = ms.model_dump_json()
    return {"amrckpt_mesh": ms.field, "amrckpt_mesh_spec": spec, "amrckpt_dim": ms.dim, "amrckpt_maxlevel": ms.maxlevel}


def checkpoint_groups(
    source: CheckpointSource,
    *,
    groups: Iterable[str] | None = None,
    drop_variables: Iterable[str] | None = None,
    chunk_nbytes: int = CHUNK_NBYTES,
) -> dict[str, xr.Dataset]:
    """Return the checkpoint's groups as lazily indexed datasets: ``"/"`` and ``"/<mesh>"`` for each mesh.

    Not collective (serial).  Reads the footer, index and manifest, the
    blocks and replicated arrays, and the headers of the hp fields' sections
    (and, for hp fields of layout ``chunks`` or per-element compression,
    their counts: the length of their values dimension).

    Parameters
    ----------
    source : CheckpointSource
    groups : iterable of str, optional
        The groups to build (all by default).
    drop_variables : iterable of str, optional
        Variables, coordinates and attributes (inline and block fields) left out.
    chunk_nbytes : int, optional
        Bytes per preferred dask chunk of the widest variable (:func:`leaf_chunk`).

    Returns
    -------
    dict of str to xarray.Dataset
        ``"/"``: the schema's name and version, the inline values and the
        blocks (JSON text) as attributes; replicated arrays; distributed
        arrays on a dimension ``<name>_element``.  ``"/<mesh>"``: the mesh's
        leaves on dimension ``leaf`` (curve order) with coordinates
        ``tree``, ``level``, ``x``, ``y`` [, ``z``] (integers as stored),
        ``x_center`` ... (the geometry's units) and, where trees are boxes,
        ``dx`` ...; its cells fields ``(leaf, <name>_dim_0, ...)``; its hp
        fields as ``<name>`` (the values of every leaf, in curve order, on
        dimension ``<name>_values``), ``<name>_count`` (leaf) and
        ``<name>_offsets`` (``leaf_offsets``, N + 1).

    Raises
    ------
    CheckpointError, ChecksumError, ScdaError
        If the checkpoint cannot be opened or its metadata is damaged.
    """
    m = source.manifest()
    drop = set(drop_variables or ())
    want = None if groups is None else set(groups)
    attrs = _root_attrs(m, source, drop)
    out: dict[str, xr.Dataset] = {}
    if want is None or ROOT in want:
        b = _Builder(source, drop)
        _root(m, source, b)
        out[ROOT] = b.dataset(attrs, chunk_nbytes)
    for ms in m.meshes:
        g = group_name(ms.field)
        if want is not None and g not in want:
            continue
        b = _Builder(source, drop)
        mattrs = _mesh(m, ms, b)
        out[g] = b.dataset(attrs | mattrs, chunk_nbytes)
    return out
