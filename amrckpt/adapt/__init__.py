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
overlap.  Keeping families whole (between coarsening levels, and for
``allow_for_coarsening``) moves each cut that splits a family; the few
leaves around a cut come from the ranks that hold them, point-to-point.
Nothing of size N is gathered.  Every value depends only on the
leaf or family it comes from, combined in a fixed order, so the adapted
state, and the file saved from it, are the same on any number of ranks.
:class:`Balance` on more than one rank runs the rounds of the serial ripple
on the partitioned forest: each rank asks the owners of its leaves'
neighbour points (found from every rank's first leaf) and refines what they
answer must split, until an allreduce says nothing changed; the exchanges
are point-to-point, so the leaves are those of the serial balance.
"""

from __future__ import annotations

from ._ops import Adapt, Balance, CellTransfer, Coarsen, HpTransfer, Refine
from ._state import adapt_state
from ._transfer import apply_cells, apply_hp, change_degree

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
