"""p4est's completeness on slices of a forest (sfc.forest_gap): consecutive slices, each with the leaf before it, see every hole."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from forests import random_forest
from hypothesis import given, settings
from hypothesis import strategies as st

from amrckpt import sfc
from amrckpt.errors import PartitionError


def _gaps(lv: sfc.Leaves, cuts: list[int], num_trees: int) -> list[sfc.ForestGap]:
    """The gaps that consecutive slices [cuts[k], cuts[k + 1]) find, each with the leaf before it."""
    N = lv.num_leaves
    z = lv.z
    out = []
    for a, b in itertools.pairwise(cuts):
        before = None
        if 0 < a < b:
            j = a - 1
            before = (int(lv.tree[j]), int(lv.level[j]), int(lv.x[j]), int(lv.y[j]), None if z is None else int(z[j]))
        gap = sfc.forest_gap(
            lv.tree[a:b],
            lv.level[a:b],
            lv.x[a:b],
            lv.y[a:b],
            None if z is None else z[a:b],
            first_index=a,
            num_leaves=N,
            num_trees=num_trees,
            before=before,
        )
        if gap is not None:
            out.append(gap)
    return out


def _drop(lv: sfc.Leaves, i: int) -> sfc.Leaves:
    keep = np.arange(lv.num_leaves) != i
    return sfc.Leaves(lv.tree[keep], lv.level[keep], lv.x[keep], lv.y[keep], None if lv.z is None else lv.z[keep])


@settings(max_examples=60, deadline=None)
@given(dim=st.sampled_from([2, 3]), seed=st.integers(0, 10**6), data=st.data())
def test_slices_agree_with_the_whole_forest(dim: int, seed: int, data: st.DataObject) -> None:
    K = 3
    lv = random_forest(dim, K, seed=seed, level=1, rounds=2)
    N = lv.num_leaves
    cuts = sorted(data.draw(st.lists(st.integers(0, N), max_size=4)))
    cuts = [0, *cuts, N]
    assert _gaps(lv, cuts, K) == []
    i = data.draw(st.integers(0, N - 1))
    holed = _drop(lv, i)
    cuts = [min(c, N - 1) for c in cuts]
    gaps = _gaps(holed, cuts, K)
    with pytest.raises(PartitionError, match="not a complete forest"):
        sfc.check_linear_forest(holed.tree, holed.level, holed.x, holed.y, holed.z, num_trees=K, complete=True)
    assert gaps, f"leaf {i} dropped, no gap found with cuts {cuts}"
    first = min(gaps, key=lambda g: g.index)
    assert first.index in (i - 1, i), first  # the leaf before the hole, or the one after it (now at index i)
    assert f"quadrant {first.index}" in first.message and f"tree {first.tree}" in first.message


def test_messages_name_the_quadrant_and_the_tree() -> None:
    lv = sfc.uniform_leaves(1, num_trees=3, dim=2)  # 4 leaves per tree
    whole = [0, lv.num_leaves]
    assert _gaps(lv, whole, 3) == []
    assert "quadrant 0, the first of tree 0" in _gaps(_drop(lv, 0), whole, 3)[0].message
    assert "quadrant 2, the last of tree 0, does not end" in _gaps(_drop(lv, 3), whole, 3)[0].message
    assert "quadrant 6 (tree 1) does not start where quadrant 5 (tree 1) ends" in _gaps(_drop(lv, 6), whole, 3)[0].message
    no_tree_1 = sfc.Leaves(*(a[lv.tree != 1] for a in (lv.tree, lv.level, lv.x, lv.y)))
    assert "tree 1 has no quadrants" in _gaps(no_tree_1, [0, 8], 3)[0].message
    first_two = sfc.Leaves(lv.tree[:8], lv.level[:8], lv.x[:8], lv.y[:8])
    assert "tree 2 has no quadrants (after quadrant 7, the last)" in _gaps(first_two, [0, 8], 3)[0].message
