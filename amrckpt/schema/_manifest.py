"""A schema class built from a checkpoint's manifest at run time (:meth:`CheckpointSchema.from_manifest`)."""

from __future__ import annotations

import keyword
from typing import Any

import numpy as np
from pydantic import create_model

from ..container import FieldSpec, Manifest, dtype_from_json
from ..errors import CheckpointError, SchemaError
from ._kinds import (
    ArrayKind,
    BlockKind,
    CellsKind,
    FieldKind,
    Forest,
    HpCellsKind,
    HpData,
    InlineKind,
    Mesh,
    NDArrayKind,
    _field,
)

__all__ = ["schema_from_manifest"]


def _kind_of(fs: FieldSpec, manifest: Manifest) -> tuple[Any, Any]:
    """Return ``(annotation, FieldInfo)`` of one field as its manifest entry describes it."""
    common: dict[str, Any] = {"units": fs.units, "description": fs.description, "compress": fs.compressed}
    if fs.kind == "inline":
        return Any, _field(InlineKind(units=fs.units, description=fs.description), ...)
    if fs.kind == "block":
        return Any, _field(BlockKind(description=fs.description, compress=fs.compressed), ...)
    if fs.kind == "mesh":
        ms = next((m for m in manifest.meshes if m.field == fs.name), None)
        if ms is None:
            raise SchemaError(f"the manifest has no mesh entry for field {fs.name!r}")
        return Forest, Mesh(ms.dim, curve=ms.curve, geometry=ms.geometry, description=fs.description, compress=fs.compressed)
    try:
        dt = dtype_from_json(fs.dtype, f"field {fs.name!r}")
    except CheckpointError as exc:
        raise SchemaError(str(exc)) from exc
    native = fs.native_byteorder
    if native:
        dt = dt.newbyteorder("=")
    shape = tuple(fs.shape)
    chunks = fs.chunk if fs.layout == "chunks" else None
    level = 1 if chunks is not None else 9
    common |= {"level": level}
    kind: FieldKind
    if fs.kind == "cells":
        kind = CellsKind(**common, dtype=dt, native=native, shape=shape, mesh=fs.mesh, chunks=chunks)
        return np.ndarray, _field(kind, ...)
    if fs.kind == "hp":
        kind = HpCellsKind(**common, dtype=dt, native=native, shape=shape, mesh=fs.mesh)
        return HpData, _field(kind, ...)
    if fs.kind == "array":
        kind = ArrayKind(**common, dtype=dt, native=native, shape=shape, chunks=chunks)
        return np.ndarray, _field(kind, ...)
    kind = NDArrayKind(**common, dtype=dt, native=native, shape=shape, any_shape=False)
    return np.ndarray, _field(kind, ...)


def schema_from_manifest(base: type[Any], manifest: Manifest) -> type[Any]:
    """Implement :meth:`CheckpointSchema.from_manifest`."""
    fields: dict[str, Any] = {}
    for fs in manifest.fields:
        if not fs.name.isidentifier() or keyword.iskeyword(fs.name) or fs.name.startswith("_"):
            raise SchemaError(
                f"field {fs.name!r} of schema {manifest.schema_name!r} is not a Python identifier: no schema class has it"
            )
        fields[fs.name] = _kind_of(fs, manifest)
    ident = "".join(ch if ch.isalnum() else "_" for ch in manifest.schema_name)
    cls_name = f"{ident[:1].upper()}{ident[1:]}_v{manifest.schema_version}" if ident else f"Schema_v{manifest.schema_version}"
    model: type[Any] = create_model(
        cls_name,
        __base__=base,
        __cls_kwargs__={"name": manifest.schema_name, "version": manifest.schema_version},
        __module__=__name__,
        **fields,
    )
    return model
