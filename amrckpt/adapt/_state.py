"""The whole adaptation of a load's state, on every rank: checks, markers, the ops in order, the fields' transfers, the move."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from ..comm import Call
from ..container import HpData
from ..errors import AdaptError
from ..partition import Partition
from ..sfc import CONNECT_TYPES, MAXLEVEL, AdaptStep, Forest, family_members
from ..sfc import balance as sfc_balance
from ..sfc import coarsen as sfc_coarsen
from ..sfc import refine as sfc_refine
from ._balance import balance_parallel
from ._exchange import keep, moved, weights
from ._ops import Adapt, Balance, CellTransfer, Coarsen, HpTransfer, Refine
from ._transfer import apply_cells, apply_hp, change_degree, hp_user

__all__ = ["adapt_state"]


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


def _check_ops(adapt: Adapt, dim: int, default_conn: Any) -> None:
    """Check the ops against the mesh and the job: the same on every rank (no data), so raised directly.

    Raises
    ------
    AdaptError
        On every rank alike (the check reads no data), if a level, a maxlevel, a minlevel or a degree is out of range,
        a Balance's connect is not one of the dimension, or a Balance has no connectivity (neither its own nor the
        checkpoint's).
    """
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
    _check_ops(adapt, forest.dim, connectivity)
    names = [n for n in values if n != mesh and n in kinds and kinds[n].per_leaf and kinds[n].mesh_name(n) == mesh]
    tkinds = {n: ("hp" if isinstance(values[n], HpData) else "cells") for n in names}
    transfers = call.run(lambda: {n: _transfer_of(n, tkinds[n], adapt) for n in names}) or {}
    a = _Adapting(call, forest, {n: values[n] for n in names}, transfers)
    for op in adapt.ops:
        if isinstance(op, Refine):
            call.run(a.refine, op)
        elif isinstance(op, Coarsen):
            a.coarsen(op)
        else:
            a.balance(op, op.connectivity if op.connectivity is not None else connectivity)
        a.fresh = False
    a.change_degrees()
    call.agree("adapt")
    new = a.repartition(target, families)
    out = dict(values)
    out[mesh] = a.forest
    out.update(a.fields)
    return out, new


class _Adapting:
    """One rank's forest and fields of one mesh while an :class:`Adapt` runs (the steps of :func:`adapt_state`)."""

    def __init__(self, call: Call, forest: Forest, fields: dict[str, Any], transfers: dict[str, Any]) -> None:
        self.call, self.forest, self.fields, self.transfers = call, forest, fields, transfers
        self.dim = forest.dim
        self.fresh = True  # the leaves as read: with families kept whole when the adaptation coarsens

    def apply(self, steps: tuple[AdaptStep, ...], new_forest: Forest) -> None:
        """Carry every field through ``steps`` (not collective); the forest becomes ``new_forest``."""
        for s in steps:
            for n, t in self.transfers.items():
                f = self.fields[n]
                self.fields[n] = apply_hp(f, s, self.dim, t, n) if isinstance(t, HpTransfer) else apply_cells(f, s, self.dim, t, n)
        self.forest = new_forest

    def refine(self, op: Refine) -> None:
        """One :class:`Refine` (not collective: run through ``call.run``)."""
        m = _marker(op, self.forest, dict(self.fields), "Refine")
        res = sfc_refine(self.forest, op.levels, m, maxlevel=op.maxlevel)
        self.apply(res.steps, res.forest)

    def coarsen(self, op: Coarsen) -> None:
        """One :class:`Coarsen`, a level at a time; families made whole on one rank between levels. Collective."""
        call = self.call
        mark = call.run(_marker, op, self.forest, dict(self.fields), "Coarsen")
        box = [np.ones(len(self.forest), dtype=bool) if mark is None else mark]
        for _ in range(operator.index(op.levels)):
            if call.comm.size > 1 and not self.fresh:  # each family whole on one rank again: a few leaves move
                call.agree("adapt: coarsen")
                cur = Partition.from_counts(call.allgather_int(len(self.forest), what="adapt: counts"))
                kept = keep(call, self.forest, cur, cur)
                if not np.array_equal(kept.global_first_quadrant, cur.global_first_quadrant):
                    state = {"forest": self.forest, **self.fields, "__mark": box[0]}
                    state.update(moved(call, state, cur, kept))
                    self.forest, box[0] = state.pop("forest"), state.pop("__mark")
                    self.fields = state

            def step(op: Coarsen = op) -> None:
                res = sfc_coarsen(self.forest, 1, box[0], minlevel=op.minlevel)
                if res.steps:
                    box[0] = box[0][~family_members(res.steps[0].mask, self.dim)]
                self.apply(res.steps, res.forest)

            call.run(step)
            self.fresh = False

    def balance(self, op: Balance, conn: Any) -> None:
        """One :class:`Balance` (p4est's 2:1 balance; across ranks when there are several). Collective."""
        call = self.call
        if call.comm.size == 1:

            def step() -> None:
                res = sfc_balance(self.forest, conn, op.connect)
                self.apply(res.steps, res.forest)

            call.run(step)
        else:
            call.agree("adapt: balance")
            steps, new_forest = balance_parallel(call, self.forest, conn, op.connect)
            call.run(self.apply, steps, new_forest)

    def change_degrees(self) -> None:
        """Each hp field's degree change or conversion (:class:`HpTransfer` ``degree``, ``convert``). Collective."""
        for n, t in self.transfers.items():
            if isinstance(t, HpTransfer) and (t.degree is not None or t.convert is not None):

                def step(n: str = n, t: HpTransfer = t) -> None:
                    d = self.fields[n]
                    if t.degree is not None:
                        d = change_degree(d, t.degree, self.dim, n)
                    if t.convert is not None:
                        v, c = hp_user(
                            t.convert(d.values, d.counts.copy()), len(d), d.values.shape[1:], d.values.dtype, f"{n}: convert"
                        )
                        d = HpData(v, c)
                    self.fields[n] = d

                self.call.run(step)

    def repartition(self, target: Literal["uniform", "weighted"], families: bool) -> Partition:
        """Move the leaves and fields to the ``target`` partition (families kept whole if ``families``). Collective."""
        call = self.call
        n_local = len(self.forest)
        cur = Partition.from_counts(call.allgather_int(n_local, what="adapt: counts"))
        state = {"forest": self.forest, **self.fields}
        names = list(self.fields)
        if target == "weighted":
            w = call.run(weights, state, names, self.dim)
            new = Partition.weighted(w if w is not None else np.zeros(n_local, dtype=np.int64), call.comm)
        else:
            new = Partition.uniform(cur.N, call.comm.size)
        if families and call.comm.size > 1:
            new = keep(call, self.forest, cur, new)
        if call.comm.size > 1 and not np.array_equal(new.global_first_quadrant, cur.global_first_quadrant):
            state.update(moved(call, state, cur, new))
            self.forest = state.pop("forest")
            self.fields = state
        return new
