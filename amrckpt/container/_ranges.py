"""Reading ranges of leaves on one rank: what a tool that streams a checkpoint reads (not collective).

:class:`LeafRanges` is the part of :class:`~amrckpt.container.CheckpointReader`
that runs a field's read plan over a range of leaves on the calling rank
alone, with POSIX reads: the exporters, ``amrckpt plot`` and the xarray
backend read a file this way.  With ``verify``, the CRC32 of every piece
read is kept, and the reader's ``check_crcs`` combines them per section.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import scda
from .._crc import crc32, crc32_combine
from ..errors import AmrckptError, CheckpointError
from ._convention import FieldSpec, IndexEntry
from ._handlers import handler_for
from ._metadata import explain, read_sections
from ._sections import Span, resolve

if TYPE_CHECKING:
    from ._convention import Index, Manifest
    from ._sections import Section

__all__ = ["LeafRanges"]


class LeafRanges:
    """Range reads of a :class:`~amrckpt.container.CheckpointReader`, on the calling rank alone. Not collective.

    A mixin: the reader provides the file (``_local``), its index and
    manifest, the sections found, and the planning of a field
    (``_plan``, ``_cover``); this class keeps what its range reads found
    and CRC'd (``_ranged``, ``_range_crcs``, ``_local_sections``).
    """

    path: str
    verify: bool
    is_root: bool
    cursors: dict[str, tuple[int, int]]
    file_size: int
    index: Index
    manifest: Manifest
    _ranged: set[str]
    _range_crcs: dict[int, set[tuple[int, int, int]]]
    _local_sections: dict[str, list[Section]]
    _sections: dict[str, list[Section]]

    if TYPE_CHECKING:

        def _local(self, root: bool = False) -> scda.LocalFile: ...
        def _field(self, name: str) -> FieldSpec: ...
        def entries(self, name: str) -> list[IndexEntry]: ...
        def sections(self, name: str) -> list[Section]: ...
        def _cover(self, plan: scda.ReadPlan, secs: list[Section]) -> None: ...
        def _plan(
            self, plan: scda.ReadPlan, fs: FieldSpec, span: Span | None, build: dict[str, Any], *, every_rank: bool = True
        ) -> None: ...

    def _range_crc(self, e: IndexEntry) -> int:
        """CRC32 of the bytes of index entry ``e``: the pieces range reads CRC'd, combined; the bytes between them read now.

        A piece inside bytes already combined (a range read twice) is
        skipped; one that overlaps them is read again from where they end.
        Not collective.
        """
        read = self._local().read
        crc, pos = 0, e.offset

        def upto(stop: int) -> None:
            nonlocal crc, pos
            for off in range(pos, stop, 16 << 20):
                crc = crc32(read(off, min(16 << 20, stop - off)), crc)
            pos = max(pos, stop)

        for off, n, c in sorted(self._range_crcs.get(e.offset, ())):
            end = off + n
            if end <= pos:
                continue
            if off < pos or end > e.end:  # overlaps what is combined, or not of this section: read the bytes
                upto(min(end, e.end))
                continue
            upto(off)
            crc, pos = crc32_combine(crc, c, n), end
        upto(e.end)
        return crc

    # -- ranges of leaves, on one rank -------------------------------------------------------------------

    def read_range(self, name: str, start: int, count: int) -> Any:
        """Elements ``start .. start + count - 1`` of a partitioned field, on this rank alone: its handler's plan over that range.

        Not collective.  What the handler's plan builds (as :meth:`read_field`
        for ``count`` elements).  With ``verify`` the bytes read are CRC'd as
        they are read (in the helper thread, before this returns): a range
        that holds a whole section is checked here, the others by
        :meth:`check_crcs`, from the CRC32s kept.  The zlib streams a range
        decodes (chunks, compressed elements) keep their own Adler-32 check,
        since the CRC32 of their section is not compared here; a stream that
        does not decode makes the field's sections be CRC'd, so that damage
        is reported as a :class:`~amrckpt.errors.ChecksumError`.

        Raises
        ------
        ValueError
            If the range is not inside the field, or the field is not partitioned.
        ChecksumError
            With ``verify``: the range holds a whole section that does not
            match its CRC32, or what it read does not decode and a section
            of the field does not match.
        CheckpointError, ScdaError
            If the file is damaged or cannot be read.
        """

        def plan_values(plan: scda.ReadPlan, fs: FieldSpec, span: Span) -> Callable[[], Any]:
            build: dict[str, Any] = {}
            self._plan(plan, fs, span, build, every_rank=False)
            made: Callable[[], Any] = build[fs.name]
            return made

        return self._read_range(name, start, count, plan_values)

    def _read_range(
        self, name: str, start: int, count: int, planner: Callable[[scda.ReadPlan, FieldSpec, Span], Callable[[], Any]]
    ) -> Any:
        """Run ``planner``'s plan of field ``name`` over elements ``start ..`` on this rank alone (:meth:`read_range`).

        Raises
        ------
        ValueError
            On this rank, if field ``name`` is not read by ranges, or the leaves are not inside it.
        AmrckptError
            On this rank, the error of the read (with ``verify``, the ChecksumError of a section whose bytes do not
            match).
        """
        fs = self._field(name)
        h = handler_for(fs.kind)
        N = h.elem_count(fs, self.manifest)
        if N is None:
            raise ValueError(f"field {name!r} is a {fs.kind} field: every rank reads it whole")
        if start < 0 or count < 0 or start + count > N:
            raise ValueError(f"leaves {start}..{start + count} are not inside field {fs.name!r} of {N} leaves")
        self._ranged.add(fs.name)
        f = self._local()
        if name not in self._sections and name not in self._local_sections:
            self._local_sections.update(read_sections(f.read, self.file_size, self.index, self.manifest, [name], False, self.path))
        plan = scda.ReadPlan(self.path, verify=self.verify, file_size=self.file_size, compares_sections=False)
        build = planner(plan, fs, Span(count, start, N))
        scda.LocalExecutor(f).run(plan)
        out = {name: plan.try_(build)} if plan.error is None else {}
        if plan.error is None:
            plan.try_(functools.partial(resolve, out))
        if plan.error is not None:
            if self.verify and isinstance(plan.error, AmrckptError):  # bytes that do not decode: damage says where
                for e in self.entries(name):
                    explain(f.read, self.file_size, e, True, self.path, plan.error)
            raise plan.error
        if self.verify:
            for off, pieces in plan.piece_crcs().items():
                self._range_crcs.setdefault(off, set()).update(pieces)
        return out[name]

    def read_mesh(self, start: int, count: int, mesh: str | None = None) -> np.ndarray:
        """Leaves ``start .. start + count - 1`` of a mesh (the first by default), on this rank alone. Not collective.

        Returns
        -------
        (count,) numpy.ndarray of :func:`mesh_record_dtype`
            Fields ``tree``, ``x``, ``y`` [, ``z``] (``<i4``; coordinates in units
            of ``2**-maxlevel`` of a tree) and ``level`` (``i1``), in curve order.

        Raises
        ------
        CheckpointError
            On this rank, if the file holds no mesh.
        """
        ms = self.manifest.mesh if mesh is None else next(m for m in self.manifest.meshes if m.field == mesh)
        if ms is None:
            raise CheckpointError(f"{self.path!r} holds no mesh")
        out: np.ndarray = self.read_range(ms.field, start, count)
        return out

    def read_cells(self, name: str, start: int, count: int) -> np.ndarray:
        r"""Values of leaves ``start .. start + count - 1`` of a cells (or array) field, on this rank alone. Not collective.

        Returns
        -------
        (count, \\*shape) numpy.ndarray of the field's dtype (as stored)

        Raises
        ------
        ValueError
            On this rank, if field ``name`` is not a cells (or array) field.
        """
        fs = self._field(name)
        if handler_for(fs.kind).reads_as != "values":
            raise ValueError(f"field {name!r} is a {fs.kind} field, not cells")
        out: np.ndarray = self.read_range(name, start, count)
        return out

    def read_hp(self, name: str, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        r"""Values of leaves ``start .. start + count - 1`` of an hp field, on this rank alone. Not collective.

        The sizes (or counts) of the leaves before ``start`` are read, in
        blocks, to find where the range's values begin, from where the
        previous range of the same field ended when that lies before
        ``start``: reading a field in order, range after range, reads every
        size once.

        Returns
        -------
        counts : (count,) numpy.ndarray of int64
            Values per leaf.
        values : (sum(counts), \\*shape) numpy.ndarray of the field's dtype

        Raises
        ------
        ValueError
            On this rank, if field ``name`` is not an hp field.
        """
        fs = self._field(name)
        if handler_for(fs.kind).reads_as != "runs":
            raise ValueError(f"field {name!r} is a {fs.kind} field, not hp")
        values, counts = self.read_range(name, start, count)
        return counts, values

    def read_hp_counts(self, name: str, start: int, count: int) -> np.ndarray:
        """Values per leaf of leaves ``start .. start + count - 1`` of an hp field, on this rank alone; its values are not read.

        Not collective.  The handler's plan of bytes per leaf
        (:meth:`~amrckpt.container.FieldHandler.plan_leaf_nbytes`: the counts,
        the chunks of counts, or the size entries of the leaves), run as
        :meth:`read_range` runs a plan: checked as it says.

        Returns
        -------
        (count,) numpy.ndarray of int64

        Raises
        ------
        ValueError
            If ``name`` is not an hp field, or the range is not inside it.
        CheckpointError, ChecksumError, ScdaError
            As :meth:`read_range`.
        """
        fs = self._field(name)
        if handler_for(fs.kind).reads_as != "runs":
            raise ValueError(f"field {name!r} is a {fs.kind} field, not hp")
        h = handler_for(fs.kind)
        E = h.value_dtype(fs, self.path).itemsize * math.prod(fs.shape)

        def plan_counts(plan: scda.ReadPlan, fs: FieldSpec, span: Span) -> Callable[[], Any]:
            self._cover(plan, self.sections(fs.name))
            got = h.plan_leaf_nbytes(self, plan, fs, span)
            assert callable(got), "hp fields have bytes per leaf of their own"
            return lambda: got() // E

        if E == 0:  # values of no bytes: the counts are in the values' plan alone
            return self.read_hp(name, start, count)[0]
        counts: np.ndarray = self._read_range(name, start, count, plan_counts)
        return counts
