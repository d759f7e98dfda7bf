"""The base class of checkpoint schemas."""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, create_model

from ..container import Manifest
from ..errors import SchemaError
from ._kinds import KINDS, CellsKind, FieldKind, MeshKind

__all__ = ["CheckpointSchema", "Migration"]

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""A function that upgrades the fields of version k to version k + 1 (a dict of name to value)."""


class CheckpointSchema(BaseModel):
    """Base class of a checkpoint schema: a simulation's state, declared once.

    Subclass it with a ``name`` and a ``version`` and declare one field per
    part of the state with :func:`~amrckpt.Inline`, :func:`~amrckpt.Block`,
    :func:`~amrckpt.Mesh`, :func:`~amrckpt.Cells` or :func:`~amrckpt.HpCells`::

        class Advection(CheckpointSchema, name="advection2d", version=2):
            step: int = Inline()
            time: float = Inline(units="s")
            params: Params = Block()
            mesh: Forest = Mesh(dim=2)
            rho: CellData = Cells("<f8", units="kg m^-3")
            modes: HpData = HpCells("<f8")

    An instance holds what the calling rank owns: its mesh leaves and, for
    every cell field, one value per local leaf (pydantic checks the types;
    :func:`~amrckpt.save` checks dtypes, shapes and lengths on every rank).
    Each field becomes one scda section whose user string is the field's
    name, in declaration order.

    Class keyword arguments
    -----------------------
    name : str
        The schema's name, stored in every checkpoint (at most 40 bytes).
    version : int
        Its version (>= 1); older files are upgraded by the functions
        registered with :meth:`migration`.

    Raises
    ------
    SchemaError
        At class creation: no name or version, a field without a kind, a
        field name longer than 58 bytes, cell fields without a mesh, cell
        fields that do not say which of several meshes they belong to.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    __amrckpt_name__: ClassVar[str]
    __amrckpt_version__: ClassVar[int]
    __amrckpt_fields__: ClassVar[dict[str, FieldKind]]
    __amrckpt_migrations__: ClassVar[dict[int, Migration]]

    def __init_subclass__(cls, *, name: str | None = None, version: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is None or version is None:
            raise SchemaError(
                f"{cls.__name__}: declare the schema as 'class {cls.__name__}(CheckpointSchema, name=..., version=...)'"
            )
        if not isinstance(name, str) or not name or len(name.encode()) > 40:
            raise SchemaError(f"{cls.__name__}: name must be a non-empty str of at most 40 bytes, not {name!r}")
        if not isinstance(version, int) or version < 1:
            raise SchemaError(f"{cls.__name__}: version must be an int >= 1, not {version!r}")
        cls.__amrckpt_name__ = name
        cls.__amrckpt_version__ = version
        cls.__amrckpt_migrations__ = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kinds: dict[str, FieldKind] = {}
        for fname, info in cls.model_fields.items():
            found = [m for m in info.metadata if isinstance(m, FieldKind)]
            if len(found) != 1:
                raise SchemaError(
                    f"{cls.__name__}.{fname}: declare it with exactly one of Inline(), Block(), Mesh(), Cells(), HpCells(), "
                    "Array(), NDArray()"
                )
            if len(fname.encode()) > 58:
                raise SchemaError(f"{cls.__name__}.{fname}: a field name is a section's user string: at most 58 bytes")
            kinds[fname] = found[0]
        meshes = [n for n, k in kinds.items() if isinstance(k, MeshKind)]
        for fname, k in kinds.items():
            if not k.per_leaf or isinstance(k, MeshKind):
                continue
            assert isinstance(k, CellsKind)
            if k.mesh is None:
                if len(meshes) != 1:
                    raise SchemaError(
                        f"{cls.__name__}.{fname}: per-leaf values need a Mesh() field for their leaves"
                        if not meshes
                        else f"{cls.__name__}.{fname}: the schema has meshes {', '.join(meshes)}: "
                        "say whose leaves these are (mesh=...)"
                    )
                kinds[fname] = dataclasses.replace(k, mesh=meshes[0])
            elif k.mesh not in meshes:
                raise SchemaError(
                    f"{cls.__name__}.{fname}: mesh={k.mesh!r} is not a Mesh() field of the schema ({', '.join(meshes) or 'none'})"
                )
        cls.__amrckpt_fields__ = kinds

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> type[CheckpointSchema]:
        """Return a schema class that reads every field of a checkpoint, built from its manifest at run time.

        Not collective.  The class has the file's schema name and version
        and one field per field of the file, in order, of the kind, dtype
        (with its byte order, or native where the file says so), per-leaf
        shape, units, compression and layout the manifest records: inline
        and block values as JSON values (``Any``), meshes as :class:`Forest`
        with the stored geometry, cells and distributed arrays as numpy
        arrays, hp fields as :class:`HpData`, replicated arrays with the
        recorded shape.  ``amrckpt.load(path)`` without a schema uses it;
        saving an instance writes the same manifest again.

        Parameters
        ----------
        manifest : amrckpt.container.Manifest
            E.g. ``amrckpt.read_info(path).manifest``.

        Returns
        -------
        type of CheckpointSchema

        Raises
        ------
        SchemaError
            If a field's dtype cannot be rebuilt, its name is not a Python identifier (or is a keyword, or starts
            with ``_``), or its kind is unknown to this release.
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
        version = manifest.schema_version
        model: type[CheckpointSchema] = create_model(
            f"{ident[:1].upper()}{ident[1:]}_v{version}" if ident else f"Schema_v{version}",
            __base__=cls,
            __cls_kwargs__={"name": manifest.schema_name, "version": version},
            __module__=__name__,
            **fields,
        )
        return model

    @classmethod
    def migration(cls, from_version: int) -> Callable[[Migration], Migration]:
        """Register the function that upgrades fields of ``from_version`` to ``from_version + 1``.

        Loading a file of version v into a schema of version V > v runs the
        migrations v -> v+1, ..., V-1 -> V in order, on each rank's local
        fields (a dict of field name to value, as read from the file: JSON
        values for inline and block fields, numpy arrays for cell fields,
        :class:`Forest` and :class:`HpData`), before validation::

            @Advection.migration(from_version=1)
            def add_viscosity(fields):
                fields["nu"] = 0.0                        # a field added with a default
                fields["rho"] = fields.pop("density")     # a field renamed
                return fields

        Parameters
        ----------
        from_version : int
            The version the function upgrades from.

        Returns
        -------
        callable
            A decorator that registers the function and returns it unchanged.

        Raises
        ------
        SchemaError
            If ``from_version`` is not below the schema's version, or is
            registered twice.
        """
        if isinstance(from_version, bool) or not isinstance(from_version, int):
            raise SchemaError(f"{cls.__name__}: from_version must be an int, not {type(from_version).__name__}")
        if not 1 <= from_version < cls.__amrckpt_version__:
            raise SchemaError(
                f"{cls.__name__}: a migration from version {from_version} cannot lead to version {cls.__amrckpt_version__}"
            )

        def register(fn: Migration) -> Migration:
            if from_version in cls.__amrckpt_migrations__:
                raise SchemaError(f"{cls.__name__}: a migration from version {from_version} is registered twice")
            cls.__amrckpt_migrations__[from_version] = fn
            return fn

        return register

    @classmethod
    def check_migrations(cls, from_version: int) -> None:
        """Raise unless a file of ``from_version`` can be upgraded to this schema's version.

        Not collective; runs no migration.

        Raises
        ------
        SchemaError
            If the file is newer than the schema, or a migration is missing
            (naming both versions).
        """
        target = cls.__amrckpt_version__
        if from_version > target:
            raise SchemaError(
                f"the checkpoint has version {from_version} of schema {cls.__amrckpt_name__!r}; {cls.__name__} is version "
                f"{target}: update the program that reads it"
            )
        for v in range(from_version, target):
            if v not in cls.__amrckpt_migrations__:
                raise SchemaError(
                    f"the checkpoint has version {from_version} of schema {cls.__amrckpt_name__!r}; {cls.__name__} is "
                    f"version {target}, and no migration from version {v} to {v + 1} is registered "
                    f"(@{cls.__name__}.migration(from_version={v}))"
                )

    @classmethod
    def migrate(cls, fields: dict[str, Any], from_version: int) -> dict[str, Any]:
        """Run the registered migrations from ``from_version`` up to this schema's version.

        Not collective (each rank migrates its local fields).

        Raises
        ------
        SchemaError
            As :meth:`check_migrations`, if a migration raises (naming it and
            the versions), or if it does not return a dict.
        """
        cls.check_migrations(from_version)
        for v in range(from_version, cls.__amrckpt_version__):
            fn = cls.__amrckpt_migrations__[v]
            try:
                fields = fn(dict(fields))
            except Exception as exc:  # a user function: any exception, reported as ours
                raise SchemaError(
                    f"the migration of {cls.__name__} from version {v} to {v + 1} ({getattr(fn, '__name__', fn)}) failed: {exc!r}"
                ) from exc
            if not isinstance(fields, dict):
                raise SchemaError(f"the migration from version {v} of {cls.__name__} returned {type(fields).__name__}, not a dict")
        return fields
