"""Planning the read of a rank's elements of a V section: sizes in the first read, data in the second.

Every layout whose elements vary in size goes through :func:`plan_varray`:
an hp field of one V section (a leaf's values as one element), the
per-element compression of the scda paper (section 3: a compressed A or V
field is a V section of compressed elements), and layout ``chunks`` (a V
section of compressed chunks of K leaves).  A rank reads the 32-byte size
entries of its elements in the plan's first collective read; one exscan of
their sums gives where its data begin; the second read fills them.
Compressed elements are decoded in threads afterwards (:func:`decode`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._threads import default_threads, pool
from ..errors import CheckpointError, ScdaDecodeError
from ..scda import MAX_INFLATE_RATIO, ReadPlan, data_padding_nbytes, decode_elements
from ._sections import FieldSource, Section, entries_prefix, exact_sum, parse_sizes

__all__ = ["decode", "plan_varray"]


def plan_varray(
    src: FieldSource,
    plan: ReadPlan,
    sec: Section,
    first: int,
    end: int,
    what: str,
    *,
    usizes: bool = False,
    partial: int | None = None,
) -> dict[str, Any]:
    """Plan the read of elements ``first .. end - 1`` of V section ``sec``: entries now, data after the prefix sum.

    Parameters
    ----------
    src : FieldSource
    plan : ReadPlan
    sec : Section
        Its last raw section is the V section (for a compressed V field,
        the first holds the U entries).
    first, end : int
        The elements whose entries and data this rank reads, CRC'd: every
        element of the section is read by exactly one rank.
    what : str
        Names the field in messages.
    usizes : bool, optional
        Also read the U entries (uncompressed sizes) of a compressed V field.
    partial : int, optional
        One more element, below ``first``, whose bytes this rank reads
        without CRCing them (the chunk that holds this rank's first leaf,
        which a rank below reads as its own).

    Returns
    -------
    dict
        Filled when the plan has run: ``sizes`` ((end - first,) uint64 E
        entries), ``usizes`` (U entries, if asked), ``data`` (their bytes,
        uint8), ``psize`` and ``pdata`` (the partial element's), ``before``
        (bytes of the elements below ``first``).  Missing where the plan failed.

    Raises
    ------
    CheckpointError
        On this rank, if the index ends the section before its data, or the element sizes do not add up to the
        section.
    """
    v = sec.raw
    room = sec.entry.end - v.data_offset  # data and padding: the index says where the section ends
    if room < 0:
        raise CheckpointError(f"{what}: the index ends the section before its data begin")
    n = end - first
    key = f"{sec.entry.name}@{sec.entry.offset}"
    got: dict[str, Any] = {}
    ents = np.empty(32 * n, dtype=np.uint8)
    plan.read(sec.key, v.entries_offset + 32 * first, ents)
    uents = None
    if usizes:
        u = sec.raws[0]
        uents = np.empty(32 * n, dtype=np.uint8)
        plan.read(sec.key, u.data_offset + 32 * first, uents)
    pent = None
    if partial is not None:
        pent = np.empty(32, dtype=np.uint8)
        plan.read(sec.key, v.entries_offset + 32 * partial, pent, crc=False)

    def local() -> int:
        sizes = parse_sizes(ents, b"E", first, v, v.entries_offset, room, what)
        got["sizes"] = sizes
        if uents is not None:
            u = sec.raws[0]
            got["usizes"] = parse_sizes(uents, b"U", first, u, u.data_offset, 2**63 - 1, what)
        if pent is not None:
            got["psize"] = int(parse_sizes(pent, b"E", partial, v, v.entries_offset, room, what)[0])  # type: ignore[arg-type]
        got["n"] = exact_sum(sizes, room)
        return int(got["n"])

    def then(before: int) -> None:
        nbytes: int = got["n"]
        if before + nbytes > room:
            raise CheckpointError(f"{what}: its element sizes add up to more bytes than its section holds")
        got["before"] = before
        got["data"] = data = np.empty(nbytes, dtype=np.uint8)
        plan.read(sec.key, v.data_offset + before, data)
        if partial is not None:
            psize = got["psize"]
            if psize > before:
                raise CheckpointError(f"{what}: its element sizes do not add up to its section")
            got["pdata"] = pdata = np.empty(psize, dtype=np.uint8)
            plan.read(sec.key, v.data_offset + before - psize, pdata, crc=False)
        N = v.elem_count
        if (N == 0 and src.is_root) or (n and first <= N - 1 < end):  # the padding, read by the rank of the last element
            start = v.data_offset + before + nbytes
            if start + data_padding_nbytes(before + nbytes) != sec.entry.end:
                raise CheckpointError(f"{what}: its element sizes do not add up to its section")
            plan.read(sec.key, start, np.empty(sec.entry.end - start, dtype=np.uint8))
        src.cursors[key] = (end, before + nbytes)

    plan.scan(local, then, entries_prefix(src, key, v.entries_offset, first, b"E", v.where))
    return got


def decode(data: np.ndarray, sizes: np.ndarray, usizes: np.ndarray, first: int, offset: int, what: str) -> np.ndarray:
    """Decode elements of the scda compression convention (paper 3.1) in threads: their bytes, concatenated.

    Nothing is allocated for decoded data that the encoded bytes cannot
    hold (deflate expands at most ``MAX_INFLATE_RATIO``-fold).

    Raises
    ------
    ScdaDecodeError
        Naming the first element that does not decode, its global index and file offset.
    """
    n = sizes.size
    if int(usizes.sum(dtype=np.uint64)) > MAX_INFLATE_RATIO * (int(sizes.sum(dtype=np.uint64)) + n):
        raise ScdaDecodeError(f"{what}: {int(usizes.sum())} uncompressed bytes cannot come from {int(sizes.sum())} encoded bytes")
    k = min(default_threads(), max(1, n // 64))
    if k <= 1:
        return decode_elements(data, sizes, usizes, first_index=first, offset=offset, what=what)
    cuts = [n * j // k for j in range(k + 1)]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes.astype(np.int64), out=starts[1:])

    def part(j: int) -> np.ndarray:
        a, b = cuts[j], cuts[j + 1]
        s, e = int(starts[a]), int(starts[b])
        return decode_elements(data[s:e], sizes[a:b], usizes[a:b], first_index=first + a, offset=offset + s, what=what)

    return np.concatenate(list(pool(k).map(part, range(k))))
