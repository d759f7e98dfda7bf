"""Export checkpoints to VTKHDF: one ``UnstructuredGrid`` cell per leaf, a ``Steps`` group for a series.

The file follows the VTKHDF specification (version 2.2; VTK's
``vtkHDFReader``, ParaView 5.12 and later; ParaView 5.11 reads one step
correctly but overlays all steps of a series in one grid).  Each leaf
becomes a cell, and every cell array is a function of the leaf index alone:
leaves ``a .. b`` of a step fill rows ``[C + a, C + b)`` of ``Types`` and
the cell data and rows ``[K + 2**dim a, K + 2**dim b)`` of ``Connectivity``.
Corner points are shared within blocks of :data:`POINT_BLOCK_LEAVES`
consecutive leaves (:func:`shared_corners`: each distinct vertex of a tree
once per block), at global positions along the curve, so that the points
depend neither on the chunk size nor on the number of processes: one VTK
partition per step, in curve order.  A serial export appends each block's
points as it goes (``Points`` grows, in HDF5 chunks); a parallel one (h5py
built with MPI) counts each rank's points first, then every rank writes
its blocks in place.  The elements of Array fields of positions (particles)
follow a step's leaves, one ``VTK_VERTEX`` cell and point each.  Every row
is written through h5py's public API (:class:`RowSink`, which holds no
layout: the writers of :mod:`amrckpt.export._unstructured` say which rows
of which dataset).  With
``format="htg"`` a checkpoint of box trees becomes a VTKHDF 2.4
``HyperTreeGrid`` instead (:mod:`amrckpt.export._htg`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._files import replacing
from .._logging import get_logger
from ..comm import Call, Comm, collective, mpi_of
from ..errors import UnsupportedFormatError
from ._arrays import CellArray, HpSummary, PointSet, checkpoint_paths, mesh_spec
from ._geometry import mesh_geometry
from ._htg import HtgOptions, htg_grid, write_htg
from ._reader import open_reader
from ._unstructured import _common, _dataset_name, _Float64Needed, _Plan, _Step, _survey, _Writer

__all__ = ["DEFAULT_CHUNK_LEAVES", "FORMATS", "ExportResult", "to_vtkhdf", "vtkhdf_formats"]

logger = get_logger(__name__)

FORMATS = ("unstructured", "htg")
"""The VTKHDF types :func:`to_vtkhdf` writes (``format``): ``UnstructuredGrid``, ``HyperTreeGrid``."""
DEFAULT_CHUNK_LEAVES = 1 << 17
"""Leaves converted at a time (one block of shared points, :data:`~amrckpt.export.POINT_BLOCK_LEAVES`)."""

INSTALL_H5PY = "exporting to VTKHDF needs h5py: pip install 'amrckpt[export]' (h5py alone)"


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
    num_points : tuple of int
        Points of each step: the leaves' shared corner points, then one per
        particle.
    format : {"unstructured", "htg"}
        The VTKHDF type written: ``UnstructuredGrid`` or ``HyperTreeGrid``.
    num_nodes : tuple of int
        ``"htg"``: the nodes of each step's hyper trees (leaves and coarse
        nodes: the rows of each cell array); empty otherwise.
    """

    path: Path
    sources: tuple[Path, ...]
    num_cells: tuple[int, ...]
    steps: tuple[int | None, ...]
    times: tuple[float | None, ...]
    arrays: tuple[str, ...]
    series: bool
    points: tuple[str, ...] = ()
    num_points: tuple[int, ...] = ()
    format: str = "unstructured"
    num_nodes: tuple[int, ...] = ()


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
    format: Literal["unstructured", "htg"] = "unstructured",
) -> ExportResult:
    """Export a checkpoint, or a directory of them, to a VTKHDF file that ParaView, VisIt and VTK open.

    The file is a VTKHDF ``UnstructuredGrid`` with one cell per leaf, in
    curve order (cell ``i`` of a step is leaf ``i`` of its checkpoint): a
    ``VTK_QUAD`` (2D) or ``VTK_HEXAHEDRON`` (3D) on the leaf's box, placed by
    the forest geometry of the checkpoint (:func:`tree_boxes`).  Leaves
    share their corner points within blocks of :data:`POINT_BLOCK_LEAVES`
    consecutive leaves, each distinct vertex of a tree once per block
    (:func:`shared_corners`): about one point per leaf in 2D, instead of
    four.  Cell data:
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
    mesh, and each checkpoint is read once: every byte read is CRC'd as it
    is read and checked against the index before the file is kept.  Under
    MPI with an h5py built with MPI (``h5py.get_config().mpi``) every rank
    counts the points of its blocks of each step's leaves (one more read of
    its mesh), then writes its share into one file opened with the
    ``mpio`` driver; otherwise rank 0 writes the file alone, in chunks.  The
    datasets do not depend on the number of ranks nor on ``chunk_leaves``.

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
        level 20 or so of unit trees), which halves them, else float64
        (a serial export meets the first finer leaf while it writes, and
        starts again with float64 points); ``"float64"``: always float64.
    mesh : str, optional
        The mesh whose leaves become the cells, for a checkpoint of several
        meshes (the first by default); the fields on its leaves are
        exported.
    prefix : str, optional
        The manager's file prefix, for a directory.
    chunk_leaves : int, optional
        Leaves per chunk (what is read, converted and written at a time;
        the leaves of an unfinished block of points are held until it ends).
    comm : None or mpi4py.MPI.Comm, optional
        Collective over ``comm`` when given; serial by default.
    verify : bool, optional
        Check what is read against the checkpoint's CRC32s.
    format : {"unstructured", "htg"}, optional
        The VTK data type, named as the CLI's ``--format`` names it:
        ``"unstructured"`` (the default; VTKHDF 2.2 ``UnstructuredGrid``,
        any geometry, ParaView 5.12+) or ``"htg"``: VTKHDF 2.4
        ``HyperTreeGrid`` (VTK 9.5+, ParaView 6), for a forest whose trees
        are boxes on a grid (:func:`vtkhdf_formats`): one hyper tree per
        tree, the cell arrays on every node (a leaf's own values, a coarse
        node's the mean of its children, :func:`htg_values`), one
        checkpoint (no series, no particles), written by rank 0, which
        reads whole trees at a time (about ``chunk_leaves`` leaves, or one
        larger tree: a one-tree forest is held whole) and writes the rows
        of two chunks at a time while it makes the next two.

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
    ChecksumError
        With ``verify``, if a byte read does not match its section's CRC32
        (naming the section); the file is not written.
    CheckpointError
        If a checkpoint holds no mesh, cannot be read, or the checkpoints
        of a series mix 2D and 3D.
    UnsupportedFormatError
        With ``format="htg"``, if the trees are not boxes on a grid (the
        message says why), or ``source`` is a series.
    ValueError
        For a bad ``brick``, ``ranks``, ``hp``, ``chunk_leaves`` or ``format``.

    Examples
    --------
    >>> to_vtkhdf("run/ckpt-000000000100.scda", "ckpt-100.vtkhdf")  # doctest: +SKIP
    >>> to_vtkhdf("run", "run.vtkhdf", brick=(2, 1))  # a time series  # doctest: +SKIP
    """
    try:
        import h5py
    except ImportError as exc:
        raise ImportError(INSTALL_H5PY) from exc
    if chunk_leaves < 1:
        raise ValueError(f"chunk_leaves must be at least 1, not {chunk_leaves}")
    if points not in ("auto", "float64"):
        raise ValueError(f"points must be 'auto' or 'float64', not {points!r}")
    if format not in ("unstructured", "htg"):
        raise ValueError(f"format must be 'unstructured' or 'htg', not {format!r}")
    with collective(comm, "export") as call:
        if format == "htg":
            return _export_htg(call, h5py, source, out, prefix, hp, ranks, verify, brick, chunk_leaves, mesh, units_in_names)
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

    def survey() -> list[_Step]:
        return _survey(paths, hp, ranks, verify, brick, mesh)

    steps = survey() if c.size == 1 else call.on_root(survey, what="export: survey")
    arrays: list[CellArray] = _common([s.arrays for s in steps], lambda a: a.name, "arrays")
    point_sets: list[PointSet] = _common([s.points for s in steps], lambda p: p.field, "point sets")
    float32 = points == "auto" and all(s.float32_level >= 0 for s in steps)
    w = _Writer(steps, arrays, point_sets, series, units_in_names, verify, brick, chunk_leaves, float32)
    out_path = Path(out)
    if c.size > 1 and bool(h5py.get_config().mpi):
        counts = call.allgather_ints(w.count(c.rank, c.size), what="export: points of each rank")
        plan, starts = w.plan(counts)
        with replacing(out_path, call) as tmp, h5py.File(tmp, "w", driver="mpio", comm=_mpi4py_comm(c)) as h5:
            totals = w.write(c.rank, c.size, h5, plan, starts)
    else:

        def serial() -> list[int]:
            try:
                with replacing(out_path) as tmp, h5py.File(tmp, "w") as h5:
                    return w.write(0, 1, h5, _Plan(steps, w.particles), [])
            except _Float64Needed:
                logger.info("a leaf's corners are not float32: the points are float64")
                w.float32 = False
                with replacing(out_path) as tmp, h5py.File(tmp, "w") as h5:
                    return w.write(0, 1, h5, _Plan(steps, w.particles), [])

        totals = serial() if c.size == 1 else call.on_root(serial, what="export: write")
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
        tuple(totals),
    )


def _export_htg(
    call: Call, h5py: Any, source: Any, out: Any, prefix: str, hp: Any, ranks: Any, verify: bool, brick: Any, chunk: int,
    mesh: Any, units_in_names: bool
) -> ExportResult:  # fmt: skip
    paths, series = checkpoint_paths(source, prefix)
    if series:
        raise UnsupportedFormatError(
            f"{os.fspath(source) if isinstance(source, (str, os.PathLike)) else 'the list'}: a HyperTreeGrid export takes one "
            "checkpoint, not a series (export each step, or a series with --format unstructured)"
        )
    out_path = Path(out)
    opts = HtgOptions(hp, ranks, verify, brick, mesh, chunk, lambda a: _dataset_name(a, units_in_names))
    plan, names, rows = write_htg(call, h5py, paths[0], out_path, opts)
    logger.info("exported %s to %s (HyperTreeGrid)", paths[0], out_path)
    return ExportResult(
        out_path, (paths[0],), (plan.num_leaves,), (plan.step,), (plan.time,), tuple(names), False, format="htg", num_nodes=(rows,)
    )


def vtkhdf_formats(
    source: str | os.PathLike[str], *, brick: tuple[int, ...] | None = None, mesh: str | None = None, verify: bool = True
) -> dict[str, str | None]:
    """Return the VTKHDF formats :func:`to_vtkhdf` can write for a checkpoint, and why not for the others.

    Not collective: reads the checkpoint's metadata (its manifest and
    geometry) on the calling process.

    Parameters
    ----------
    source : path
        A checkpoint file.
    brick : tuple of int, optional
        As for :func:`to_vtkhdf`.
    mesh : str, optional
        As for :func:`to_vtkhdf`.
    verify : bool, optional
        Check the metadata read against the checkpoint's CRC32s.

    Returns
    -------
    dict of str to (str or None)
        For each of :data:`FORMATS`: None if the checkpoint allows it, else
        the reason it does not (``"unstructured"`` is always allowed).

    Raises
    ------
    CheckpointError
        If the checkpoint holds no mesh or cannot be read.
    """
    with open_reader(source, verify=verify) as r:
        geometry = mesh_geometry(r, brick, mesh_spec(r.manifest, mesh).field)
    try:
        htg_grid(geometry)
        why = None
    except UnsupportedFormatError as exc:
        why = str(exc)
    return {"unstructured": None, "htg": why}


def _mpi4py_comm(c: Comm) -> Any:
    """Return the mpi4py communicator under ``c`` for h5py's ``mpio`` driver (None if ``c`` is not MPI's)."""
    m = mpi_of(c)
    return m.mpi_comm if m is not None else None
