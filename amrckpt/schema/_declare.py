"""The declaration of a schema's fields: one function per field kind (:func:`Inline`, :func:`Mesh`, :func:`Cells`...).

Each returns a pydantic ``FieldInfo`` that carries the field's kind
(:mod:`amrckpt.schema._kinds`), checked when the schema is declared.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic_core import PydanticUndefined

from .. import sfc
from ..container import DEFAULT_CHUNK, GeometrySpec
from ..errors import ConnectivityError, SchemaError
from ._kinds import (
    ArrayKind,
    BlockKind,
    CellsKind,
    HpCellsKind,
    InlineKind,
    NDArrayKind,
    _check_mesh,
    _common,
    _dtype_spec,
    _field,
    _shape,
    mesh_kind,
)

__all__ = ["Array", "Block", "Cells", "HpCells", "Inline", "Mesh", "NDArray"]


def Inline(default: Any = PydanticUndefined, *, units: str | None = None, description: str | None = None) -> Any:
    r"""Declare a scalar field stored in an inline section (scda I, paper 2.3).

    The value (a bool, int, float or str that pydantic validates against the
    field's annotation) is written as JSON in 32 bytes, left-aligned, padded
    with spaces and ending in a line feed, so that it reads in a text editor
    (``42`` ... ``\\n``).  At most 31 bytes of JSON: use :func:`Block` for more.

    Parameters
    ----------
    default : optional
        As ``pydantic.Field(default)``.
    units : str, optional
        Physical units, e.g. ``"s"``.
    description : str, optional
        A sentence for humans.

    Returns
    -------
    pydantic.fields.FieldInfo
        To be assigned to a field of a :class:`CheckpointSchema`.
    """
    return _field(InlineKind(**_common(units, description, False, 9)), default)


def Block(
    default: Any = PydanticUndefined,
    *,
    description: str | None = None,
    compress: bool = False,
    level: int = 9,
    default_factory: Any = None,
) -> Any:
    """Declare a global value stored as JSON in a block section (scda B, paper 2.4).

    Any value that pydantic serializes to JSON: a pydantic model, a dict, a
    list.  It is the same on every rank (checked when saving).

    Parameters
    ----------
    default, default_factory : optional
        As ``pydantic.Field``.
    description : str, optional
        A sentence for humans.
    compress : bool, optional
        Write by the compression convention (paper 3.2).
    level : int, optional
        zlib level for ``compress``.

    Returns
    -------
    pydantic.fields.FieldInfo
    """
    kw = {"default_factory": default_factory} if default_factory is not None else {}
    return _field(
        BlockKind(**_common(None, description, compress, level)), default if default_factory is None else PydanticUndefined, **kw
    )


def Mesh(
    dim: int = 2,
    *,
    curve: str = "morton",
    brick: tuple[int, ...] | None = None,
    periodic: bool | tuple[bool, ...] = False,
    lower: Any = None,
    upper: Any = None,
    units: str | None = None,
    geometry: GeometrySpec | sfc.Connectivity | None = None,
    description: str | None = None,
    compress: Compress = False,
    level: int | None = None,
    chunks: int | None = None,
) -> Any:
    """Declare the mesh: the local leaves of a forest, one record per leaf in an array section (scda A).

    The leaves are stored in space-filling-curve order, trees first, so
    that a leaf's index in the section is its position on the curve and any
    contiguous split is a valid partition (p4est's ``global_first_quadrant``).
    Each record is ``tree`` (<i4), ``x``, ``y`` [, ``z``] (<i4) and ``level``
    (i1), packed: 13 bytes in 2D, 17 in 3D.

    Parameters
    ----------
    dim : {2, 3}
        Quadtrees or octrees.
    curve : {"morton", "hilbert"}, optional
        The order of the leaves (:mod:`amrckpt.sfc`).
    brick : tuple of int, optional
        The trees form a brick of ``brick[a]`` trees along axis ``a``: p4est's
        ``p4est_connectivity_new_brick`` (:meth:`amrckpt.sfc.Connectivity.brick`),
        whose trees are numbered along a Morton curve over the brick (tree 2
        of a 4 x 2 brick is at (0, 1)), recorded in the manifest with the
        connectivity, so that viewers place the trees and readers know the
        neighbours.
    periodic : bool or tuple of bool, optional
        The brick's periodicity along each axis (p4est's ``periodic_a``, ...).
    lower, upper : (dim,) array_like of float, optional
        The physical corners of the brick (default: 0 and ``brick``, unit
        trees): the connectivity's vertices are scaled onto them.
    units : str, optional
        Length units of the vertices, e.g. ``"m"``.
    geometry : amrckpt.sfc.Connectivity or amrckpt.container.GeometrySpec, optional
        Any other p4est connectivity (:meth:`~amrckpt.sfc.Connectivity.star`,
        a connectivity read from a p4est file, ...), or a geometry spec (a
        connectivity with an analytic map, such as p8est's shell; or boxes
        per tree), instead of ``brick``.
    description : str, optional
    compress : {False, True, "element"}, optional
        ``True``: the records in shuffled, deflated chunks of ``chunks``
        leaves (layout ``chunks``, as for :func:`Cells`).  ``"element"``:
        every record compressed by itself (the scda paper's convention, 3.3).
    level : int, optional
        zlib level: 1 by default for chunks, 9 for ``"element"``.
    chunks : int, optional
        Leaves per chunk (default ``DEFAULT_CHUNK`` with ``compress=True``).

    Returns
    -------
    pydantic.fields.FieldInfo

    Raises
    ------
    SchemaError
        For a bad dimension, curve or brick, a connectivity of another
        dimension, or one that fails p4est's ``p4est_connectivity_is_valid``.
    """
    _check_mesh(dim, curve)
    try:
        if brick is not None:
            if geometry is not None:
                raise SchemaError("Mesh: give brick= or geometry=, not both")
            b = _shape(brick)
            if len(b) != dim:
                raise SchemaError(f"Mesh: brick {b}: give {dim} positive tree counts per axis")
            conn = sfc.Connectivity.brick(b, periodic)
            per = [bool(periodic)] * dim if isinstance(periodic, (bool, int)) else [bool(p) for p in periodic]
            if lower is not None or upper is not None:
                lo = np.zeros(dim) if lower is None else np.asarray(lower, dtype=np.float64)
                hi = np.asarray(b, dtype=np.float64) if upper is None else np.asarray(upper, dtype=np.float64)
                if lo.shape != (dim,) or hi.shape != (dim,) or not (hi > lo).all():
                    raise SchemaError(f"Mesh: lower= and upper= must be {dim} coordinates with lower < upper")
                conn = conn.scaled(lo, hi, b)
            geometry = GeometrySpec.of_connectivity(conn, units=units, brick=b, periodic=per)
        elif lower is not None or upper is not None:
            raise SchemaError("Mesh: lower= and upper= are the corners of a brick: give brick= too")
        elif isinstance(geometry, sfc.Connectivity):
            if geometry.dim != dim:
                raise SchemaError(f"Mesh: a {geometry.dim}D connectivity for a {dim}D mesh")
            geometry = GeometrySpec.of_connectivity(geometry, units=units)
    except ConnectivityError as exc:
        raise SchemaError(f"Mesh: {exc}") from exc
    given: Any = geometry
    if given is not None and not isinstance(given, GeometrySpec):
        what = type(given).__name__
        raise SchemaError(f"Mesh: geometry must be an amrckpt.sfc.Connectivity or an amrckpt.container.GeometrySpec, not {what}")
    element, chunks, level = _layout(compress, chunks, level)
    return _field(mesh_kind(dim, curve, geometry, description, element, level, chunks), PydanticUndefined)


def Cells(
    dtype: Any,
    *,
    shape: tuple[int, ...] = (),
    units: str | None = None,
    description: str | None = None,
    compress: Compress = False,
    level: int | None = None,
    mesh: str | None = None,
    chunks: int | None = None,
) -> Any:
    """Declare fixed-size data per leaf, stored in an array section (scda A, paper 2.5).

    The value is a numpy array of shape ``(n_local, *shape)`` whose dtype
    equals ``dtype`` (a different byte order is converted when saving;
    nothing else is cast).

    Parameters
    ----------
    dtype : str or numpy.dtype
        E.g. ``"<f8"`` (little-endian float64 in the file, returned as such),
        or ``"f8"`` (the writer's byte order in the file; converted to the
        reader's when loading).
    shape : tuple of int, optional
        Shape of each leaf's value, e.g. ``(2,)`` for a 2D velocity.
    units : str, optional
        Physical units, e.g. ``"kg m^-3"``.
    description : str, optional
    compress : {False, True, "element"}, optional
        ``True``: compress chunks of ``chunks`` consecutive leaves (layout
        ``chunks``: HDF5's byte shuffle, then deflate, encoded and decoded
        in threads): smaller and faster than the per-element convention, as
        HDF5's shuffle+gzip.  ``"element"``: compress every leaf's value by
        itself (the scda paper's convention, 3.3): random access per leaf,
        for large values (kilobytes) read one by one; small values grow (a
        32-byte size entry each).
    level : int, optional
        zlib level: 1 by default for chunks, 9 for ``"element"``.
    mesh : str, optional
        The mesh field whose leaves the values belong to; needed when the schema has more than one mesh.
    chunks : int, optional
        Leaves per chunk (layout ``chunks``; implied by ``compress=True``,
        default ``DEFAULT_CHUNK`` = 16384 leaves).

    Returns
    -------
    pydantic.fields.FieldInfo

    Raises
    ------
    SchemaError
        If ``compress="element"`` and ``chunks`` are both given, ``compress``
        is not one of ``False``, ``True``, ``"element"``, or ``chunks`` is
        not a positive int.
    """
    return _values(CellsKind, "Cells", dtype, shape, units, description, compress, level, chunks, mesh=mesh)


def _values(
    cls: type[CellsKind],
    what: str,
    dtype: Any,
    shape: Any,
    units: Any,
    description: Any,
    compress: Any,
    level: Any,
    chunks: Any,
    *,
    nonempty: bool = False,
    **more: Any,
) -> Any:
    """Return the field of fixed-size values (cells, arrays, hp): dtype, shape, compression and chunks checked.

    Raises
    ------
    SchemaError
        On this rank, if a declared value is not valid; with ``nonempty``, if a value of ``shape`` has no bytes.
    """
    dt, native = _dtype_spec(dtype, what)
    if nonempty and math.prod(_shape(shape)) == 0:
        raise SchemaError(f"{what}: values of shape {_shape(shape)} have no bytes, so the file could not carry their counts")
    element, chunks, level = _layout(compress, chunks, level)
    common = _common(units, description, element, level)
    return _field(cls(**common, dtype=dt, native=native, shape=_shape(shape), chunks=chunks, **more), PydanticUndefined)


Compress = bool | Literal["element"]
"""What ``compress=`` accepts: ``False``, ``True`` (chunks of leaves), ``"element"`` (the scda paper's per-element convention)."""


def _layout(compress: Any, chunks: Any, level: Any) -> tuple[bool, int | None, Any]:
    """Return (per-element convention, leaves per chunk or None, zlib level) of a field's ``compress``, ``chunks``, ``level``.

    ``compress="element"`` asks for the per-element convention, ``True``
    for chunks.  A ``level`` of None is 1 for chunks, else 9.

    Raises
    ------
    SchemaError
        On this rank, if ``compress`` is not False, True or ``"element"``, or ``chunks`` is not a positive int, or is
        given with ``compress="element"``.
    """
    if (isinstance(compress, str) and compress != "element") or not isinstance(compress, (str, bool, np.bool_)):
        raise SchemaError(f'compress must be False, True or "element", not {compress!r}')
    element = isinstance(compress, str)
    if chunks is not None:
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise SchemaError(f"chunks must be a positive int (leaves per chunk), not {chunks!r}")
        if element:
            raise SchemaError('compress="element" (per element) and chunks (per chunk of leaves) exclude each other: choose one')
    elif not element and compress:
        chunks = DEFAULT_CHUNK
    return element, chunks, level if level is not None else 1 if chunks is not None else 9


def HpCells(
    dtype: Any,
    *,
    shape: tuple[int, ...] = (),
    units: str | None = None,
    description: str | None = None,
    compress: Compress = False,
    level: int | None = None,
    mesh: str | None = None,
    chunks: int | None = None,
) -> Any:
    """Declare a variable number of values per leaf: its counts and its values in two arrays (scda A, paper 2.5).

    The value is an :class:`HpData`: e.g. the (p+1)**d modal coefficients of
    a degree-p leaf, whose degree varies from leaf to leaf.  In the file
    (layout ``counts``): an A section of the counts (1, 2, 4 or 8 bytes per
    leaf, the narrowest for the largest count) and an A section of the
    values.  With ``compress=True`` (layout ``chunks``): two V sections,
    the counts and the values of each chunk of ``chunks`` consecutive
    leaves, byte shuffled and deflated (as :func:`Cells`).  With
    ``compress="element"``: one variable-size array (scda V, paper 2.6) of
    per-leaf compressed elements (paper 3.4), for values of kilobytes per
    leaf that a tool reads leaf by leaf.

    Parameters
    ----------
    dtype : str or numpy.dtype
        Type of one value, as for :func:`Cells`.
    shape : tuple of int, optional
        Shape of one value.
    units, description, compress, level, mesh, chunks : optional
        As for :func:`Cells` (paper 3.4 for ``compress="element"``).  A
        chunk holds the values of ``chunks`` leaves, however many they are:
        for many values per leaf, fewer leaves per chunk keep a chunk in
        the cache (16384 leaves of 27 float64 are 3.4 MiB).

    Returns
    -------
    pydantic.fields.FieldInfo

    Raises
    ------
    SchemaError
        As :func:`Cells`, or if a value has no bytes.
    """
    return _values(HpCellsKind, "HpCells", dtype, shape, units, description, compress, level, chunks, nonempty=True, mesh=mesh)


def Array(
    dtype: Any,
    *,
    shape: tuple[int, ...] = (),
    units: str | None = None,
    description: str | None = None,
    compress: Compress = False,
    level: int | None = None,
    chunks: int | None = None,
) -> Any:
    """Declare a distributed array that is not per leaf: N_p elements on rank p, in an array section (scda A).

    The value is a numpy array of shape ``(N_p, *shape)``; ranks may hold
    any number of elements (particles, boundary faces, a global vector).
    The file holds the concatenation in rank order, so its bytes do not
    depend on the number of ranks; :func:`amrckpt.load` gives rank q of Q
    the elements ``floor(N q / Q) .. floor(N (q + 1) / Q)``.

    Parameters
    ----------
    dtype : str or numpy.dtype
        Any fixed-size dtype, structured ones included (``[("id", "<i8"), ("x", "<f8", (3,))]``).
    shape : tuple of int, optional
        Shape of one element.
    units, description, compress, level, chunks : optional
        As for :func:`Cells` (chunks of that many elements).

    Returns
    -------
    pydantic.fields.FieldInfo
    """
    return _values(ArrayKind, "Array", dtype, shape, units, description, compress, level, chunks)


def NDArray(
    dtype: Any,
    *,
    shape: tuple[int, ...] | None = None,
    units: str | None = None,
    description: str | None = None,
    compress: bool = False,
    level: int = 9,
    default_factory: Any = None,
) -> Any:
    """Declare a numpy array that every rank holds in full (replicated), in a block section (scda B).

    A table of coefficients, a 1D profile, a random state: the same on
    every rank (checked with a digest when saving), stored once, with its
    dtype and shape in the manifest.

    Parameters
    ----------
    dtype : str or numpy.dtype
        Any fixed-size dtype, structured ones included.
    shape : tuple of int, optional
        The array's shape; None: any shape (the saved one is recorded).
    units, description, compress, level : optional
        As for :func:`Cells`.
    default_factory : callable, optional
        As for pydantic's Field.

    Returns
    -------
    pydantic.fields.FieldInfo
    """
    dt, native = _dtype_spec(dtype, "NDArray")
    kind = NDArrayKind(
        **_common(units, description, compress, level),
        dtype=dt,
        native=native,
        shape=_shape(shape) if shape is not None else (),
        any_shape=shape is None,
    )
    if default_factory is not None:
        return _field(kind, PydanticUndefined, default_factory=default_factory)
    return _field(kind, PydanticUndefined)
