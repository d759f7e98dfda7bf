"""What an adaptation asks for: the ops (Refine, Coarsen, Balance), the transfers of the fields, and Adapt, which strings them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import AdaptError
from ..sfc import Forest

__all__ = ["Adapt", "Balance", "CellTransfer", "Coarsen", "HpTransfer", "Marker", "Op", "Refine"]

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
        """Return ``spec`` as an :class:`Adapt`: itself, one op, or a sequence of ops.

        Raises
        ------
        AdaptError
            On this rank, if ``spec`` is neither an Adapt, nor a Refine, Coarsen or Balance, nor a sequence of them.
        """
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
