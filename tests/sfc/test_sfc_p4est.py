"""Forest.from_p4est / Forest.to_p4est: p4est's quadrant arrays, global_first_quadrant and pertree."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from forests import random_forest

import amrckpt as ac
from amrckpt import sfc
from amrckpt.comm import run_threads
from amrckpt.errors import SchemaError


def _part(lv: sfc.Leaves, a: int, b: int, K: int) -> ac.Forest:
    return ac.Forest(lv.tree[a:b], lv.level[a:b], lv.x[a:b], lv.y[a:b], None if lv.z is None else lv.z[a:b], num_trees=K)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_to_p4est_and_back_on_any_P(dim: int, P: int) -> None:
    K = 5
    lv = random_forest(dim, K, seed=10 * dim + P, level=1)
    N = lv.num_leaves
    want_pertree = np.concatenate([[0], np.cumsum(np.bincount(lv.tree, minlength=K))])

    def body(comm: Any) -> bool:
        a, b = N * comm.rank // P, N * (comm.rank + 1) // P
        if comm.rank == 1:  # an uneven split, one rank possibly empty
            a = b = N * (comm.rank + 1) // P
        if comm.rank == 0 and P > 1:
            b = N * 2 // P
        mine = _part(lv, a, b, K)
        q = mine.to_p4est(comm=comm, connectivity=sfc.Connectivity.brick((5, 1) if dim == 2 else (5, 1, 1)))
        assert q.quadrants.dtype == np.int32 and q.quadrants.shape == (b - a, dim + 1)
        assert np.array_equal(q.quadrants[:, dim], lv.level[a:b]) and np.array_equal(q.quadrants[:, 0], lv.x[a:b])
        assert np.array_equal(q.pertree, want_pertree) and q.global_first_quadrant[comm.rank] == a
        assert q.global_first_quadrant[-1] == N and len(q.global_first_quadrant) == P + 1
        assert (q.first_local_tree, q.last_local_tree) == ((int(lv.tree[a]), int(lv.tree[b - 1])) if b > a else (-1, -2))
        back = ac.Forest.from_p4est(q.quadrants, pertree=q.pertree, global_first_quadrant=q.global_first_quadrant, rank=comm.rank)
        assert back == mine
        trusted = mine.to_p4est(comm=comm, check=False)  # no keys computed: the same arrays
        assert all(np.array_equal(u, v) for u, v in zip(q, trusted, strict=True))
        rec = np.zeros(b - a, dtype=sfc.quadrant_dtype(dim))
        for k, name in enumerate("xyz"[:dim]):
            rec[name] = q.quadrants[:, k]
        rec["level"] = q.quadrants[:, dim]
        rec["p"] = 0xDEADBEEF  # the union of p4est_quadrant_t: ignored
        same = ac.Forest.from_p4est(rec, pertree=q.pertree, global_first_quadrant=q.global_first_quadrant, rank=comm.rank)
        assert same == mine
        return True

    assert all(run_threads(P, body))
    assert sfc.quadrant_dtype(dim).itemsize == 24


def test_to_p4est_refuses_what_p4est_cannot_hold() -> None:
    lv = random_forest(2, 2, seed=3)
    N, K = lv.num_leaves, 2
    gap = _part(lv, 0, N, K)
    keep = np.ones(N, dtype=bool)
    keep[N // 2] = False
    holes = ac.Forest(gap.tree[keep], gap.level[keep], gap.x[keep], gap.y[keep], num_trees=K)
    with pytest.raises(SchemaError, match="not a complete forest"):
        holes.to_p4est()

    def across(comm: Any) -> None:  # the hole at a rank boundary: every rank raises
        a, b = (0, N // 2) if comm.rank == 0 else (N // 2 + 1, N)
        _part(lv, a, b, K).to_p4est(comm=comm)

    with pytest.raises(SchemaError, match="do not join"):
        run_threads(2, across)
    with pytest.raises(SchemaError, match="Morton"):
        ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=K, curve="hilbert").to_p4est()
    with pytest.raises(SchemaError, match="connectivity"):
        _part(lv, 0, N, K).to_p4est(connectivity=sfc.Connectivity.unit(2))
    lone = ac.Forest(lv.tree[lv.tree == 0], lv.level[lv.tree == 0], lv.x[lv.tree == 0], lv.y[lv.tree == 0], num_trees=K)
    with pytest.raises(SchemaError, match="do not join"):  # tree 1 has no leaves
        lone.to_p4est()


def test_from_p4est_checks_its_arrays() -> None:
    lv = random_forest(3, 2, seed=4)
    q = _part(lv, 0, lv.num_leaves, 2).to_p4est()
    kw = {"pertree": q.pertree, "global_first_quadrant": q.global_first_quadrant}
    with pytest.raises(SchemaError, match="quadrants; global_first_quadrant gives"):
        ac.Forest.from_p4est(q.quadrants[1:], **kw)
    with pytest.raises(SchemaError, match="3D quadrants, a 2D connectivity"):
        ac.Forest.from_p4est(q.quadrants, connectivity=sfc.Connectivity.unit(2), **kw)
    with pytest.raises(SchemaError, match="pertree"):
        ac.Forest.from_p4est(q.quadrants, pertree=q.pertree[::-1], global_first_quadrant=q.global_first_quadrant)
    bad = q.quadrants.copy()
    bad[0, 3] = 40
    with pytest.raises(SchemaError, match="level"):
        ac.Forest.from_p4est(bad, **kw)
    bad = q.quadrants.copy()
    bad[1, 0] += 1
    with pytest.raises(SchemaError, match="aligned"):
        ac.Forest.from_p4est(bad, **kw)
    for outside in (1 << sfc.MAXLEVEL[3], -(1 << 18)):
        bad = q.quadrants.copy()
        bad[-1, 2] = outside
        with pytest.raises(SchemaError, match=f"leaf {len(bad) - 1} has coordinates outside its tree"):
            ac.Forest.from_p4est(bad, **kw)
    with pytest.raises(SchemaError, match=r"\(n, dim \+ 1\)"):
        ac.Forest.from_p4est(q.quadrants[:, :2], **kw)


@pytest.mark.parametrize("chunk", [5, 1 << 15])
@pytest.mark.parametrize("dim", [2, 3])
def test_from_p4est_keeps_the_records_it_packs(dim: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """p4est's (n, dim + 1) int32 rows are packed once: to_records gives those records, and follows the forest."""
    from amrckpt.sfc import _p4est

    monkeypatch.setattr(_p4est, "_CHUNK", chunk)  # 5: rows spill across chunks and trees
    lv = random_forest(dim, 3, seed=20 + dim, level=1)
    K = 3
    q = _part(lv, 0, lv.num_leaves, K).to_p4est()
    kw = {"pertree": q.pertree, "global_first_quadrant": q.global_first_quadrant}
    forest = ac.Forest.from_p4est(q.quadrants, **kw)
    plain = _part(lv, 0, lv.num_leaves, K)
    want = plain.to_records()
    rec = forest.to_records(check=True)
    assert forest == plain and rec.tobytes() == want.tobytes() and not rec.flags.writeable
    assert np.shares_memory(rec, forest.x) and np.shares_memory(forest.to_records(), rec)
    q.quadrants[0, 0] = 12345  # p4est's array is copied: the forest does not follow it
    assert forest.to_records().tobytes() == want.tobytes()
    forest.level[-1] = 1  # in place: the records are the forest's storage
    assert forest.to_records()["level"][-1] == 1
    with pytest.raises(SchemaError, match=r"aligned|range"):
        forest.to_records(check=True)
    forest.level[-1] = lv.level[-1]
    forest.check()
    for name, value, why in (("tree", K, "out of range"), (("z" if dim == 3 else "y"), 1 << sfc.MAXLEVEL[dim], "outside its tree")):
        keep = int(getattr(forest, name)[-1])
        getattr(forest, name)[-1] = value
        with pytest.raises(SchemaError, match=f"leaf {len(forest) - 1} .*{why}"):
            forest.to_records(check=True)
        getattr(forest, name)[-1] = keep
    forest.x = forest.x.copy()  # replaced: packed again, from the new array
    forest.x[0] = 1 << 20
    assert np.shares_memory(forest.to_records(), forest.tree) is False
    assert forest.to_records()["x"][0] == 1 << 20
    copied = copy.deepcopy(ac.Forest.from_p4est(_part(lv, 0, lv.num_leaves, K).to_p4est().quadrants, **kw))
    assert copied == plain and copied.to_records().tobytes() == want.tobytes() and copied.to_records().flags.writeable
    strided = np.zeros((lv.num_leaves, 2 * (dim + 1)), np.int32)[:, ::2]  # not p4est's layout: through columns
    strided[...] = _part(lv, 0, lv.num_leaves, K).to_p4est().quadrants
    assert ac.Forest.from_p4est(strided, **kw) == plain


def test_from_p4est_refuses_levels_beyond_int8_unchecked() -> None:
    lv = random_forest(3, 2, seed=5)
    q = _part(lv, 0, lv.num_leaves, 2).to_p4est()
    kw = {"pertree": q.pertree, "global_first_quadrant": q.global_first_quadrant, "check": False}
    bad = q.quadrants.copy()
    bad[-1, 3] = 256 + int(bad[-1, 3])  # the low byte is a valid level: no silent wrap-around
    with pytest.raises(SchemaError, match="beyond the range of int8"):
        ac.Forest.from_p4est(bad, **kw)
    bad[-1, 3] = -3  # fits int8: kept, and found by the checks
    forest = ac.Forest.from_p4est(bad, **kw)
    assert forest.level[-1] == -3
    with pytest.raises(SchemaError, match="out of range"):
        forest.check()


def _pieces(lv: sfc.Leaves, keep: np.ndarray, K: int) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """The kept leaves as p4est holds them: (n, dim + 1) int32 rows, each tree's p4est_quadrant_t records, pertree."""
    dim = lv.dim
    coords = [c[keep] for c in lv[2 : 2 + dim]]
    rows = np.stack([*coords, lv.level[keep]], axis=1).astype(np.int32)
    rec = np.zeros(len(rows), dtype=sfc.quadrant_dtype(dim))
    for k, name in enumerate("xyz"[:dim]):
        rec[name] = coords[k]
    rec["level"], rec["p"] = lv.level[keep], 0xDEADBEEF
    pertree = np.concatenate([[0], np.cumsum(np.bincount(lv.tree[keep], minlength=K))])
    return rows, [rec[pertree[t] : pertree[t + 1]] for t in range(K)], pertree


def _pairs_follow(f: ac.Forest) -> bool:
    """Whether each leaf starts where the one before it ends (by curve keys)."""
    L, dim = sfc.MAXLEVEL[f.dim], f.dim
    keys = sfc.morton_keys(*f.coords(), level=f.level).astype(object)
    ends = keys + np.array([1 << (dim * (L - int(v))) for v in f.level], dtype=object)
    t = f.tree.astype(np.int64)
    same = (t[1:] == t[:-1]) & (keys[1:] == ends[:-1])
    nxt = (t[1:] == t[:-1] + 1) & (ends[:-1] == 1 << (dim * L)) & (keys[1:] == 0)
    return bool(np.all(same | nxt))


@pytest.mark.parametrize("dim", [2, 3])
def test_from_p4est_and_to_p4est_judge_completeness_as_the_curve_keys_do(dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Morton successor from the coordinates (no keys) against check_linear_forest(complete=True), chunks of 7 leaves."""
    from amrckpt.sfc import _p4est

    monkeypatch.setattr(_p4est, "_CHUNK", 7)  # pairs across chunks, trees and pieces
    K = 3
    lv = random_forest(dim, K, seed=30 + dim, level=1)
    N = lv.num_leaves
    rng = np.random.default_rng(dim)
    for trial in range(16):
        keep = np.ones(N, dtype=bool)
        if trial:  # a hole: one leaf, or a run of them (a family, a tree's end)
            i = int(rng.integers(N))
            keep[i : i + int(rng.integers(1, 9))] = False
        if trial == 1:
            keep[:] = True
            keep[N // 2] = False
        rows, trees, pertree = _pieces(lv, keep, K)
        if (pertree[1:] == pertree[:-1]).any():
            continue  # a tree without leaves: pertree of p4est cannot say so
        plain = ac.Forest(lv.tree[keep], lv.level[keep], *(c[keep] for c in lv[2 : 2 + dim]), num_trees=K)
        complete = sfc.is_linear_forest(plain.tree, plain.level, *plain.coords(), num_trees=K, complete=True)
        kw = {"pertree": pertree, "global_first_quadrant": [0, len(rows)]}
        for given in (rows, trees, [t.copy() for t in trees if len(t)]):
            forest = ac.Forest.from_p4est(given, **kw)
            assert forest == plain and forest.to_records().tobytes() == plain.to_records().tobytes()
            # Inner pairs only (the ends of a rank's part are checked across ranks): each leaf where the one before ends.
            assert (forest._ordered is not None) == _pairs_follow(plain)
            if complete:
                assert forest._ordered is not None
        if complete:
            back = plain.to_p4est()
            assert np.array_equal(back.quadrants, rows) and np.array_equal(back.pertree, pertree)
            assert all(np.array_equal(u, v) for u, v in zip(back, ac.Forest.from_p4est(trees, **kw).to_p4est(), strict=True))
        else:
            with pytest.raises(SchemaError, match=r"complete forest|do not join"):
                plain.to_p4est()
            with pytest.raises(SchemaError, match=r"complete forest|do not join"):
                ac.Forest.from_p4est(trees, **kw).to_p4est()  # from its records: the rows copied whole


def test_a_forest_checked_by_from_p4est_is_saved_unchecked_unless_it_changed(tmp_path: Any) -> None:
    """save trusts from_p4est's checks only for the records they passed (their CRC32): the same bytes either way."""
    K = 2
    lv = random_forest(3, K, seed=40, level=1)
    rows, trees, pertree = _pieces(lv, np.ones(lv.num_leaves, dtype=bool), K)
    forest = ac.Forest.from_p4est(trees, pertree=pertree, global_first_quadrant=[0, len(rows)])
    assert forest._ordered is not None

    class S(ac.CheckpointSchema, name="p4est trust", version=1):
        mesh: ac.Forest = ac.Mesh(dim=3)

    ac.save(S(mesh=forest), tmp_path / "a.scda")
    ac.save(S(mesh=_part(lv, 0, lv.num_leaves, K)), tmp_path / "b.scda")
    assert (tmp_path / "a.scda").read_bytes() == (tmp_path / "b.scda").read_bytes()
    forest.x[[3, 4]] = forest.x[[4, 3]]  # in place, after the check: out of order now
    with pytest.raises(SchemaError, match="curve"):
        ac.save(S(mesh=forest), tmp_path / "c.scda")
    forest.x[[3, 4]] = forest.x[[4, 3]]
    forest.level[0] = 30  # out of range: the ranges are checked again too
    with pytest.raises(SchemaError, match="out of range"):
        ac.save(S(mesh=forest), tmp_path / "c.scda")


def test_from_p4est_takes_nested_rows_as_one_array_and_arrays_as_pieces() -> None:
    lv = random_forest(2, 1, seed=6, level=1)
    rows, trees, pertree = _pieces(lv, np.ones(lv.num_leaves, dtype=bool), 1)
    kw = {"pertree": pertree, "global_first_quadrant": [0, len(rows)]}
    want = ac.Forest.from_p4est(rows, **kw)
    assert ac.Forest.from_p4est(rows.tolist(), **kw) == want  # a nested list is an array_like of rows, as before
    assert ac.Forest.from_p4est(tuple(map(tuple, rows.tolist())), **kw) == want
    assert ac.Forest.from_p4est([rows[:5], rows[5:]], **kw) == want  # arrays: pieces
    assert ac.Forest.from_p4est((trees[0][:3], trees[0][3:]), **kw) == want


@pytest.mark.parametrize(("chunk", "threads"), [(6, 1), (6, 2), (1 << 15, 2)])
@pytest.mark.parametrize("dim", [2, 3])
def test_from_p4est_judges_one_changed_leaf_as_the_exact_checks_do(
    dim: int, chunk: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One coordinate bit or level changed: refused when a range check fails, trusted (_ordered) only when every pair follows.

    Chunks of 6 leaves, checked as they are packed (one thread) or while the helper thread packs them (two).
    """
    from amrckpt.sfc import _p4est

    monkeypatch.setattr(_p4est, "_CHUNK", chunk)
    monkeypatch.setattr(_p4est, "default_threads", lambda: threads)
    K = 2
    lv = random_forest(dim, K, seed=50 + dim, level=1)
    rows, _, pertree = _pieces(lv, np.ones(lv.num_leaves, dtype=bool), K)
    kw = {"pertree": pertree, "global_first_quadrant": [0, len(rows)]}
    L = sfc.MAXLEVEL[dim]
    rng = np.random.default_rng(dim + chunk)
    for _ in range(60):
        bad = rows.copy()
        i, axis = int(rng.integers(len(bad))), int(rng.integers(dim + 1))
        if axis == dim:
            bad[i, dim] = int(rng.integers(-2, sfc.QMAXLEVEL[dim] + 3))
        else:
            bad[i, axis] ^= 1 << int(rng.integers(L + 2))
        plain = ac.Forest(lv.tree, bad[:, dim], *(bad[:, k] for k in range(dim)), num_trees=K)
        records = np.zeros(len(bad), dtype=sfc.quadrant_dtype(dim))  # p4est_quadrant_t, one piece per tree
        for k, name in enumerate([*"xyz"[:dim], "level"]):
            records[name] = bad[:, k]
        for given in (bad, [records[pertree[t] : pertree[t + 1]] for t in range(K)]):
            unchecked = ac.Forest.from_p4est(given, check=False, **kw)  # packed as it is, by two threads at once
            assert unchecked.to_records().tobytes() == plain.to_records().tobytes()
            try:
                plain.check()
            except SchemaError as exc:
                with pytest.raises(SchemaError, match=str(exc).split(" (")[0].replace("(", r"\(")):
                    ac.Forest.from_p4est(given, **kw)
                continue
            forest = ac.Forest.from_p4est(given, **kw)
            assert forest == plain and (forest._ordered is not None) == _pairs_follow(plain)


def test_from_p4est_unchecked_in_two_threads_packs_chunks_in_any_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk packed after the next one spills onto that one's first tree: written again after the chunks."""
    from amrckpt.sfc import _p4est

    monkeypatch.setattr(_p4est, "_CHUNK", 5)
    monkeypatch.setattr(_p4est, "default_threads", lambda: 2)
    monkeypatch.setattr(_p4est, "map_shared", lambda fn, items, threads: [fn(x) for x in items[::-1]][::-1])
    K = 3
    lv = random_forest(3, K, seed=60, level=1)
    rows, trees, pertree = _pieces(lv, np.ones(lv.num_leaves, dtype=bool), K)
    want = _part(lv, 0, lv.num_leaves, K).to_records().tobytes()
    for given in (rows, trees):
        forest = ac.Forest.from_p4est(given, pertree=pertree, global_first_quadrant=[0, len(rows)], check=False)
        assert forest.to_records().tobytes() == want
