"""Space-filling curves for forests of quadtrees (2D) and octrees (3D).

Layer 3 of amrckpt, pure numpy.  A forest's leaves are described, as in
p4est, by parallel arrays:

``tree`` ((N,) numpy.ndarray of numpy.int32 or numpy.int64)
    The tree of each leaf (p4est ``p4est_topidx_t``), ``0 <= tree``.
``level`` ((N,) numpy.ndarray of numpy.int8)
    The refinement level, ``0 <= level <= QMAXLEVEL[dim]``.
``x, y[, z]`` ((N,) numpy.ndarray of numpy.int32)
    The integer coordinates of the leaf's anchor (its lower-left-front
    corner) in units of the smallest cell, ``0 <= x < ROOT_LEN[dim]``; a
    leaf of level ``l`` has coordinates that are multiples of
    ``2**(MAXLEVEL[dim] - l)`` (p4est ``p4est_quadrant_t``: ``x``, ``y``,
    ``z``, ``level``, with ``P4EST_MAXLEVEL`` = 30, ``P4EST_QMAXLEVEL`` = 29,
    ``P8EST_MAXLEVEL`` = 19, ``P8EST_QMAXLEVEL`` = 18).

Both curves assign to every leaf a **key**: the index, along the curve at
maximum level ``L = MAXLEVEL[dim]``, of the first max-level cell of the leaf.
The ``2**(dim * (L - level))`` max-level cells of a leaf form the contiguous
key range ``[key, key + 2**(dim * (L - level)))`` (:func:`leaf_ranges`), so
that sorting the leaves of one tree by ``(key, level)`` gives the curve's
order of any adaptive leaf set, an ancestor right before its first
descendant (p4est ``p4est_quadrant_compare``); the forest order is tree
major (:func:`sfc_order`).  A forest is *linear* when its leaves are in that
order and do not overlap (:func:`check_linear_forest`, p4est
``p4est_tree_is_linear``), and *complete* when they also cover every tree
(:func:`forest_gap`, p4est ``p4est_tree_is_complete``, checked on any slice).

Curves
------
``"morton"``
    The Z-order of p4est: bit ``i`` of ``x``, ``y``, ``z`` goes to bit
    ``dim * i``, ``dim * i + 1``, ``dim * i + 2`` of the key, so that
    ``key >> dim * (L - l)`` is ``p4est_quadrant_linear_id(q, l)``; the key of
    a leaf is the Morton index of its anchor.  This is the order in which
    amrckpt stores leaves.
``"hilbert"``
    The Hilbert curve in the construction of C. Hamilton ("Compact Hilbert
    indices", Dalhousie University technical report CS-2006-07, 2006),
    computed top-down from a fixed root orientation, so that the curve of
    level ``l`` is the coarsening of the curve of level ``l + 1``.  In every
    tree it enters at the origin corner and leaves at the corner ``(1, 0)``
    (2D) or ``(1, 0, 0)`` (3D); consecutive cells of a uniform level are
    face neighbors.  Trees are not connected to each other (each is ordered
    on its own, tree major), as in p4est.

Keys are numpy.uint64: 60 bits in 2D, 57 bits in 3D.
"""

from __future__ import annotations

from ._adapt import (
    CONNECT_TYPES,
    Adapted,
    AdaptStep,
    BalanceQueries,
    apply_steps,
    balance,
    balance_answers,
    balance_queries,
    coarsen,
    coarsen_step,
    family_starts,
    refine,
    refine_step,
)
from ._builtin import shell_map
from ._complete import ForestGap, forest_gap
from ._connectivity import P4EST_ONDISK_FORMAT, Connectivity
from ._forest import Forest, mesh_record_dtype
from ._keys import CURVES, MAXLEVEL, QMAXLEVEL, ROOT_LEN, Curve, hilbert_keys, leaf_ranges, morton_decode, morton_keys, sfc_keys
from ._linear import Leaves, check_linear_forest, is_linear_forest, sfc_order, uniform_leaves
from ._p4est import P4estQuadrants, quadrant_dtype

__all__ = [
    "CONNECT_TYPES",
    "CURVES",
    "AdaptStep",
    "Adapted",
    "BalanceQueries",
    "apply_steps",
    "balance",
    "balance_answers",
    "balance_queries",
    "coarsen",
    "coarsen_step",
    "family_starts",
    "refine",
    "refine_step",
    "Connectivity",
    "Forest",
    "ForestGap",
    "Curve",
    "MAXLEVEL",
    "P4EST_ONDISK_FORMAT",
    "P4estQuadrants",
    "QMAXLEVEL",
    "ROOT_LEN",
    "Leaves",
    "check_linear_forest",
    "forest_gap",
    "hilbert_keys",
    "is_linear_forest",
    "leaf_ranges",
    "mesh_record_dtype",
    "morton_decode",
    "morton_keys",
    "quadrant_dtype",
    "sfc_keys",
    "sfc_order",
    "shell_map",
    "uniform_leaves",
]
