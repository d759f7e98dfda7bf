"""Hypothesis strategies for scda section sequences and partitions, for property tests of scda readers and writers.

Needs hypothesis (the ``test`` extra); imported only as
``amrckpt.testing.strategies``, never by ``import amrckpt.testing``.
:func:`section_specs` draws one section of any type (``I``, ``B``, ``A``,
``V``; scda paper section 2) with its user string, payload and ``encode``;
:func:`partitions` draws ``elem_counts`` over P ranks; :func:`write_specs`
and :func:`read_specs` write and read such a sequence through
:mod:`amrckpt.scda`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .. import scda


@dataclass(frozen=True)
class Spec:
    """One section to write: type, user string, payload, element sizes, encode."""

    type: str
    user_string: bytes
    data: bytes
    sizes: tuple[int, ...]  # element sizes (A: all equal; I, B: one element)
    elem_size: int = 0
    encode: bool = False
    root: int = 0


@st.composite
def section_specs(draw: Any) -> Spec:
    """Draw one section: its type, user string (reserved magic strings where they would start a pair), payload, sizes, root."""
    t = draw(st.sampled_from("IBAV"))
    # The magic strings are reserved where they start a pair (I: B and A magic;
    # A: V magic); elsewhere they are ordinary strings that must not confuse a reader.
    reserved = {"I": (scda.MAGIC_B, scda.MAGIC_A), "A": (scda.MAGIC_V,)}.get(t, ())
    magic = st.sampled_from([m for m in (scda.MAGIC_B, scda.MAGIC_A, scda.MAGIC_V) if m not in reserved])
    ustr = draw(st.one_of(st.binary(max_size=58).filter(lambda u: u not in reserved), st.just(b""), magic))
    root = draw(st.integers(0, 7))
    if t == "I":
        return Spec("I", ustr, draw(st.binary(min_size=32, max_size=32)), (32,), root=root)
    encode = draw(st.booleans())
    if t == "B":
        data = draw(st.one_of(st.binary(max_size=200), st.just(b"ends in LF\n")))
        return Spec("B", ustr, data, (len(data),), encode=encode, root=root)
    if t == "A":
        n = draw(st.integers(0, 40))
        e = draw(st.integers(0, 24))
        data = draw(st.binary(min_size=n * e, max_size=n * e))
        return Spec("A", ustr, data, (e,) * n, elem_size=e, encode=encode)
    sizes = tuple(draw(st.lists(st.integers(0, 60), max_size=40)))
    data = draw(st.binary(min_size=sum(sizes), max_size=sum(sizes)))
    return Spec("V", ustr, data, sizes, encode=encode)


@st.composite
def partitions(draw: Any, n: int, size: int) -> list[int]:
    """Draw ``elem_counts``: a partition of ``n`` elements over ``size`` ranks (empty ranks included)."""
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=size - 1, max_size=size - 1)))
    bounds = [0, *cuts, n]
    return [bounds[p + 1] - bounds[p] for p in range(size)]


def write_specs(comm: Any, path: Any, specs: list[Spec], parts: list[list[int]], style: scda.Style) -> None:
    """Write ``specs`` on this rank with element partitions ``parts`` (one per section)."""
    with scda.fopen_write(path, b"property", comm=comm, style=style) as f:
        write_into(f, comm, specs, parts)


def write_into(f: scda.ScdaWriter, comm: Any, specs: list[Spec], parts: list[list[int]]) -> None:
    """Write ``specs`` into an open file (see :func:`write_specs`)."""
    P, r = comm.size, comm.rank
    for spec, counts in zip(specs, parts, strict=True):
        if spec.type in "IB":
            root = spec.root % P
            data = spec.data if r == root else None
            if spec.type == "I":
                f.fwrite_inline(data, spec.user_string, root=root)
            else:
                f.fwrite_block(data, spec.user_string, root=root, encode=spec.encode)
            continue
        sizes = np.asarray(spec.sizes, dtype=np.int64)
        C = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        lo, hi = int(C[r]), int(C[r + 1])
        local = spec.data[int(offs[lo]) : int(offs[hi])]
        if spec.type == "A":
            f.fwrite_array(local, counts, spec.elem_size, spec.user_string, encode=spec.encode)
        else:
            proc = [int(offs[C[p + 1]] - offs[C[p]]) for p in range(P)]
            f.fwrite_varray(local, counts, sizes[lo:hi], proc, spec.user_string, encode=spec.encode)


def read_specs(comm: Any, path: Any, parts: list[list[int]]) -> list[tuple[str, bytes, bytes]]:
    """Read every logical section with decode; return (type, user string, all data in rank order)."""
    out = []
    with scda.fopen_read(path, comm=comm) as f:
        k = 0
        while (h := f.fread_section_header(decode=True)) is not None:
            counts = parts[k]
            local: bytes
            if h.type == "I":
                local = f.fread_inline_data(root=0) or b""
            elif h.type == "B":
                block = f.fread_block_data(root=0)
                local = b"" if block is None else block.tobytes()
            elif h.type == "A":
                local = _bytes(f.fread_array_data(counts))
            else:
                s = f.fread_varray_sizes(counts)
                local = _bytes(f.fread_varray_data(counts, s, f.proc_sizes()))
            out.append((h.type, h.user_string, b"".join(comm.allgather(local))))
            k += 1
    return out


def _bytes(a: np.ndarray | None) -> bytes:
    return b"" if a is None else a.tobytes()
