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
    read_info,
)
from ..errors import AmrckptError
from ._common import _INSTALL_MATPLOTLIB, EXIT_BAD, EXIT_OK, _dtype_text, _err, _out, _UsageError


def _parse_brick_nd(text: str | None, dim: int) -> tuple[int, ...] | None:
    """``--brick NX,NY[,NZ]`` as a tuple, or None without it (the geometry stored in the file places the trees)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[x,]\s*(\d+)\s*(?:[x,]\s*(\d+)\s*)?", text)
    if not m or (m.group(3) is not None) != (dim == 3) or any(int(g) < 1 for g in m.groups() if g is not None):
        raise _UsageError(
            f"--brick {text!r}: give NX,NY" + (",NZ" if dim == 3 else "") + " (trees along each axis), e.g. --brick 2,1"
        )
    return tuple(int(g) for g in m.groups() if g is not None)


def _parse_slice(text: str | None) -> tuple[int, float | None]:
    """``--slice AXIS[=VALUE]`` as (axis index, value or None for the middle of the domain)."""
    m = re.fullmatch(r"\s*([xyz])\s*(?:=\s*(\S+)\s*)?", text or "z")
    try:
        if m is None:
            raise ValueError
        return "xyz".index(m.group(1)), None if m.group(2) is None else float(m.group(2))
    except ValueError:
        raise _UsageError(f"--slice {text!r}: give x, y or z, and optionally =VALUE (e.g. --slice z=0.5)") from None


def _plot_leaves(
    path: str, ck: CheckpointInfo, what: str, ranks: int | None, brick: tuple[int, ...] | None, axis: int | None, at: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float | None, str, str]:
    """Return the leaves to draw: 2D boxes (lo, hi), a value each, the plane (3D), a label and the kind of colouring.

    Streams the leaves in chunks through :mod:`amrckpt.export` (the same
    geometry and per-leaf values as ``amrckpt export``), CRC32s checked.  A
    2D mesh is drawn whole; of a 3D mesh, the leaves cut by the plane
    ``axis = at`` (default: through the middle of the domain).
    """
    from ..export import DEFAULT_CHUNK_LEAVES, leaf_boxes, leaf_values, plan_arrays, tree_boxes

    m = ck.manifest
    assert m.mesh is not None
    cells = [fs.name for fs in m.fields if fs.kind in ("cells", "hp")]
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
        if fs.kind not in ("cells", "hp"):
            choices = ", ".join(cells) or "none"
            raise _UsageError(f"field {what!r} is a {fs.kind} field; leaves are coloured by a cell field: {choices}")
        name = f"{what}.count" if fs.kind == "hp" else what
        found = [a for a in arrays if a.name == name or (fs.kind == "cells" and a.field == what)]
        if not found:
            raise _UsageError(f"field {what!r} has dtype {_dtype_text(fs.dtype)}, which has no colour")
        arr, kind = found[0], "field"
        dt = dtype_from_json(fs.dtype, what)
        many = arr.ncomp > 1 or len(found) > 1
        label = f"{what}: values per leaf" if fs.kind == "hp" else ("|" + what + "|" if dt.kind == "c" else what)
        label += " (first component)" if fs.kind != "hp" and many else ""
        label += f" [{fs.units}]" if fs.units and fs.kind != "hp" else ""
    keep_lo, keep_hi, keep_v = [], [], []
    with CheckpointReader(path, comm=SerialComm(), verify=True) as r:
        lower, upper = tree_boxes(r, brick)
        plane = None
        if axis is not None:
            plane = float(at) if at is not None else 0.5 * (float(lower[:, axis].min()) + float(upper[:, axis].max()))
        N = m.num_leaves
        for s in range(0, N, DEFAULT_CHUNK_LEAVES):
            mesh = r.read_mesh(s, min(DEFAULT_CHUNK_LEAVES, N - s))
            lo, hi = leaf_boxes(mesh, lower, upper, m.mesh.maxlevel)
            v = leaf_values([arr], r, mesh, s, N)[0]  # the chunk's values (rank: global indices)
            v = v.reshape(len(v), -1)[:, 0]
            if axis is not None and plane is not None:
                cut = (lo[:, axis] <= plane) & (plane < hi[:, axis])
                lo, hi, v = np.delete(lo[cut], axis, axis=1), np.delete(hi[cut], axis, axis=1), v[cut]
            keep_lo.append(lo)
            keep_hi.append(hi)
            keep_v.append(np.abs(v) if np.iscomplexobj(v) else v.astype(np.float64))
        r.check_crcs()
    n = sum(len(v) for v in keep_v)
    if axis is not None and not n:
        raise _UsageError(f"the plane {'xyz'[axis]} = {plane:g} cuts no leaf of {path}")

    def cat(xs: list[np.ndarray], k: int) -> np.ndarray:
        return np.concatenate(xs) if xs else np.zeros((0, k))

    return cat(keep_lo, 2), cat(keep_hi, 2), cat(keep_v, 1).reshape(-1), plane, label, kind


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
        lo, hi, values, plane, label, kind = _plot_leaves(path, ck, args.field, args.ranks, brick, axis, at)
    except ValueError as exc:
        if isinstance(exc, AmrckptError):  # a damaged file (ChecksumError is a ValueError too): not a usage error
            raise
        raise _UsageError(str(exc)) from exc
    units = ck.manifest.mesh.geometry.units if ck.manifest.mesh.geometry is not None else None  # type: ignore[union-attr]
    u, v = [a for a in "xyz"[:dim] if axis is None or a != "xyz"[axis]]
    verts = np.stack([lo, np.stack([hi[:, 0], lo[:, 1]], 1), hi, np.stack([lo[:, 0], hi[:, 1]], 1)], 1)
    n = len(values)
    x0, y0 = lo.min(axis=0) if n else (0.0, 0.0)
    x1, y1 = hi.max(axis=0) if n else (1.0, 1.0)
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
    if axis is not None and plane is not None:
        _out(f"wrote {out}: the {n} leaves of {path} cut by {'xyz'[axis]} = {plane:g}, coloured by {label}")
    else:
        _out(f"wrote {out}: {n} leaves of {path} coloured by {label}")
    return EXIT_OK


# -- export ---------------------------------------------------------------------
