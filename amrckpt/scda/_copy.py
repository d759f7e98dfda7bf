"""Reading a whole section's data and writing it again: the copy at the heart of converting files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._layout import SectionHeader
from ._reader import ScdaReader, _uniform
from ._writer import ScdaWriter, SectionRecord

__all__ = ["SectionData", "copy_section", "read_section_data", "write_section_data"]


@dataclass
class SectionData:
    """One section's data as this rank read it (what :func:`read_section_data` returns).

    Attributes
    ----------
    header : SectionHeader
        The (decoded) header.
    data : numpy.ndarray, bytes or None
        I and B: the data on the root; A and V: this rank's elements.
    elem_counts : (P,) list of int or None
        A and V: the uniform split the data was read with.
    elem_sizes : (N_p,) numpy.ndarray of uint64 or None
        V: this rank's element sizes (uncompressed).
    proc_sizes : (P,) list of int or None
        V: S_p of every rank.
    """

    header: SectionHeader
    data: Any
    elem_counts: list[int] | None = None
    elem_sizes: Any = None
    proc_sizes: list[int] | None = None


def read_section_data(f: ScdaReader, h: SectionHeader) -> SectionData:
    """Read the data of the section whose header ``h`` was just read, split uniformly over the ranks. Collective.

    I and B data go to rank 0; A and V elements are split as p4est_load
    splits leaves (rank p reads floor(N p / P) .. floor(N (p + 1) / P)).
    """
    if h.type == "I":
        return SectionData(h, f.fread_inline_data(root=0))
    if h.type == "B":
        return SectionData(h, f.fread_block_data(root=0))
    counts = _uniform(h.elem_count, f.comm.size)
    if h.type == "A":
        return SectionData(h, f.fread_array_data(counts), counts)
    sizes = f.fread_varray_sizes(counts)
    proc = f.proc_sizes()
    return SectionData(h, f.fread_varray_data(counts, sizes, proc), counts, sizes, proc)


def write_section_data(
    w: ScdaWriter, d: SectionData, *, user_string: bytes | None = None, encode: bool = False, level: int = 9
) -> SectionRecord:
    """Write what :func:`read_section_data` read as one (logical) section, compressed or not. Collective.

    Returns
    -------
    SectionRecord
        The writer's record of the (first raw) section written.
    """
    h = d.header
    u = h.user_string if user_string is None else user_string
    if h.type == "I":
        return w.fwrite_inline(d.data, u)
    if h.type == "B":
        return w.fwrite_block(d.data, u, encode=encode, level=level)
    assert d.elem_counts is not None
    if h.type == "A":
        return w.fwrite_array(d.data, d.elem_counts, h.elem_size, u, encode=encode, level=level)
    assert d.proc_sizes is not None
    return w.fwrite_varray(d.data, d.elem_counts, d.elem_sizes, d.proc_sizes, u, encode=encode, level=level)


def copy_section(f: ScdaReader, w: ScdaWriter, *, encode: bool = False, level: int = 9) -> SectionHeader | None:
    """Copy the next section of ``f`` into ``w`` (decoded on reading, compressed on writing if ``encode``). Collective.

    Returns
    -------
    SectionHeader or None
        The header of the section copied; None at the end of ``f``.
    """
    h = f.fread_section_header(decode=True)
    if h is None:
        return None
    write_section_data(w, read_section_data(f, h), encode=encode and h.type != "I", level=level)
    return h
