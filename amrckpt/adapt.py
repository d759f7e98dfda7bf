"""Adapting a forest and its fields while a checkpoint loads: refine, coarsen, 2:1 balance, change the degree.

Layer between :mod:`amrckpt.restart` (which calls it from :func:`amrckpt.load`)
and the schema.  The names are p4est's, so that a p4est user reads them as
the calls they already make: :class:`Refine` is ``p4est_refine_ext`` (with its
``maxlevel``), :class:`Coarsen` is ``p4est_coarsen_ext`` (complete families
only), :class:`Balance` is ``p4est_balance`` (with its ``connect`` type), and
the per-field transfers are what p4est leaves to a ``replace_fn``
(:class:`CellTransfer`, :class:`HpTransfer`).  :class:`Adapt` strings them
together::

    from amrckpt.adapt import Adapt, Balance, Coarsen, Refine

    loaded = ac.load(path, State, comm=comm, adapt=Refine(levels=1))
    loaded = ac.load(path, State, comm=comm, adapt=Adapt(Refine(marker=hot), Balance("face")))

How it runs on P ranks (:func:`adapt_state`): each rank reads its leaves under
the uniform partition of the file's leaves (with families kept whole when
something coarsens: :func:`amrckpt.partition.keep_families`), adapts them
and their fields on its own (refinement and the coarsening of a family are
local to the leaves of that family), and the leaves then move to the
partition asked for (uniform or weighted over the new leaves, families kept
if asked) by point-to-point exchanges between the ranks whose ranges
overlap.  Nothing of size N is gathered.  Every value depends only on the
leaf or family it comes from, combined in a fixed order, so the adapted
state, and the file saved from it, are the same on any number of ranks.
:class:`Balance` on more than one rank runs the rounds of the serial ripple
on the partitioned forest: each rank asks the owners of its leaves'
neighbour points (found from every rank's first leaf) and refines what they
answer must split, until an allreduce says nothing changed; the exchanges
are point-to-point, so the leaves are those of the serial balance.
"""

from __future__ import annotations

import itertools
import operator
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .comm import Call
from .container import HpData
from .errors import AdaptError
from .partition import Partition, family_window, keep_families, transfer_counts
from .sfc import (
    CONNECT_TYPES,
    MAXLEVEL,
    AdaptStep,
    BalanceQueries,
    Forest,
    balance_answers,
    balance_queries,
    family_members,
    mesh_record_dtype,
    morton_keys,
    refine_step,
)
from .sfc import balance as sfc_balance
from .sfc import coarsen as sfc_coarsen
from .sfc import refine as sfc_refine

__all__ = [
    "Adapt",
    "Balance",
    "CellTransfer",
    "Coarsen",
    "HpTransfer",
    "Refine",
    "adapt_state",
    "apply_cells",
    "apply_hp",
    "change_degree",
]

Marker = Callable[[Forest, Mapping[str, Any]], Any]
"""``marker(forest, fields) -> (n,) bool``: this rank's leaves and their per-leaf field values, by name."""


@dataclass(frozen=True)
class Refine:
    r"""Refine leaves by ``levels`` levels, all or where ``marker`` says (``p4est_refine_ext``, non-recursive, per level).

    Attributes
    ----------
    levels : int
        Levels to refine (default 1).
    marker : callable, optional
        p4est's ``refine_fn``, vectorized: ``marker(forest, fields)`` returns
        an (n,) numpy.bool_ array over this rank's leaves (``fields``: the
        values of the mesh's per-leaf fields, by name: (n, \*shape) arrays,
        :class:`~amrckpt.HpData`).  It is called on each rank with that
        rank's leaves; a mark must depend only on its own leaf (its position,
        level and values), so that the result does not depend on the number
        of ranks.  Children inherit their parent's mark.  Default: all.
    maxlevel : int, optional
        No leaf is refined beyond this level (p4est's ``maxlevel``).
    """

    levels: int = 1
    marker: Marker | None = None
    maxlevel: int | None = None


@dataclass(frozen=True)
class Coarsen:
    """Coarsen complete families by ``levels`` levels, all or where ``marker`` says (``p4est_coarsen_ext``, per level).

    A family (the ``2**dim`` children of one parent, all present as leaves)
    is replaced by its parent when all its members are marked and above
    ``minlevel``; the parent is marked.

    Attributes
    ----------
    levels : int
        Passes (default 1).
    marker : callable, optional
        As :attr:`Refine.marker`: the leaves that may be coarsened (default all).
    minlevel : int
        No leaf is made coarser than this level (default 0).
    """

    levels: int = 1
    marker: Marker | None = None
    minlevel: int = 0


@dataclass(frozen=True)
class Balance:
    """2:1 balance (``p4est_balance``): the same leaves as p4est gives.

    Attributes
    ----------
    connect : {"face", "edge", "corner", "full"}
        p4est's ``btype`` (``"edge"`` in 3D only); default ``"full"``.
    connectivity : amrckpt.sfc.Connectivity, optional
        Default: the connectivity stored with the mesh (checkpoints of p4est
        forests, or saved with one); without one, an error.
    """

    connect: Literal["face", "edge", "corner", "full"] = "full"
    connectivity: Any = None


@dataclass(frozen=True)
class CellTransfer:
    r"""How a cells field follows the leaves (what a p4est code writes as its ``replace_fn``).

    Attributes
    ----------
    refine : "inject" or callable
        ``"inject"`` (default): each child takes its parent's value.  Or
        ``fn(parents) -> children``: parents (m, \*shape), children
        (m, 2**dim, \*shape) in Morton (p4est child) order, the field's dtype.
    coarsen : "average" or callable
        ``"average"`` (default): the parent takes the mean of its
        ``2**dim`` children, summed pairwise in child order
        (``((c0 + c1) + (c2 + c3))`` in 2D, one more level in 3D) and
        multiplied by ``2**-dim``, for float and complex dtypes.  All
        leaves of a family have the same volume, so the parent's value times
        its volume is the children's sum times theirs: the integral over the
        family is kept up to the rounding of the ``2**dim - 1`` additions
        (exactly when the children's sum is exact, e.g. after an injection:
        refining then coarsening gives the values back bit for bit, unless
        ``2**dim`` times a value overflows).  The order is fixed, so the
        result does not depend on the number of ranks.  Or
        ``fn(children) -> parents``: (m, 2**dim, \*shape) to (m, \*shape).
    """

    refine: Literal["inject"] | Callable[[np.ndarray], np.ndarray] = "inject"
    coarsen: Literal["average"] | Callable[[np.ndarray], np.ndarray] = "average"


@dataclass(frozen=True)
class HpTransfer:
    r"""How an hp field follows the leaves, and a change of its degree.

    Attributes
    ----------
    refine : "inject" or callable
        ``"inject"`` (default): each child takes its parent's values (the
        same coefficients: exact for degree 0, a placeholder otherwise: pass
        the projection of your basis).  Or ``fn(values, counts) -> (values,
        counts)``: the parents' values (sum(counts), \*shape) and counts (m,)
        to the children's, ``2**dim`` children per parent in Morton order.
    coarsen : "average" or callable
        ``"average"`` (default): coefficient by coefficient, as
        :class:`CellTransfer`'s average, for families whose members have the
        same count (else an error naming the leaf).  Or ``fn(values, counts)
        -> (values, counts)``: the children's (``m * 2**dim`` leaves,
        families consecutive) to the parents' (m).
    degree : int, optional
        After the mesh changes: the new degree ``p`` of a tensor-product
        hierarchical modal basis with ``(q + 1)**dim`` coefficients per leaf
        (degree q, the last axis fastest): coefficients of degrees above
        ``p`` are dropped, missing ones are zero (:func:`change_degree`).
        For an orthogonal basis (Legendre) truncation is the L2 projection;
        raising then lowering the degree gives the coefficients back.
    convert : callable, optional
        After the mesh changes and ``degree``: ``fn(values, counts) ->
        (values, counts)`` of all this rank's leaves (the same number of
        leaves), for any other change.
    """

    refine: Literal["inject"] | Callable[[np.ndarray, np.ndarray], tuple[Any, Any]] = "inject"
    coarsen: Literal["average"] | Callable[[np.ndarray, np.ndarray], tuple[Any, Any]] = "average"
    degree: int | None = None
    convert: Callable[[np.ndarray, np.ndarray], tuple[Any, Any]] | None = None


Op = Refine | Coarsen | Balance


@dataclass(frozen=True, init=False)
class Adapt:
    """A sequence of :class:`Refine`, :class:`Coarsen`, :class:`Balance`, and the transfer of each field.

    Parameters
    ----------
    *ops : Refine, Coarsen or Balance
        Applied in order to the (first) mesh.
    transfers : mapping of str to CellTransfer or HpTransfer, optional
        By field name; fields not named take the default transfers
        (:class:`CellTransfer`, :class:`HpTransfer`).
    mesh : str, optional
        The mesh field to adapt (default: the first).

    Raises
    ------
    AdaptError
        If an op or a transfer is not one of these types.
    """

    ops: tuple[Op, ...]
    transfers: Mapping[str, CellTransfer | HpTransfer] = field(default_factory=dict)
    mesh: str | None = None

    def __init__(self, *ops: Op, transfers: Mapping[str, CellTransfer | HpTransfer] | None = None, mesh: str | None = None) -> None:
        for op in ops:
            if not isinstance(op, Refine | Coarsen | Balance):
                raise AdaptError(f"Adapt: expected Refine, Coarsen or Balance, not {op!r}")
        for name, t in (transfers or {}).items():
            if not isinstance(t, CellTransfer | HpTransfer):
                raise AdaptError(f"Adapt: the transfer of {name!r} must be a CellTransfer or an HpTransfer, not {t!r}")
        object.__setattr__(self, "ops", tuple(ops))
        object.__setattr__(self, "transfers", dict(transfers or {}))
        object.__setattr__(self, "mesh", mesh)

    @classmethod
    def of(cls, spec: Any) -> Adapt:
        """Return ``spec`` as an :class:`Adapt`: itself, one op, or a sequence of ops."""
        if isinstance(spec, Adapt):
            return spec
        if isinstance(spec, Refine | Coarsen | Balance):
            return cls(spec)
        if isinstance(spec, list | tuple):
            return cls(*spec)
        raise AdaptError(f"adapt must be an Adapt, a Refine, a Coarsen, a Balance or a sequence of them, not {spec!r}")

    @property
    def coarsens(self) -> bool:
        """Whether an op coarsens (then the leaves are read with families kept whole)."""
        return any(isinstance(op, Coarsen) for op in self.ops)


# ------------------------------------------------------------------ transfers of one step, local


def _pairwise_sum(parts: list[np.ndarray]) -> np.ndarray:
    """Sum ``2**k`` arrays pairwise in order: ((a0 + a1) + (a2 + a3)) + ..."""
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] for i in range(0, len(parts), 2)]
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
            out[pos] = kids.reshape(-1, *values.shape[1:])
        return out
    idx = np.flatnonzero(m)
    if idx.size * F == m.shape[0] and transfer.coarsen == "average" and values.dtype.kind in "fc":
        # every leaf is in a family (families consecutive from leaf 0): members by reshaping, no gathers
        fam = values.reshape(idx.size, F, *values.shape[1:])
        parent: np.ndarray = _pairwise_sum([fam[:, c] for c in range(F)])
        parent *= values.dtype.type(1.0 / F)
        return parent
    members = family_members(m, dim)
    out = values[~members]
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


def _run_index(offsets: np.ndarray, src: np.ndarray, counts: np.ndarray, size: int) -> np.ndarray:
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


def _offsets(counts: np.ndarray) -> np.ndarray:
    """``[0, cumsum(counts)]``, int64."""
    out = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _inject_runs(values: np.ndarray, offsets: np.ndarray, counts: np.ndarray, mask: np.ndarray, F: int) -> np.ndarray:
    """Return the runs of the leaves, those of the marked leaves ``F`` times in a row (their children's). Vectorized.

    Per chunk of output (a loop over chunks, not leaves): the position in
    ``values`` of each value out, one repeat and one add, then one ``take``
    straight into the output.
    """
    n_out = np.where(mask, F, 1)
    S = _offsets(n_out * counts)
    out = np.empty((int(S[-1]), *values.shape[1:]), dtype=values.dtype)
    for a, b in _chunks(S, _CHUNK_VALUES):
        reps = n_out[a:b]
        rlen = np.repeat(counts[a:b], reps)  # the output's runs: each leaf's, once or F times
        rpos = np.cumsum(rlen) - rlen
        o = out[int(S[a]) : int(S[b])]
        take = np.repeat((np.repeat(offsets[a:b], reps) - rpos).astype(np.intp), rlen)
        take += np.arange(o.shape[0], dtype=np.intp)
        np.take(values, take, axis=0, out=o, mode="clip")  # positions in range by construction
    return out


def _pairwise_into(parts: list[np.ndarray], out: np.ndarray) -> None:
    """Sum ``2**k >= 2`` arrays pairwise in order into ``out``, as :func:`_pairwise_sum`, in place of the parts."""
    while len(parts) > 2:
        parts = [np.add(parts[i], parts[i + 1], out=parts[i]) for i in range(0, len(parts), 2)]
    np.add(parts[0], parts[1], out=out)


def _average_runs(values: np.ndarray, offsets: np.ndarray, first: np.ndarray, pc: np.ndarray, F: int) -> np.ndarray:
    """Return the parents' runs: value k of the family at leaf i is the pairwise mean of ``values[offsets[i] + r c + k]``.

    Per chunk of parents' values (a loop over chunks): the position of
    each value of child 0 (one repeat and one add), ``F`` gathers, each
    after an in-place shift by the count, summed pairwise in child order
    into the output, times ``2**-dim``.
    """
    P0 = _offsets(pc)
    out = np.empty((int(P0[-1]), *values.shape[1:]), dtype=values.dtype)
    scale = values.dtype.type(1.0 / F)
    fo = offsets[first]
    for a, b in _chunks(P0, _CHUNK_VALUES // F):
        c = pc[a:b]
        o = out[int(P0[a]) : int(P0[b])]
        base = np.repeat((fo[a:b] - P0[a:b]).astype(np.intp), c)
        base += np.arange(int(P0[a]), int(P0[b]), dtype=np.intp)
        step = np.repeat(c.astype(np.intp), c)
        parts = []
        for r in range(F):
            if r:
                base += step
            parts.append(np.take(values, base, axis=0, mode="clip"))  # positions in range by construction
        _pairwise_into(parts, o)
        o *= scale
    return out


def _gather_runs(values: np.ndarray, offsets: np.ndarray, src: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenate the runs ``values[offsets[s]:offsets[s] + counts[k]]`` for ``s = src[k]``, vectorized (one ``take``)."""
    if int(counts.sum()) == 0:
        return values[:0]
    out: np.ndarray = values[_run_index(offsets, src, counts, values.shape[0])]
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
    off = data.offsets
    idx = np.flatnonzero(m)
    shape = data.values.shape[1:]
    if step.kind == "refine":
        n_out = np.where(m, F, 1)
        new_counts = np.repeat(counts, F) if idx.size == m.shape[0] else np.repeat(counts, n_out)
        if transfer.refine == "inject" or idx.size == 0:
            return HpData(_inject_runs(data.values, off, counts, m, F), new_counts)
        src = np.repeat(np.arange(m.shape[0]), n_out)
        pv = _gather_runs(data.values, off, idx, counts[idx])
        kv, kc = _hp_user(transfer.refine(pv, counts[idx].copy()), idx.size * F, shape, data.values.dtype, f"{name}: refine")
        # children of refined leaves from kv, kc; others as they are
        new_counts[np.repeat(m, n_out)] = kc
        return HpData(_merge_runs(data, m, n_out, src, kv, kc, new_counts), new_counts)
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
        pv = _average_runs(data.values, off, idx, pc, F)
        if every:  # every leaf is in a family: the parents' runs are all the runs, in order
            return HpData(pv, pc.copy())
    else:
        fam = np.arange(m.shape[0]) if every else (idx[:, None] + np.arange(F)[None, :]).reshape(-1)
        kv = _gather_runs(data.values, off, fam, counts[fam])
        pv, pc = _hp_user(transfer.coarsen(kv, counts[fam].copy()), idx.size, shape, data.values.dtype, f"{name}: coarsen")
    keep = ~family_members(m, dim)
    new_counts = counts[keep]
    is_parent = m[keep]
    parent_pos = np.flatnonzero(is_parent)
    new_counts[parent_pos] = pc
    # the kept leaves' runs, with each family's run replaced by its parent's
    src = np.flatnonzero(keep)
    new_off = np.concatenate([[0], np.cumsum(new_counts)])
    out = np.empty((int(new_off[-1]), *shape), dtype=data.values.dtype)
    single = ~is_parent
    if single.any():
        pos = _run_index(new_off, np.flatnonzero(single), new_counts[single], out.shape[0])
        out[pos] = _gather_runs(data.values, off, src[single], new_counts[single])
    if pv.size:
        out[_run_index(new_off, parent_pos, pc, out.shape[0])] = pv.reshape(-1, *shape)
    return HpData(out, new_counts)


def _merge_runs(
    data: HpData, m: np.ndarray, n_out: np.ndarray, src: np.ndarray, kv: np.ndarray, kc: np.ndarray, new_counts: np.ndarray
) -> np.ndarray:
    """Return the values after a refinement: unrefined leaves' runs as they were, refined leaves' children from ``kv``."""
    new_off = np.concatenate([[0], np.cumsum(new_counts)])
    out = np.empty((int(new_off[-1]), *data.values.shape[1:]), dtype=data.values.dtype)
    child = np.repeat(m, n_out)
    plain = np.flatnonzero(~child)
    if plain.size:
        out[_run_index(new_off, plain, new_counts[plain], out.shape[0])] = _gather_runs(
            data.values, data.offsets, src[plain], new_counts[plain]
        )
    kids = np.flatnonzero(child)
    if kids.size:
        out[_run_index(new_off, kids, kc, out.shape[0])] = kv
    return out


def _hp_user(got: Any, n: int, shape: tuple[int, ...], dtype: np.dtype[Any], what: str) -> tuple[np.ndarray, np.ndarray]:
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
        out[pos] = dst.reshape(-1, *shape)
    return HpData(out, new_counts)


# ------------------------------------------------------------------ moving leaves between ranks


def _records(forest: Forest) -> np.ndarray:
    return forest.to_records()


def _take(item: Any, a: int, b: int) -> Any:
    """Leaves ``a:b`` of a per-leaf item: records, an array, or (values, counts, offsets) of an hp field."""
    if isinstance(item, HpData):
        off = item.offsets
        return HpData(item.values[int(off[a]) : int(off[b])], item.counts[a:b])
    return item[a:b]


def _concat(parts: list[Any], like: Any) -> Any:
    if isinstance(like, HpData):
        return HpData(np.concatenate([p.values for p in parts]), np.concatenate([p.counts for p in parts]))
    return np.concatenate(parts)


def _move(call: Call, items: dict[str, Any], cur: Partition, new: Partition) -> dict[str, Any]:
    """Move the leaves of ``items`` (records, arrays, HpData, each over this rank's leaves) from ``cur`` to ``new``.

    Collective, point-to-point: contiguous ranges move between the ranks
    whose ranges overlap (:func:`~amrckpt.partition.transfer_counts`), in
    rounds of one ``sendrecv`` each: in round k rank p sends to p + k and
    receives from p - k; the rounds span the offsets that occur (one
    allreduce finds them; one or two rounds after a uniform refinement).
    """
    comm = call.comm
    r, P = comm.rank, comm.size
    send, recv = transfer_counts(cur, new, r)
    targets = np.flatnonzero(send)
    sources = np.flatnonzero(recv)
    lo = min([int(t) - r for t in targets] + [r - int(s) for s in sources] + [0])
    hi = max([int(t) - r for t in targets] + [r - int(s) for s in sources] + [0])
    got = call.allreduce(maxima=[-lo, hi], what="adapt: move leaves").maxima
    lo, hi = -int(got[0]), int(got[1])
    start = np.concatenate([[0], np.cumsum(send)])
    pieces: dict[int, dict[str, Any]] = {}
    for k in range(lo, hi + 1):
        dest, src = r + k, r - k
        out = None
        if 0 <= dest < P and send[dest] > 0:
            a, b = int(start[dest]), int(start[dest + 1])
            out = {n: _take(v, a, b) for n, v in items.items()}
        if k == 0:
            if out is not None:
                pieces[r] = out
            continue
        payload = None if out is None else pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        source = src if 0 <= src < P and recv[src] > 0 else None
        data = call.sendrecv(payload, dest if out is not None else None, source)
        if source is not None and data is not None:
            pieces[source] = pickle.loads(data)  # the bytes of this job's own ranks
    order = sorted(pieces)
    result: dict[str, Any] = {}
    for n, v in items.items():
        parts = [pieces[s][n] for s in order]
        result[n] = _concat(parts, v) if parts else _take(v, 0, 0)
    return result


def _keep(call: Call, forest: Forest, cur: Partition, target: Partition) -> Partition:
    """:func:`~amrckpt.partition.keep_families` of ``target`` for leaves distributed as ``cur`` (this rank's: ``forest``).

    Collective.  Each rank needs the leaves of its window around its cut of
    ``target`` (:func:`~amrckpt.partition.family_window`, at most
    ``2 * 2**dim - 2``); the ranks that hold them under ``cur`` send them,
    point-to-point (:func:`_alltoall`: a holder sends to the ranks whose cuts
    lie within ``2**dim - 1`` leaves of its range, found by a binary search
    of the cuts); then keep_families' one allgather of the new cuts.
    """
    r = call.comm.rank
    d = forest.dim
    F = 1 << d
    a, b = cur.local_range(r)
    outgoing: dict[int, bytes] = {}
    if b > a:
        cuts = target.global_first_quadrant[:-1]
        q0 = max(1, int(np.searchsorted(cuts, a - F + 1, side="right")))
        q1 = int(np.searchsorted(cuts, b + F - 1, side="left"))
        for q in range(q0, q1):  # a loop over the ranks whose windows hold some of this rank's leaves
            s, k = family_window(target, q, d)
            lo, hi = max(s, a), min(s + k, b)
            if hi > lo:
                outgoing[q] = _window_rows(forest, lo - a, hi - a, lo).tobytes()
    got = _alltoall(call, outgoing)
    start, count = family_window(target, r, d)
    w = call.run(_window_of, got, start, count, d)
    if w is None:
        return keep_families(target, [], [], [[]] * d, maxlevel=MAXLEVEL[d], comm=call.comm)
    return keep_families(target, w[:, 1], w[:, 2], [w[:, 3 + i] for i in range(d)], maxlevel=MAXLEVEL[d], comm=call.comm)


def _window_rows(forest: Forest, i: int, j: int, first: int) -> np.ndarray:
    """Leaves ``i:j`` of ``forest`` as (j - i, 3 + dim) little-endian int64 rows: global index, tree, level, coordinates."""
    out = np.empty((j - i, 3 + forest.dim), dtype="<i8")
    out[:, 0] = np.arange(first, first + j - i)
    out[:, 1] = forest.tree[i:j]
    out[:, 2] = forest.level[i:j]
    for k, c in enumerate(forest.coords()):
        out[:, 3 + k] = c[i:j]
    return out


def _window_of(got: dict[int, bytes], start: int, count: int, d: int) -> np.ndarray:
    """Return the window from the rows its holders sent, in order; AdaptError unless they are leaves ``start .. start + count``."""
    parts = [np.frombuffer(v, dtype="<i8").reshape(-1, 3 + d) for _, v in sorted(got.items()) if v]
    w = np.concatenate(parts) if parts else np.zeros((0, 3 + d), dtype="<i8")
    if not np.array_equal(w[:, 0], np.arange(start, start + count)):
        raise AdaptError(f"adapt: the leaves around this rank's cut are {w[:, 0].tolist()}, not {count} from {start}")
    return w


# ------------------------------------------------------------------ the whole adaptation, on every rank


def _transfer_of(name: str, kind: str, adapt: Adapt) -> CellTransfer | HpTransfer:
    t = adapt.transfers.get(name)
    if kind == "hp":
        if t is None:
            return HpTransfer()
        if not isinstance(t, HpTransfer):
            raise AdaptError(f"field {name!r} is an hp field: its transfer must be an HpTransfer, not {t!r}")
        return t
    if t is None:
        return CellTransfer()
    if not isinstance(t, CellTransfer):
        raise AdaptError(f"field {name!r} is a cells field: its transfer must be a CellTransfer, not {t!r}")
    return t


def _marker(op: Refine | Coarsen, forest: Forest, fields: dict[str, Any], what: str) -> np.ndarray | None:
    if op.marker is None:
        return None
    got = np.asarray(op.marker(forest, dict(fields)))
    if got.dtype != np.bool_:
        raise AdaptError(f"{what}: the marker returned dtype {got.dtype}, not bool")
    if got.shape != (len(forest),):
        raise AdaptError(f"{what}: the marker returned shape {got.shape}; this rank has ({len(forest)},) leaves")
    return got


def _levels(v: Any, what: str, lo: int, hi: int) -> int:
    try:
        k = operator.index(v)
    except TypeError as exc:
        raise AdaptError(f"{what} must be an int, not {v!r}") from exc
    if not lo <= k <= hi:
        raise AdaptError(f"{what} must be in [{lo}, {hi}], not {k}")
    return k


def _check_ops(adapt: Adapt, dim: int, size: int, default_conn: Any) -> None:
    """Check the ops against the mesh and the job: the same on every rank (no data), so raised directly."""
    top = MAXLEVEL[dim] - 1
    for op in adapt.ops:
        if isinstance(op, Refine):
            _levels(op.levels, "Refine: levels", 0, top)
            if op.maxlevel is not None:
                _levels(op.maxlevel, "Refine: maxlevel", 0, top)
        elif isinstance(op, Coarsen):
            _levels(op.levels, "Coarsen: levels", 0, top)
            _levels(op.minlevel, "Coarsen: minlevel", 0, top)
        else:
            if op.connect not in CONNECT_TYPES[dim]:
                raise AdaptError(f"Balance: connect must be one of {CONNECT_TYPES[dim]} in {dim}D, not {op.connect!r}")
            if op.connectivity is None and default_conn is None:
                raise AdaptError("Balance: the checkpoint stores no connectivity of its mesh; give Balance(connectivity=...)")
    for name, t in adapt.transfers.items():
        if isinstance(t, HpTransfer) and t.degree is not None:
            _levels(t.degree, f"HpTransfer of {name!r}: degree", 0, 1 << 20)


def adapt_state(
    call: Call,
    values: dict[str, Any],
    kinds: Mapping[str, Any],
    mesh: str,
    adapt: Adapt,
    target: Literal["uniform", "weighted"],
    families: bool,
    connectivity: Any = None,
) -> tuple[dict[str, Any], Partition]:
    r"""Adapt this rank's leaves of ``mesh`` and their fields, then move them to the target partition. Collective.

    Runs inside the collective call of a load (``call``): local steps through
    ``call.run`` (an error on one rank is raised on every rank at the next
    agreement), exchanges through the call.

    Parameters
    ----------
    call : amrckpt.comm.Call
    values : dict of str to object
        This rank's values by field name, as the load built them: ``mesh``'s
        Forest, cells (n, \*shape) arrays, HpData; other fields untouched.
    kinds : mapping of str to FieldKind
        The schema's kinds, by name (``.kind``, ``.per_leaf``, ``.mesh_name``).
    mesh : str
        The mesh field to adapt; its leaves as read (uniform partition of
        the file's leaves, families kept whole if ``adapt`` coarsens on
        more than one rank).
    adapt : Adapt
    target : {"uniform", "weighted"}
        The partition of the new leaves: equal counts, or equal bytes
        (mesh record, cells and hp payloads of each leaf).
    families : bool
        Keep families whole in the target partition (``allow_for_coarsening``).
    connectivity : amrckpt.sfc.Connectivity, optional
        The mesh's stored connectivity, for :class:`Balance`.

    Returns
    -------
    values : dict of str to object
        With the adapted mesh and fields.
    partition : Partition
        The new partition of the leaves.

    Raises
    ------
    AdaptError
        On every rank: a marker of the wrong length or dtype, a level out
        of range, a transfer function returning the wrong shape, Balance
        without a connectivity.
    """
    forest: Forest = values[mesh]
    dim = forest.dim
    _check_ops(adapt, dim, call.comm.size, connectivity)
    names = [n for n in values if n != mesh and n in kinds and kinds[n].per_leaf and kinds[n].mesh_name(n) == mesh]
    tkinds = {n: ("hp" if isinstance(values[n], HpData) else "cells") for n in names}
    transfers = call.run(lambda: {n: _transfer_of(n, tkinds[n], adapt) for n in names}) or {}
    state: dict[str, Any] = {"forest": forest, **{n: values[n] for n in names}}
    fresh = True  # the leaves as read: with families kept whole when the adaptation coarsens

    def apply(steps: tuple[AdaptStep, ...], new_forest: Forest) -> None:
        for s in steps:
            for n in names:
                t = transfers[n]
                if isinstance(t, HpTransfer):
                    state[n] = apply_hp(state[n], s, dim, t, n)
                else:
                    state[n] = apply_cells(state[n], s, dim, t, n)
        state["forest"] = new_forest

    def fields_of() -> dict[str, Any]:
        return {n: state[n] for n in names}

    for op in adapt.ops:
        if isinstance(op, Refine):

            def do_refine(op: Refine = op) -> None:
                m = _marker(op, state["forest"], fields_of(), "Refine")
                res = sfc_refine(state["forest"], op.levels, m, maxlevel=op.maxlevel)
                apply(res.steps, res.forest)

            call.run(do_refine)
        elif isinstance(op, Coarsen):
            mark = call.run(_marker, op, state["forest"], fields_of(), "Coarsen")
            state["__mark"] = np.ones(len(state["forest"]), dtype=bool) if mark is None else mark
            for _ in range(operator.index(op.levels)):
                if call.comm.size > 1 and not fresh:  # each family whole on one rank again: a few leaves move
                    call.agree("adapt: coarsen")
                    cur = Partition.from_counts(call.allgather_int(len(state["forest"]), what="adapt: counts"))
                    kept = _keep(call, state["forest"], cur, cur)
                    if not np.array_equal(kept.global_first_quadrant, cur.global_first_quadrant):
                        state.update(_moved(call, state, cur, kept))

                def do_coarsen(op: Coarsen = op) -> None:
                    res = sfc_coarsen(state["forest"], 1, state["__mark"], minlevel=op.minlevel)
                    if res.steps:
                        state["__mark"] = state["__mark"][~family_members(res.steps[0].mask, dim)]
                    apply(res.steps, res.forest)

                call.run(do_coarsen)
                fresh = False
            state.pop("__mark", None)
        else:
            conn = op.connectivity if op.connectivity is not None else connectivity
            if call.comm.size == 1:

                def do_balance(op: Balance = op, conn: Any = conn) -> None:
                    res = sfc_balance(state["forest"], conn, op.connect)
                    apply(res.steps, res.forest)

                call.run(do_balance)
            else:
                call.agree("adapt: balance")
                steps, new_forest = _balance_parallel(call, state["forest"], conn, op.connect)
                call.run(apply, steps, new_forest)
        fresh = False
    for n in names:
        t = transfers.get(n)
        if isinstance(t, HpTransfer) and (t.degree is not None or t.convert is not None):

            def do_hp(n: str = n, t: HpTransfer = t) -> None:
                d = state[n]
                if t.degree is not None:
                    d = change_degree(d, t.degree, dim, n)
                if t.convert is not None:
                    v, c = _hp_user(
                        t.convert(d.values, d.counts.copy()), len(d), d.values.shape[1:], d.values.dtype, f"{n}: convert"
                    )
                    d = HpData(v, c)
                state[n] = d

            call.run(do_hp)
    call.agree("adapt")
    n_local = len(state["forest"])
    cur = Partition.from_counts(call.allgather_int(n_local, what="adapt: counts"))
    if target == "weighted":
        w = call.run(_weights, state, names, dim)
        new = Partition.weighted(w if w is not None else np.zeros(n_local, dtype=np.int64), call.comm)
    else:
        new = Partition.uniform(cur.N, call.comm.size)
    if families and call.comm.size > 1:
        new = _keep(call, state["forest"], cur, new)
    if call.comm.size > 1 and not np.array_equal(new.global_first_quadrant, cur.global_first_quadrant):
        state.update(_moved(call, state, cur, new))
    out = dict(values)
    out[mesh] = state["forest"]
    for n in names:
        out[n] = state[n]
    return out, new


def _alltoall(call: Call, outgoing: dict[int, bytes]) -> dict[int, bytes]:
    """Send ``outgoing[q]`` to rank q, receive what each rank sends here. Collective.

    Rounds of one ``sendrecv`` each (round k: to rank + k, from rank - k),
    over the offsets that occur (one allreduce finds them): few rounds when
    the ranks exchange with their neighbours along the curve.
    """
    r, P = call.comm.rank, call.comm.size
    ks = [q - r for q in outgoing if q != r]
    got = call.allreduce(maxima=[-min([*ks, 0]), max([*ks, 0])], what="adapt: exchange").maxima
    lo, hi = -int(got[0]), int(got[1])
    received: dict[int, bytes] = {}
    if r in outgoing:
        received[r] = outgoing[r]
    for k in range(lo, hi + 1):
        if k == 0:
            continue
        dest, src = r + k, r - k
        data = call.sendrecv(outgoing.get(dest, b""), dest if 0 <= dest < P else None, src if 0 <= src < P else None)
        if data:
            received[src] = data
    return received


def _balance_parallel(call: Call, forest: Forest, conn: Any, connect: str) -> tuple[tuple[AdaptStep, ...], Forest]:
    """p4est_balance of a forest partitioned over the ranks: the rounds of :func:`amrckpt.sfc.balance`, exchanged. Collective.

    In each round every rank asks, for each of its leaves of level 2 or
    more, the leaf that holds each neighbour point (:func:`~amrckpt.sfc.balance_queries`);
    the questions go to the ranks that own the points (found from every
    rank's first leaf, one allgather of P positions), which answer them on
    their leaves (:func:`~amrckpt.sfc.balance_answers`) and refine what must
    be split by one level; an allreduce says whether anything changed.  The
    rounds and their leaves are those of the serial ripple, so the result is
    the same forest on any number of ranks.
    """
    d = forest.dim
    if getattr(conn, "dim", None) != d or getattr(conn, "num_trees", None) != forest.num_trees:
        raise AdaptError(f"Balance: the connectivity {conn!r} does not fit the forest ({d}D, {forest.num_trees} trees)")
    ctype = "full" if connect == "corner" else connect
    steps: list[AdaptStep] = []
    while True:
        n = len(forest)
        first = [n, int(forest.tree[0]) if n else -1] + ([int(c[0]) for c in forest.coords()] if n else [0] * d)
        firsts = call.allgather_ints(first, what="adapt: balance firsts")
        nonempty = np.flatnonzero(firsts[:, 0] > 0)
        fkeys = morton_keys(*[firsts[nonempty, 2 + a].astype(np.int32) for a in range(d)], check=False)
        ftree = firsts[nonempty, 1]
        idx = np.flatnonzero(forest.level >= 2)
        q = balance_queries(forest, idx, conn, ctype)
        qkeys = morton_keys(*[q.point[a].astype(np.int32) for a in range(d)], check=False)
        # the owner: the last non-empty rank whose first leaf is at or before the point (tree, then key)
        owner = np.zeros(q.source.size, dtype=np.int64)
        for t in np.unique(q.tree):  # a loop over trees
            sel = q.tree == t
            before = int(np.searchsorted(ftree, t, side="left"))  # ranks starting in an earlier tree
            same = np.flatnonzero(ftree == t)
            k = np.searchsorted(fkeys[same], qkeys[sel], side="right") if same.size else np.zeros(int(sel.sum()), np.int64)
            owner[sel] = np.maximum(before + k - 1, 0)
        owner = nonempty[owner] if nonempty.size else owner
        mark = np.zeros(n, dtype=bool)
        outgoing: dict[int, bytes] = {}
        for o in np.unique(owner):  # a loop over the ranks asked
            sel = np.flatnonzero(owner == o)
            part = q.take(sel)
            if int(o) == call.comm.rank:
                j, split = balance_answers(forest, part, ctype)
                mark[j[split]] = True
            else:
                packed = np.concatenate(
                    [part.tree[:, None], part.point.T, part.quad.T, part.level[:, None], part.kernel[:, None].astype(np.int64)],
                    axis=1,
                )
                outgoing[int(o)] = np.ascontiguousarray(packed, dtype="<i8").tobytes()
        for src, data in _alltoall(call, outgoing).items():
            if src == call.comm.rank:
                continue
            a = np.frombuffer(data, dtype="<i8").reshape(-1, 2 * d + 3)
            z = np.zeros(a.shape[0], dtype=np.int64)
            theirs = BalanceQueries(z, a[:, 0], a[:, 1 : 1 + d].T, a[:, 1 + d : 1 + 2 * d].T, a[:, 1 + 2 * d], a[:, 2 + 2 * d] != 0)
            j, split = balance_answers(forest, theirs, ctype)
            mark[j[split & (j >= 0)]] = True
        changed = call.allreduce(sums=[int(mark.sum())], what="adapt: balance round").sums[0]
        if not changed:
            break
        steps.append(AdaptStep("refine", mark))
        forest = refine_step(forest, mark)
    return tuple(steps), forest


def _weights(state: dict[str, Any], names: list[str], dim: int) -> np.ndarray:
    """Bytes of each leaf: its mesh record, cells values and hp payloads (the weighted partition's weights)."""
    n = len(state["forest"])
    w = np.full(n, mesh_record_dtype(dim).itemsize, dtype=np.int64)
    for name in names:
        v = state[name]
        if isinstance(v, HpData):
            w += v.counts * (v.values.dtype.itemsize * int(np.prod(v.values.shape[1:], dtype=np.int64)))
        else:
            w += v.dtype.itemsize * int(np.prod(v.shape[1:], dtype=np.int64))
    return w


def _moved(call: Call, state: dict[str, Any], cur: Partition, new: Partition) -> dict[str, Any]:
    """Move the whole state (leaves, fields, marks) from ``cur`` to ``new``. Collective."""
    forest = state["forest"]
    items = {k: (_records(forest) if k == "forest" else v) for k, v in state.items()}
    got = _move(call, items, cur, new)
    got["forest"] = Forest.from_records(got["forest"], num_trees=forest.num_trees, curve=forest.curve)
    return got
