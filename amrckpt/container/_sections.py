"""What a field handler sees of a checkpoint: its sections as found, this rank's span, and the two protocols.

zarr's codecs receive a ``ByteGetter`` / ``ByteSetter``, never a concrete
store; field handlers receive a :class:`FieldSource` when they plan reads
(and return a :data:`Build`) and a :class:`SectionSink` with the field's
:class:`Payload` when they write, never the checkpoint reader or writer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._threads import default_threads, map_shared, pool
from ..comm import Comm
from ..errors import CheckpointError
from ..scda import Checksummed, RawSection, SectionHeader, parse_entries
from ._convention import FieldSpec, IndexEntry, Manifest

__all__ = [
    "Build",
    "Deferred",
    "FieldSource",
    "Payload",
    "Section",
    "SectionSink",
    "Span",
    "check_a",
    "column_prefix",
    "counts_of",
    "entries_prefix",
    "exact_sum",
    "int64_later",
    "not_multiples",
    "parse_sizes",
    "resolve",
    "sections_of",
]


Build = Callable[[], Any]
"""What a handler's plan returns: builds the field's value once the plan has run."""


@dataclass
class Payload:
    r"""One field's data on this rank, checked by the schema and ready for its handler's :meth:`FieldHandler.write`.

    Attributes
    ----------
    data : bytes, numpy.ndarray or amrckpt.scda.Checksummed
        inline: the 32 bytes of JSON; block: the JSON bytes; ndarray: the
        array's bytes (the same on every rank); mesh: (N_p,) leaf records;
        cells and array: (N_p, \\*shape) values; hp: (sum(counts), \\*shape)
        values.  Arrays in the byte order of the file, contiguous.  An
        array written as it is may come as a :class:`~amrckpt.scda.Checksummed`
        (the array and its CRC32), which the handler passes to the sink as
        it is; :attr:`array` is the array either way.
    counts : (N_p,) numpy.ndarray of int64, optional
        hp: values of each local leaf.
    level : int
        zlib level of a compressed or chunked field.
    """

    data: Any = None
    counts: np.ndarray | None = None
    level: int = 9

    @property
    def array(self) -> Any:
        """``data``, or the data of a :class:`~amrckpt.scda.Checksummed`."""
        return self.data.data if isinstance(self.data, Checksummed) else self.data


@dataclass(frozen=True)
class Section:
    """One (logical) section of a field as the root found it when opening (broadcast with the index).

    Attributes
    ----------
    header : amrckpt.scda.SectionHeader
        The decoded header: the type and sizes of what was written (for a
        compression pair, of what was compressed).
    raws : tuple of amrckpt.scda.RawSection
        Its raw sections (two for a compression pair, the inline or U-entry section first).
    entry : IndexEntry
        Its index entry (offset, end, CRC32).
    known : tuple of (int, int, int)
        ``(offset, nbytes, crc32)`` of the pieces the root read and CRCed
        (headers, the padding of A sections); a read plan adds them to the
        section's CRC32 on the root.
    data : bytes or None
        I and B (decoded if compressed): the data, whose CRC32 the root
        checked; else None.
    """

    header: SectionHeader
    raws: tuple[RawSection, ...]
    entry: IndexEntry
    known: tuple[tuple[int, int, int], ...] = ()
    data: bytes | None = None

    @property
    def raw(self) -> RawSection:
        """The raw section that holds the data (the second of a pair)."""
        return self.raws[-1]

    @property
    def key(self) -> int:
        """The section's first byte: what a read plan knows it by."""
        return self.entry.offset


@dataclass(frozen=True)
class Span:
    """A rank's part of a partitioned field: ``count`` elements from global element ``offset``; ``N`` in all."""

    count: int
    offset: int
    N: int

    @property
    def end(self) -> int:
        """One past this rank's last element."""
        return self.offset + self.count

    @property
    def holds_last(self) -> bool:
        """Whether this rank holds the field's last element (no rank does of an empty field)."""
        return self.count > 0 and self.offset + self.count == self.N


class FieldSource(Protocol):
    """What a handler plans a field's reads from (the checkpoint reader is one). Not collective.

    Attributes
    ----------
    path : str
        Names the file in messages.
    manifest : Manifest
    file_size : int
    is_root : bool
        Whether this rank reads what the root reads of a section (its
        padding when no rank holds an element).
    cursors : dict of str to (int, int)
        Where a prefix sum over a field's elements stopped last, on this
        rank: ``(element, sum)``, so that a tool reading a field range
        after range sums every size once.
    """

    path: str
    manifest: Manifest
    file_size: int
    is_root: bool
    cursors: dict[str, tuple[int, int]]

    def sections(self, name: str) -> list[Section]:
        """Return the sections of field ``name`` as found in the file, in file order."""
        ...


class SectionSink(Protocol):
    """What a handler writes a field's sections to: the scda writer's calls (:class:`amrckpt.scda.ScdaWriter` is one).

    Every method is collective over ``comm``; the data of inline and block
    sections is passed on every rank (the root's is written).
    """

    comm: Comm

    def fwrite_inline(self, data: Any, user_string: bytes | str) -> Any:
        """Write an inline section I."""
        ...

    def fwrite_block(self, data: Any, user_string: bytes | str, *, encode: bool = False, level: int = 9) -> Any:
        """Write a block section B (compressed with ``encode``)."""
        ...

    def fwrite_array(
        self, data: Any, elem_counts: Any, elem_size: int, user_string: bytes | str, *, encode: bool = False, level: int = 9
    ) -> Any:
        """Write an array section A of this rank's elements."""
        ...

    def fwrite_varray(
        self,
        data: Any,
        elem_counts: Any,
        elem_sizes: Any,
        proc_sizes: Any,
        user_string: bytes | str,
        *,
        encode: bool = False,
        level: int = 9,
    ) -> Any:
        """Write a variable-size array section V of this rank's elements."""
        ...


def sections_of(src: FieldSource, fs: FieldSpec, n: int) -> list[Section]:
    """Return the first ``n`` sections of field ``fs``, checked against the manifest (not collective; the same on every rank).

    Raises
    ------
    CheckpointError
        If the index has fewer, or one is not the field the manifest describes.
    """
    secs = src.sections(fs.name)
    if len(secs) < n:
        raise CheckpointError(f"{src.path!r}: the index has {len(secs)} sections of field {fs.name!r}, not {n}")
    for sec in secs[:n]:
        h = sec.header
        if h.type != fs.section or h.user_string != fs.name.encode() or h.decoded != fs.compressed:
            raise CheckpointError(
                f"{src.path!r}: the section at byte {sec.entry.offset} is not field {fs.name!r} as the manifest describes it"
            )
    return secs[:n]


def check_a(src: FieldSource, fs: FieldSpec, sec: Section, N: int, E: int, what: str, per_leaf: bool) -> None:
    """Check an A section's N and E against the manifest, before anything is allocated by them.

    Raises
    ------
    CheckpointError
        On this rank, if the section's N or E differs from the manifest's.
    """
    what_n = "leaves" if per_leaf else "elements"
    h = sec.header
    if h.elem_count != N:
        raise CheckpointError(f"{src.path!r}: field {fs.name!r} has {h.elem_count} {what_n} in the file, the manifest {N}")
    if h.elem_size != E:
        raise CheckpointError(f"{src.path!r}: field {fs.name!r} has {h.elem_size}-byte {what} in the file, not {E}-byte ones")


def _prefix(src: FieldSource, key: str, first: int, block: int, sum_of: Callable[[Any, int, int], int]) -> Callable[[Any], int]:
    """Return ``prefix(read)``: the sum of ``sum_of(read, lo, n)`` over elements ``0 .. first - 1``, in blocks.

    From where the last sum of ``key`` stopped on this rank (``src.cursors``) when that is at or before ``first``.
    """

    def prefix(read: Any) -> int:
        at, acc = src.cursors.get(key, (0, 0))
        if at > first:
            at, acc = 0, 0
        for lo in range(at, first, block):
            acc += sum_of(read, lo, min(block, first - lo))
        return acc

    return prefix


def entries_prefix(src: FieldSource, key: str, entries_offset: int, first: int, letter: bytes, what: str) -> Callable[[Any], int]:
    """Return ``prefix(read)``: the sum of the 32-byte ``letter`` entries ``0 .. first - 1`` at ``entries_offset``, on this rank."""

    def sum_of(read: Any, lo: int, n: int) -> int:
        off = entries_offset + 32 * lo
        buf = np.frombuffer(read(off, 32 * n), dtype=np.uint8)
        return int(parse_entries(letter, buf, first_index=lo, offset=off, what=what).sum(dtype=np.uint64))

    return _prefix(src, key, first, 1 << 16, sum_of)


def column_prefix(src: FieldSource, key: str, data_offset: int, dtype: np.dtype[Any], first: int) -> Callable[[Any], int]:
    """Return ``prefix(read)``: the sum of integers ``0 .. first - 1`` of ``dtype`` at ``data_offset``, on this rank."""

    def sum_of(read: Any, lo: int, n: int) -> int:
        raw = read(data_offset + lo * dtype.itemsize, n * dtype.itemsize)
        return int(np.frombuffer(raw, dtype=dtype).sum(dtype=np.uint64))

    return _prefix(src, key, first, 1 << 20, sum_of)


def exact_sum(a: np.ndarray, most: int) -> int:
    """Return the sum of non-negative integers ``a``, each at most ``most``, exactly (int64 sums of chunks that cannot overflow)."""
    if a.size == 0:
        return 0
    if a.size * max(most, 1) < 2**32:  # a uint32 sum cannot overflow: twice as fast as int64's over narrow counts
        return int(a.sum(dtype=np.uint32))
    step = max(1, (2**63 - 1) // max(most, 1))
    if a.size <= step:
        return int(a.sum(dtype=np.int64))
    return sum(int(a[i : i + step].sum(dtype=np.int64)) for i in range(0, a.size, step))


_WIDEN_LATER = 1 << 20
"""Counts of this many leaves or more are widened to int64 on a helper thread (:func:`int64_later`)."""


def int64_later(a: np.ndarray) -> Callable[[], np.ndarray]:
    """Return a function that gives ``a`` as a new int64 array, widened now or, if large, on a helper thread meanwhile.

    For the counts of an hp field, read before its values: where this rank
    has a core to spare (:func:`amrckpt._threads.default_threads`), the
    copy runs while the values are read instead of between the two reads.
    """
    if a.size < _WIDEN_LATER or default_threads() < 2:
        out = a.astype(np.int64)
        return lambda: out
    return pool(1).submit(a.astype, np.int64).result


def counts_of(sizes: np.ndarray, value_nbytes: int) -> np.ndarray:
    """Values per leaf from bytes per leaf, (n,) int64; a shift for power-of-two value sizes."""
    counts = sizes.view(np.int64)  # sizes are below 2**63: they fit the file
    shift = value_nbytes.bit_length() - 1
    return counts >> shift if value_nbytes == 1 << shift else counts // value_nbytes


def not_multiples(sizes: np.ndarray, value_nbytes: int) -> bool:
    """Whether a size is not a multiple of ``value_nbytes``; for a power of two, one OR-reduction (no temporary)."""
    if value_nbytes & (value_nbytes - 1) == 0:
        return bool(int(np.bitwise_or.reduce(sizes)) & (value_nbytes - 1))
    return bool(np.any(sizes % np.uint64(value_nbytes)))


def parse_sizes(
    buf: np.ndarray, letter: bytes, first: int, raw: RawSection, entries_offset: int, room: int, what: str
) -> np.ndarray:
    """Parse 32-byte ``letter`` entries of elements ``first ..`` (read from ``entries_offset + 32 first``), each at most ``room``.

    Raises
    ------
    ScdaFormatError
        Naming the first malformed entry.
    CheckpointError
        If an element has more bytes than its section holds.
    """
    sizes = parse_entries(letter, buf, first_index=first, offset=entries_offset + 32 * first, what=raw.where)
    if sizes.size and int(sizes.max()) > room:
        raise CheckpointError(f"{what} has an element of more bytes than its section holds")
    return sizes


class Deferred:
    """A field's value still to be decoded: ``tasks`` to run in threads, then ``then()`` builds it.

    What a handler's build returns when its work is CPU-bound and splits
    (chunks to decompress): :func:`resolve` runs the tasks of every field
    of a read in one pass of the threads, so that no field waits for its
    own while threads are idle.  ``then()`` returns the value, or another
    Deferred for a later pass (hp values, whose sizes come from their
    decoded counts).

    Parameters
    ----------
    tasks : list of (callable, int)
        ``(fn, n)``: ``fn(i)`` for ``i`` in ``range(n)``, each returning
        nothing; all run in any order, at the same time.
    then : callable
        Called once every task has run.
    early : bool, optional
        A small first stage (hp counts) that the Deferred its ``then``
        returns depends on: the early tasks of all fields run in a pass of
        their own, before the others', so that what they lead to joins the
        others' pass.
    """

    __slots__ = ("early", "tasks", "then")

    def __init__(self, tasks: list[tuple[Callable[[int], None], int]], then: Callable[[], Any], *, early: bool = False) -> None:
        self.tasks = tasks
        self.then = then
        self.early = early


def resolve(values: dict[str, Any]) -> None:
    """Replace every :class:`Deferred` in ``values`` by what it builds, in place; the tasks of all in one pass per stage.

    Not collective.  The early tasks (:class:`Deferred`) first, in a pass
    of their own; then the tasks of every field at once.  Runs on
    :func:`amrckpt._threads.default_threads` threads (this one among
    them), each taking the next ``fn(i)`` not yet taken.

    Raises
    ------
    Exception
        The first raised by a task or a ``then`` (after every task of the
        pass has stopped).
    """
    pending = [k for k, v in values.items() if isinstance(v, Deferred)]
    while pending:
        now = [k for k in pending if values[k].early] or pending
        items = [(fn, i) for k in now for fn, n in values[k].tasks for i in range(n)]
        map_shared(lambda item: item[0](item[1]), items, default_threads())
        for k in now:
            values[k] = values[k].then()
        pending = [k for k in pending if isinstance(values[k], Deferred)]
