"""The three layouts of an hp field on disk, one object each, behind one protocol.

:class:`~amrckpt.container._handlers.HpHandler` looks its layout up once
(:data:`HP_LAYOUTS`, by the manifest's ``layout``; :func:`hp_layout_of`,
from the schema's declaration) and hands every step on to it: the manifest
entry, its check, the sections written, the reads planned of a rank's leaves
and of their bytes per leaf.  Every layout stores the same runs of values,
``counts[i]`` values of one value's ``E`` bytes for leaf ``i``, in SFC order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import numpy as np

from ..errors import CheckpointError
from ..scda import ReadPlan, Share, parse_entries
from ._chunks import plan_hp_chunks, plan_hp_counts, write_hp_chunks
from ._convention import FieldSpec
from ._sections import (
    Build,
    FieldSource,
    Payload,
    Section,
    SectionSink,
    Span,
    check_a,
    column_prefix,
    counts_of,
    exact_sum,
    int64_later,
    not_multiples,
    sections_of,
)
from ._varray import decode, plan_varray

__all__ = ["HP_LAYOUTS", "HpLayout", "count_dtype", "hp_layout_of"]


def count_dtype(max_count: int) -> str:
    """Return the narrowest unsigned integer (``u1``, ``<u2``, ``<u4``, ``<u8``) that holds ``max_count``."""
    for dt in ("u1", "<u2", "<u4"):
        if max_count <= np.iinfo(dt).max:
            return dt
    return "<u8"


class HpLayout(Protocol):
    """How the runs of an hp field lie in its sections: the steps of its handler that differ by layout.

    :meth:`write` is collective over the sink's communicator, everything
    else is not.

    Attributes
    ----------
    name : str or None
        The layout's name in the manifest (``FieldSpec.layout``).
    section : str
        The type of its sections (``"A"`` or ``"V"``).
    """

    name: ClassVar[str | None]
    section: ClassVar[str]

    def describe(self, out: FieldSpec, decl: Mapping[str, Any], max_count: int) -> FieldSpec:
        """Return manifest entry ``out`` with this layout's keys; ``max_count`` is the largest count of a leaf on any rank."""
        ...

    def consistent(self, fs: FieldSpec) -> bool:
        """Whether manifest entry ``fs`` has this layout's section type and keys."""
        ...

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share, E: int) -> None:
        """Write the field's sections of values of ``E`` bytes. Collective.

        ``counts`` is this rank's share of the leaves, ``nbytes`` of the
        values' bytes, as the ranks agreed.
        """
        ...

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, dt: np.dtype[Any], E: int) -> Build:
        r"""Add this rank's reads of ``span``'s leaves to ``plan``; return what builds ``(values, counts)`` after it ran.

        ``values`` is (sum(counts), \\*shape) of ``dt``, ``counts`` (N_p,) int64.

        Raises
        ------
        CheckpointError
            On this rank, if the sections do not hold the runs the manifest describes.
        """
        ...

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, E: int) -> Callable[[], np.ndarray]:
        """Add the reads of the sizes of ``span``'s leaves to ``plan``; return what gives their (count,) int64 bytes after it ran.

        Raises
        ------
        CheckpointError
            On this rank, if the sections do not hold the leaves the manifest describes.
        """
        ...


class _CountsLayout:
    """Layout ``counts``: an ``A`` section of the values per leaf, then an ``A`` section of all values.

    The first holds N elements of ``count_dtype`` (1, 2, 4 or 8 bytes, the
    narrowest for the largest count), the second sum(counts) elements of one
    value's bytes; both have the field's name as user string.  A reader reads
    its leaves' counts, and its values' partition follows from them by a
    prefix sum over the ranks.
    """

    name: ClassVar[str | None] = "counts"
    section: ClassVar[str] = "A"

    def describe(self, out: FieldSpec, decl: Mapping[str, Any], max_count: int) -> FieldSpec:
        return out.model_copy(update={"layout": "counts", "count_dtype": count_dtype(max_count)})

    def consistent(self, fs: FieldSpec) -> bool:
        return fs.section == "A" and fs.count_dtype is not None and not fs.compressed and all(d >= 0 for d in fs.shape)

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share, E: int) -> None:
        assert fs.count_dtype is not None and payload.counts is not None
        ustr = fs.name.encode()
        cdt = np.dtype(fs.count_dtype)
        sink.fwrite_array(np.asarray(payload.counts).astype(cdt, copy=False), counts, cdt.itemsize, ustr)
        ps = nbytes  # every rank's bytes are whole values (checked by the schema)
        sink.fwrite_array(payload.data, Share(ps.count // E, ps.offset // E, ps.total // E, ps.max // E, ps.last), E, ustr)

    @staticmethod
    def _sections(src: FieldSource, fs: FieldSpec, span: Span) -> tuple[Section, Section, np.dtype[Any]]:
        """Return the counts and values sections and the counts' dtype, the counts' section checked.

        Raises
        ------
        CheckpointError
            If the counts' section does not have the manifest's leaves of ``count_dtype``.
        """
        assert fs.count_dtype is not None
        cdt = np.dtype(fs.count_dtype)
        csec, vsec = sections_of(src, fs, 2)
        check_a(src, fs, csec, span.N, cdt.itemsize, "counts", True)
        return csec, vsec, cdt

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, dt: np.dtype[Any], E: int) -> Build:
        """Plan this rank's counts in the first read; its values, after a prefix sum of the counts, in the second.

        Raises
        ------
        CheckpointError
            On this rank, if the values section does not fit the counts (its element size, its length, a leaf of more
            values than it holds).
        """
        csec, vsec, cdt = self._sections(src, fs, span)
        total = vsec.header.elem_count
        if vsec.header.elem_size != E or (span.N == 0 and total != 0):
            raise CheckpointError(
                f"{src.path!r}: the values of field {fs.name!r} at byte {vsec.entry.offset} are not as its counts give them"
            )
        raw = np.empty(span.count, dtype=cdt)
        plan.read(csec.key, csec.raw.data_offset + span.offset * cdt.itemsize, raw)
        got: dict[str, Any] = {}
        key = f"{fs.name}@{csec.entry.offset}"

        def local() -> int:
            # count_dtype is unsigned: one reduction over the file's narrow integers bounds every count.
            most = int(raw.max()) if raw.size else 0
            if most > total:
                raise CheckpointError(f"{src.path!r}: field {fs.name!r} has a leaf of more values than its values section holds")
            got["counts"], got["n"] = int64_later(raw), exact_sum(raw, most)  # the int64 copy overlaps the values' read
            return int(got["n"])

        def then(before: int) -> None:
            n: int = got["n"]
            if before + n > total or (span.holds_last and before + n != total):
                raise CheckpointError(
                    f"{src.path!r}: the values of field {fs.name!r} at byte {vsec.entry.offset} are not the values its counts give"
                )
            got["values"] = values = np.empty((n, *fs.shape), dtype=dt)
            plan.read(vsec.key, vsec.raw.data_offset + before * E, values)
            src.cursors[key] = (span.end, before + n)

        plan.scan(local, then, column_prefix(src, key, csec.raw.data_offset, cdt, span.offset))
        return lambda: (got["values"], got["counts"]())

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, E: int) -> Callable[[], np.ndarray]:
        csec, vsec, cdt = self._sections(src, fs, span)
        raw = np.empty(span.count, dtype=cdt)
        plan.read(csec.key, csec.raw.data_offset + span.offset * cdt.itemsize, raw)
        total = vsec.header.elem_count

        def from_counts() -> np.ndarray:
            counts = raw.astype(np.int64)
            if counts.size and (int(counts.min()) < 0 or int(counts.max()) > total):
                raise CheckpointError(f"{src.path!r}: field {fs.name!r} has a leaf of more values than its values section holds")
            return counts * E

        return from_counts


class _ChunksLayout:
    """Layout ``chunks``: two ``V`` sections of ceil(N / K) elements, the counts and the values of each chunk of K leaves.

    The counts are of ``count_dtype``; both are shuffled and deflated
    (:mod:`._chunks`).  ``compress=True`` declares it.
    """

    name: ClassVar[str | None] = "chunks"
    section: ClassVar[str] = "V"

    def describe(self, out: FieldSpec, decl: Mapping[str, Any], max_count: int) -> FieldSpec:
        update = {"layout": "chunks", "chunk": decl["chunks"], "compressed": False, "count_dtype": count_dtype(max_count)}
        return out.model_copy(update=update)

    def consistent(self, fs: FieldSpec) -> bool:
        return (
            fs.section == "V"
            and fs.count_dtype is not None
            and fs.chunk is not None
            and not fs.compressed
            and all(d >= 0 for d in fs.shape)
        )

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share, E: int) -> None:
        assert fs.count_dtype is not None and fs.chunk is not None and payload.counts is not None
        ustr = fs.name.encode()
        write_hp_chunks(sink, payload.counts, payload.data, counts, fs.count_dtype, E, fs.chunk, ustr, level=payload.level)

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, dt: np.dtype[Any], E: int) -> Build:
        assert fs.count_dtype is not None and fs.chunk is not None
        csec, vsec = sections_of(src, fs, 2)
        what = f"{src.path!r}: field {fs.name!r}"
        return plan_hp_chunks(src, plan, csec, vsec, span, np.dtype(fs.count_dtype), dt, tuple(fs.shape), fs.chunk, what)

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, E: int) -> Callable[[], np.ndarray]:
        assert fs.count_dtype is not None and fs.chunk is not None
        csec, vsec = sections_of(src, fs, 2)
        what = f"{src.path!r}: field {fs.name!r}"
        counts = plan_hp_counts(src, plan, csec, vsec, span, np.dtype(fs.count_dtype), fs.chunk, what)
        return lambda: counts() * E


class _VLayout:
    """Layout None: one ``V`` section, a leaf's bytes as one element (a 32-byte size entry per leaf).

    Compressed by the scda paper's per-element convention (3.4) when the
    field is.  A field without ``layout`` has it (as format 2 was first
    written); ``compress="element"`` declares it.
    """

    name: ClassVar[str | None] = None
    section: ClassVar[str] = "V"

    def describe(self, out: FieldSpec, decl: Mapping[str, Any], max_count: int) -> FieldSpec:
        return out

    def consistent(self, fs: FieldSpec) -> bool:
        return fs.section == "V" and all(d >= 0 for d in fs.shape)

    def write(self, sink: SectionSink, fs: FieldSpec, payload: Payload, counts: Share, nbytes: Share, E: int) -> None:
        assert payload.counts is not None
        sizes = _sizes(payload.counts, E)
        sink.fwrite_varray(payload.data, counts, sizes, nbytes, fs.name.encode(), encode=fs.compressed, level=payload.level)

    def plan(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, dt: np.dtype[Any], E: int) -> Build:
        """Plan this rank's leaves' size entries and bytes; decode them if compressed.

        Raises
        ------
        CheckpointError
            On this rank, if the section does not have the manifest's leaves, or a leaf's size is not a multiple of the
            value's size.
        """
        what = f"{src.path!r}: field {fs.name!r}"
        (sec,) = sections_of(src, fs, 1)
        if sec.raw.elem_count != span.N:
            raise CheckpointError(f"{what} has {sec.raw.elem_count} leaves in the file, the manifest {span.N}")
        got = plan_varray(src, plan, sec, span.offset, span.end, what, usizes=fs.compressed)

        def build() -> tuple[np.ndarray, np.ndarray]:
            sizes, data = got["sizes"], got["data"]
            if fs.compressed:
                usizes = got["usizes"]
                if usizes.size and not_multiples(usizes, E):
                    raise CheckpointError(f"{what} has a leaf whose size is not a multiple of {E} bytes")
                off = sec.raw.data_offset + got["before"]
                data, sizes = decode(data, sizes, usizes, span.offset, off, sec.raw.where), usizes
            elif sizes.size and not_multiples(sizes, E):
                raise CheckpointError(f"{what} has a leaf whose size is not a multiple of {E} bytes")
            return data.view(dt).reshape(-1, *fs.shape), counts_of(sizes, E)

        return build

    def plan_leaf_nbytes(self, src: FieldSource, plan: ReadPlan, fs: FieldSpec, span: Span, E: int) -> Callable[[], np.ndarray]:
        """Plan the reads of the size entries of ``span``'s leaves: the U entries of a compressed field, else the E entries.

        Raises
        ------
        CheckpointError
            On this rank, if the section does not have the manifest's leaves; after the plan ran, if a leaf has more bytes
            than the section holds.
        """
        (sec,) = sections_of(src, fs, 1)
        v = sec.raw
        if v.elem_count != span.N:
            raise CheckpointError(f"{src.path!r}: field {fs.name!r} has {v.elem_count} leaves in the file, the manifest {span.N}")
        raw_sec = sec.raws[0] if fs.compressed else v
        at = raw_sec.data_offset if fs.compressed else v.entries_offset
        entries = np.empty(32 * span.count, dtype=np.uint8)
        plan.read(sec.key, at + 32 * span.offset, entries)
        room = sec.entry.end - v.data_offset

        def from_sizes() -> np.ndarray:
            letter = b"U" if fs.compressed else b"E"
            sizes = parse_entries(letter, entries, first_index=span.offset, offset=at + 32 * span.offset, what=raw_sec.where)
            if sizes.size and not fs.compressed and int(sizes.max()) > room:
                raise CheckpointError(f"{src.path!r}: field {fs.name!r} has a leaf of more bytes than its section holds")
            return sizes.astype(np.int64)

        return from_sizes


def _sizes(counts: np.ndarray, value_nbytes: int) -> np.ndarray:
    """Bytes per leaf of an hp field, (n,) uint64, in one pass (a shift for power-of-two value sizes)."""
    shift = value_nbytes.bit_length() - 1
    c = np.asarray(counts, dtype=np.int64).view(np.uint64)
    if value_nbytes == 1 << shift:
        return np.left_shift(c, np.uint64(shift))
    return np.multiply(c, np.uint64(value_nbytes))


HP_LAYOUTS: dict[str | None, HpLayout] = {lay.name: lay for lay in (_CountsLayout(), _ChunksLayout(), _VLayout())}
"""The layout of each value of an hp field's manifest ``layout``."""


def hp_layout_of(decl: Mapping[str, Any]) -> HpLayout:
    """Return the layout a declaration asks for: ``chunks`` given chunks, else the V layout if compressed, else ``counts``."""
    if decl.get("chunks") is not None:
        return HP_LAYOUTS["chunks"]
    return HP_LAYOUTS[None] if decl.get("compress") else HP_LAYOUTS["counts"]
