"""Export checkpoints to VTKHDF: one ``UnstructuredGrid`` cell per leaf, a ``Steps`` group for a series.

The file follows the VTKHDF specification (version 2.2; VTK's
``vtkHDFReader``, ParaView 5.12 and later; ParaView 5.11 reads one step
correctly but overlays all steps of a series in one grid).  Each leaf becomes a cell with
its own 4 (2D) or 8 (3D) corner points, so that every array is a function of
the leaf index alone: leaves ``a .. b`` of a step fill rows ``[P + 2**dim * a,
P + 2**dim * b)`` of ``Points`` and rows ``[C + a, C + b)`` of ``Types`` and
the cell data, whatever else is written.  That lets the export run in
chunks of leaves, one at a time (serial) or on each rank at once (h5py built
with MPI), and makes the file the same for any number of processes: one
VTK partition per step, in curve order.  The elements of Array fields of
positions (particles) follow a step's leaves, one ``VTK_VERTEX`` cell each.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .._files import replacing
from ..comm import Call, collective
from ..errors import CheckpointError
from ._arrays import (
    CellArray,
    HpSummary,
    PointSet,
    checkpoint_paths,
    leaf_values,
    mesh_spec,
    plan_arrays,
    plan_points,
    point_values,
)
from ._geometry import VTK_CELL_TYPE, cell_corners, float32_exact, leaf_boxes, leaf_corners, mesh_geometry
from ._reader import HpWindow, open_reader

__all__ = ["DEFAULT_CHUNK_LEAVES", "ExportResult", "to_vtkhdf"]

logger = logging.getLogger(__name__)

VTK_VERTEX = 1
"""VTK cell type of a point (an element of an Array field of positions)."""
DEFAULT_CHUNK_LEAVES = 1 << 17
"""Leaves converted at a time: 24 MiB of 3D corner points, the largest temporary of a chunk."""

INSTALL_H5PY = "exporting to VTKHDF needs h5py: pip install h5py (or pip install 'amrckpt[viz]')"


@dataclass(frozen=True)
class ExportResult:
    """What :func:`to_vtkhdf` wrote.

    Attributes
    ----------
    path : pathlib.Path
        The VTKHDF file.
    sources : tuple of pathlib.Path
        The checkpoints exported, one per step.
    num_cells : tuple of int
        Cells (leaves) of each step.
    steps, times : tuple
        The ``step`` and ``time`` inline values of each checkpoint (None where
        a checkpoint has none).
    arrays : tuple of str
        The cell data arrays of every step (those of the point sets last).
    series : bool
        Whether the file has a ``Steps`` group (a time series).
    points : tuple of str
        The Array fields exported as points (particles): VTK_VERTEX cells
        after each step's leaves (:func:`amrckpt.export.plan_points`).
    """

    path: Path
    sources: tuple[Path, ...]
    num_cells: tuple[int, ...]
    steps: tuple[int | None, ...]
    times: tuple[float | None, ...]
    arrays: tuple[str, ...]
    series: bool
    points: tuple[str, ...] = ()


def _number(v: Any, kind: type) -> Any:
    return kind(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class _Step:
    path: Path
    num_leaves: int
    dim: int
    step: int | None
    time: float | None
    arrays: list[CellArray]
    float32: bool
    mesh: str
    length_units: str | None
    points: list[PointSet]

    @property
    def num_points(self) -> int:
        """Elements of the step's point sets (particles), exported as VTK_VERTEX cells after the leaves."""
        return sum(p.count for p in self.points)


def _float32_points(r: Any, brick: tuple[int, ...] | None, chunk: int, mesh: str) -> bool:
    """Whether every corner of this mesh's leaves is exactly a float32 (one pass over the levels)."""
    N = mesh_spec(r.manifest, mesh).num_leaves
    g = mesh_geometry(r, brick, mesh)
    if not g.boxes_exact or plan_points(r.manifest):  # leaves placed by a vertex map, or particles: float64
        return False
    lower, upper = g.tree_lower, g.tree_upper
    finest = 0
    for s in range(0, N, chunk):
        finest = max(finest, int(r.read_mesh(s, min(chunk, N - s), mesh)["level"].max()))
    return float32_exact(lower, upper, finest)


def _survey(
    paths: Sequence[Path],
    hp: HpSummary,
    ranks: int | None,
    verify: bool,
    points: str,
    brick: tuple[int, ...] | None,
    chunk: int,
    mesh: str | None,
) -> list[_Step]:
    out = []
    for p in paths:
        with open_reader(p, verify=verify) as r:
            m = r.manifest
            if not m.meshes:
                raise CheckpointError(f"{os.fspath(p)!r} holds no mesh (schema {m.schema_name}): nothing to export")
            ms = mesh_spec(m, mesh)
            out.append(
                _Step(
                    p,
                    ms.num_leaves,
                    ms.dim,
                    _number(m.values.get("step"), int),
                    _number(m.values.get("time"), float),
                    plan_arrays(m, hp=hp, ranks=ranks, mesh=ms.field),
                    points == "auto" and _float32_points(r, brick, chunk, ms.field),
                    ms.field,
                    ms.geometry.units if ms.geometry is not None else None,
                    plan_points(m),
                )
            )
    dims = {s.dim for s in out}
    if len(dims) > 1:
        raise CheckpointError(f"the checkpoints mix {sorted(dims)}D meshes; a series has one dimension")
    return out


def _common_arrays(steps: Sequence[_Step]) -> list[CellArray]:
    """Return the arrays of the first step that every step has, alike (others are logged and left out)."""
    first = steps[0].arrays
    keep = set.intersection(*({a.key for a in s.arrays} for s in steps))
    dropped = [a.name for a in first if a.key not in keep]
    if dropped:
        logger.warning("arrays %s are not in every checkpoint alike; not exported", dropped)
    return [a for a in first if a.key in keep]


def _common_points(steps: Sequence[_Step]) -> list[PointSet]:
    """Return the point sets of the first step that every step has, alike (others are logged and left out)."""
    keep = set.intersection(*({p.key for p in s.points} for s in steps))
    dropped = [p.field for p in steps[0].points if p.key not in keep]
    if dropped:
        logger.warning("point sets %s are not in every checkpoint alike; not exported", dropped)
    return [p for p in steps[0].points if p.key in keep]


def _dataset_name(a: CellArray, units_in_names: bool) -> str:
    """Return the array's name in the file: with ``units_in_names``, ``NAME [UNITS]``.

    HDF5 takes ``/`` as a path separator (``velocity [m/s]`` would become a
    group ``velocity [m`` holding ``s]``, which VTK does not show): a ``/``
    of the units is written as U+2215 DIVISION SLASH, which looks the same;
    the exact units are in the ``units`` attribute.
    """
    name = f"{a.name} [{a.units}]" if units_in_names and a.units else a.name
    return name.replace("/", "\u2215")


def _fill(dt: np.dtype[Any]) -> Any:
    """Return what a leaf array holds on point cells, and a point array on leaf cells: NaN, -1, or the largest unsigned."""
    if dt.kind == "f":
        return np.nan
    return np.iinfo(dt).max if dt.kind == "u" else -1


def _create(
    h5: Any, steps: Sequence[_Step], arrays: Sequence[CellArray], points: Sequence[PointSet], series: bool, units_in_names: bool
) -> dict[str, Any]:
    """Create every dataset of the file at its full size (collective under MPI); return them by name."""
    dim = steps[0].dim
    nv = 1 << dim
    n = np.array([s.num_leaves for s in steps], dtype=np.int64)
    m = np.array([sum(p.count for p in s.points if p.key in {q.key for q in points}) for s in steps], dtype=np.int64)
    cells = n + m
    pts = nv * n + m
    S = len(steps)
    total, total_pts = int(cells.sum()), int(pts.sum())
    root = h5.create_group("VTKHDF")
    root.attrs["Version"] = np.array([2, 2], dtype=np.int64)
    root.attrs.create("Type", np.bytes_(b"UnstructuredGrid"))
    d: dict[str, Any] = {}
    root.create_dataset("NumberOfPoints", data=pts)
    root.create_dataset("NumberOfCells", data=cells)
    root.create_dataset("NumberOfConnectivityIds", data=pts)
    points_dt = np.float32 if all(s.float32 for s in steps) else np.float64
    d["Points"] = root.create_dataset("Points", (total_pts, 3), dtype=points_dt)
    # Point ids count from each step's first point: int32 unless a step has 2**31 points (VTK widens them to vtkIdType).
    ids = np.int32 if int(pts.max(initial=0)) < 2**31 else np.int64
    d["Connectivity"] = root.create_dataset("Connectivity", (total_pts,), dtype=ids)
    d["Offsets"] = root.create_dataset("Offsets", (total + S,), dtype=ids)
    d["Types"] = root.create_dataset("Types", (total,), dtype=np.uint8)
    cd = root.create_group("CellData")
    mixed = bool(m.any())
    everything = [("cell:", a) for a in arrays] + [(f"point:{p.field}:", a) for p in points for a in p.arrays]
    for prefix, a in everything:
        shape = (total,) if a.ncomp == 1 else (total, a.ncomp)
        fill = {"fillvalue": _fill(a.dtype)} if mixed else {}
        ds = cd.create_dataset(_dataset_name(a, units_in_names), shape, dtype=a.dtype, **fill)
        if a.units:
            ds.attrs.create("units", np.bytes_(a.units.encode()))
        d[prefix + a.name] = ds
    root.create_group("PointData")
    fd = root.create_group("FieldData")
    step_v = np.array([-1 if s.step is None else s.step for s in steps], dtype=np.int64)
    time_v = np.array([np.nan if s.time is None else s.time for s in steps], dtype=np.float64)
    fd.create_dataset("step", data=step_v)
    fd.create_dataset("time", data=time_v)
    if series:
        cells_before = np.concatenate([[0], np.cumsum(cells)[:-1]]).astype(np.int64)
        pts_before = np.concatenate([[0], np.cumsum(pts)[:-1]]).astype(np.int64)
        st = root.create_group("Steps")
        st.attrs["NSteps"] = np.int64(S)
        st.create_dataset("Values", data=np.where(np.isnan(time_v), step_v.astype(np.float64), time_v))
        st.create_dataset("PartOffsets", data=np.arange(S, dtype=np.int64))
        st.create_dataset("NumberOfParts", data=np.ones(S, dtype=np.int64))
        st.create_dataset("PointOffsets", data=pts_before)
        st.create_dataset("CellOffsets", data=cells_before.reshape(S, 1))
        st.create_dataset("ConnectivityIdOffsets", data=pts_before.reshape(S, 1))
        cdo = st.create_group("CellDataOffsets")
        for _, a in everything:
            cdo.create_dataset(_dataset_name(a, units_in_names), data=cells_before)
        st.create_group("PointDataOffsets")
        fdo = st.create_group("FieldDataOffsets")
        fds = st.create_group("FieldDataSizes")
        for name in ("step", "time"):
            fdo.create_dataset(name, data=np.arange(S, dtype=np.int64))
            fds.create_dataset(name, data=np.ones((S, 2), dtype=np.int64))
    meta = h5.create_group("amrckpt")  # outside /VTKHDF: ignored by VTK (spec 2.2)
    meta.attrs["sources"] = [os.fspath(s.path) for s in steps]
    meta.attrs["mesh"] = [s.mesh for s in steps]
    meta.attrs["leaf_order"] = "curve order of each checkpoint: cell i of a step is its leaf i"
    if mixed:
        meta.attrs["points"] = [p.field for p in points]
        meta.attrs["point_cells"] = "after the leaves of each step: one VTK_VERTEX cell per element of each point set, in order"
    if steps[0].length_units:
        meta.attrs["length_units"] = steps[0].length_units
    return d


@dataclass(frozen=True)
class _Rows:
    """Where one step starts in the file's datasets, and its sizes."""

    step_index: int
    cells_before: int
    points_before: int
    num_leaves: int
    num_points: int
    leaf_points: int


def _write_range(
    d: dict[str, Any],
    reader: Any,
    arrays: Sequence[CellArray],
    geometry: Any,
    maxlevel: int,
    rows: _Rows,
    a: int,
    b: int,
    chunk: int,
    prefetch: bool,
    mesh: str,
) -> None:
    """Write leaves ``a .. b - 1`` of one step, ``chunk`` leaves at a time (not collective).

    With ``prefetch`` one worker thread reads and converts the next chunk
    while this thread writes the current one (reads and numpy release the
    GIL; h5py does not): serial exports only, where no MPI call is made off
    the main thread.
    """
    dim = geometry.dim
    nv = 1 << dim
    num_leaves = rows.num_leaves
    off0 = rows.cells_before + rows.step_index  # this step's first row of Offsets (one extra row per part)
    ids = d["Connectivity"].dtype
    points_dtype = d["Points"].dtype
    boxes = geometry.boxes_exact

    def convert(s: int) -> tuple[int, int, np.ndarray, list[np.ndarray]]:
        e = min(s + chunk, b)
        leaves = reader.read_mesh(s, e - s, mesh)
        if boxes:
            lo, hi = leaf_boxes(leaves, geometry.tree_lower, geometry.tree_upper, maxlevel)
            corners = cell_corners(lo, hi, points_dtype)
        else:
            corners = leaf_corners(leaves, geometry, maxlevel, points_dtype)
        return s, e, corners, leaf_values(arrays, reader, leaves, s, num_leaves)

    def write(s: int, e: int, points: np.ndarray, values: list[np.ndarray]) -> None:
        c0, c1 = rows.cells_before + s, rows.cells_before + e
        p0 = rows.points_before + nv * s
        d["Points"][p0 : p0 + nv * (e - s)] = points
        d["Connectivity"][p0 : p0 + nv * (e - s)] = np.arange(nv * s, nv * e, dtype=ids)
        last = e == num_leaves and not rows.num_points
        d["Offsets"][off0 + s : off0 + e + last] = np.arange(nv * s, nv * (e + last), nv, dtype=ids)
        d["Types"][c0:c1] = np.full(e - s, VTK_CELL_TYPE[dim], dtype=np.uint8)
        for arr, v in zip(arrays, values, strict=True):
            d["cell:" + arr.name][c0:c1] = v

    starts = list(range(a, b, chunk))
    if prefetch and len(starts) > 1:
        with ThreadPoolExecutor(1, thread_name_prefix="amrckpt-export") as pool:
            pending = pool.submit(convert, starts[0])
            for nxt in [*starts[1:], None]:
                done = pending.result()
                if nxt is not None:
                    pending = pool.submit(convert, nxt)
                write(*done)
    else:
        for s in starts:
            write(*convert(s))
    if num_leaves == 0 and a == 0 and not rows.num_points:
        d["Offsets"][off0 : off0 + 1] = np.zeros(1, dtype=ids)


def _write_points(
    d: dict[str, Any], reader: Any, points: Sequence[PointSet], rows: _Rows, rank: int, size: int, chunk: int
) -> None:
    """Write this rank's share of each point set of one step, as VTK_VERTEX cells after the leaves (not collective)."""
    ids = d["Connectivity"].dtype
    off0 = rows.cells_before + rows.step_index
    leaf_pts = rows.leaf_points
    before = 0
    for ps in points:
        a, b = ps.count * rank // size, ps.count * (rank + 1) // size
        for s in range(a, b, max(1, chunk)):
            e = min(s + chunk, b)
            xyz, values = point_values(ps, reader, s, e - s)
            k0, k1 = before + s, before + e  # the step's point cells, counted after its leaves
            c0, c1 = rows.cells_before + rows.num_leaves + k0, rows.cells_before + rows.num_leaves + k1
            p0 = rows.points_before + leaf_pts + k0
            d["Points"][p0 : p0 + (e - s)] = xyz
            d["Connectivity"][p0 : p0 + (e - s)] = np.arange(leaf_pts + k0, leaf_pts + k1, dtype=ids)
            last = k1 == rows.num_points
            first_row = off0 + rows.num_leaves + k0
            d["Offsets"][first_row : first_row + (e - s) + last] = np.arange(leaf_pts + k0, leaf_pts + k1 + last, dtype=ids)
            d["Types"][c0:c1] = np.full(e - s, VTK_VERTEX, dtype=np.uint8)
            for arr, v in zip(ps.arrays, values, strict=True):
                d[f"point:{ps.field}:" + arr.name][c0:c1] = v
        before += ps.count


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:
        raise ImportError(INSTALL_H5PY) from exc
    return h5py


def to_vtkhdf(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    brick: tuple[int, ...] | None = None,
    ranks: int | None = None,
    hp: HpSummary = "first",
    units_in_names: bool = False,
    points: Literal["auto", "float64"] = "auto",
    mesh: str | None = None,
    prefix: str = "ckpt",
    chunk_leaves: int = DEFAULT_CHUNK_LEAVES,
    comm: Any = None,
    verify: bool = True,
) -> ExportResult:
    """Export a checkpoint, or a directory of them, to a VTKHDF file that ParaView, VisIt and VTK open.

    The file is a VTKHDF ``UnstructuredGrid`` with one cell per leaf, in
    curve order (cell ``i`` of a step is leaf ``i`` of its checkpoint): a
    ``VTK_QUAD`` (2D) or ``VTK_HEXAHEDRON`` (3D) on the leaf's box, placed by
    the forest geometry of the checkpoint (:func:`tree_boxes`).  Cell data:
    ``level`` and ``tree``, every ``cells`` field (vector and tensor values
    as components; units in each dataset's ``units`` attribute, and in its
    name with ``units_in_names``), every ``hp`` field as ``NAME.count`` and
    ``NAME.first`` (or ``NAME.mean``), and ``rank`` with ``ranks``; see
    :func:`plan_arrays`.  Field data ``step`` and ``time``: the checkpoint's
    inline values (-1 and NaN where it has none).  A directory (or a list of
    files) becomes a time series: a ``Steps`` group whose ``Values`` are the
    checkpoints' times (their steps where they have no time), each step
    with its own mesh.

    Leaves are converted ``chunk_leaves`` at a time, so no rank holds a whole
    mesh.  Under MPI with an h5py built with MPI (``h5py.get_config().mpi``)
    every rank writes its share of each step's leaves into one file opened
    with the ``mpio`` driver; otherwise rank 0 writes the file alone, in
    chunks.  The bytes do not depend on the number of ranks.

    Parameters
    ----------
    source : path or sequence of paths
        A checkpoint file; a :class:`~amrckpt.CheckpointManager` directory
        (its ``PREFIX-<step>.scda`` files, in step order); or a list of
        checkpoint files (in order).
    out : path
        The VTKHDF file to write (``.vtkhdf``; replaced if it exists).
    brick : tuple of int, optional
        Place trees as a brick of unit trees, ``(nx, ny[, nz])``, row-major,
        instead of the geometry the checkpoint stores (for files written
        before it was stored; see :func:`tree_boxes`).
    ranks : int, optional
        Add the cell array ``rank``: the owner of each leaf when the
        checkpoint is loaded on this many ranks (uniform partition).
    hp : {"first", "mean"}, optional
        The per-leaf value of hp fields (NaN for a leaf without values).
    units_in_names : bool, optional
        Name arrays ``NAME [UNITS]`` (ParaView shows names, not attributes).
    points : {"auto", "float64"}, optional
        ``"auto"``: the corner points are float32 where every corner of
        every step is exactly a float32 (:func:`float32_exact`: leaves up to
        level 20 or so of unit trees), which saves a third of the file,
        else float64; ``"float64"``: always float64.
    mesh : str, optional
        The mesh whose leaves become the cells, for a checkpoint of several
        meshes (the first by default); the fields on its leaves are
        exported.
    prefix : str, optional
        The manager's file prefix, for a directory.
    chunk_leaves : int, optional
        Leaves per chunk.
    comm : None or mpi4py.MPI.Comm, optional
        Collective over ``comm`` when given; serial by default.
    verify : bool, optional
        Check what is read against the checkpoint's CRC32s.

    Returns
    -------
    ExportResult
        On every rank.

    Raises
    ------
    ImportError
        If h5py is not installed.
    FileNotFoundError
        If ``source`` does not exist or a directory holds no checkpoint.
    CheckpointError
        If a checkpoint holds no mesh, cannot be read, or the checkpoints
        of a series mix 2D and 3D.
    ValueError
        For a bad ``brick``, ``ranks``, ``hp`` or ``chunk_leaves``.

    Examples
    --------
    >>> to_vtkhdf("run/ckpt-000000000100.scda", "ckpt-100.vtkhdf")  # doctest: +SKIP
    >>> to_vtkhdf("run", "run.vtkhdf", brick=(2, 1))  # a time series  # doctest: +SKIP
    """
    h5py = _h5py()
    if chunk_leaves < 1:
        raise ValueError(f"chunk_leaves must be at least 1, not {chunk_leaves}")
    with collective(comm, "export") as call:
        return _export(call, h5py, source, out, prefix, hp, ranks, verify, points, brick, chunk_leaves, mesh, units_in_names)


def _export(
    call: Call,
    h5py: Any,
    source: Any,
    out: Any,
    prefix: str,
    hp: Any,
    ranks: Any,
    verify: bool,
    points: str,
    brick: Any,
    chunk_leaves: int,
    mesh: Any,
    units_in_names: bool,
) -> ExportResult:
    c = call.comm
    paths, series = checkpoint_paths(source, prefix)
    if points not in ("auto", "float64"):
        raise ValueError(f"points must be 'auto' or 'float64', not {points!r}")

    def survey() -> list[_Step]:
        return _survey(paths, hp, ranks, verify, points, brick, chunk_leaves, mesh)

    steps = survey() if c.size == 1 else call.on_root(survey, what="export: survey")
    arrays = _common_arrays(steps)
    point_sets = _common_points(steps)
    keys = {p.key for p in point_sets}
    out_path = Path(out)
    parallel = c.size > 1 and bool(h5py.get_config().mpi)

    def write(rank: int, size: int, h5: Any) -> None:
        d = _create(h5, steps, arrays, point_sets, series, units_in_names)
        cells_before = points_before = 0
        for i, st in enumerate(steps):
            nv = 1 << st.dim
            N = st.num_leaves
            mine = [p for p in st.points if p.key in keys]
            rows = _Rows(i, cells_before, points_before, N, sum(p.count for p in mine), nv * N)
            with open_reader(st.path, verify=verify) as r:
                maxlevel = mesh_spec(r.manifest, st.mesh).maxlevel
                geometry = mesh_geometry(r, brick, st.mesh)
                a, b = N * rank // size, N * (rank + 1) // size
                _write_range(d, HpWindow(r), arrays, geometry, maxlevel, rows, a, b, chunk_leaves, not parallel, st.mesh)
                _write_points(d, r, mine, rows, rank, size, chunk_leaves)
                r.check_crcs()  # every section read against the index (verify=True), before the file is kept
            cells_before += N + rows.num_points
            points_before += nv * N + rows.num_points

    if parallel:
        with replacing(out_path, call) as tmp, h5py.File(tmp, "w", driver="mpio", comm=getattr(c, "mpi_comm", None)) as h5:
            write(c.rank, c.size, h5)
    else:

        def serial() -> None:
            with replacing(out_path) as tmp, h5py.File(tmp, "w") as h5:
                write(0, 1, h5)

        serial() if c.size == 1 else call.on_root(serial, what="export: write")
    logger.info("exported %d checkpoint(s) to %s", len(steps), out_path)
    return ExportResult(
        out_path,
        tuple(s.path for s in steps),
        tuple(s.num_leaves for s in steps),
        tuple(s.step for s in steps),
        tuple(s.time for s in steps),
        tuple(_dataset_name(a, units_in_names) for a in [*arrays, *(x for p in point_sets for x in p.arrays)]),
        series,
        tuple(p.field for p in point_sets),
    )
