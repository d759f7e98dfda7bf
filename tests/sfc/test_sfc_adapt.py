"""amrckpt.sfc's refine, coarsen and balance on their own (tests/p4est/test_adapt_p4est.py compares them with p4est)."""

from __future__ import annotations

import numpy as np
import pytest
from forests import families, random_forest
from hypothesis import given, settings
from hypothesis import strategies as st

from amrckpt import sfc
from amrckpt.errors import AdaptError


def _forest(dim: int, trees: int, seed: int, rounds: int = 3) -> sfc.Forest:
    lv = random_forest(dim, trees, seed, level=1, rounds=rounds)
    return sfc.Forest(lv.tree, lv.level, *lv[2:], num_trees=trees)


@settings(max_examples=30, deadline=None)
@given(dim=st.sampled_from([2, 3]), trees=st.integers(1, 3), seed=st.integers(0, 2**16), k=st.integers(1, 2))
def test_refine_then_coarsen_gives_the_forest_back(dim: int, trees: int, seed: int, k: int) -> None:
    f = _forest(dim, trees, seed, rounds=2)
    marks = np.random.default_rng(seed).random(len(f)) < 0.5
    up = sfc.refine(f, k, marks)
    up.forest.check()
    up.forest.check_order()
    assert len(up.forest) == len(f) + int(marks.sum()) * ((1 << (dim * k)) - 1)
    if k == 1 and marks.any():  # the children of the marked leaves, all marked, coarsen back to f (no marks: no step)
        counts = up.steps[0].counts(dim)
        children = np.repeat(marks, counts) & (up.forest.level > np.repeat(f.level, counts))
        assert sfc.coarsen(up.forest, 1, children).forest == f
    assert sfc.apply_steps(f, up.steps) == up.forest


@settings(max_examples=30, deadline=None)
@given(dim=st.sampled_from([2, 3]), trees=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_family_starts_are_the_reference_families(dim: int, trees: int, seed: int) -> None:
    lv = random_forest(dim, trees, seed, level=1, rounds=3)
    f = sfc.Forest(lv.tree, lv.level, *lv[2:], num_trees=trees)
    assert np.array_equal(np.flatnonzero(sfc.family_starts(f)), families(lv))


def test_uniform_refine_and_coarsen_by_levels() -> None:
    lv = sfc.uniform_leaves(2, 2, 3)
    f = sfc.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=2)
    up = sfc.refine(f, 2)
    lv4 = sfc.uniform_leaves(4, 2, 3)
    assert up.forest == sfc.Forest(lv4.tree, lv4.level, lv4.x, lv4.y, lv4.z, num_trees=2)
    assert sfc.coarsen(up.forest, 2).forest == f
    assert sfc.coarsen(up.forest, 9, minlevel=3).forest == sfc.refine(f, 1).forest
    assert len(sfc.refine(f, 5, maxlevel=3).steps) == 1


def test_bad_input_raises_adapt_errors() -> None:
    f = _forest(2, 1, 1)
    with pytest.raises(AdaptError, match="shape"):
        sfc.refine(f, 1, np.ones(len(f) + 1, dtype=bool))
    with pytest.raises(AdaptError, match="bool"):
        sfc.refine(f, 1, np.ones(len(f), dtype=np.int8))
    with pytest.raises(AdaptError, match="maxlevel"):
        sfc.refine(f, 1, maxlevel=99)
    with pytest.raises(AdaptError, match="levels"):
        sfc.coarsen(f, -1)
    with pytest.raises(AdaptError, match="complete family"):
        sfc.coarsen_step(f, np.arange(len(f)) == 1)
    with pytest.raises(AdaptError, match="connect"):
        sfc.balance(f, sfc.Connectivity.unit(2), "edge")
    with pytest.raises(AdaptError, match="does not fit"):
        sfc.balance(f, sfc.Connectivity.brick((2, 1)))


@settings(max_examples=20, deadline=None)
@given(dim=st.sampled_from([2, 3]), seed=st.integers(0, 2**16))
def test_balance_is_balanced_and_idempotent(dim: int, seed: int) -> None:
    conn = sfc.Connectivity.brick((2, 1) if dim == 2 else (1, 2, 1))
    f = _forest(dim, conn.num_trees, seed, rounds=2)
    f = sfc.refine(f, 3, np.arange(len(f)) % 11 == 0).forest
    b = sfc.balance(f, conn, "full")
    assert sfc.apply_steps(f, b.steps) == b.forest
    assert sfc.balance(b.forest, conn, "full").steps == ()
    assert len(b.forest) >= len(f)
