"""How the fields follow one step of the mesh on one rank: cells and hp fields, refined or coarsened; an hp field's degree.

Not collective, vectorized: the hp fields' averages and injections run in
compiled loops (``amrckpt/_kernels.c``) where the extension is built; the
numpy code, which gives the same bits, loops over the ``2**dim`` children,
chunks of values (:data:`_CHUNK_VALUES`) and distinct degrees, never over
leaves.  A step is an :class:`amrckpt.sfc.AdaptStep`.
"""

from __future__ import annotations

import importlib
import itertools
import math
import operator
from types import ModuleType
from typing import Any

import numpy as np

from .._threads import default_threads, map_shared
from ..container import HpData
from ..errors import AdaptError
from ..sfc import AdaptStep, family_members
from ._ops import CellTransfer, HpTransfer

try:  # the compiled loops (amrckpt/_kernels.c, an optional extension): without them, numpy's code below
    _kernels: ModuleType | None = importlib.import_module("amrckpt._kernels")
except ImportError:  # pragma: no cover - a build without a C compiler
    _kernels = None

__all__ = ["apply_cells", "apply_hp", "change_degree"]


def _pairwise_sum(parts: list[np.ndarray]) -> np.ndarray:
    """Sum ``2**k`` arrays pairwise in order: ((a0 + a1) + (a2 + a3)) + ... (new arrays for the first sums, in place after)."""
    if len(parts) > 1:
        parts = [parts[i] + parts[i + 1] for i in range(0, len(parts), 2)]
    while len(parts) > 1:
        parts = [np.add(parts[i], parts[i + 1], out=parts[i]) for i in range(0, len(parts), 2)]
    return parts[0]


def _check_out(got: Any, shape: tuple[int, ...], dtype: np.dtype[Any], what: str) -> np.ndarray:
    a = np.asarray(got)
    if a.shape != shape:
        raise AdaptError(f"{what} returned shape {a.shape}, not {shape}")
    if a.dtype != dtype:
        if not np.can_cast(a.dtype, dtype, casting="same_kind"):
            raise AdaptError(f"{what} returned dtype {a.dtype}, not {dtype}")
        a = a.astype(dtype)
    return a


def apply_cells(values: np.ndarray, step: AdaptStep, dim: int, transfer: CellTransfer, name: str = "cells") -> np.ndarray:
    r"""Return a cells field's values after one step of the mesh. Not collective, vectorized.

    Parameters
    ----------
    values : (n, \*shape) numpy.ndarray
        Over the leaves before the step.
    step : amrckpt.sfc.AdaptStep
    dim : {2, 3}
    transfer : CellTransfer
    name : str, optional
        The field's name, for errors.

    Returns
    -------
    (n', \*shape) numpy.ndarray
        Over the leaves after the step, the same dtype.

    Raises
    ------
    AdaptError
        Averaging a dtype that is not float or complex, or a user function
        returning the wrong shape or dtype.
    """
    F = 1 << dim
    m = step.mask
    if values.shape[0] != m.shape[0]:
        raise AdaptError(f"{name}: {values.shape[0]} values for {m.shape[0]} leaves")
    out: np.ndarray
    if step.kind == "refine":
        if m.shape[0] and m.all():  # every leaf: a repeat by a scalar
            out = np.repeat(values, F, axis=0)
            if transfer.refine == "inject":
                return out
        else:
            out = np.repeat(values, np.where(m, F, 1), axis=0)
        idx = np.flatnonzero(m)
        if transfer.refine != "inject" and idx.size:
            counts = np.where(m, F, 1)
            start = np.cumsum(counts) - counts
            kids = _check_out(transfer.refine(values[idx]), (idx.size, F, *values.shape[1:]), values.dtype, f"{name}: refine")
            pos = (start[idx][:, None] + np.arange(F)[None, :]).reshape(-1)
            out[pos] = kids.reshape(pos.size, *values.shape[1:])
        return out
    k = int(np.count_nonzero(m))
    if k * F == m.shape[0] and transfer.coarsen == "average" and values.dtype.kind in "fc":
        # every leaf is in a family (families consecutive from leaf 0): members by reshaping, no gathers
        fam = values.reshape(k, F, *values.shape[1:])
        parent: np.ndarray = _pairwise_sum([fam[:, c] for c in range(F)])
        parent *= values.dtype.type(1.0 / F)
        return parent
    members = family_members(m, dim)
    out = values[~members]
    idx = np.flatnonzero(m)
    if idx.size == 0:
        return out
    where = np.flatnonzero(m[~members])
    if transfer.coarsen == "average":
        if values.dtype.kind not in "fc":
            raise AdaptError(f"{name}: cannot average values of dtype {values.dtype}; give CellTransfer(coarsen=fn)")
        parent = _pairwise_sum([values[idx + c] for c in range(F)]) * values.dtype.type(1.0 / F)
    else:
        kids = values[(idx[:, None] + np.arange(F)[None, :]).reshape(-1)].reshape(idx.size, F, *values.shape[1:])
        parent = _check_out(transfer.coarsen(kids), (idx.size, *values.shape[1:]), values.dtype, f"{name}: coarsen")
    out[where] = parent
    return out


def _run_index(offsets: np.ndarray, src: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Return the positions of the runs ``offsets[s] .. offsets[s] + counts[k]`` for ``s = src[k]``, concatenated.

    One repeat and an in-place add (numpy.intp: what indexing takes without a conversion).
    """
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    take = np.repeat((offsets[src] - starts).astype(np.intp), counts)
    take += np.arange(total, dtype=np.intp)
    return take


_CHUNK_VALUES = 1 << 16
"""Values per chunk of the hp transfers (of the larger side: the children's): the chunk's index arrays stay in a core's cache."""


def _chunks(starts: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Return ``(a, b)``: consecutive ranges of runs of about ``size`` values (``starts``: the runs' offsets and the total)."""
    k = starts.shape[0] - 1
    if k <= 0:
        return []
    marks = np.searchsorted(starts, np.arange(size, int(starts[-1]), size), side="left")
    bounds = np.unique(np.concatenate([[0], marks, [k]])).tolist()
    return list(itertools.pairwise(bounds))


def _segment_copy(values: np.ndarray, out: np.ndarray, starts: np.ndarray, lengths: np.ndarray, delta: np.ndarray) -> None:
    """Fill ``out``: run k (``lengths[k]`` values from ``starts[k]``) is ``values[starts[k] + delta[k]:][:lengths[k]]``.

    Per chunk of about :data:`_CHUNK_VALUES` values out (a loop over chunks,
    not runs): the position in ``values`` of each value out, one repeat
    of the runs' ``delta`` and one add of a ramp made once, then one
    ``take`` straight into ``out``.  ``delta``: intp.
    """
    chunks = _chunks(starts, _CHUNK_VALUES)
    if not chunks:
        return
    ends = starts[[b for _, b in chunks]] - starts[[a for a, _ in chunks]]
    ramp = np.arange(int(ends.max()), dtype=np.intp)
    for a, b in chunks:
        s0, s1 = int(starts[a]), int(starts[b])
        take = np.repeat(delta[a:b] + s0, lengths[a:b])
        take += ramp[: s1 - s0]
        np.take(values, take, axis=0, out=out[s0:s1], mode="clip")  # positions in range by construction


def _offsets(counts: np.ndarray) -> np.ndarray:
    """``[0, cumsum(counts)]``, int64."""
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _rows(values: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
    """Return the values as (n, c, ...) rows when each of the n leaves holds the same c > 0 values, else None."""
    if counts.shape[0] == 0 or int(counts[0]) == 0 or not bool((counts == counts[0]).all()):
        return None
    return values.reshape(counts.shape[0], int(counts[0]), *values.shape[1:])


def _split(starts: np.ndarray, threads: int) -> list[tuple[int, int]]:
    """Return up to ``threads`` consecutive ranges of runs of about equal values (``starts``: the runs' offsets and the total)."""
    cuts = np.searchsorted(starts, np.linspace(0, int(starts[-1]), threads + 1)[1:-1])
    bounds = [0, *sorted(set(cuts.tolist())), starts.shape[0] - 1]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


def _compiled_inject(values: np.ndarray, offsets: np.ndarray, counts: np.ndarray, mask: np.ndarray, F: int) -> np.ndarray | None:
    """Return :func:`_inject_runs`'s result from the compiled loop (``amrckpt/_kernels.c``: a ``memcpy`` per run), or None.

    Any dtype in C order: the values are copied as bytes.  The leaves are
    split into about equal ranges of values, one per thread (the loop
    releases the GIL); each range's output starts after the runs before it.
    """
    if _kernels is None or not values.flags.c_contiguous:
        return None
    isz = values.dtype.itemsize * math.prod(values.shape[1:])
    every = bool(mask.all())
    o64, c64 = np.ascontiguousarray(offsets[:-1], dtype=np.int64), np.ascontiguousarray(counts, dtype=np.int64)
    mask = np.ascontiguousarray(mask, dtype=bool)
    parts = _split(offsets, default_threads())
    sizes = [int(c64[a:b].sum()) * F if every else int(c64[a:b].sum() + (F - 1) * c64[a:b][mask[a:b]].sum()) for a, b in parts]
    out = np.empty((sum(sizes), *values.shape[1:]), dtype=values.dtype)
    if isz == 0 or not parts:
        return out
    src, dest = values.reshape(-1).view(np.uint8), out.reshape(-1).view(np.uint8)
    ends = np.cumsum([0, *sizes]) * isz

    def run(k: int) -> None:
        a, b = parts[k]
        _kernels.repeat_runs(src, o64[a:b], c64[a:b], None if every else mask[a:b], dest[ends[k] : ends[k + 1]], F, isz)

    map_shared(run, range(len(parts)), default_threads())
    return out


def _inject_runs(values: np.ndarray, offsets: np.ndarray, counts: np.ndarray, mask: np.ndarray, F: int) -> np.ndarray:
    """Return the runs of the leaves, those of the marked leaves ``F`` times in a row (their children's). Vectorized.

    The compiled loop (:func:`_compiled_inject`) where it is built;
    otherwise the runs out, their lengths and where each starts in ``values`` are
    built over the runs (``F`` per marked leaf), then copied by
    :func:`_segment_copy`.  When every leaf holds as many values, the
    leaves are rows: one repeat of whole rows.
    """
    got = _compiled_inject(values, offsets, counts, mask, F)
    if got is not None:
        return got
    rows = _rows(values, counts)
    if rows is not None:
        got = np.repeat(rows, F if mask.all() else np.where(mask, F, 1), axis=0)
        return got.reshape(got.shape[0] * got.shape[1], *values.shape[1:])  # not -1: a value may have no components
    src = offsets[:-1].astype(np.intp)
    if mask.all():  # run r of leaf i starts at F offsets[i] + r counts[i]
        lengths = np.repeat(counts, F)
        delta = (src * (1 - F))[:, None] - np.arange(F, dtype=np.intp)[None, :] * counts.astype(np.intp)[:, None]
        delta = delta.reshape(-1)
        starts = _offsets(lengths)
    else:
        n_out = np.where(mask, F, 1)
        lengths = np.repeat(counts, n_out)
        starts = _offsets(lengths)
        delta = np.repeat(src, n_out) - starts[:-1].astype(np.intp)
    out = np.empty((int(starts[-1]), *values.shape[1:]), dtype=values.dtype)
    _segment_copy(values, out, starts, lengths, delta)
    return out


def _compiled_means(values: np.ndarray, fo: np.ndarray, pc: np.ndarray, F: int) -> np.ndarray | None:
    """Return :func:`_average_runs`'s result from the compiled loop (``amrckpt/_kernels.c``), or None where it does not serve.

    It serves real floating values (float64, float32) in C order: each value
    is ``m`` scalars (its components), so family ``j`` starts at scalar
    ``m fo[j]`` with ``m pc[j]`` scalars per child.  The families are split
    into about equal ranges of values, one per thread
    (:func:`amrckpt._threads.default_threads`; the loop releases the GIL).
    Complex values take the numpy loop: numpy multiplies them by a complex
    ``1/F``, whose signed zeros the compiled loop would not reproduce.
    """
    if _kernels is None or values.dtype not in (np.float64, np.float32) or not values.flags.c_contiguous:
        return None
    m = math.prod(values.shape[1:])
    fo_s = fo.astype(np.int64) * m
    pc_s = pc.astype(np.int64) * m
    starts = _offsets(pc_s)
    out = np.empty((int(pc.sum()), *values.shape[1:]), dtype=values.dtype)
    flat, dest = values.reshape(-1), out.reshape(-1)
    threads = default_threads()

    def run(ab: tuple[int, int]) -> None:
        a, b = ab
        _kernels.family_means(flat, fo_s[a:b], pc_s[a:b], dest[starts[a] : starts[b]], F, 1.0 / F)

    map_shared(run, _split(starts, threads), threads)
    return out


def _average_runs(
    values: np.ndarray, counts: np.ndarray, first: np.ndarray, fo: np.ndarray, pc: np.ndarray, F: int, tiled: bool = False
) -> np.ndarray:
    """Return the parents' runs: value k of the family at leaf ``first[j]`` is the pairwise mean of ``values[fo[j] + r pc[j] + k]``.

    ``counts``: every leaf's; ``fo``: where each family's values start;
    ``tiled``: the families are all the leaves, in order (then a chunk's
    children's values are one slice, copied at once into a buffer in which
    the gathers find them in cache).

    The compiled loop (:func:`_compiled_means`) where it is built and
    serves; otherwise numpy, with the same bits (a NaN's sign aside: where
    two NaNs meet in an add, the instruction chooses which comes out):
    per chunk of parents' values (a loop over chunks): the position of each
    value of child 0 (one repeat and one add of a ramp made once), ``F``
    gathers into buffers reused by every chunk, each after an in-place
    shift by the count, summed pairwise in child order into the output,
    times ``2**-dim``.  When every leaf holds as many values, the
    leaves are rows: ``F`` takes of whole rows.
    """
    got = _compiled_means(values, fo, pc, F)
    if got is not None:
        return got
    rows = _rows(values, counts)
    if rows is not None:
        parent = _pairwise_sum([np.take(rows, first + r, axis=0) for r in range(F)])
        parent *= values.dtype.type(1.0 / F)
        return parent.reshape(parent.shape[0] * parent.shape[1], *values.shape[1:])
    P0 = _offsets(pc)
    shape = values.shape[1:]
    out = np.empty((int(P0[-1]), *shape), dtype=values.dtype)
    chunks = _chunks(P0, _CHUNK_VALUES // F)
    if not chunks:
        return out
    scale = values.dtype.type(1.0 / F)
    c = pc.astype(np.intp)
    d0 = fo.astype(np.intp) - P0[:-1].astype(np.intp)  # child 0's first value, from the parent's
    longest = int((P0[[b for _, b in chunks]] - P0[[a for a, _ in chunks]]).max())
    ramp = np.arange(longest, dtype=np.intp)
    kids = np.empty((F, longest, *shape), dtype=values.dtype)  # the children's values of a chunk, reused
    span = np.empty((F * longest, *shape), dtype=values.dtype) if tiled else None
    for a, b in chunks:
        p0, p1 = int(P0[a]), int(P0[b])
        cc = c[a:b]
        if span is None:
            src = values
            base = np.repeat(d0[a:b] + p0, cc)
        else:  # the chunk's children: values[F p0:F p1], read once in order
            src = span[: F * (p1 - p0)]
            np.copyto(src, values[F * p0 : F * p1])
            base = np.repeat(d0[a:b] + (p0 - F * p0), cc)
        base += ramp[: p1 - p0]
        step = np.repeat(cc, cc)
        parts = [kids[r, : p1 - p0] for r in range(F)]
        for r in range(F):
            if r:
                base += step
            np.take(src, base, axis=0, out=parts[r], mode="clip")  # positions in range by construction
        o = out[p0:p1]
        _pairwise_into(parts, o)
        o *= scale
    return out


def _pairwise_into(parts: list[np.ndarray], out: np.ndarray) -> None:
    """Sum ``2**k >= 2`` arrays pairwise in order into ``out``, as :func:`_pairwise_sum`, in place of the parts."""
    while len(parts) > 2:
        parts = [np.add(parts[i], parts[i + 1], out=parts[i]) for i in range(0, len(parts), 2)]
    np.add(parts[0], parts[1], out=out)


def _gather_runs(values: np.ndarray, offsets: np.ndarray, src: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenate the runs ``values[offsets[s]:offsets[s] + counts[k]]`` for ``s = src[k]``, vectorized (one ``take``)."""
    if int(counts.sum()) == 0:
        return values[:0]
    out: np.ndarray = values[_run_index(offsets, src, counts)]
    return out


def apply_hp(data: HpData, step: AdaptStep, dim: int, transfer: HpTransfer, name: str = "hp") -> HpData:
    """Return an hp field's values after one step of the mesh. Not collective, vectorized.

    Raises
    ------
    AdaptError
        Averaging a family whose members have different counts or a dtype
        that is not float or complex, or a user function returning values
        that do not fit.
    """
    F = 1 << dim
    m = step.mask
    counts = data.counts
    if counts.shape[0] != m.shape[0]:
        raise AdaptError(f"{name}: {counts.shape[0]} leaves of values for {m.shape[0]} leaves")
    idx = np.flatnonzero(m)
    shape = data.values.shape[1:]
    if step.kind == "refine":
        off = data.offsets
        n_out = np.where(m, F, 1)
        new_counts = np.repeat(counts, F) if idx.size == m.shape[0] else np.repeat(counts, n_out)
        if transfer.refine == "inject" or idx.size == 0:
            return HpData(_inject_runs(data.values, off, counts, m, F), new_counts)
        src = np.repeat(np.arange(m.shape[0]), n_out)
        pv = _gather_runs(data.values, off, idx, counts[idx])
        kv, kc = hp_user(transfer.refine(pv, counts[idx].copy()), idx.size * F, shape, data.values.dtype, f"{name}: refine")
        # children of refined leaves from kv, kc; others as they are
        child = np.repeat(m, n_out)
        new_counts[child] = kc
        return HpData(_merge_runs(data, child, src, kv, kc, new_counts), new_counts)
    if idx.size == 0:
        return HpData(data.values, counts.copy())
    every = idx.size * F == m.shape[0]  # every leaf is in a family: the members are the leaves in order
    if transfer.coarsen == "average":
        if data.values.dtype.kind not in "fc":
            raise AdaptError(f"{name}: cannot average values of dtype {data.values.dtype}; give HpTransfer(coarsen=fn)")
        fc = counts.reshape(-1, F) if every else counts[(idx[:, None] + np.arange(F)[None, :]).reshape(-1)].reshape(idx.size, F)
        bad = fc[:, 1] != fc[:, 0]
        for c in range(2, F):
            bad |= fc[:, c] != fc[:, 0]
        if bad.any():
            i = int(idx[np.flatnonzero(bad)[0]])
            raise AdaptError(
                f"{name}: the family at leaf {i} has members of different counts {fc[bad][0].tolist()}; give HpTransfer(coarsen=fn)"
            )
        pc = fc[:, 0]
        # where each family's values start: with every leaf in a family, F runs of its parent's count each
        fo = F * _offsets(pc)[:-1] if every else data.offsets[idx]
        pv = _average_runs(data.values, counts, idx, fo, pc, F, tiled=every)
        if every:  # the parents' runs are all the runs, in order
            return HpData(pv, pc.copy())
    else:
        fam = np.arange(m.shape[0]) if every else (idx[:, None] + np.arange(F)[None, :]).reshape(-1)
        kv = _gather_runs(data.values, data.offsets, fam, counts[fam])
        pv, pc = hp_user(transfer.coarsen(kv, counts[fam].copy()), idx.size, shape, data.values.dtype, f"{name}: coarsen")
    keep = ~family_members(m, dim)
    new_counts = counts[keep]
    is_parent = m[keep]
    new_counts[is_parent] = pc
    # the kept leaves' runs, with each family's run replaced by its parent's
    return HpData(_merge_runs(data, is_parent, np.flatnonzero(keep), pv, pc, new_counts), new_counts)


def _merge_runs(
    data: HpData, new: np.ndarray, src: np.ndarray, kv: np.ndarray, kc: np.ndarray, new_counts: np.ndarray
) -> np.ndarray:
    """Return the values after a step: the runs of the leaves marked ``new`` from ``kv`` (``kc`` values each), others as they were.

    ``new``, ``new_counts``: over the leaves after the step; ``src``: the
    leaf before the step of each leaf after it, for the runs kept (the
    children of a refined leaf, or the parent of a family, are marked).
    """
    new_off = np.concatenate([[0], np.cumsum(new_counts)])
    out = np.empty((int(new_off[-1]), *data.values.shape[1:]), dtype=data.values.dtype)
    plain = np.flatnonzero(~new)
    if plain.size:
        out[_run_index(new_off, plain, new_counts[plain])] = _gather_runs(data.values, data.offsets, src[plain], new_counts[plain])
    made = np.flatnonzero(new)
    if made.size:
        out[_run_index(new_off, made, kc)] = kv
    return out


def hp_user(got: Any, n: int, shape: tuple[int, ...], dtype: np.dtype[Any], what: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        values, counts = got
    except (TypeError, ValueError) as exc:
        raise AdaptError(f"{what} must return (values, counts), not {type(got).__name__}") from exc
    c = np.asarray(counts)
    if c.shape != (n,) or c.dtype.kind not in "iu" or (c.size and int(c.min()) < 0):
        raise AdaptError(f"{what} returned counts of shape {c.shape} and dtype {c.dtype}, not ({n},) non-negative integers")
    c = c.astype(np.int64)
    v = _check_out(values, (int(c.sum()), *shape), dtype, what)
    return v, c


def change_degree(data: HpData, degree: int, dim: int, name: str = "hp") -> HpData:
    r"""Return tensor-product modal coefficients truncated or zero-padded to degree ``degree``. Not collective, vectorized.

    A leaf of degree q holds ``(q + 1)**dim`` values (times the field's
    per-value shape): coefficients ``c[a_1, ..., a_dim]``, ``a_i <= q``, the
    last index fastest.  The new leaf holds ``(degree + 1)**dim``: those
    with every ``a_i <= degree``, zeros where ``a_i > q``.  For an orthogonal
    basis truncation is the L2 projection onto the lower degree.  Loops over
    the distinct degrees only.

    Parameters
    ----------
    data : HpData
        Counts ``(q + 1)**dim`` per leaf.
    degree : int
        The new degree, ``>= 0``.
    dim : {2, 3}

    Raises
    ------
    AdaptError
        A count that is not ``(q + 1)**dim``, or a negative degree.
    """
    p = operator.index(degree)
    if p < 0:
        raise AdaptError(f"{name}: degree must be >= 0, not {p}")
    counts = data.counts
    q = np.rint(np.power(counts.astype(np.float64), 1.0 / dim)).astype(np.int64) - 1
    bad = ((q + 1) ** dim != counts) | (q < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AdaptError(f"{name}: leaf {i} holds {int(counts[i])} values, not (q + 1)**{dim} of a tensor-product basis")
    shape = data.values.shape[1:]
    new_counts = np.full(counts.shape[0], (p + 1) ** dim, dtype=np.int64)
    out = np.zeros((int(new_counts.sum()), *shape), dtype=data.values.dtype)
    off = data.offsets
    for qq in np.unique(q):  # a loop over the distinct degrees
        leaves = np.flatnonzero(q == qq)
        k = int(min(p, qq)) + 1
        block = _gather_runs(data.values, off, leaves, counts[leaves]).reshape(leaves.size, *([int(qq) + 1] * dim), *shape)
        dst = np.zeros((leaves.size, *([p + 1] * dim), *shape), dtype=data.values.dtype)
        sl = (slice(None), *([slice(0, k)] * dim))
        dst[sl] = block[sl]
        pos = (leaves[:, None] * (p + 1) ** dim + np.arange((p + 1) ** dim)[None, :]).reshape(-1)
        out[pos] = dst.reshape(pos.size, *shape)
    return HpData(out, new_counts)
