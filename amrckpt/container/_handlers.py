"""Per-kind field handlers: how each field kind is written to and read from its scda section.

orbax's ``TypeHandler`` is the model: one object per field kind knows its
section type, checks its manifest entry before anything is allocated by it,
writes its section and reads it back under any partition.  The schema layer
(:mod:`amrckpt.schema`) prepares a field's :class:`Payload` and turns what
:meth:`FieldHandler.read` returns into the schema's value types; the writer
and reader of this package loop over fields and call the handler of each.
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..comm import Call, current_call
from ..errors import CheckpointError, ScdaError
from ..scda import Share, data_padding_nbytes, parse_entries
from ..sfc import mesh_record_dtype
from ._chunks import read_chunks, write_chunks
from ._convention import SECTION_OF_KIND, FieldSpec, Manifest, dtype_from_json

if TYPE_CHECKING:
    from ._gather import GatheredRead, Section, Span
    from ._reader import CheckpointReader
    from ._writer import CheckpointWriter

__all__ = ["HANDLERS", "FieldHandler", "Payload", "handler_for"]


@dataclass
class Payload:
    """One field's data, ready to be written by this rank (what :meth:`FieldHandler.write` takes).

    Attributes
    ----------
    data : bytes, numpy.ndarray or None
        I: the 32 data bytes; B: the block's bytes (significant on the root
        only); A: this rank's elements, contiguous; V: this rank's values.
    elem_counts : (P,) list of int, or amrckpt.scda.Share, optional
        A and V: N_p of every rank (libsc's ``elem_counts``), or this
        rank's share of them (:func:`amrckpt.save`: no P-length list).
    elem_size : int, optional
        A: E, bytes per element.
    elem_sizes : (N_p,) numpy.ndarray of uint64, optional
        V: bytes of each local element.
    proc_sizes : (P,) list of int, or amrckpt.scda.Share, optional
        V: S_p, the bytes of every rank, or this rank's share of them.
    counts : (N_p,) numpy.ndarray of int64, optional
        hp: values of each local leaf (layout ``counts``; else ``elem_sizes`` is used).
    compress : bool
        Write by the per-element compression convention (paper section 3).
    level : int
        zlib level of the compression (also of layout ``chunks``).
    relay : bool or None
        Layout ``chunks`` with ``elem_counts`` a Share: whether some rank's
        first leaf lies inside a chunk (the same on every rank, e.g. agreed
        by :func:`amrckpt.save`); None: not known, the chunks' heads are
        relayed anyway (one collective call more).
    """

    data: Any = None
    elem_counts: list[int] | Share | None = None
    elem_size: int = 0
    elem_sizes: np.ndarray | None = None
    proc_sizes: list[int] | Share | None = None
    counts: np.ndarray | None = None
    compress: bool = False
    level: int = 9
    relay: bool | None = None


class FieldHandler(abc.ABC):
    """Interface for writing and reading one field kind (orbax's ``TypeHandler``).

    Every method is collective over the writer's or reader's communicator
    unless it says otherwise.
    """

    kind: ClassVar[str] = ""
    per_leaf: ClassVar[bool] = False
    """Whether the field holds one value (or a run of values) per leaf of a mesh."""

    @property
    def section(self) -> str:
        """The scda section type that holds the field."""
        return SECTION_OF_KIND[self.kind]

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        """Check a manifest entry before anything is allocated by it (not collective; same outcome on every rank).

        Raises
        ------
        CheckpointError
            If the entry is inconsistent.
        """
        if fs.section != self.section or any(d < 0 for d in fs.shape):
            raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")

    @abc.abstractmethod
    def write(self, w: CheckpointWriter, fs: FieldSpec, p: Payload) -> None:
        """Write the field's section (collective)."""

    @abc.abstractmethod
    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        """Read this rank's part of the field under ``elem_counts`` (None for global fields). Collective."""

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        """Add this rank's pieces of field ``fs`` to the gathered read ``g``; return what builds the value after ``g`` ran.

        Not collective: every check compares the sections the root read
        (:meth:`CheckpointReader.sections`) with the manifest, the same on
        every rank.  Returns None, before planning anything, for a field this
        kind reads only section by section (:meth:`read`): the compressed
        layouts.  The value is what :meth:`read` returns.

        Raises
        ------
        CheckpointError
            If a section is not the field the manifest describes.
        """
        return None

    def leaf_nbytes(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int]) -> int | np.ndarray:
        """Bytes per leaf of this rank's leaves under ``elem_counts`` (a constant, or (N_p,) int64). Collective."""
        return 0

    def plan_leaf_nbytes(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span) -> int | Callable[[], np.ndarray]:
        """As :meth:`leaf_nbytes`, in a gathered read: a constant, or what returns (N_p,) int64 after ``g`` ran. Not collective."""
        got = self.leaf_nbytes(r, fs, [])  # fixed sizes: nothing to read
        assert isinstance(got, int), "a kind with sizes per leaf plans its own reads"
        return got

    def value_dtype(self, fs: FieldSpec, path: str) -> np.dtype[Any]:
        """Return the dtype of one value (cells, hp, array, ndarray), checked."""
        return dtype_from_json(fs.dtype, f"{path!r}: field {fs.name!r}")


def _json(raw: bytes, fs: FieldSpec, path: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"{path!r}: field {fs.name!r} does not hold JSON: {exc}") from exc


class InlineHandler(FieldHandler):
    """``I`` section: a JSON value of at most 31 bytes, written by the root, read by every rank."""

    kind = "inline"

    def write(self, w: CheckpointWriter, fs: FieldSpec, p: Payload) -> None:
        w.scda.fwrite_inline(p.data if w.is_root else None, fs.name.encode())

    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        r.seek_field(fs)
        raw: bytes = _call(r).allreduce(root_value=r.scda.fread_inline_data(root=0) or b"", what="inline data").value
        r.check_crc(fs.name)  # before parsing: damaged JSON is a damaged section, not a parse error
        return _json(raw, fs, r.path)

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        (sec,) = _sections(r, fs, 1)
        data = sec.data or b""  # read, and its CRC32 checked, by the root
        return lambda: _json(data, fs, r.path)


class BlockHandler(FieldHandler):
    """``B`` section: JSON text of any length, written by the root, read by every rank."""

    kind = "block"

    def write(self, w: CheckpointWriter, fs: FieldSpec, p: Payload) -> None:
        w.scda.fwrite_block(p.data if w.is_root or w.defer else None, fs.name.encode(), encode=p.compress, level=p.level)

    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        return _json(self.raw(r, fs), fs, r.path)

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        if fs.compressed:
            return None
        (sec,) = _sections(r, fs, 1)
        data = sec.data or b""  # read, and its CRC32 checked, by the root
        return lambda: _json(data, fs, r.path)

    def raw(self, r: CheckpointReader, fs: FieldSpec) -> bytes:
        """Return the block's bytes on every rank, CRC checked. Collective."""
        r.seek_field(fs)
        data = r.scda.fread_block_data(root=None)
        assert data is not None
        r.check_crc(fs.name)
        return data.tobytes()


class NDArrayHandler(BlockHandler):
    """``B`` section: a replicated numpy array's bytes (dtype and shape in the manifest), the same on every rank."""

    kind = "ndarray"

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        super().check_spec(fs, manifest, path)
        self.value_dtype(fs, path)

    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        dt = self.value_dtype(fs, r.path)
        h = r.seek_field(fs)
        if h.elem_size != dt.itemsize * math.prod(fs.shape):  # before allocating by the manifest's shape
            raise CheckpointError(f"{r.path!r}: field {fs.name!r} has {h.elem_size} bytes in the file, not {fs.shape} of {dt}")
        out = np.empty(fs.shape, dtype=dt)
        r.scda.fread_block_data(root=None, out=out)
        r.check_crc(fs.name)
        return out

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        if fs.compressed:
            return None
        dt = self.value_dtype(fs, r.path)
        (sec,) = _sections(r, fs, 1)
        if sec.raw.elem_size != dt.itemsize * math.prod(fs.shape):
            raise CheckpointError(
                f"{r.path!r}: field {fs.name!r} has {sec.raw.elem_size} bytes in the file, not {fs.shape} of {dt}"
            )
        data = sec.data or b""
        return lambda: np.frombuffer(bytearray(data), dtype=dt).reshape(fs.shape)


class ArrayHandler(FieldHandler):
    """``A`` section of fixed-size elements, N_p per rank, read back under any partition (cells, arrays)."""

    kind = "array"

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        if fs.layout == "chunks":
            ok = fs.section == "V" and fs.chunk is not None and not fs.compressed and fs.kind != "mesh"
            if not ok or any(d < 0 for d in fs.shape):
                raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")
            self.value_dtype(fs, path)
            if not self.per_leaf and fs.count is None:
                raise CheckpointError(f"{path!r}: the manifest gives array field {fs.name!r} no element count")
            return
        if fs.layout is not None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} of kind {fs.kind!r} cannot have layout {fs.layout!r}")
        self._check_one_section(fs, manifest, path)

    def _check_one_section(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        FieldHandler.check_spec(self, fs, manifest, path)
        self.value_dtype(fs, path)
        if not self.per_leaf and fs.count is None:
            raise CheckpointError(f"{path!r}: the manifest gives array field {fs.name!r} no element count")

    def write(self, w: CheckpointWriter, fs: FieldSpec, p: Payload) -> None:
        assert p.elem_counts is not None
        if fs.layout == "chunks":
            assert fs.chunk is not None
            # A Share gives the offset and total of this rank's leaves: chunk boundaries are global, no count is gathered.
            write_chunks(
                w.scda, w.comm, p.data, p.elem_counts, p.elem_size, fs.chunk, fs.name.encode(), level=p.level, relay=p.relay
            )
            return
        w.scda.fwrite_array(p.data, p.elem_counts, p.elem_size, fs.name.encode(), encode=p.compress, level=p.level)

    def elem_nbytes(self, fs: FieldSpec, path: str) -> int:
        """Bytes of one element (dtype size times the product of the shape)."""
        return self.value_dtype(fs, path).itemsize * math.prod(fs.shape)

    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        assert elem_counts is not None
        dt = self.value_dtype(fs, r.path)
        h = r.seek_field(fs)
        if fs.layout is None and h.elem_size != self.elem_nbytes(fs, r.path):  # before allocating by the manifest's shape
            raise CheckpointError(
                f"{r.path!r}: field {fs.name!r} has {h.elem_size}-byte values in the file, not {fs.shape} of {dt}"
            )
        arr = np.empty((elem_counts[r.comm.rank], *fs.shape), dtype=dt)
        if fs.layout == "chunks":
            assert fs.chunk is not None
            read_chunks(r, fs.name, elem_counts, dt.itemsize * math.prod(fs.shape), fs.chunk, arr)
            return arr
        r.scda.fread_array_data(elem_counts, h.elem_size, out=arr)
        return arr

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        if fs.layout is not None or fs.compressed:
            return None
        assert span is not None
        dt = self.value_dtype(fs, r.path)
        E = self.elem_nbytes(fs, r.path)
        (sec,) = _sections(r, fs, 1)
        _check_a(r, fs, sec, span.N, E, "values")
        arr = np.empty((span.count, *fs.shape), dtype=dt)
        g.read(sec, sec.raw.data_offset + span.offset * E, arr)
        return lambda: arr

    def leaf_nbytes(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int]) -> int | np.ndarray:
        return self.elem_nbytes(fs, r.path) if self.per_leaf else 0


class CellsHandler(ArrayHandler):
    """``A`` section: one fixed-size value per leaf of a mesh."""

    kind = "cells"
    per_leaf = True


class MeshHandler(ArrayHandler):
    """``A`` section of packed leaf records (:func:`mesh_record_dtype`): tree, coordinates, level."""

    kind = "mesh"
    per_leaf = True

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        FieldHandler.check_spec(self, fs, manifest, path)
        if fs.layout is not None:
            raise CheckpointError(f"{path!r}: mesh field {fs.name!r} cannot have layout {fs.layout!r}")
        ms = manifest.mesh_of(fs)
        if ms is None:
            raise CheckpointError(f"{path!r}: field {fs.name!r} is a mesh, but the manifest describes no such mesh")
        want = mesh_record_dtype(ms.dim)
        if [tuple(x) for x in ms.record] != [(nm, want[nm].str) for nm in want.names or ()]:
            raise CheckpointError(f"{path!r}: the mesh record {ms.record} is not amrckpt's for {ms.dim}D")

    def elem_nbytes(self, fs: FieldSpec, path: str) -> int:
        raise AssertionError("a mesh's record size comes from its MeshSpec")

    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        assert elem_counts is not None
        ms = r.manifest.mesh_of(fs)
        assert ms is not None
        rec = mesh_record_dtype(ms.dim)
        r.seek_field(fs)
        buf = np.empty(elem_counts[r.comm.rank], dtype=rec)
        r.scda.fread_array_data(elem_counts, rec.itemsize, out=buf)
        return buf

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        if fs.compressed:
            return None
        assert span is not None
        ms = r.manifest.mesh_of(fs)
        assert ms is not None
        rec = mesh_record_dtype(ms.dim)
        (sec,) = _sections(r, fs, 1)
        _check_a(r, fs, sec, span.N, rec.itemsize, "records")
        buf = np.empty(span.count, dtype=rec)
        g.read(sec, sec.raw.data_offset + span.offset * rec.itemsize, buf)
        return lambda: buf

    def leaf_nbytes(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int]) -> int | np.ndarray:
        ms = r.manifest.mesh_of(fs)
        assert ms is not None
        return mesh_record_dtype(ms.dim).itemsize


class HpHandler(FieldHandler):
    """A run of fixed-size values per leaf (hp-adaptive payloads), in one of two layouts.

    Layout ``counts`` (written since issue 18): an ``A`` section of the
    values per leaf (N elements of ``count_dtype``: 1, 2, 4 or 8 bytes, the
    narrowest for the largest count), then an ``A`` section of all values
    (sum(counts) elements of one value's bytes), both with the field's name
    as user string.  A reader reads its leaves' counts, and its values'
    partition follows from them by a prefix sum over the ranks.  Layout None
    (format 2 as first written, and ``compress=True``): one ``V`` section,
    a leaf's bytes as one element (a 32-byte size entry per leaf; with the
    per-element compression of scda paper section 3.4).
    """

    kind = "hp"
    per_leaf = True

    def check_spec(self, fs: FieldSpec, manifest: Manifest, path: str) -> None:
        if fs.layout == "counts":
            if fs.section != "A" or fs.count_dtype is None or fs.compressed or any(d < 0 for d in fs.shape):
                raise CheckpointError(f"{path!r}: the manifest describes field {fs.name!r} inconsistently")
        elif fs.layout is None:
            super().check_spec(fs, manifest, path)
        else:
            raise CheckpointError(f"{path!r}: hp field {fs.name!r} cannot have layout {fs.layout!r}")
        if self.value_dtype(fs, path).itemsize * math.prod(fs.shape) == 0:
            raise CheckpointError(f"{path!r}: field {fs.name!r} has values of no bytes")

    def value_nbytes(self, r: CheckpointReader, fs: FieldSpec) -> int:
        """Return the bytes of one value, checked against the file's size before it sizes or multiplies anything.

        Raises
        ------
        CheckpointError
            The same on every rank (the manifest's shape): no value of the file is that large.
        """
        E = self.value_dtype(fs, r.path).itemsize * math.prod(fs.shape)
        if E > r.file_size:
            raise CheckpointError(f"{r.path!r}: field {fs.name!r} has values of {E} bytes, more than the file holds")
        return E

    def write(self, w: CheckpointWriter, fs: FieldSpec, p: Payload) -> None:
        assert p.elem_counts is not None and p.proc_sizes is not None
        ustr = fs.name.encode()
        if fs.layout == "counts":
            assert fs.count_dtype is not None
            E = self.value_dtype(fs, w.path).itemsize * math.prod(fs.shape)
            cdt = np.dtype(fs.count_dtype)
            counts = p.counts if p.counts is not None else counts_of(np.asarray(p.elem_sizes, dtype=np.uint64), E)
            w.scda.fwrite_array(np.asarray(counts).astype(cdt, copy=False), p.elem_counts, cdt.itemsize, ustr)
            ps = p.proc_sizes
            values = (
                Share(ps.count // E, ps.offset // E, ps.total // E, ps.max // E, ps.last)
                if isinstance(ps, Share)
                else [s // E for s in ps]
            )  # every rank's bytes are whole values (checked when prepared)
            w.scda.fwrite_array(p.data, values, E, ustr)
            return
        w.scda.fwrite_varray(p.data, p.elem_counts, p.elem_sizes, p.proc_sizes, ustr, encode=p.compress, level=p.level)

    def read(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int] | None) -> Any:
        r"""Return ``(values, counts)``: (sum(counts), \\*shape) values and (N_p,) int64 values per leaf."""
        assert elem_counts is not None
        dt = self.value_dtype(fs, r.path)
        value_nbytes = self.value_nbytes(r, fs)
        if fs.layout == "counts":
            counts = self._read_counts(r, fs, elem_counts)
            return self._read_values(r, fs, counts, dt, value_nbytes), counts
        r.seek_field(fs)
        f = r.scda
        sizes = f.fread_varray_sizes(elem_counts)
        assert sizes is not None
        call = _call(r)
        if sizes.size and _not_multiples(sizes, value_nbytes):
            call.fail(
                CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf whose size is not a multiple of {value_nbytes} bytes")
            )
        call.agree("load")
        data = f.fread_varray_data(elem_counts, sizes, f.proc_sizes())
        assert data is not None
        values = data.view(dt).reshape(-1, *fs.shape)
        return values, counts_of(sizes, value_nbytes)

    def _read_counts(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int]) -> np.ndarray:
        """Layout ``counts``: this rank's values per leaf, (N_p,) int64, CRC checked before anything is sized by them."""
        assert fs.count_dtype is not None
        cdt = np.dtype(fs.count_dtype)
        h = r.seek_field(fs)
        if h.elem_size != cdt.itemsize:
            raise CheckpointError(f"{r.path!r}: field {fs.name!r} has {h.elem_size}-byte counts in the file, not {cdt}")
        raw = np.empty(elem_counts[r.comm.rank], dtype=cdt)
        r.scda.fread_array_data(elem_counts, cdt.itemsize, out=raw)
        # No CRC wait here (a load CRCs in a helper thread until check_crcs): nothing is sized by the counts
        # before their sum is compared with the values section's N, whose bytes the file holds.
        counts = raw.astype(np.int64)
        call = _call(r)
        if cdt.itemsize == 8 and counts.size and int(counts.min()) < 0:  # u8 above 2**63
            counts[:] = 0
            call.fail(CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf of more than 2**63 values"))
        call.agree("load")
        return counts

    def _read_values(self, r: CheckpointReader, fs: FieldSpec, counts: np.ndarray, dt: np.dtype[Any], E: int) -> np.ndarray:
        """Layout ``counts``: this rank's values, their partition from the counts of every rank (one allgather). Collective."""
        mine = int(counts.sum(dtype=np.int64))
        vcounts: list[int] = _call(r).allgather_int(mine, what="values per rank").tolist()
        parts = r.entries(fs.name)
        if len(parts) < 2:  # the index, the same on every rank
            raise CheckpointError(f"{r.path!r}: the index has no values section of field {fs.name!r}")
        e = parts[1]
        f = r.scda
        try:
            f.fseek_section(e.offset)
            h = f.fread_section_header()
        except ScdaError as exc:
            raise CheckpointError(f"{r.path!r}: no values of field {fs.name!r} at byte {e.offset}: {exc}") from exc
        total = sum(vcounts)
        if h is None or h.type != "A" or h.user_string != fs.name.encode() or h.elem_size != E or h.elem_count != total:
            r.check_crc(fs.name)  # damaged counts: say so (ChecksumError) rather than that they do not fit
            raise CheckpointError(
                f"{r.path!r}: the values of field {fs.name!r} at byte {e.offset} are not the {total} values its counts give"
            )
        values = np.empty((mine, *fs.shape), dtype=dt)
        f.fread_array_data(vcounts, E, out=values)  # its CRC32 is compared by check_crcs, as a cells field's
        return values

    def plan(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span | None) -> Callable[[], Any] | None:
        if fs.compressed:
            return None
        assert span is not None
        dt = self.value_dtype(fs, r.path)
        E = self.value_nbytes(r, fs)
        if fs.layout == "counts":
            return self._plan_counts(r, g, fs, span, dt, E)
        (sec,) = _sections(r, fs, 1)
        if sec.raw.elem_count != span.N:
            raise CheckpointError(
                f"{r.path!r}: field {fs.name!r} has {sec.raw.elem_count} leaves in the file, the manifest {span.N}"
            )
        room = sec.entry.end - sec.raw.data_offset  # data and padding: the index says where the section ends
        if room < 0:
            raise CheckpointError(f"{r.path!r}: the index ends field {fs.name!r} before its data begin")
        entries = np.empty(32 * span.count, dtype=np.uint8)
        g.read(sec, sec.raw.entries_offset + 32 * span.offset, entries)
        got: dict[str, Any] = {}

        def local() -> int:
            sizes = parse_entries(
                b"E", entries, first_index=span.offset, offset=sec.raw.entries_offset + 32 * span.offset, what=sec.raw.where
            )
            if sizes.size and int(sizes.max()) > room:
                raise CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf of more bytes than its section holds")
            if sizes.size and _not_multiples(sizes, E):
                raise CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf whose size is not a multiple of {E} bytes")
            got["sizes"], got["n"] = sizes, _exact_sum(sizes, room)
            return int(got["n"])

        def then(before: int) -> None:
            n: int = got["n"]
            if before + n > room:
                raise CheckpointError(
                    f"{r.path!r}: the leaf sizes of field {fs.name!r} add up to more bytes than its section holds"
                )
            got["values"] = values = np.empty((n // E, *fs.shape), dtype=dt)
            g.read(sec, sec.raw.data_offset + before, values)
            if span.holds_last or (span.N == 0 and r.comm.rank == 0):  # the padding, read by the rank of the last leaf
                start = sec.raw.data_offset + before + n
                if start + data_padding_nbytes(before + n) != sec.entry.end:
                    raise CheckpointError(f"{r.path!r}: the leaf sizes of field {fs.name!r} do not add up to its section")
                g.read(sec, start, np.empty(sec.entry.end - start, dtype=np.uint8))

        g.scan(local, then)
        return lambda: (got["values"], counts_of(got["sizes"], E))

    def _plan_counts(
        self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span, dt: np.dtype[Any], E: int
    ) -> Callable[[], Any]:
        """Layout ``counts``: this rank's counts in the first read; its values, after a prefix sum of the counts, in the second."""
        assert fs.count_dtype is not None
        cdt = np.dtype(fs.count_dtype)
        csec, vsec = _sections(r, fs, 2)
        _check_a(r, fs, csec, span.N, cdt.itemsize, "counts")
        total = vsec.raw.elem_count
        if vsec.raw.elem_size != E or (span.N == 0 and total != 0):
            raise CheckpointError(
                f"{r.path!r}: the values of field {fs.name!r} at byte {vsec.raw.offset} are not as its counts give them"
            )
        raw = np.empty(span.count, dtype=cdt)
        g.read(csec, csec.raw.data_offset + span.offset * cdt.itemsize, raw)
        g.cover(vsec)
        got: dict[str, Any] = {}

        def local() -> int:
            counts = raw.astype(np.int64)
            if counts.size and (
                int(counts.min()) < 0 or int(counts.max()) > total
            ):  # u8 above 2**63, or more than the file's values
                raise CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf of more values than its values section holds")
            got["counts"], got["n"] = counts, _exact_sum(counts, total)
            return int(got["n"])

        def then(before: int) -> None:
            n: int = got["n"]
            if before + n > total or (span.holds_last and before + n != total):
                raise CheckpointError(
                    f"{r.path!r}: the values of field {fs.name!r} at byte {vsec.raw.offset} are not the values its counts give"
                )
            got["values"] = values = np.empty((n, *fs.shape), dtype=dt)
            g.read(vsec, vsec.raw.data_offset + before * E, values)

        g.scan(local, then)
        return lambda: (got["values"], got["counts"])

    def plan_leaf_nbytes(self, r: CheckpointReader, g: GatheredRead, fs: FieldSpec, span: Span) -> int | Callable[[], np.ndarray]:
        E = self.value_nbytes(r, fs)
        if fs.layout == "counts":
            assert fs.count_dtype is not None
            cdt = np.dtype(fs.count_dtype)
            csec, vsec = _sections(r, fs, 2)
            _check_a(r, fs, csec, span.N, cdt.itemsize, "counts")
            raw = np.empty(span.count, dtype=cdt)
            g.read(csec, csec.raw.data_offset + span.offset * cdt.itemsize, raw)
            total = vsec.raw.elem_count

            def from_counts() -> np.ndarray:
                counts = raw.astype(np.int64)
                if counts.size and (int(counts.min()) < 0 or int(counts.max()) > total):
                    raise CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf of more values than its values section holds")
                return counts * E

            return from_counts
        (sec,) = _sections(r, fs, 1)
        if sec.raw.elem_count != span.N:
            raise CheckpointError(
                f"{r.path!r}: field {fs.name!r} has {sec.raw.elem_count} leaves in the file, the manifest {span.N}"
            )
        entries = np.empty(32 * span.count, dtype=np.uint8)
        g.read(sec, sec.raw.entries_offset + 32 * span.offset, entries)
        room = sec.entry.end - sec.raw.data_offset

        def from_sizes() -> np.ndarray:
            at = sec.raw.entries_offset + 32 * span.offset
            sizes = parse_entries(b"E", entries, first_index=span.offset, offset=at, what=sec.raw.where)
            if sizes.size and int(sizes.max()) > room:
                raise CheckpointError(f"{r.path!r}: field {fs.name!r} has a leaf of more bytes than its section holds")
            return sizes.astype(np.int64)

        return from_sizes

    def leaf_nbytes(self, r: CheckpointReader, fs: FieldSpec, elem_counts: list[int]) -> int | np.ndarray:
        if fs.layout == "counts":
            return self._read_counts(r, fs, elem_counts) * self.value_nbytes(r, fs)
        r.seek_field(fs)
        sizes = r.scda.fread_varray_sizes(elem_counts)
        assert sizes is not None
        return sizes.astype(np.int64)


def _call(r: CheckpointReader) -> Call:
    """Return the collective call a section-by-section read belongs to (a method of the reader)."""
    call = current_call(r.comm)
    assert call is not None, "a field read outside a collective call"
    return call


def _sections(r: CheckpointReader, fs: FieldSpec, n: int) -> list[Section]:
    """Return the first ``n`` sections of field ``fs`` as the root found them, checked against the manifest (not collective)."""
    secs = r.sections(fs.name)
    if len(secs) < n:
        raise CheckpointError(f"{r.path!r}: the index has {len(secs)} sections of field {fs.name!r}, not {n}")
    for sec in secs[:n]:
        if sec.raw.type != fs.section or sec.raw.user_string != fs.name.encode():
            raise CheckpointError(
                f"{r.path!r}: the section at byte {sec.raw.offset} is not field {fs.name!r} as the manifest describes it"
            )
    return secs[:n]


def _check_a(r: CheckpointReader, fs: FieldSpec, sec: Section, N: int, E: int, what: str) -> None:
    """Check an A section's N and E against the manifest, before anything is allocated by them."""
    what_n = "leaves" if handler_for(fs.kind).per_leaf else "elements"
    if sec.raw.elem_count != N:
        raise CheckpointError(f"{r.path!r}: field {fs.name!r} has {sec.raw.elem_count} {what_n} in the file, the manifest {N}")
    if sec.raw.elem_size != E:
        raise CheckpointError(f"{r.path!r}: field {fs.name!r} has {sec.raw.elem_size}-byte {what} in the file, not {E}-byte ones")


def _exact_sum(a: np.ndarray, most: int) -> int:
    """Return the sum of non-negative integers ``a``, each at most ``most``, exactly (int64 sums of chunks that cannot overflow)."""
    if a.size == 0:
        return 0
    step = max(1, (2**63 - 1) // max(most, 1))
    if a.size <= step:
        return int(a.sum(dtype=np.int64))
    return sum(int(a[i : i + step].sum(dtype=np.int64)) for i in range(0, a.size, step))


def counts_of(sizes: np.ndarray, value_nbytes: int) -> np.ndarray:
    """Values per leaf from bytes per leaf, (n,) int64; a shift for power-of-two value sizes."""
    counts = sizes.view(np.int64)  # sizes are below 2**63: they fit the file
    shift = value_nbytes.bit_length() - 1
    return counts >> shift if value_nbytes == 1 << shift else counts // value_nbytes


def _not_multiples(sizes: np.ndarray, value_nbytes: int) -> bool:
    """Whether a size is not a multiple of ``value_nbytes``; for a power of two, one OR-reduction (no temporary)."""
    if value_nbytes & (value_nbytes - 1) == 0:
        return bool(int(np.bitwise_or.reduce(sizes)) & (value_nbytes - 1))
    return bool(np.any(sizes % np.uint64(value_nbytes)))


HANDLERS: dict[str, FieldHandler] = {
    h.kind: h
    for h in (InlineHandler(), BlockHandler(), NDArrayHandler(), ArrayHandler(), CellsHandler(), MeshHandler(), HpHandler())
}
"""The handler of each field kind of the manifest."""


def handler_for(kind: str) -> FieldHandler:
    """Return the handler of field kind ``kind`` (KeyError for an unknown kind)."""
    return HANDLERS[kind]
