"""A schema class built from a checkpoint's manifest at run time (:meth:`CheckpointSchema.from_manifest`)."""

from __future__ import annotations

import keyword
from typing import Any

from pydantic import create_model

from ..container import Manifest
from ..errors import SchemaError
from ._kinds import KINDS

__all__ = ["schema_from_manifest"]


def schema_from_manifest(base: type[Any], manifest: Manifest) -> type[Any]:
    """Implement :meth:`CheckpointSchema.from_manifest`.

    Raises
    ------
    SchemaError
        On this rank, if a field's name is not a Python identifier (or is a keyword, or starts with ``_``), or its
        kind is unknown to this release.
    """
    fields: dict[str, Any] = {}
    for fs in manifest.fields:
        if not fs.name.isidentifier() or keyword.iskeyword(fs.name) or fs.name.startswith("_"):
            raise SchemaError(
                f"field {fs.name!r} of schema {manifest.schema_name!r} is not a Python identifier: no schema class has it"
            )
        try:
            kind = KINDS[fs.kind]
        except KeyError:
            raise SchemaError(f"field {fs.name!r} is of kind {fs.kind!r}, unknown to this release") from None
        fields[fs.name] = kind.from_spec(fs, manifest)  # (annotation, FieldInfo), as the manifest entry describes it
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
