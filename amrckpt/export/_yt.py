"""A checkpoint as a yt dataset: yt's stream frontend for unstructured meshes, one element per leaf."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._logging import get_logger
from ._arrays import CellArray, HpSummary, _number, leaf_values, mesh_spec, plan_arrays
from ._geometry import _CORNERS, leaf_boxes, leaf_corners, mesh_geometry
from ._reader import HpWindow, open_reader
from ._vtkhdf import DEFAULT_CHUNK_LEAVES

__all__ = ["INSTALL_YT", "to_yt", "yt_units"]

logger = get_logger(__name__)

INSTALL_YT = "to_yt needs yt: pip install yt (or pip install 'amrckpt[viz]')"


def yt_units(units: str | None) -> str:
    """Return a checkpoint's units as unyt spells them (``kg m^-3`` -> ``kg*m**-3``; ``1`` or none: dimensionless).

    Units that unyt does not know become ``dimensionless`` (logged); the
    checkpoint's spelling stays in ``ds.parameters["units"]``.
    """
    if units is None or units.strip() in ("", "1", "-"):
        return "dimensionless"
    text = "*".join(units.split()).replace("^", "**")
    try:
        from unyt import Unit

        Unit(text)
    except Exception:  # noqa: BLE001 - any parse failure of a foreign unit string
        logger.warning("units %r are not known to unyt; the field is dimensionless in yt", units)
        return "dimensionless"
    return text


def to_yt(
    path: str | os.PathLike[str],
    *,
    brick: tuple[int, ...] | None = None,
    hp: HpSummary = "first",
    ranks: int | None = None,
    length_unit: str | None = None,
    mesh: str | None = None,
    chunk_leaves: int = DEFAULT_CHUNK_LEAVES,
    verify: bool = True,
) -> Any:
    """Return a checkpoint as a yt dataset, one mesh element per leaf (2D or 3D, any forest).

    Built with :func:`yt.load_unstructured_mesh` (yt's stream frontend):
    each leaf is a ``Quad4`` (2D) or ``Hex8`` (3D) element placed by the
    forest geometry (:func:`mesh_geometry`: p4est's vertex map of the
    connectivity, or boxes), in curve order (element
    ``i`` is leaf ``i``).  The element fields are those of
    :func:`to_vtkhdf` (:func:`plan_arrays`), under the mesh field type
    ``connect1``: ``("connect1", "q")``, a vector field's components as
    ``NAME_0``, ``NAME_1``, ...; each with the field's units where unyt knows
    them (:func:`yt_units`).  ``ds.current_time`` is the checkpoint's
    ``time`` (in seconds if the field's units are ``s``), and
    ``ds.parameters`` holds its inline values, ``schema_name``,
    ``schema_version``, ``source``, the fields' ``units`` as the checkpoint
    spells them, and ``bounds`` (lower and upper corner of the forest; yt
    pads its domain by 10% around an unstructured mesh).  Slices
    (``yt.SlicePlot(ds, "z", ("connect1", "q"))``) and ``ds.r[:]`` work;
    covering grids do not (yt's unstructured meshes have none).

    The whole mesh is read into memory (yt's stream frontends hold it),
    ``chunk_leaves`` leaves at a time.  Serial.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    brick : tuple of int, optional
        Place trees as a brick of unit trees (see :func:`tree_boxes`).
    hp : {"first", "mean"}, optional
        The per-leaf value of hp fields.
    ranks : int, optional
        Add the field ``rank``: the owner of each leaf under the uniform
        partition on this many ranks.
    length_unit : str, optional
        The length of one unit of the geometry (``"m"``, ``"km"``); default
        the units of the geometry stored in the checkpoint, else yt's
        ``code_length`` of 1 cm.
    mesh : str, optional
        The mesh whose leaves become the elements, for a checkpoint of
        several meshes (the first by default).
    chunk_leaves : int, optional
        Leaves read at a time.
    verify : bool, optional
        Check what is read against the checkpoint's CRC32s.

    Returns
    -------
    yt.frontends.stream.data_structures.StreamUnstructuredMeshDataset

    Raises
    ------
    ImportError
        If yt is not installed.
    CheckpointError
        If the checkpoint holds no mesh or cannot be read.

    Examples
    --------
    >>> ds = to_yt("ckpt-000000000100.scda", brick=(2, 1))  # doctest: +SKIP
    >>> yt.SlicePlot(ds, "z", ("connect1", "q")).save("q.png")  # doctest: +SKIP
    """
    try:
        import yt
    except ImportError as exc:
        raise ImportError(INSTALL_YT) from exc
    with open_reader(path, verify=verify) as r:
        m = r.manifest
        ms = mesh_spec(m, mesh)
        arrays: list[CellArray] = plan_arrays(m, hp=hp, ranks=ranks, mesh=ms.field)
        geometry = mesh_geometry(r, brick, ms.field)
        lower, upper = geometry.tree_lower, geometry.tree_upper
        if length_unit is None and brick is None and ms.geometry is not None and ms.geometry.units:
            length_unit = yt_units(ms.geometry.units)
        dim, N, maxlevel = ms.dim, ms.num_leaves, ms.maxlevel
        hp_reader = HpWindow(r, N)  # yt holds every value anyway: one read per hp field
        nv = 1 << dim
        coords = np.empty((N, nv, dim), dtype=np.float64)
        values = [np.empty((N,) if a.ncomp == 1 else (N, a.ncomp), dtype=a.dtype) for a in arrays]
        for s in range(0, N, max(1, chunk_leaves)):
            e = min(s + chunk_leaves, N)
            leaves = r.read_mesh(s, e - s, ms.field)
            if geometry.boxes_exact:
                lo, hi = leaf_boxes(leaves, lower, upper, maxlevel)
                coords[s:e] = np.where(_CORNERS[dim][None, :, :], hi[:, None, :], lo[:, None, :])
            else:  # p4est's vertex map (a 2D mesh drawn in its x-y plane)
                coords[s:e] = leaf_corners(leaves, geometry, maxlevel).reshape(e - s, nv, 3)[:, :, :dim]
            for v, chunk in zip(values, leaf_values(arrays, hp_reader, leaves, s, N), strict=True):
                v[s:e] = chunk
        r.check_crcs()  # every section read against the index (verify=True)
        path_s = os.fspath(path)
        units = {fs.name: fs.units for fs in m.fields if fs.units}
        time_units = units.get("time")
    elem: dict[tuple[str, str], tuple[np.ndarray, str]] = {}
    for a, v in zip(arrays, values, strict=True):
        u = yt_units(a.units)
        if a.ncomp == 1:
            elem["connect1", a.name] = (v.astype(np.float64), u)
        else:
            for k in range(a.ncomp):
                elem["connect1", f"{a.name}_{k}"] = (v[:, k].astype(np.float64), u)
    sim_time = _number(m.values.get("time"), float) or 0.0
    params: dict[str, Any] = dict(m.values)
    bounds = ([float(v) for v in lower.min(axis=0)], [float(v) for v in upper.max(axis=0)])
    params.update(schema_name=m.schema_name, schema_version=m.schema_version, source=path_s, units=units, bounds=bounds)
    return yt.loaders.load_unstructured_mesh(
        np.arange(N * nv, dtype=np.int64).reshape(N, nv),
        coords.reshape(N * nv, dim),
        elem_data=elem,
        length_unit=length_unit,
        time_unit="s" if time_units == "s" else None,
        sim_time=sim_time,
        parameters=params,
        dataset_name=os.path.basename(path_s),
    )
