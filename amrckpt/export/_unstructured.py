"""The VTKHDF ``UnstructuredGrid`` of :func:`amrckpt.export.to_vtkhdf`: its datasets, and each rank's rows of them.

The layout of the file (:func:`_create`: one cell per leaf, then one
``VTK_VERTEX`` per particle, for each step) and the writers that fill it:
:class:`_Writer` says which rank writes which blocks of leaves of which
step; :func:`_write_range` reads, converts and writes one rank's leaves of
one step, a chunk at a time, their corner points a block at a time
(:func:`~amrckpt.export.shared_corners`); :func:`_write_points` writes the
particles.  Every row goes through a :class:`RowSink`.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._logging import get_logger
from .._threads import Pool
from ..errors import CheckpointError
from ._arrays import CellArray, HpSummary, PointSet, _number, leaf_values, mesh_spec, plan_arrays, plan_points, point_values
from ._geometry import VTK_CELL_TYPE, float32_exact, mesh_geometry
from ._points import POINT_BLOCK_LEAVES, count_shared_corners, shared_corners
from ._reader import open_reader
from ._sink import RowSink, cell_dataset

__all__ = ["POINTS_CHUNK_ROWS", "PREFETCH_CHUNKS", "VTK_VERTEX"]

logger = get_logger(__name__)

VTK_VERTEX = 1
"""VTK cell type of a point (an element of an Array field of positions)."""
PREFETCH_CHUNKS = 2
"""Chunks a serial export reads and converts ahead of the one it writes (each holds about 100 bytes per leaf)."""
POINTS_CHUNK_ROWS = 1 << 16
"""Rows of an HDF5 chunk of ``Points`` when a serial export appends them (768 KiB of float32 points)."""


@dataclass(frozen=True)
class _Step:
    path: Path
    num_leaves: int
    dim: int
    step: int | None
    time: float | None
    arrays: list[CellArray]
    float32_level: int  # the finest leaf level whose corners are all float32 (-1: none, or float64 points anyway)
    mesh: str
    length_units: str | None
    points: list[PointSet]


def _float32_level(geometry: Any, maxlevel: int, particles: bool) -> int:
    """Return the finest level up to which every leaf corner is exactly a float32 (:func:`float32_exact`), -1 if none.

    Leaves placed by a vertex map, and steps with particles (float64
    positions), have float64 points: -1.
    """
    if particles or not geometry.boxes_exact:
        return -1
    for level in range(maxlevel, -1, -1):
        if float32_exact(geometry.tree_lower, geometry.tree_upper, level):
            return level
    return -1


def _survey(
    paths: Sequence[Path], hp: HpSummary, ranks: int | None, verify: bool, brick: tuple[int, ...] | None, mesh: str | None
) -> list[_Step]:
    """Read the metadata of every checkpoint (no field data).

    Raises
    ------
    CheckpointError
        On this rank, if a checkpoint holds no mesh, or the checkpoints mix 2D and 3D meshes.
    """
    out = []
    for p in paths:
        with open_reader(p, verify=verify) as r:
            m = r.manifest
            if not m.meshes:
                raise CheckpointError(f"{os.fspath(p)!r} holds no mesh (schema {m.schema_name}): nothing to export")
            ms = mesh_spec(m, mesh)
            particles = plan_points(m)
            out.append(
                _Step(
                    p,
                    ms.num_leaves,
                    ms.dim,
                    _number(m.values.get("step"), int),
                    _number(m.values.get("time"), float),
                    plan_arrays(m, hp=hp, ranks=ranks, mesh=ms.field),
                    _float32_level(mesh_geometry(r, brick, ms.field), ms.maxlevel, bool(particles)),
                    ms.field,
                    ms.geometry.units if ms.geometry is not None else None,
                    particles,
                )
            )
    dims = {s.dim for s in out}
    if len(dims) > 1:
        raise CheckpointError(f"the checkpoints mix {sorted(dims)}D meshes; a series has one dimension")
    return out


def _common(per_step: Sequence[Sequence[Any]], name: Callable[[Any], str], what: str) -> list[Any]:
    """Return the items (arrays or point sets) of the first step that every step has, alike (others are logged and left out)."""
    keep = set.intersection(*({x.key for x in items} for items in per_step))
    dropped = [name(x) for x in per_step[0] if x.key not in keep]
    if dropped:
        logger.warning("%s %s are not in every checkpoint alike; not exported", what, dropped)
    return [x for x in per_step[0] if x.key in keep]


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


@dataclass
class _Plan:
    """The sizes of every step in the file: cells, connectivity ids, particles (points once known)."""

    steps: Sequence[_Step]
    particles: list[int]  # exported particles of each step
    points: list[int] | None = None  # points of each step (leaves' shared corners, then particles)

    @property
    def nv(self) -> int:
        """Corners of a leaf: 4 or 8."""
        return 1 << self.steps[0].dim

    @property
    def cells(self) -> np.ndarray:
        """Cells of each step: its leaves, then its particles."""
        return np.array([s.num_leaves + m for s, m in zip(self.steps, self.particles, strict=True)], dtype=np.int64)

    @property
    def conn_ids(self) -> np.ndarray:
        """Connectivity ids of each step: ``2**dim`` per leaf, one per particle."""
        return np.array([self.nv * s.num_leaves + m for s, m in zip(self.steps, self.particles, strict=True)], dtype=np.int64)

    @property
    def ids(self) -> Any:
        """The dtype of point ids and offsets: int32 unless a step has ``2**31`` connectivity ids."""
        return np.int32 if int(self.conn_ids.max(initial=0)) < 2**31 else np.int64

    def before(self, sizes: Any) -> np.ndarray:
        """Rows of a dataset before each step."""
        return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))[:-1]]).astype(np.int64)


def _create(
    h5: Any,
    plan: _Plan,
    arrays: Sequence[CellArray],
    points: Sequence[PointSet],
    series: bool,
    units_in_names: bool,
    points_dtype: Any,
) -> dict[str, Any]:
    """Create every dataset of the file (collective under MPI); return them by name.

    ``Points`` has its final size where the points of every step are known
    (``plan.points``); otherwise it starts empty, chunked, and grows as
    blocks are appended (:class:`RowSink`), and :func:`_finish` writes the
    datasets that count points.
    """
    steps = plan.steps
    cells, conn_ids = plan.cells, plan.conn_ids
    S = len(steps)
    total = int(cells.sum())
    root = h5.create_group("VTKHDF")
    root.attrs["Version"] = np.array([2, 2], dtype=np.int64)
    root.attrs.create("Type", np.bytes_(b"UnstructuredGrid"))
    d: dict[str, Any] = {"root": root}

    if plan.points is None:
        d["Points"] = root.create_dataset("Points", (0, 3), maxshape=(None, 3), chunks=(POINTS_CHUNK_ROWS, 3), dtype=points_dtype)
    else:
        d["Points"] = root.create_dataset("Points", (int(sum(plan.points)), 3), dtype=points_dtype)
    root.create_dataset("NumberOfCells", data=cells)
    root.create_dataset("NumberOfConnectivityIds", data=conn_ids)
    ids = plan.ids  # point ids count from each step's first point, offsets from its first id
    d["Connectivity"] = root.create_dataset("Connectivity", (int(conn_ids.sum()),), dtype=ids)
    d["Offsets"] = root.create_dataset("Offsets", (total + S,), dtype=ids)
    d["Types"] = root.create_dataset("Types", (total,), dtype=np.uint8)
    cd = root.create_group("CellData")
    mixed = any(plan.particles)
    everything = [("cell:", a) for a in arrays] + [(f"point:{p.field}:", a) for p in points for a in p.arrays]
    for prefix, a in everything:
        fill = {"fillvalue": _fill(a.dtype)} if mixed else {}
        d[prefix + a.name] = cell_dataset(cd, _dataset_name(a, units_in_names), a, total, **fill)
    root.create_group("PointData")
    fd = root.create_group("FieldData")
    step_v = np.array([-1 if s.step is None else s.step for s in steps], dtype=np.int64)
    time_v = np.array([np.nan if s.time is None else s.time for s in steps], dtype=np.float64)
    fd.create_dataset("step", data=step_v)
    fd.create_dataset("time", data=time_v)
    if series:
        st = root.create_group("Steps")
        d["Steps"] = st
        st.attrs["NSteps"] = np.int64(S)
        st.create_dataset("Values", data=np.where(np.isnan(time_v), step_v.astype(np.float64), time_v))
        st.create_dataset("PartOffsets", data=np.arange(S, dtype=np.int64))
        st.create_dataset("NumberOfParts", data=np.ones(S, dtype=np.int64))
        st.create_dataset("CellOffsets", data=plan.before(cells).reshape(S, 1))
        st.create_dataset("ConnectivityIdOffsets", data=plan.before(conn_ids).reshape(S, 1))
        cdo = st.create_group("CellDataOffsets")
        for _, a in everything:
            cdo.create_dataset(_dataset_name(a, units_in_names), data=plan.before(cells))
        st.create_group("PointDataOffsets")
        fdo = st.create_group("FieldDataOffsets")
        fds = st.create_group("FieldDataSizes")
        for name in ("step", "time"):
            fdo.create_dataset(name, data=np.arange(S, dtype=np.int64))
            fds.create_dataset(name, data=np.ones((S, 2), dtype=np.int64))
    if plan.points is not None:
        _finish(d, plan.points)
    meta = h5.create_group("amrckpt")  # outside /VTKHDF: ignored by VTK (spec 2.2)
    meta.attrs["sources"] = [os.fspath(s.path) for s in steps]
    meta.attrs["mesh"] = [s.mesh for s in steps]
    meta.attrs["leaf_order"] = "curve order of each checkpoint: cell i of a step is its leaf i"
    meta.attrs["point_blocks"] = (
        f"the corner points of leaves [k {POINT_BLOCK_LEAVES}, (k + 1) {POINT_BLOCK_LEAVES}) of a step are shared: "
        "each distinct vertex of a tree once, ordered by tree, x, y, z"
    )
    if mixed:
        meta.attrs["points"] = [p.field for p in points]
        meta.attrs["point_cells"] = "after the leaves of each step: one VTK_VERTEX cell per element of each point set, in order"
    if steps[0].length_units:
        meta.attrs["length_units"] = steps[0].length_units
    return d


def _finish(d: dict[str, Any], points: Sequence[int]) -> None:
    """Create the datasets that count each step's points (collective under MPI)."""
    pts = np.asarray(points, dtype=np.int64)
    d["root"].create_dataset("NumberOfPoints", data=pts)
    if "Steps" in d:
        d["Steps"].create_dataset("PointOffsets", data=np.concatenate([[0], np.cumsum(pts)[:-1]]).astype(np.int64))


@dataclass
class _Rows:
    """Where one step starts in the file's datasets, its sizes, and where this rank's points go."""

    step_index: int
    cells_before: int
    conn_before: int
    points_before: int  # rows of Points before the step
    num_leaves: int
    num_particles: int
    nv: int  # corners of a leaf: 4 or 8
    next_point: int = 0  # the step's next point (this rank's first, then on), counted from the step's first
    leaf_points: int = 0  # the step's leaf points (all ranks'), known once they are counted or written


class _Float64Needed(Exception):
    """A block's finest leaf has corners that are not float32: the export starts again with float64 points."""


@dataclass
class _Blocks:
    """Cuts a stream of leaf chunks into the blocks of shared points, holding the leaves of an unfinished block."""

    end: int  # one past the last leaf of the range
    pending: list[np.ndarray] = field(default_factory=list)

    def feed(self, s: int, leaves: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """Take leaves ``s .. s + len(leaves) - 1``; yield ``(first leaf, leaves)`` of every block they complete."""
        e, pos = s + len(leaves), s
        while pos < e:
            block_end = min((pos // POINT_BLOCK_LEAVES + 1) * POINT_BLOCK_LEAVES, self.end)
            stop = min(e, block_end)
            self.pending.append(leaves[pos - s : stop - s])
            pos = stop
            if pos == block_end:
                block = self.pending[0] if len(self.pending) == 1 else np.concatenate(self.pending)
                self.pending = []
                yield block_end - len(block), block


def _block_range(N: int, rank: int, size: int) -> tuple[int, int]:
    """Leaves of a step that rank ``rank`` of ``size`` converts: whole blocks, split as p4est splits elements."""
    nb = -(-N // POINT_BLOCK_LEAVES)
    return min(N, nb * rank // size * POINT_BLOCK_LEAVES), min(N, nb * (rank + 1) // size * POINT_BLOCK_LEAVES)


def _count_range(reader: Any, mesh: str, dim: int, maxlevel: int, a: int, b: int, chunk: int) -> tuple[int, int]:
    """Return the shared corner points of leaves ``a .. b - 1`` (whole blocks) and their finest level (-1 if none)."""
    blocks = _Blocks(b)
    count, finest = 0, -1
    for s in range(a, b, chunk):
        leaves = reader.read_mesh(s, min(chunk, b - s), mesh)
        if len(leaves):
            finest = max(finest, int(leaves["level"].max()))
        for _, block in blocks.feed(s, leaves):
            count += count_shared_corners(block, dim, maxlevel)
    return count, finest


@dataclass
class _Range:
    """The leaves of one step that one rank converts and writes, and how (:func:`_write_range`)."""

    reader: Any  # the open checkpoint
    mesh: str
    geometry: Any  # amrckpt.container.Geometry
    maxlevel: int
    arrays: Sequence[CellArray]
    rows: _Rows  # where the step's rows go
    a: int  # leaves a .. b - 1: whole blocks of points
    b: int
    chunk: int
    float32_level: int  # the finest level of float32 corners
    ids: Any  # dtype of point ids and offsets
    points_dtype: Any


def _write_range(job: _Range, sink_of: Callable[[], RowSink], prefetch: bool) -> None:
    """Write leaves ``job.a .. job.b - 1`` of one step: cells ``job.chunk`` leaves at a time, points a block at a time.

    Not collective.  With ``prefetch`` one worker thread reads the next
    chunks, converts their values and places the points of each block
    completed, and this thread writes them through the sink (reads and
    numpy release the GIL): serial exports only, where no MPI call is
    made off the main thread.  ``sink_of()`` gives the sink once the first
    chunks are on their way (it may create the file meanwhile).

    Raises
    ------
    _Float64Needed
        If the points are float32 and a leaf is finer than ``job.float32_level``.
    """
    reader, arrays, geometry, maxlevel, rows = job.reader, job.arrays, job.geometry, job.maxlevel, job.rows
    nv = 1 << geometry.dim
    num_leaves = rows.num_leaves
    off0 = rows.cells_before + rows.step_index  # this step's first row of Offsets (one extra row per part)
    blocks = _Blocks(job.b)
    cell_type = VTK_CELL_TYPE[geometry.dim]

    def convert(s: int, e: int) -> tuple[int, int, list[np.ndarray], list[tuple[int, np.ndarray]]]:
        """Read and convert leaves ``s .. e - 1`` (on the worker thread): their rows of cells, and the blocks they complete."""
        leaves = reader.read_mesh(s, e - s, job.mesh)
        last = e == num_leaves and not rows.num_particles
        cells = [
            np.arange(nv * s, nv * (e + last), nv, dtype=job.ids),
            np.full(e - s, cell_type, dtype=np.uint8),
            *(np.ascontiguousarray(v) for v in leaf_values(arrays, reader, leaves, s, num_leaves)),
        ]
        return s, e, cells, list(blocks.feed(s, leaves))

    def place(done: list[tuple[int, np.ndarray]]) -> list[tuple[int, int, np.ndarray, np.ndarray]]:
        """Place the points of the blocks completed (in order): where they go, points, corners.

        Raises
        ------
        _Float64Needed
            On this rank, if the points are float32 and a leaf is finer than ``float32_level``.
        """
        out = []
        for first, block in done:
            if np.dtype(job.points_dtype) == np.float32 and int(block["level"].max()) > job.float32_level:
                raise _Float64Needed
            pts, corners = shared_corners(block, geometry, maxlevel, job.points_dtype, first=rows.next_point)
            out.append((first, rows.next_point, pts, corners.reshape(-1)))
            rows.next_point += len(pts)
        return out

    def write_cells(s: int, e: int, cells: list[np.ndarray]) -> None:
        c0 = rows.cells_before + s
        offsets, types, *values = cells
        sink.put("Offsets", off0 + s, offsets)
        sink.put("Types", c0, types)
        for arr, v in zip(arrays, values, strict=True):
            sink.put("cell:" + arr.name, c0, v)

    def write_points(placed: list[tuple[int, int, np.ndarray, np.ndarray]]) -> None:
        for first, at, pts, corners in placed:
            sink.put("Points", rows.points_before + at, pts)
            sink.put("Connectivity", rows.conn_before + nv * first, corners)

    def make(s: int, e: int) -> tuple[int, int, list[np.ndarray], list[tuple[int, int, np.ndarray, np.ndarray]]]:
        """Read and convert leaves ``s .. e - 1`` and place the points of the blocks they complete (in chunk order)."""
        s, e, cells, done = convert(s, e)
        return s, e, cells, place(done)

    chunks = [(s, min(s + job.chunk, job.b)) for s in range(job.a, job.b, job.chunk)]
    if prefetch and len(chunks) > 1:
        # Two threads: one reads, converts and places chunk after chunk (queued ahead, so that it goes on as soon as it
        # ends one), this one writes them.  h5py holds the GIL while HDF5 writes: a third thread would only wait for it.
        with Pool(1, "amrckpt-export") as making:
            todo = iter(chunks)
            made = deque(making.submit(make, *c) for c in itertools.islice(todo, PREFETCH_CHUNKS))
            sink = sink_of()
            while made:
                s, e, cells, placed = made.popleft().result()
                for c in itertools.islice(todo, 1):
                    made.append(making.submit(make, *c))
                write_cells(s, e, cells)
                write_points(placed)
    else:
        sink = sink_of()
        for c in chunks:
            s, e, cells, placed = make(*c)
            write_cells(s, e, cells)
            write_points(placed)
    if num_leaves == 0 and job.a == 0 and not rows.num_particles:
        sink.put("Offsets", off0, np.zeros(1, dtype=job.ids))


def _write_points(sink: RowSink, reader: Any, points: Sequence[PointSet], rows: _Rows, rank: int, size: int, chunk: int) -> None:
    """Write this rank's share of each point set of one step, as VTK_VERTEX cells after the leaves (not collective).

    Particle ``k`` of the step is cell ``N + k``, connectivity id ``2**dim N
    + k`` and point ``L + k``, ``L`` the step's leaf points
    (``rows.leaf_points``, known by then).
    """
    ids = sink.d["Connectivity"].dtype
    off0 = rows.cells_before + rows.step_index
    leaf_ids = rows.nv * rows.num_leaves
    before = 0
    for ps in points:
        a, b = ps.count * rank // size, ps.count * (rank + 1) // size
        for s in range(a, b, max(1, chunk)):
            e = min(s + chunk, b)
            xyz, values = point_values(ps, reader, s, e - s)
            k0, k1 = before + s, before + e  # the step's particles, counted after its leaves
            c0 = rows.cells_before + rows.num_leaves + k0
            sink.put("Points", rows.points_before + rows.leaf_points + k0, xyz)
            point_ids = np.arange(rows.leaf_points + k0, rows.leaf_points + k1, dtype=ids)
            sink.put("Connectivity", rows.conn_before + leaf_ids + k0, point_ids)
            last = k1 == rows.num_particles
            sink.put("Offsets", off0 + rows.num_leaves + k0, np.arange(leaf_ids + k0, leaf_ids + k1 + last, dtype=ids))
            sink.put("Types", c0, np.full(e - s, VTK_VERTEX, dtype=np.uint8))
            for arr, v in zip(ps.arrays, values, strict=True):
                sink.put(f"point:{ps.field}:" + arr.name, c0, v)
        before += ps.count


@dataclass
class _Writer:
    """What every rank writes of one export: its steps, their arrays and point sets, and how.

    Serial: :meth:`write` on rank 0 of 1, ``Points`` growing as blocks are
    appended.  Parallel: every rank counts the points of its blocks
    (:meth:`count`), :meth:`plan` sizes the file from every rank's counts,
    and every rank writes its blocks and particles in place (:meth:`write`).
    """

    steps: list[_Step]
    arrays: list[CellArray]
    point_sets: list[PointSet]
    series: bool
    units_in_names: bool
    verify: bool
    brick: Any
    chunk: int
    float32: bool

    @property
    def particles(self) -> list[int]:
        """Exported particles of each step."""
        keys = {p.key for p in self.point_sets}
        return [sum(p.count for p in s.points if p.key in keys) for s in self.steps]

    def count(self, rank: int, size: int) -> list[int]:
        """Return, for each step, the points of this rank's blocks and its finest leaf (-1 if none). Not collective."""
        out: list[int] = []
        for st in self.steps:
            with open_reader(st.path, verify=self.verify) as r:
                a, b = _block_range(st.num_leaves, rank, size)
                out.extend(_count_range(r, st.mesh, st.dim, mesh_spec(r.manifest, st.mesh).maxlevel, a, b, self.chunk))
        return out

    def plan(self, counts: np.ndarray) -> tuple[_Plan, list[np.ndarray]]:
        """Size the file from every rank's :meth:`count`, ``(P, 2 S)``; return it and each step's first point of each rank.

        Points are float64 from here on if a leaf is too fine for float32.
        """
        got = np.asarray(counts, dtype=np.int64).reshape(len(counts), len(self.steps), 2)
        points, finest = got[:, :, 0], got[:, :, 1].max(axis=0)
        self.float32 = self.float32 and all(int(f) <= s.float32_level for f, s in zip(finest, self.steps, strict=True))
        starts = [np.concatenate([[0], np.cumsum(points[:, i])[:-1]]).astype(np.int64) for i in range(len(self.steps))]
        particles = self.particles
        return _Plan(self.steps, particles, [int(points[:, i].sum()) + particles[i] for i in range(len(self.steps))]), starts

    def create(self, h5: Any, plan: _Plan) -> RowSink:
        """Create the file's datasets (collective under MPI); return their sink."""
        points_dtype = np.float32 if self.float32 else np.float64
        return RowSink(_create(h5, plan, self.arrays, self.point_sets, self.series, self.units_in_names, points_dtype))

    def write_steps(
        self, rank: int, size: int, sink: RowSink | Callable[[], RowSink], plan: _Plan, starts: Sequence[Any], prefetch: bool
    ) -> list[int]:
        """Write this rank's blocks and particles of every step; return the points of each step.

        Not collective (except ``sink()``, which may create the file: the
        same on every rank, before the first step's first write).

        Raises
        ------
        _Float64Needed
            If ``Points`` is float32 and grows (serial) and a leaf is too fine.
        """
        nv = plan.nv
        particles = plan.particles
        keys = {p.key for p in self.point_sets}
        sink_of = sink if callable(sink) else lambda: sink
        cells_before, conn_before, points_before = 0, 0, 0
        totals = []
        for i, st in enumerate(self.steps):
            N = st.num_leaves
            rows = _Rows(i, cells_before, conn_before, points_before, N, particles[i], nv)
            with open_reader(st.path, verify=self.verify) as r:
                ms = mesh_spec(r.manifest, st.mesh)
                geometry = mesh_geometry(r, self.brick, st.mesh)
                a, b = _block_range(N, rank, size)
                if plan.points is not None:  # counted: this rank's first point follows the ranks' below
                    rows.next_point, rows.leaf_points = int(starts[i][rank]), plan.points[i] - particles[i]
                points_dtype = np.float32 if self.float32 else np.float64
                job = _Range(
                    r, st.mesh, geometry, ms.maxlevel, self.arrays, rows, a, b, self.chunk, st.float32_level, plan.ids, points_dtype
                )
                _write_range(job, sink_of, prefetch)
                if plan.points is None:
                    rows.leaf_points = rows.next_point
                _write_points(sink_of(), r, [p for p in st.points if p.key in keys], rows, rank, size, self.chunk)
                r.check_crcs()  # every byte read, against the index (verify=True), before the file is kept
            totals.append(rows.leaf_points + particles[i])
            cells_before += N + particles[i]
            conn_before += nv * N + particles[i]
            points_before += totals[-1]
        return totals

    def write(self, rank: int, size: int, h5: Any, plan: _Plan, starts: Sequence[Any]) -> list[int]:
        """Create the datasets, write this rank's part (prefetching when serial), count the points. Collective under MPI.

        The datasets are created while the first chunk is read.
        """
        made: list[RowSink] = []

        def sink() -> RowSink:
            if not made:
                made.append(self.create(h5, plan))
            return made[0]

        try:
            totals = self.write_steps(rank, size, sink, plan, starts, prefetch=size == 1)
        finally:
            for m in made:
                m.close()
        if plan.points is None:
            _finish(sink().d, totals)
        return totals
