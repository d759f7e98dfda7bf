"""Per-kind field handlers: each owns everything about its kind on disk.

orbax's ``TypeHandler`` is the model: one object per field kind says which
sections hold the field and in which layout (count dtypes, chunks,
compression), describes the field's manifest entry, writes its sections,
checks a manifest entry before anything is allocated by it, and plans this
rank's reads of the field under any partition (:meth:`FieldHandler.plan`)
for the one gathered read of a load (:class:`amrckpt.scda.ReadPlan`).  The
schema layer (:mod:`amrckpt.schema`) validates the user's values and hands
each handler a :class:`Payload`; a save and a load are loops over handlers.
Handlers see a :class:`~amrckpt.container.FieldSource` and a
:class:`~amrckpt.container.SectionSink`, never the checkpoint reader or writer.
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from ..errors import CheckpointError
from ..scda import MAX_INFLATE_RATIO, ReadPlan, Share
from ..sfc import mesh_record_dtype
from ._chunks import plan_chunks, write_chunks
from ._convention import FieldSpec, Manifest, MeshSpec, dtype_from_json
from ._hp_layouts import HP_LAYOUTS, HpLayout, count_dtype, hp_layout_of
from ._registry import register, registered
from ._sections import Build, FieldSource, Payload, SectionSink, Span, check_a, sections_of
from ._varray import decode, plan_varray

__all__ = ["HANDLERS", "FieldHandler", "Payload", "count_dtype", "handler_for"]


class FieldHandler(abc.ABC):
    r"""Interface of the handler of one field kind (orbax's ``TypeHandler``).

    Unless they say otherwise, :meth:`write` is collective over the sink's
    communicator, everything else is not.

    Attributes
    ----------
    kind : str
        The kind's name in the manifest.
    per_leaf : bool
        Its values belong to the leaves of a mesh (a mesh, cells, hp).
    is_mesh : bool
        It is a mesh (the leaves themselves).
    partitioned : bool
        Its elements are split over the ranks when read (per leaf, or the
        elements of a distributed array); else every rank reads it whole.
    in_manifest : bool
        Its value is in the manifest as well (inline fields: always read).
    reads_as : str
        What :meth:`plan` builds: ``"json"``, ``"ndarray"``, ``"records"``
        (mesh leaves), ``"values"`` ((N_p, \\*shape) array) or ``"runs"``
        (hp: ``(values, counts)``).
    """

    kind: ClassVar[str] = ""
    per_leaf: ClassVar[bool] = False
    is_mesh: ClassVar[bool] = False
    partitioned: ClassVar[bool] = False
    in_manifest: ClassVar[bool] = False
    reads_as: ClassVar[str] = "json"

    # -- writing -------------------------------------------------------------------------------------------

    def describe(self, decl: Mapping[str, Any], total: int = 0, max_count: int = 0) -> FieldSpec:
        """Return the field's manifest entry, from the schema's declaration and what the ranks agreed on.

        Parameters
        ----------
        decl : mapping
            ``name``, ``units``, ``description``, ``compress``, and for
            arrays ``dtype`` (JSON), ``shape``, ``native_byteorder``,
            ``mesh``, ``chunks`` (leaves per chunk, or None).
        total : int
            Elements over all ranks (a distributed array's count).
        max_count : int
            The largest number of values of a leaf on any rank (hp).
        """
        return FieldSpec.model_validate(
            {
                "name": decl["name"],
                "kind": self.kind,
                "section": self._section_of(decl),
                "units": decl.get("units"),
                "description": decl.get("description"),
                "compressed": bool(decl.get("compress", False)),
            }
        )

    def _section_of(self, decl: Mapping[str, Any]) -> str:
        return "B"

    def measure(self, payload: Payload) -> tuple[int, int]:
        """Return ``(nbytes, max_count)`` of this rank's payload: the values' bytes and most values of a leaf (hp)."""
        return 0, 0

    @abc.abstractmethod
    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share) -> None:
        """Write the field's sections. Collective.

        ``counts`` is this rank's share of the elements, ``nbytes`` of the
        values' bytes (hp), as the ranks agreed.
        """

    # -- reading -------------------------------------------------------------------------------------------

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        """Check a manifest entry before anything is allocated by it (the same outcome on every rank).

        Raises
        ------
        CheckpointError
            If the entry is inconsistent.
        """
        if fs.section != self._expected_section(fs) or fs.layout is not None or any(d < 0 for d in fs.shape):
            raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")

    def _expected_section(self, fs: FieldSpec) -> str:
        return self._section_of({"compress": fs.compressed, "chunks": fs.chunk})

    def elem_count(self, fs: FieldSpec, manifest: Manifest) -> int | None:
        """Return the field's global number of elements (leaves of its mesh, or its count); None if not partitioned."""
        if not self.partitioned:
            return None
        ms = manifest.mesh_of(fs)
        return ms.num_leaves if self.per_leaf and ms is not None else fs.count

    @abc.abstractmethod
    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span | None) -> Build:
        """Add this rank's reads of field ``fs`` (its part ``span``) to ``plan``; return what builds its value after the plan ran.

        The value is the field's as :attr:`reads_as` says.  Every check
        compares the sections the root found with the manifest: the same on
        every rank.

        Raises
        ------
        CheckpointError
            If a section is not the field the manifest describes.
        """

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span) -> int | Callable[[], np.ndarray]:
        """Bytes per leaf of ``span``'s leaves: a constant, or what returns (count,) int64 after ``plan`` ran."""
        return 0

    def value_dtype(self, fs: FieldSpec, path: str) -> np.dtype[Any]:
        """Return the dtype of one value (cells, hp, array, ndarray), checked."""
        return dtype_from_json(fs.dtype, f"{path!r}: field {fs.name!r}")


def _array_decl(out: FieldSpec, decl: Mapping[str, Any], **more: Any) -> FieldSpec:
    return out.model_copy(
        update={
            "dtype": decl["dtype"],
            "shape": list(decl.get("shape", ())),
            "native_byteorder": bool(decl.get("native_byteorder")),
        }
        | more
    )


def _json(raw: bytes, fs: FieldSpec, path: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"{path!r}: field {fs.name!r} does not hold JSON: {exc}") from exc


@register
class InlineHandler(FieldHandler):
    """An ``I`` section: a JSON value of at most 31 bytes, written by the root, read by every rank."""

    kind = "inline"
    in_manifest = True

    def _section_of(self, decl: Mapping[str, Any]) -> str:
        return "I"

    def describe(self, decl: Mapping[str, Any], total: int = 0, max_count: int = 0) -> FieldSpec:
        return super().describe({**decl, "compress": False})

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share) -> None:
        sink.fwrite_inline(payload.data, fs.name.encode())

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span | None) -> Build:
        (sec,) = sections_of(src, fs, 1)
        data = sec.data or b""  # read, and its CRC32 checked, by the root
        return lambda: _json(data, fs, src.path)


@register
class BlockHandler(FieldHandler):
    """A ``B`` section (compressed: a pair, paper 3.2): JSON text of any length, written by the root, read by every rank."""

    kind = "block"

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share) -> None:
        sink.fwrite_block(payload.data, fs.name.encode(), encode=fs.compressed, level=payload.level)

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span | None) -> Build:
        (sec,) = sections_of(src, fs, 1)
        data = sec.data or b""  # read (decoded), and its CRC32 checked, by the root
        return lambda: _json(data, fs, src.path)


@register
class NDArrayHandler(BlockHandler):
    """A ``B`` section: a replicated numpy array's bytes (dtype and shape in the manifest), the same on every rank."""

    kind = "ndarray"
    reads_as = "ndarray"

    def describe(self, decl: Mapping[str, Any], total: int = 0, max_count: int = 0) -> FieldSpec:
        return _array_decl(super().describe(decl), decl)

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        super().check_spec(fs, manifest, path)
        self.value_dtype(fs, path)

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span | None) -> Build:
        dt = self.value_dtype(fs, src.path)
        (sec,) = sections_of(src, fs, 1)
        if sec.header.elem_size != dt.itemsize * math.prod(fs.shape):  # before allocating by the manifest's shape
            raise CheckpointError(
                f"{src.path!r}: field {fs.name!r} has {sec.header.elem_size} bytes in the file, not {fs.shape} of {dt}"
            )
        data = sec.data or b""
        return lambda: np.frombuffer(bytearray(data), dtype=dt).reshape(fs.shape)


@register
class ArrayHandler(FieldHandler):
    """Fixed-size elements, N_p per rank, read back under any partition: a distributed array (cells and meshes extend it).

    Layouts: one ``A`` section; compressed, a pair of the scda paper's
    convention (3.3: an inline section, then a ``V`` section of one
    compressed element per value); ``chunks``, one ``V`` section of
    shuffled, deflated chunks of K consecutive elements (:mod:`._chunks`).
    """

    kind = "array"
    partitioned = True
    reads_as = "values"

    def _section_of(self, decl: Mapping[str, Any]) -> str:
        return "V" if decl.get("chunks") is not None else "A"

    def describe(self, decl: Mapping[str, Any], total: int = 0, max_count: int = 0) -> FieldSpec:
        out = super().describe(decl)
        K = decl.get("chunks")
        if K is not None:
            out = out.model_copy(update={"layout": "chunks", "chunk": K, "compressed": False})
        return self._where(out, decl, total)

    def _where(self, out: FieldSpec, decl: Mapping[str, Any], total: int) -> FieldSpec:
        return _array_decl(out, decl, count=total)

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        if fs.layout == "chunks":
            if fs.section != "V" or fs.chunk is None or fs.compressed or any(d < 0 for d in fs.shape):
                raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")
        elif fs.layout is not None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} of kind {fs.kind!r} cannot have layout {fs.layout!r}")
        else:
            super().check_spec(fs, manifest, path)
        self.value_dtype(fs, path)
        if not self.per_leaf and fs.count is None:
            raise CheckpointError(f"{path!r}: the manifest gives array field {fs.name!r} no element count")

    def elem_nbytes(self, fs: FieldSpec, manifest: Manifest, path: str) -> int:
        """Bytes of one element (dtype size times the product of the shape)."""
        return self.value_dtype(fs, path).itemsize * math.prod(fs.shape)

    def elem_dtype(self, fs: FieldSpec, manifest: Manifest, path: str) -> tuple[np.dtype[Any], tuple[int, ...]]:
        """Return the dtype and shape of one element as it is read."""
        return self.value_dtype(fs, path), tuple(fs.shape)

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share) -> None:
        E = self._write_nbytes(fs, payload)
        if fs.layout == "chunks":
            assert fs.chunk is not None
            # The Share gives the offset and total of this rank's elements: chunk boundaries are global, no count is gathered.
            write_chunks(sink, payload.data, counts, E, fs.chunk, fs.name.encode(), level=payload.level)
            return
        sink.fwrite_array(payload.data, counts, E, fs.name.encode(), encode=fs.compressed, level=payload.level)

    def _write_nbytes(self, fs: FieldSpec, payload: Payload) -> int:
        return self.value_dtype(fs, fs.name).itemsize * math.prod(fs.shape)

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span | None) -> Build:
        assert span is not None
        dt, shape = self.elem_dtype(fs, src.manifest, src.path)
        E = self.elem_nbytes(fs, src.manifest, src.path)
        what = f"{src.path!r}: field {fs.name!r}"
        (sec,) = sections_of(src, fs, 1)
        if fs.layout == "chunks":
            assert fs.chunk is not None
            if span.count * E > MAX_INFLATE_RATIO * (src.file_size + 1):  # before allocating by the manifest's shape
                raise CheckpointError(f"{what} has values of {E} bytes: more than its chunks can hold")
            out = np.empty((span.count, *shape), dtype=dt)
            return plan_chunks(src, plan, sec, span, E, fs.chunk, out, what)
        check_a(src, fs, sec, span.N, E, "values" if not self.is_mesh else "records", self.per_leaf)
        out = np.empty((span.count, *shape), dtype=dt)
        if not fs.compressed:
            plan.read(sec.key, sec.raw.data_offset + span.offset * E, out)
            return lambda: out
        if sec.raw.elem_count != span.N:
            raise CheckpointError(f"{what}: its compressed section holds {sec.raw.elem_count} elements, not {span.N}")
        got = plan_varray(src, plan, sec, span.offset, span.end, what)

        def build() -> np.ndarray:
            raw = sec.raw
            usizes = np.full(span.count, E, dtype=np.uint64)
            off = raw.data_offset + got["before"]
            out.reshape(-1).view(np.uint8)[:] = decode(got["data"], got["sizes"], usizes, span.offset, off, raw.where)
            return out

        return build

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span) -> int | Callable[[], np.ndarray]:
        return self.elem_nbytes(fs, src.manifest, src.path) if self.per_leaf else 0


@register
class CellsHandler(ArrayHandler):
    """One fixed-size value per leaf of a mesh, in the layouts of :class:`ArrayHandler`."""

    kind = "cells"
    per_leaf = True

    def _where(self, out: FieldSpec, decl: Mapping[str, Any], total: int) -> FieldSpec:
        return _array_decl(out, decl, mesh=decl.get("mesh"))


@register
class MeshHandler(ArrayHandler):
    """The leaves of a forest: packed records (:func:`amrckpt.sfc.mesh_record_dtype`: tree, coordinates, level), one per leaf.

    One ``A`` section, shuffled and deflated chunks of records (layout
    ``chunks``, one ``V`` section), or compressed by the scda paper's
    per-element convention; a :class:`MeshSpec` in the manifest says the dimension, the curve and the
    geometry.
    """

    kind = "mesh"
    per_leaf = True
    is_mesh = True
    reads_as = "records"

    def _where(self, out: FieldSpec, decl: Mapping[str, Any], total: int) -> FieldSpec:
        return out  # dimension, curve and geometry are in the manifest's MeshSpec

    def mesh_spec(self, name: str, dim: int, num_trees: int, curve: str, maxlevel: int, num_leaves: int, geometry: Any) -> MeshSpec:
        """Return the mesh's manifest entry: its record (the packed leaves' fields), leaf count and geometry."""
        rec = mesh_record_dtype(dim)
        return MeshSpec.model_validate(
            {
                "field": name,
                "dim": dim,
                "num_trees": num_trees,
                "curve": curve,
                "maxlevel": maxlevel,
                "record": [(nm, rec[nm].str) for nm in rec.names or ()],
                "num_leaves": num_leaves,
                "geometry": geometry,
            }
        )

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        if fs.layout == "chunks":
            if fs.section != "V" or fs.chunk is None or fs.compressed or any(d < 0 for d in fs.shape):
                raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")
        else:
            FieldHandler.check_spec(self, fs, manifest, path)
        ms = manifest.mesh_of(fs)
        if ms is None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} is a mesh, but the manifest describes no such mesh")
        want = mesh_record_dtype(ms.dim)
        if [tuple(x) for x in ms.record] != [(nm, want[nm].str) for nm in want.names or ()]:
            raise CheckpointError(f"{path!r}: the mesh record {ms.record} is not amrckpt's for {ms.dim}D")

    def _expected_section(self, fs: FieldSpec) -> str:
        return "A"

    def elem_dtype(self, fs: FieldSpec, manifest: Manifest, path: str) -> tuple[np.dtype[Any], tuple[int, ...]]:
        ms = manifest.mesh_of(fs)
        assert ms is not None
        return mesh_record_dtype(ms.dim), ()

    def elem_nbytes(self, fs: FieldSpec, manifest: Manifest, path: str) -> int:
        return self.elem_dtype(fs, manifest, path)[0].itemsize

    def _write_nbytes(self, fs: FieldSpec, payload: Payload) -> int:
        return int(payload.array.dtype.itemsize)


@register
class HpHandler(FieldHandler):
    """A run of fixed-size values per leaf (hp-adaptive payloads), in one of three layouts (:mod:`._hp_layouts`).

    Layout ``counts``: an ``A`` section of the values per leaf and one of
    all values.  Layout ``chunks`` (``compress=True``): two ``V`` sections,
    the counts and the values of each chunk of K leaves, shuffled and
    deflated.  Layout None (as format 2 was first written, and
    ``compress="element"``): one ``V`` section, a leaf's bytes as one
    element.  Each method looks the layout up from the declaration or the
    manifest entry, and hands the step to it.
    """

    kind = "hp"
    per_leaf = True
    partitioned = True
    reads_as = "runs"

    def _section_of(self, decl: Mapping[str, Any]) -> str:
        return hp_layout_of(decl).section

    def describe(self, decl: Mapping[str, Any], total: int = 0, max_count: int = 0) -> FieldSpec:
        # The counts' dtype follows from the largest count of every rank.
        return hp_layout_of(decl).describe(_array_decl(super().describe(decl), decl, mesh=decl.get("mesh")), decl, max_count)

    def measure(self, payload: Payload) -> tuple[int, int]:
        counts = payload.counts
        assert counts is not None
        return int(payload.array.nbytes), int(counts.max()) if counts.size else 0

    def _layout(self, fs: FieldSpec, path: str) -> HpLayout:
        """Return the layout of manifest entry ``fs``.

        Raises
        ------
        CheckpointError
            If an hp field has no such layout.
        """
        layout = HP_LAYOUTS.get(fs.layout)
        if layout is None:
            raise CheckpointError(f"{path!r}: hp field {fs.name!r} cannot have layout {fs.layout!r}")
        return layout

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        if not self._layout(fs, path).consistent(fs):
            raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")
        if self.value_dtype(fs, path).itemsize * math.prod(fs.shape) == 0:
            raise CheckpointError(f"{path!r}: field {fs.name!r} has values of no bytes")

    def value_nbytes(self, src: FieldSource, fs: FieldSpec) -> int:
        """Return the bytes of one value, checked against the file's size before it sizes or multiplies anything.

        Raises
        ------
        CheckpointError
            The same on every rank (the manifest's shape): no value of the file is that large.
        """
        E = self.value_dtype(fs, src.path).itemsize * math.prod(fs.shape)
        if E > src.file_size:
            raise CheckpointError(f"{src.path!r}: field {fs.name!r} has values of {E} bytes, more than the file holds")
        return E

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share) -> None:
        E = self.value_dtype(fs, fs.name).itemsize * math.prod(fs.shape)
        self._layout(fs, fs.name).write(sink, fs, payload, counts, nbytes, E)

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span | None) -> Build:
        r"""Plan ``(values, counts)``: (sum(counts), \\*shape) values and (N_p,) int64 values per leaf.

        Raises
        ------
        CheckpointError
            On this rank, if the sections do not have the manifest's leaves, or their values do not fit them.
        """
        assert span is not None
        dt = self.value_dtype(fs, src.path)
        E = self.value_nbytes(src, fs)
        return self._layout(fs, src.path).plan(src, plan, fs, span, dt, E)

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span) -> int | Callable[[], np.ndarray]:
        E = self.value_nbytes(src, fs)
        return self._layout(fs, src.path).plan_leaf_nbytes(src, plan, fs, span, E)


def handler_for(kind: str) -> FieldHandler:
    """Return the handler of field kind ``kind`` (KeyError for an unknown kind)."""
    h: FieldHandler = registered(kind)
    return h


HANDLERS: dict[str, FieldHandler] = {k: handler_for(k) for k in ("inline", "block", "ndarray", "array", "cells", "mesh", "hp")}
"""The handler of each field kind of the manifest."""
