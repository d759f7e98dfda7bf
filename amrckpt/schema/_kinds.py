"""Field kinds of a checkpoint schema and the values they hold.

Each field of a :class:`~amrckpt.schema.CheckpointSchema` is declared with one
of :func:`Inline`, :func:`Block`, :func:`Mesh`, :func:`Cells`, :func:`HpCells`,
:func:`Array`, :func:`NDArray`.  A kind owns the field's Python type and the
validation of the user's value; how it lies on disk (sections, layout) is
its container handler's (:func:`amrckpt.container.handler_for`).  The values
are those of the calling rank: the mesh leaves it owns, and one cell value
per local leaf.
"""

from __future__ import annotations

import abc
import json
import math
import operator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from pydantic import Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from .. import scda, sfc
from ..comm import digest_of
from ..container import FieldSpec, GeometrySpec, HpData, Manifest, MeshSpec, Payload, dtype_from_json, dtype_to_json
from ..errors import CheckpointError, ConnectivityError, SchemaError
from ..sfc import Forest
from ._json import adapter, encode_inline, json_bytes, json_value

__all__ = [
    "BlockKind",
    "CellData",
    "CellsKind",
    "FieldKind",
    "Forest",
    "KINDS",
    "HpCellsKind",
    "HpData",
    "InlineKind",
    "MeshKind",
    "NDArrayKind",
    "Prepared",
    "ArrayKind",
]

CellData = np.ndarray
"""The type of a :func:`Cells` field: a numpy array of shape (n_local, \\*shape)."""


def _dtype_spec(spec: Any, what: str) -> tuple[np.dtype[Any], bool]:
    """Return ``(dtype, native)``: native unless the spec names '<' or '>' byte order.

    A string names it by its first character (``"<f8"``); a dtype object by
    its byte order, which numpy reports as native (``'='``) for the machine's
    own: ``np.dtype("<f8")`` is native on a little-endian machine, so pin a
    byte order with a string.

    Raises
    ------
    SchemaError
        On this rank, if ``spec`` is not a numpy dtype, or one with no fixed-size binary form.
    """
    try:
        dt = np.dtype(spec)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{what}: {spec!r} is not a numpy dtype: {exc}") from exc
    if dt.hasobject or dt.itemsize == 0:
        raise SchemaError(f"{what}: dtype {dt} has no fixed-size binary form")
    if isinstance(spec, str):
        native = spec[:1] not in ("<", ">")
    else:
        native = dt.byteorder in ("=", "|") and all(dt[n].byteorder in ("=", "|") for n in (dt.names or ()))
    return dt, native


@dataclass
class Prepared:
    """One field of this rank's state, checked and ready to be written (what :meth:`FieldKind.prepare` returns).

    Attributes
    ----------
    name : str
    kind : FieldKind
    payload : amrckpt.container.Payload
        The checked data, for the field's container handler.
    value : object
        The JSON value of an inline field (recorded in the manifest).
    digest : int
        A digest of a global value (inline, block, ndarray), to check that ranks agree.
    count : int
        Local elements: leaves of a mesh, values of cells, elements of an array.
    shape : tuple of int
        The whole shape of an ndarray field.
    """

    name: str
    kind: FieldKind
    payload: Payload
    value: Any = None
    digest: int = 0
    count: int = 0
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class FieldKind(abc.ABC):
    """A field of a schema: its Python type and the validation of the user's value (base class).

    Each kind checks and prepares its value for writing (:meth:`prepare`),
    declares what the user asked for (:meth:`declaration`: units, dtype,
    compression...) and turns what the container read back into its value
    (:meth:`from_file`).  Everything about the file (sections, layout, the
    manifest entry) is the container's handler of :attr:`kind`
    (:func:`amrckpt.container.handler_for`); :func:`amrckpt.save` and
    :func:`amrckpt.load` are loops over fields and their handlers.

    Attributes
    ----------
    units : str or None
        Physical units, e.g. ``"kg m^-3"`` (recorded in the manifest).
    description : str or None
        A sentence for humans (recorded in the manifest).
    compress : bool
        Write by the compression convention (scda paper, section 3).
    level : int
        zlib level for ``compress``.
    distributed : bool
        Class attribute: each rank holds and writes its own part of the
        field (mesh, cells, hp, arrays); False for values that are the same
        on every rank and written once (inline, block, ndarray).
    """

    kind: ClassVar[str] = ""
    per_leaf: ClassVar[bool] = False
    distributed: ClassVar[bool] = False
    units: str | None = None
    description: str | None = None
    compress: bool = False
    level: int = 9

    def check_value(self, name: str, value: Any, n: int | None, *, check_values: bool = True) -> None:
        """Check one field's local value against the kind and the local leaf count ``n`` (not collective).

        Raises
        ------
        SchemaError
            Naming the field.
        """
        return  # inline and block values: pydantic typed them; array kinds override this

    @abc.abstractmethod
    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None) -> Prepared:
        """Check this rank's value and prepare it for writing (not collective).

        Parameters
        ----------
        cls : type of CheckpointSchema
            The schema (for the field's pydantic type).
        name : str
            The field.
        value : object
            This rank's value.
        n : int or None
            The local leaf count of the field's mesh (per-leaf kinds).

        Raises
        ------
        SchemaError
            Naming the field.
        """

    def declaration(self, p: Prepared, mesh: str | None) -> dict[str, Any]:
        """Return what the user declared of the field, for its handler's manifest entry.

        :meth:`amrckpt.container.FieldHandler.describe` turns it into the
        field's :class:`~amrckpt.container.FieldSpec`.
        """
        return {"name": p.name, "units": self.units, "description": self.description, "compress": self.compress}

    def mesh_name(self, name: str) -> str | None:
        """Return the mesh field whose leaves field ``name``'s values belong to (a mesh: itself), or None."""
        return getattr(self, "mesh", None)

    def from_read(self, cls: type[Any], name: str, value: Any, n: int | None, *, check: bool, path: str) -> Any:
        """Validate a value read (and migrated) for field ``name`` of schema ``cls``, ``n`` local leaves (not collective).

        Arrays are converted to the byte order the schema asks for; with
        ``check``, a mesh's leaves are checked as when saving (else its
        CRC32 proved them to be what their writer checked).

        Raises
        ------
        SchemaError
            Naming the field.
        """
        to_native = getattr(self, "to_native", None)
        if to_native is not None and isinstance(value, HpData):
            native = to_native(value.values)
            if native is not value.values:  # the counts are as the container checked them
                value = HpData._checked(native, value.counts)
        elif to_native is not None:
            value = to_native(value)
        self.check_value(name, value, n, check_values=check)
        return value

    def from_file(self, raw: Any, fs: FieldSpec, ms: MeshSpec | None, check: bool) -> Any:
        """Turn what the container's handler read into this kind's value (not collective)."""
        return raw

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        """Return ``(annotation, FieldInfo)`` of a field as its manifest entry describes it (for ``from_manifest``)."""
        raise NotImplementedError

    @classmethod
    def _arrays(cls, fs: FieldSpec) -> dict[str, Any]:
        """Return the keyword arguments of an array kind as the manifest entry gives them.

        Raises
        ------
        SchemaError
            On this rank, if the entry's dtype is not a numpy dtype of a fixed-size binary form.
        """
        try:
            dt = dtype_from_json(fs.dtype, f"field {fs.name!r}")
        except CheckpointError as exc:
            raise SchemaError(str(exc)) from exc
        if fs.native_byteorder:
            dt = dt.newbyteorder("=")
        chunks = fs.chunk if fs.layout == "chunks" else None
        return {
            "units": fs.units,
            "description": fs.description,
            "compress": fs.compressed,
            "level": 1 if chunks is not None else 9,
            "dtype": dt,
            "native": fs.native_byteorder,
            "shape": tuple(fs.shape),
        } | ({"chunks": chunks} if chunks is not None else {})


@dataclass(frozen=True)
class InlineKind(FieldKind):
    """A scalar (int, float, bool, short str) in an inline section I: 32 ASCII bytes of JSON."""

    kind: ClassVar[str] = "inline"

    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None) -> Prepared:
        jv, d = json_value(cls, name, value)
        return Prepared(name, self, Payload(encode_inline(jv, name)), value=jv, digest=d)

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        return Any, _field(cls(units=fs.units, description=fs.description), ...)

    def from_read(self, cls: type[Any], name: str, value: Any, n: int | None, *, check: bool, path: str) -> Any:
        return _from_json(cls, name, value, path)


@dataclass(frozen=True)
class BlockKind(FieldKind):
    """Any JSON-serializable value (a pydantic model, a dict) in a block section B."""

    kind: ClassVar[str] = "block"

    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None) -> Prepared:
        jv, d = json_value(cls, name, value)
        return Prepared(name, self, Payload(json_bytes(jv, name) + b"\n", level=self.level), digest=d)

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        return Any, _field(cls(description=fs.description, compress=fs.compressed), ...)

    def from_read(self, cls: type[Any], name: str, value: Any, n: int | None, *, check: bool, path: str) -> Any:
        return _from_json(cls, name, value, path)


@dataclass(frozen=True)
class MeshKind(FieldKind):
    """The leaves of a forest of quadtrees or octrees in an array section A.

    Attributes
    ----------
    dim : {2, 3}
        Quadtrees or octrees.
    curve : {"morton", "hilbert"}
        The space-filling curve the leaves follow (p4est: Morton).
    geometry : amrckpt.container.GeometrySpec or None
        Where the trees are in physical space (recorded in the manifest).
    chunks : int or None
        Layout ``chunks``: the records compressed in chunks of this many
        consecutive leaves (byte shuffle, then deflate at ``level``).
    """

    kind: ClassVar[str] = "mesh"
    per_leaf: ClassVar[bool] = True
    distributed: ClassVar[bool] = True
    dim: int = 2
    curve: str = "morton"
    geometry: GeometrySpec | None = None
    chunks: int | None = None

    def declaration(self, p: Prepared, mesh: str | None) -> dict[str, Any]:
        return super().declaration(p, mesh) | {"chunks": self.chunks}

    def check_value(self, name: str, value: Any, n: int | None, *, check_values: bool = True) -> None:
        if not isinstance(value, Forest):
            raise SchemaError(f"field {name!r}: expected a Forest, got {type(value).__name__}")
        if value.dim != self.dim or value.curve != self.curve:
            raise SchemaError(f"field {name!r}: a {value.dim}D {value.curve} forest; the schema declares {self.dim}D {self.curve}")
        if n is not None and len(value) != n:
            raise SchemaError(f"field {name!r}: {len(value)} leaves; the partition gives this rank {n}")
        if self.geometry is not None and self.geometry.num_trees != value.num_trees:
            raise SchemaError(f"field {name!r}: {value.num_trees} trees; the schema's geometry has {self.geometry.num_trees}")
        if check_values:
            try:
                value.check()
            except SchemaError as exc:
                raise SchemaError(f"field {name!r}: {exc}") from exc

    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None, *, check: bool = True, later: bool = False) -> Prepared:
        """Check the mesh and pack its records; with ``check``, its ranges while packing (one pass over the leaves).

        With ``later``, the records are packed by the helper thread, then
        CRC'd (an :meth:`amrckpt.scda.Checksummed.later`: a deferred writer
        writes them after the bytes that exist), and ``check`` is ignored:
        the caller checks the leaves first (:meth:`Forest.check`).

        Raises
        ------
        SchemaError
            On this rank, if ``value`` is not a mesh, or (with ``check``) a leaf is out of range.
        """
        self.check_value(name, value, None, check_values=False)
        if later:
            rec = sfc.mesh_record_dtype(value.dim)
            k = len(value)
            last = int(value.level[-1]) & 0xFF if k else None  # a record's last byte is its level (int8)
            data = scda.Checksummed.later(value.to_records, nbytes=k * rec.itemsize, last=last, dtype=rec)
            return Prepared(name, self, Payload(data, level=self.level), count=k)
        try:
            records = value.to_records(check=check)
        except SchemaError as exc:
            raise SchemaError(f"field {name!r}: {exc}") from exc
        return Prepared(name, self, Payload(records, level=self.level), count=len(value))

    def from_file(self, raw: Any, fs: FieldSpec, ms: MeshSpec | None, check: bool) -> Any:
        assert ms is not None
        return Forest.from_records(raw, num_trees=ms.num_trees, curve=ms.curve, check=check, copy=False)  # raw is the load's own

    def mesh_name(self, name: str) -> str | None:
        return name

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        ms = next((m for m in manifest.meshes if m.field == fs.name), None)
        if ms is None:
            raise SchemaError(f"the manifest has no mesh entry for field {fs.name!r}")
        chunks = fs.chunk if fs.layout == "chunks" else None
        kind = mesh_kind(ms.dim, ms.curve, ms.geometry, fs.description, fs.compressed, 9 if chunks is None else 1, chunks)
        return Forest, _field(kind, PydanticUndefined)


@dataclass(frozen=True)
class CellsKind(FieldKind):
    """Fixed-size data per leaf in an array section A.

    Attributes
    ----------
    dtype : numpy.dtype
        The element type; in the file with the byte order given (``"<f8"``)
        or, when none is given (``"f8"``, ``"=f8"``), the writer's.
    native : bool
        Whether the declaration left the byte order to the machine; loading
        then converts to the reading machine's order.
    shape : tuple of int
        The shape of each leaf's value (``()`` for a scalar per leaf).
    mesh : str or None
        The mesh field whose leaves the values belong to (resolved when the
        schema is created: the only mesh, if not given).
    chunks : int or None
        Layout ``chunks``: compress chunks of this many consecutive leaves
        (byte shuffle, then deflate at ``level``) in one V section.
    """

    kind: ClassVar[str] = "cells"
    per_leaf: ClassVar[bool] = True
    distributed: ClassVar[bool] = True
    dtype: np.dtype[Any] = field(default_factory=lambda: np.dtype("<f8"))
    native: bool = False
    shape: tuple[int, ...] = ()
    mesh: str | None = None
    chunks: int | None = None

    @property
    def cell_nbytes(self) -> int:
        """Bytes per leaf."""
        return self.dtype.itemsize * math.prod(self.shape)

    @property
    def disk_dtype(self) -> np.dtype[Any]:
        """The dtype in the file: the declared byte order, or the writer's."""
        return self.dtype.newbyteorder("=") if self.native else self.dtype

    def _check_dtype(self, name: str, got: np.dtype[Any]) -> None:
        if got.newbyteorder("=") != self.dtype.newbyteorder("=") or (got.names or ()) != (self.dtype.names or ()):
            raise SchemaError(f"field {name!r}: dtype {got.str}, the schema declares {self.dtype.str} (no casting)")

    def _as_disk(self, value: np.ndarray) -> np.ndarray:
        """Return the array in the dtype it has in the file (a byte swap if needed), contiguous."""
        target = self.disk_dtype
        if value.dtype != target:
            value = value.astype(target)  # only the byte order differs: checked
        return np.ascontiguousarray(value)

    def check_value(self, name: str, value: Any, n: int | None, *, check_values: bool = True) -> None:
        if not isinstance(value, np.ndarray):
            raise SchemaError(f"field {name!r}: expected a numpy array, got {type(value).__name__}")
        want = (n if n is not None else value.shape[0] if value.ndim else -1, *self.shape)
        if value.shape != want:
            raise SchemaError(f"field {name!r}: shape {value.shape}; {want[0]} local leaves of shape {self.shape} need {want}")
        self._check_dtype(name, value.dtype)

    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None) -> Prepared:
        self.check_value(name, value, n)
        return Prepared(name, self, Payload(self._as_disk(value), level=self.level), count=int(value.shape[0]))

    def declaration(self, p: Prepared, mesh: str | None) -> dict[str, Any]:
        out = super().declaration(p, mesh)
        out |= {"dtype": dtype_to_json(self.disk_dtype), "shape": list(self.shape), "native_byteorder": self.native}
        return out | {"chunks": self.chunks, "mesh": mesh if self.per_leaf else None}

    def to_native(self, arr: np.ndarray) -> np.ndarray:
        """Convert data read from a file to the byte order the schema asks for (native: the reader's)."""
        target = self.disk_dtype
        if arr.dtype == target or arr.dtype.newbyteorder("=") != target.newbyteorder("="):
            return arr  # equal, or not a byte-order difference: check_value reports it
        return arr.astype(target)

    def from_file(self, raw: Any, fs: FieldSpec, ms: MeshSpec | None, check: bool) -> Any:
        return self.to_native(raw)

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        return np.ndarray, _field(cls(**cls._arrays(fs), mesh=fs.mesh), ...)


@dataclass(frozen=True)
class HpCellsKind(CellsKind):
    """A variable number of values per leaf (hp-adaptive payloads).

    ``shape`` is the shape of one value; leaf i holds ``counts[i]`` values.
    Layout ``counts`` (an A section of counts, an A section of values),
    with ``chunks`` layout ``chunks`` (the counts and the values of chunks
    of leaves, shuffled and deflated, in two V sections), or with
    ``compress`` (``compress="element"``) one V section of per-leaf
    compressed elements.
    """

    kind: ClassVar[str] = "hp"

    def check_value(self, name: str, value: Any, n: int | None, *, check_values: bool = True) -> None:
        if not isinstance(value, HpData):
            raise SchemaError(f"field {name!r}: expected HpData, got {type(value).__name__}")
        if n is not None and len(value) != n:
            raise SchemaError(f"field {name!r}: {len(value)} leaves of values; the mesh has {n} local leaves")
        if value.values.shape[1:] != self.shape:
            raise SchemaError(f"field {name!r}: values of shape {value.values.shape[1:]}; the schema declares {self.shape}")
        self._check_dtype(name, value.values.dtype)

    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None) -> Prepared:
        self.check_value(name, value, n)
        return Prepared(name, self, Payload(self._as_disk(value.values), counts=value.counts, level=self.level), count=len(value))

    def from_file(self, raw: Any, fs: FieldSpec, ms: MeshSpec | None, check: bool) -> Any:
        values, counts = raw  # the container checked them: counts >= 0 that add up to len(values)
        return HpData._checked(self.to_native(values), counts)

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        return HpData, _field(cls(**cls._arrays(fs), mesh=fs.mesh), ...)


@dataclass(frozen=True)
class ArrayKind(CellsKind):
    """A distributed array that is not per leaf: N_p elements on rank p, in an array section A.

    Read back on any number of ranks, split evenly (or as :func:`amrckpt.load`
    is told); ``shape`` is the shape of one element.
    """

    kind: ClassVar[str] = "array"
    per_leaf: ClassVar[bool] = False

    def check_value(self, name: str, value: Any, n: int | None, *, check_values: bool = True) -> None:
        super().check_value(name, value, None, check_values=check_values)

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        return np.ndarray, _field(cls(**cls._arrays(fs)), ...)


@dataclass(frozen=True)
class NDArrayKind(CellsKind):
    """A numpy array that every rank holds in full (replicated), in a block section B; dtype and shape recorded.

    ``shape`` is the whole array's shape, or None for any shape (recorded
    in the manifest when saved).
    """

    kind: ClassVar[str] = "ndarray"
    per_leaf: ClassVar[bool] = False
    distributed: ClassVar[bool] = False
    any_shape: bool = False

    def check_value(self, name: str, value: Any, n: int | None, *, check_values: bool = True) -> None:
        if not isinstance(value, np.ndarray):
            raise SchemaError(f"field {name!r}: expected a numpy array, got {type(value).__name__}")
        if not self.any_shape and value.shape != self.shape:
            raise SchemaError(f"field {name!r}: shape {value.shape}; the schema declares {self.shape}")
        self._check_dtype(name, value.dtype)

    def prepare(self, cls: type[Any], name: str, value: Any, n: int | None) -> Prepared:
        self.check_value(name, value, None)
        data = self._as_disk(value)
        d = digest_of(data)
        return Prepared(name, self, Payload(data.tobytes(), level=self.level), digest=d, shape=value.shape)

    def declaration(self, p: Prepared, mesh: str | None) -> dict[str, Any]:
        return FieldKind.declaration(self, p, None) | {
            "dtype": dtype_to_json(self.disk_dtype),
            "shape": list(p.shape),
            "native_byteorder": self.native,
        }

    def check_shape(self, name: str, shape: list[int]) -> None:
        """Check a file's recorded shape against the declaration (SchemaError).

        Raises
        ------
        SchemaError
            On this rank, if ``shape`` differs from the declared shape.
        """
        if not self.any_shape and tuple(shape) != self.shape:
            raise SchemaError(f"field {name!r}: shape {tuple(shape)} in the file; the schema declares {self.shape}")

    @classmethod
    def from_spec(cls, fs: FieldSpec, manifest: Manifest) -> tuple[Any, FieldInfo]:
        return np.ndarray, _field(cls(**cls._arrays(fs), any_shape=False), ...)

    def from_read(self, cls: type[Any], name: str, value: Any, n: int | None, *, check: bool, path: str) -> Any:
        value = super().from_read(cls, name, value, n, check=check, path=path)
        self.check_shape(name, list(value.shape))
        return value


def _from_json(cls: type[Any], name: str, value: Any, path: str) -> Any:
    """Validate a JSON value read for field ``name`` of ``cls`` in JSON mode, as written (strict models, dates, tuples).

    Raises
    ------
    SchemaError
        On this rank, if ``value`` does not validate as ``cls``.
    """
    try:
        return adapter(cls, name).validate_json(json.dumps(value, allow_nan=True))
    except ValueError as exc:
        raise SchemaError(f"field {name!r}: the value in {path!r} does not fit {cls.__name__}: {exc}") from exc


KINDS: dict[str, type[FieldKind]] = {
    k.kind: k for k in (InlineKind, BlockKind, MeshKind, CellsKind, HpCellsKind, ArrayKind, NDArrayKind)
}
"""The schema kind of each field kind of the manifest."""


def _field(kind: FieldKind, default: Any, **kwargs: Any) -> Any:
    info: FieldInfo = Field(default=default, **kwargs)
    info.metadata.append(kind)
    return info


def _common(units: Any, description: Any, compress: Any, level: Any) -> dict[str, Any]:
    for name, v in (("units", units), ("description", description)):
        if v is not None and not isinstance(v, str):
            raise SchemaError(f"{name} must be a str or None, not {type(v).__name__}")
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 9:
        raise SchemaError(f"zlib level must be an int from 0 to 9, not {level!r}")
    return {"units": units, "description": description, "compress": bool(compress), "level": level}


def _check_mesh(dim: int, curve: str) -> None:
    if dim not in (2, 3):
        raise SchemaError(f"mesh dimension must be 2 or 3, not {dim}")
    if curve not in sfc.CURVES:
        raise SchemaError(f"curve must be one of {sfc.CURVES}, not {curve!r}")


def mesh_kind(
    dim: int,
    curve: str,
    geometry: GeometrySpec | None,
    description: str | None,
    compress: bool,
    level: int,
    chunks: int | None = None,
) -> MeshKind:
    """Return the kind of a mesh, its dimension, curve and geometry checked (p4est's ``p4est_connectivity_is_valid``).

    Raises
    ------
    SchemaError
        For a bad dimension or curve, or a connectivity that is not valid.
    """
    _check_mesh(dim, curve)
    if geometry is not None and geometry.connectivity is not None:
        try:
            conn = geometry.connectivity.to_connectivity(dim)
            conn.check()
        except ConnectivityError as exc:
            raise SchemaError(f"Mesh: {exc}") from exc
    return MeshKind(**_common(None, description, compress, level), dim=dim, curve=curve, geometry=geometry, chunks=chunks)


def _shape(shape: Any) -> tuple[int, ...]:
    try:
        out = tuple(operator.index(s) for s in shape)
    except TypeError as exc:
        raise SchemaError(f"shape must be a tuple of ints, not {shape!r}") from exc
    if any(s < 0 for s in out):
        raise SchemaError(f"shape {out} has a negative extent")
    return out
