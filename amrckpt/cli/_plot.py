"""``amrckpt plot``: a PNG of a 2D checkpoint's mesh, or of a slice of a 3D one."""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..comm import SerialComm
from ..container import (
    CheckpointInfo,
    CheckpointReader,
    dtype_from_json,
    handler_for,
    read_info,
)
from ..errors import AmrckptError
from ._common import _INSTALL_MATPLOTLIB, EXIT_BAD, EXIT_OK, _dtype_text, _err, _out, _UsageError


def _parse_brick_nd(text: str | None, dim: int) -> tuple[int, ...] | None:
    """``--brick NX,NY[,NZ]`` as a tuple, or None without it (the geometry stored in the file places the trees).

    Raises
    ------
    _UsageError
        On this rank, if ``text`` is not ``dim`` positive tree counts.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[x,]\s*(\d+)\s*(?:[x,]\s*(\d+)\s*)?", text)
    if not m or (m.group(3) is not None) != (dim == 3) or any(int(g) < 1 for g in m.groups() if g is not None):
        raise _UsageError(
            f"--brick {text!r}: give NX,NY" + (",NZ" if dim == 3 else "") + " (trees along each axis), e.g. --brick 2,1"
        )
    return tuple(int(g) for g in m.groups() if g is not None)


def _parse_slice(text: str | None) -> tuple[int, float | None]:
    """``--slice AXIS[=VALUE]`` as (axis index, value or None for the middle of the domain).

    Raises
    ------
    _UsageError
        On this rank, if ``text`` is not x, y or z, optionally followed by ``=`` and a number.
    """  # noqa: DOC501 (its ValueError is caught inside)
    m = re.fullmatch(r"\s*([xyz])\s*(?:=\s*(\S+)\s*)?", text or "z")
    try:
        if m is None:
            raise ValueError
        return "xyz".index(m.group(1)), None if m.group(2) is None else float(m.group(2))
    except ValueError:
        raise _UsageError(f"--slice {text!r}: give x, y or z, and optionally =VALUE (e.g. --slice z=0.5)") from None


_HEX_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4], [0, 4], [1, 5], [2, 6], [3, 7]])
"""The 12 edges of a hexahedron, its corners in VTK_HEXAHEDRON order."""


def _slice_polygons(corners: np.ndarray, axis: int, plane: float) -> tuple[np.ndarray, np.ndarray]:
    """Cut hexahedra ``(n, 8, 3)`` (VTK order) by the plane ``axis = plane``: ``(polygons (k, 6, 2), which (k,))``.

    Each hexahedron's 12 edges are cut where they cross the plane; the
    points, sorted by angle around their mean, are its polygon (padded to 6
    vertices by repeating the first).  Vectorized over the leaves.
    """
    a = corners[:, _HEX_EDGES[:, 0], :]
    b = corners[:, _HEX_EDGES[:, 1], :]
    da, db = a[:, :, axis] - plane, b[:, :, axis] - plane
    cross = ((da <= 0) & (db > 0)) | ((db <= 0) & (da > 0))
    t = np.where(cross, da / np.where(cross, da - db, 1.0), 0.0)
    pts = a + t[:, :, None] * (b - a)
    keep = np.delete(np.arange(3), axis)
    uv = pts[:, :, keep]  # (n, 12, 2)
    which = np.flatnonzero(cross.sum(axis=1) >= 3)
    uv, cross = uv[which], cross[which]
    mid = (uv * cross[:, :, None]).sum(axis=1) / cross.sum(axis=1)[:, None]
    ang = np.where(cross, np.arctan2(uv[:, :, 1] - mid[:, None, 1], uv[:, :, 0] - mid[:, None, 0]), np.inf)
    order = np.argsort(ang, axis=1)[:, :6]
    poly = np.take_along_axis(uv, order[:, :, None], axis=1)
    valid = np.take_along_axis(cross, order, axis=1)
    poly = np.where(valid[:, :, None], poly, poly[:, :1, :])
    return poly, which


def _plot_leaves(
    path: str, ck: CheckpointInfo, what: str, ranks: int | None, brick: tuple[int, ...] | None, axis: int | None, at: float | None
) -> tuple[np.ndarray, np.ndarray, float | None, str, str, np.ndarray]:
    """Return the leaves to draw: polygons in the plane, a value each, the plane (3D), a label, the kind of colouring, particles.

    Streams the leaves in chunks through :mod:`amrckpt.export` (the same
    geometry and per-leaf values as ``amrckpt export``: p4est's vertex map
    of a connectivity, or boxes), CRC32s checked.  A 2D mesh is drawn
    whole; of a 3D mesh, the leaves cut by the plane ``axis = at`` (default:
    through the middle of the domain).  The particles are the elements of
    Array fields of positions (:func:`amrckpt.export.plan_points`): all of
    them in 2D, those within 1% of the domain's extent of the plane in 3D.

    Raises
    ------
    _UsageError
        On this rank, if ``what`` is no field of the file, not a cell field or of a dtype that has no colour, or if
        the plane cuts no leaf.
    """
    from ..export import (
        DEFAULT_CHUNK_LEAVES,
        cell_corners,
        leaf_boxes,
        leaf_corners,
        leaf_values,
        mesh_geometry,
        plan_arrays,
        plan_points,
        point_values,
    )

    m = ck.manifest
    assert m.mesh is not None
    cells = [fs.name for fs in m.fields if _per_leaf_values(fs.kind)]
    P = ranks if ranks is not None else ck.writer_size or 1
    arrays = plan_arrays(m, ranks=P)
    if what in ("level", "rank"):
        arr, kind = next(a for a in arrays if a.name == what), what
        label = "refinement level" if what == "level" else f"owning rank (uniform partition on {P} rank{'s' if P != 1 else ''})"
        kind = f"rank:{P}" if what == "rank" else kind
    else:
        try:
            fs = m.field(what)
        except KeyError:
            choices = ", ".join(cells) or "none"
            raise _UsageError(f"{path} has no field {what!r}; choose level, rank or a cell field: {choices}") from None
        if not _per_leaf_values(fs.kind):
            choices = ", ".join(cells) or "none"
            article = "an" if fs.kind[:1].lower() in "aeiou" else "a"
            raise _UsageError(f"field {what!r} is {article} {fs.kind} field; leaves are coloured by a cell field: {choices}")
        runs = handler_for(fs.kind).reads_as == "runs"  # hp: coloured by the number of values of each leaf
        name = f"{what}.count" if runs else what
        found = [a for a in arrays if a.name == name or (not runs and a.field == what)]
        if not found:
            raise _UsageError(f"field {what!r} has dtype {_dtype_text(fs.dtype)}, which has no colour")
        arr, kind = found[0], "field"
        dt = dtype_from_json(fs.dtype, what)
        many = arr.ncomp > 1 or len(found) > 1
        label = f"{what}: values per leaf" if runs else ("|" + what + "|" if dt.kind == "c" else what)
        label += " (first component)" if not runs and many else ""
        label += f" [{fs.units}]" if fs.units and not runs else ""
    keep_poly, keep_v, keep_pts = [], [], []
    with CheckpointReader(path, comm=SerialComm(), verify=True) as r:
        geometry = mesh_geometry(r, brick)
        lower, upper = geometry.tree_lower, geometry.tree_upper
        plane = None
        if axis is not None:
            plane = float(at) if at is not None else 0.5 * (float(lower[:, axis].min()) + float(upper[:, axis].max()))
        N = m.num_leaves
        for s in range(0, N, DEFAULT_CHUNK_LEAVES):
            mesh = r.read_mesh(s, min(DEFAULT_CHUNK_LEAVES, N - s))
            v = leaf_values([arr], r, mesh, s, N)[0]  # the chunk's values (rank: global indices)
            v = v.reshape(len(v), -1)[:, 0]
            nv = 1 << m.mesh.dim
            if geometry.boxes_exact:
                lo, hi = leaf_boxes(mesh, lower, upper, m.mesh.maxlevel)
                if axis is not None and plane is not None:
                    cut = (lo[:, axis] <= plane) & (plane < hi[:, axis])
                    lo, hi, v = np.delete(lo[cut], axis, axis=1), np.delete(hi[cut], axis, axis=1), v[cut]
                poly = cell_corners(lo, hi).reshape(len(v), 4, 3)[:, :, :2]
            else:
                corners = leaf_corners(mesh, geometry, m.mesh.maxlevel).reshape(len(mesh), nv, 3)
                if axis is not None and plane is not None:
                    poly, which = _slice_polygons(corners, axis, plane)
                    v = v[which]
                else:
                    poly = corners[:, :, :2]
            keep_poly.append(poly)
            keep_v.append(np.abs(v) if np.iscomplexobj(v) else v.astype(np.float64))
        extent = (upper.max(axis=0) - lower.min(axis=0)).max() if len(upper) else 1.0
        for ps in plan_points(m):
            for s in range(0, ps.count, DEFAULT_CHUNK_LEAVES):
                xyz, _ = point_values(ps, r, s, min(DEFAULT_CHUNK_LEAVES, ps.count - s))
                if axis is not None and plane is not None:
                    xyz = np.delete(xyz[np.abs(xyz[:, axis] - plane) <= 0.01 * extent], axis, axis=1)
                keep_pts.append(xyz[:, :2])
        r.check_crcs()
    n = sum(len(v) for v in keep_v)
    if axis is not None and not n:
        raise _UsageError(f"the plane {'xyz'[axis]} = {plane:g} cuts no leaf of {path}")
    width = max((p.shape[1] for p in keep_poly), default=4)
    polys = [np.concatenate([p, np.repeat(p[:, :1], width - p.shape[1], axis=1)], axis=1) for p in keep_poly]
    verts = np.concatenate(polys) if polys else np.zeros((0, 4, 2))
    values = np.concatenate(keep_v) if keep_v else np.zeros(0)
    pts = np.concatenate(keep_pts) if keep_pts else np.zeros((0, 2))
    return verts, values, plane, label, kind, pts


def _cmd_plot(args: argparse.Namespace) -> int:
    path = os.fspath(args.file)
    if args.ranks is not None and args.ranks < 1:
        raise _UsageError("--ranks must be at least 1")
    ck = read_info(path, comm=SerialComm(), verify=True)
    m = ck.manifest
    if m.mesh is None:
        raise _UsageError(f"{path} holds no mesh (schema {m.schema_name}): nothing to draw")
    dim = m.mesh.dim
    brick = _parse_brick_nd(args.brick, dim)
    if brick is not None and math.prod(brick) < m.mesh.num_trees:
        raise _UsageError(f"--brick {args.brick} has {math.prod(brick)} trees; the checkpoint has {m.mesh.num_trees}")
    axis, at = _parse_slice(args.slice) if dim == 3 else (None, None)
    if dim == 2 and args.slice is not None:
        raise _UsageError(f"--slice cuts a 3D mesh; {path} holds a 2D one")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import PolyCollection
    except ImportError:
        _err(f"amrckpt plot: {_INSTALL_MATPLOTLIB}")
        return EXIT_BAD
    try:
        verts, values, plane, label, kind, particles = _plot_leaves(path, ck, args.field, args.ranks, brick, axis, at)
    except ValueError as exc:
        if isinstance(exc, AmrckptError):  # a damaged file (ChecksumError is a ValueError too): not a usage error
            raise
        raise _UsageError(str(exc)) from exc
    units = ck.manifest.mesh.geometry.units if ck.manifest.mesh.geometry is not None else None  # type: ignore[union-attr]
    u, v = [a for a in "xyz"[:dim] if axis is None or a != "xyz"[axis]]
    n = len(values)
    x0, y0 = verts.reshape(-1, 2).min(axis=0) if n else (0.0, 0.0)
    x1, y1 = verts.reshape(-1, 2).max(axis=0) if n else (1.0, 1.0)
    width = 8.0
    fig, ax = plt.subplots(figsize=(width + 1.6, max(2.5, width * (y1 - y0) / max(x1 - x0, 1e-300) + 0.9)), constrained_layout=True)
    few = n <= 20000
    pc = PolyCollection(cast(Any, verts), array=values, edgecolors="k" if few else "face", linewidths=0.1 if few else 0.0)
    ticks = None
    if kind == "level" and n:
        lo_l, hi_l = int(values.min()), int(values.max())
        pc.set_cmap(plt.get_cmap("viridis", hi_l - lo_l + 1))
        pc.set_clim(lo_l - 0.5, hi_l + 0.5)
        ticks = list(range(lo_l, hi_l + 1))
    elif kind.startswith("rank:"):
        P = int(kind[5:])
        pc.set_cmap(plt.get_cmap("tab10" if P <= 10 else "tab20" if P <= 20 else "turbo", P))
        pc.set_clim(-0.5, P - 0.5)
        ticks = list(range(P)) if P <= 20 else None
    else:
        pc.set_cmap("viridis")
    ax.add_collection(pc)
    if len(particles):
        ax.scatter(particles[:, 0], particles[:, 1], s=10, c="red", marker=".", linewidths=0, label="particles", zorder=3)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.set_xlabel(f"{u} [{units}]" if units else u)
    ax.set_ylabel(f"{v} [{units}]" if units else v)
    step, t = m.values.get("step"), m.values.get("time")
    title = f"{Path(path).name}: {m.schema_name} v{m.schema_version}, "
    title += (
        f"slice {'xyz'[axis]} = {plane:g}, {n} of {m.num_leaves} leaves"
        if axis is not None and plane is not None
        else f"{n} leaves"
    )
    title += f", step {step}" if step is not None else ""
    title += f", time {t:g}" if isinstance(t, (int, float)) else ""
    ax.set_title(title, fontsize=9 if axis is not None else None)
    fig.colorbar(pc, ax=ax, label=label, shrink=0.85, ticks=ticks)
    suffix = f"-{'xyz'[axis]}" if axis is not None else ""
    out = args.output or f"{Path(path).stem}-{args.field}{suffix}.png"
    fig.savefig(out, dpi=args.dpi)
    plt.close(fig)
    dots = f", {len(particles)} particles" if len(particles) else ""
    if axis is not None and plane is not None:
        _out(f"wrote {out}: the {n} leaves of {path} cut by {'xyz'[axis]} = {plane:g}, coloured by {label}{dots}")
    else:
        _out(f"wrote {out}: {n} leaves of {path} coloured by {label}{dots}")
    return EXIT_OK


def _per_leaf_values(kind: str) -> bool:
    """Whether fields of ``kind`` hold values on the leaves of a mesh (cells, hp), by which leaves can be coloured."""
    h = handler_for(kind)
    return h.per_leaf and not h.is_mesh
