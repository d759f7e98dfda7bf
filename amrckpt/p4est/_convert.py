"""Checkpoints to and from p4est's save files (``amrckpt convert --from p4est``, ``--to p4est``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..comm import Call, as_comm, collective
from ..container import Geometry, handler_for, write_run_record
from ..errors import CheckpointError, SchemaError
from ..partition import Partition
from ..restart import Loaded, load
from ..scda import FileAccess
from ..schema import Block, CellData, Cells, CheckpointSchema, Forest, Mesh, SaveResult, save
from ..sfc import Connectivity
from ._savefile import DEFAULT_PACKAGE_VERSION, read_p4est, write_p4est

__all__ = ["DATA_FIELD", "P4estSource", "checkpoint_to_p4est", "p4est_schema", "p4est_to_checkpoint"]

DATA_FIELD = "data"
"""The Cells field that holds p4est's quadrant data: ``data_size`` raw bytes per leaf (``u1``, shape ``(data_size,)``)."""


class P4estSource(BaseModel):
    """What a checkpoint converted from a p4est file keeps of it besides the forest (its ``p4est`` block)."""

    model_config = ConfigDict(extra="forbid")

    package_version: str = Field(description="P4EST_PACKAGE_VERSION in the file's connectivity header, e.g. '2.2'")


def p4est_schema(connectivity: Connectivity, data_size: int) -> type[CheckpointSchema]:
    """Return the schema of a checkpoint of a p4est forest: schema ``p4est`` (2D) or ``p8est`` (3D), version 1.

    Fields: ``p4est`` (a :class:`P4estSource` block), ``mesh`` (the
    leaves, with the connectivity as geometry) and, with ``data_size > 0``,
    ``data`` (``Cells("u1", shape=(data_size,))``, the quadrant data as
    raw bytes).  Not collective.
    """
    fields: dict[str, Any] = {
        "p4est": (P4estSource, Block()),
        "mesh": (Forest, Mesh(connectivity.dim, geometry=connectivity, description="p4est's quadrants")),
    }
    if data_size:
        fields[DATA_FIELD] = (CellData, Cells("u1", shape=(data_size,), description="p4est's quadrant data (raw bytes)"))
    name = "p4est" if connectivity.dim == 2 else "p8est"
    model: type[CheckpointSchema] = create_model(
        f"{name.capitalize()}Forest",
        __base__=CheckpointSchema,
        __cls_kwargs__={"name": name, "version": 1},
        __module__=__name__,
        **fields,
    )
    return model


def _per_leaf_of(fs: Any, mesh: str) -> bool:
    """Whether field ``fs`` holds values per leaf of ``mesh`` (a Cells field of it): one that can be p4est's quadrant data."""
    h = handler_for(fs.kind)
    return bool(h.per_leaf and h.reads_as == "values" and (fs.mesh or mesh) == mesh)


def p4est_to_checkpoint(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    comm: Any = None,
    partition: Literal["uniform", "saved"] | Partition = "uniform",
    check: bool = True,
    access: FileAccess | None = None,
) -> SaveResult:
    """Convert a p4est save file (``p4est_save_ext``) into a checkpoint. Collective.

    Every rank reads its own quadrants (:func:`read_p4est`) and saves them
    (:func:`amrckpt.save`): the connectivity becomes the mesh's geometry
    (format 3), the quadrant data the Cells field ``data``, the package
    version the ``p4est`` block.  A partition saved in the p4est file is
    written to the run record beside the checkpoint
    (``<out>.run.json``), where ``amrckpt.load(partition="writer")`` finds it.

    Parameters
    ----------
    source : path
        The p4est file.
    out : path
        The checkpoint to write.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
    partition : {"uniform", "saved"} or Partition, optional
        How the ranks share the quadrants while converting (the checkpoint
        does not depend on it).
    check : bool, optional
        Check the connectivity and the quadrants while reading.
    access : amrckpt.FileAccess, optional
        How both files are opened (MPI-IO hints, backend; the checkpoint's
        line breaks, sync).

    Returns
    -------
    amrckpt.schema.SaveResult

    Raises
    ------
    P4estFormatError
        On every rank, for a damaged or foreign file.
    """
    with collective(comm, "p4est_to_checkpoint") as call:
        return _to_checkpoint(call, source, out, partition, check, FileAccess.of(access))


def _to_checkpoint(call: Call, source: Any, out: Any, partition: Any, check: bool, access: FileAccess) -> SaveResult:
    """Convert: the body of :func:`p4est_to_checkpoint`, inside its collective call."""
    c = call.comm
    pf = read_p4est(source, comm=c, partition=partition, data=True, check=check, access=access)
    h = pf.header
    schema = p4est_schema(h.connectivity, h.data_size)
    values: dict[str, Any] = {"p4est": P4estSource(package_version=h.package_version), "mesh": pf.forest}
    if h.data_size:
        values[DATA_FIELD] = pf.data
    result = save(schema(**values), out, comm=c, access=access, check_mesh=check)
    saved = h.saved_partition
    if saved is not None and result.run is not None:
        run = result.run.model_copy(
            update={"writer_size": saved.size, "global_first_quadrant": saved.global_first_quadrant.tolist()}
        )
        call.on_root(lambda: write_run_record(result.path, run), what="run record")
        result = dataclasses.replace(result, run=run, partition=saved)
    return result


def checkpoint_to_p4est(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    comm: Any = None,
    partition: Literal["uniform", "writer"] | Partition = "uniform",
    save_partition: bool = False,
    data_field: str | None = DATA_FIELD,
    package_version: str | None = None,
    verify: bool = True,
    access: FileAccess | None = None,
) -> int:
    """Write a checkpoint's (first) mesh as a p4est save file (``p4est_save_ext``). Collective.

    The checkpoint is read without a schema (:func:`amrckpt.load`, CRC32s
    checked), each rank its share of the leaves, and written as
    :func:`write_p4est` writes.  The connectivity is the mesh's geometry;
    a mesh without a geometry is a row of unit trees, p4est's
    ``p4est_connectivity_new_brick(num_trees, 1, 0, 0)``.

    Parameters
    ----------
    source : path
        The checkpoint.
    out : path
        The p4est file to write.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
    partition : {"uniform", "writer"} or Partition, optional
        The ranks' shares (as for :func:`amrckpt.load`); ``"writer"`` with
        ``save_partition`` restores a partition that a p4est file saved.
    save_partition : bool, optional
        Save the partition in the file (``p4est_save_ext``'s ``save_partition``).
    data_field : str or None, optional
        The field of values per leaf of the mesh (``Cells``) written as
        quadrant data, its bytes per leaf (``data_size`` = its itemsize
        times its shape's product); default ``"data"``, the field of a
        checkpoint converted from p4est.  None: no data (``save_data`` 0).
    package_version : str, optional
        Recorded in the connectivity header; default the one the
        checkpoint kept from a p4est file, else p4est's "2.2".
    verify, access : optional
        As for :func:`amrckpt.load` (``access`` opens the p4est file too).

    Returns
    -------
    int
        The size of the p4est file in bytes.

    Raises
    ------
    CheckpointError
        On every rank: no mesh, a geometry that is not a p4est connectivity.
    SchemaError
        On every rank: ``data_field`` names a field that is not per leaf
        or that the checkpoint does not hold (when it holds fields that
        could serve, the message names them: without data, p4est loads the
        file only with ``data_size`` 0, "invalid data size" otherwise);
        leaves that are not a complete forest in Morton order.
    """
    c = as_comm(comm)
    loaded: Loaded[Any] = load(source, comm=c, partition=partition, verify=verify, access=access)
    m = loaded.info.manifest
    if not m.meshes:
        raise CheckpointError(f"{os.fspath(source)!r} holds no mesh: nothing to write as a p4est forest")
    ms = m.meshes[0]
    geo = Geometry.of(ms)
    conn = geo.connectivity
    if conn is None:
        if ms.geometry is not None:
            raise CheckpointError(
                f"{os.fspath(source)!r}: the trees of mesh {ms.field!r} are placed by boxes (format {m.format_version}), not by a "
                "p4est connectivity: save it again with Mesh(brick=...) or Mesh(geometry=Connectivity)"
            )
        conn = Connectivity.brick((ms.num_trees, 1) if ms.dim == 2 else (ms.num_trees, 1, 1))
    state = loaded.state
    forest = getattr(state, ms.field)
    data = None
    names = {fs.name: fs for fs in m.fields}
    if data_field is not None:
        fs = names.get(data_field)
        if fs is None:
            usable = [f.name for f in m.fields if _per_leaf_of(f, ms.field)]
            if usable or data_field != DATA_FIELD:
                raise SchemaError(
                    f"{os.fspath(source)!r} has no field {data_field!r} to write as p4est's quadrant data; "
                    + (
                        f"fields of values per leaf of mesh {ms.field!r} that could: {', '.join(map(repr, usable))}"
                        if usable
                        else "it has no field of values per leaf"
                    )
                    + " (amrckpt convert --to p4est --data FIELD; --no-data for a file without data)"
                )
        elif not _per_leaf_of(fs, ms.field):
            raise SchemaError(f"field {data_field!r} is a {fs.kind} field, not per leaf of mesh {ms.field!r}: no quadrant data")
        else:
            data = getattr(state, data_field)
    if package_version is None:
        block = getattr(state, "p4est", None)
        given = block.get("package_version") if isinstance(block, dict) else None
        package_version = given if isinstance(given, str) else DEFAULT_PACKAGE_VERSION
    return write_p4est(
        out,
        forest,
        conn,
        data,
        comm=c,
        save_partition=save_partition,
        package_version=package_version,
        access=access,
    )
