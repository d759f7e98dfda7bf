"""Partitions that keep families of sibling leaves on one rank (p4est's partition_for_coarsening)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from forests import families, random_forest
from hypothesis import given, settings
from hypothesis import strategies as st

import amrckpt as ac
from _support import collectives
from amrckpt import sfc
from amrckpt.comm import run_threads
from amrckpt.errors import PartitionError
from amrckpt.partition import Partition, family_window, keep_families


def p4est_correction(partition: list[int], rank: int, lo: int, hi: int) -> int:
    """p4est_partition_correction of p4est_algorithms.c, line for line (the family lo..hi, the cut of rank)."""
    P = len(partition) - 1
    rank_with_max = rank
    max_num = min(hi, partition[rank + 1] - 1) - partition[rank] + 1
    i = rank_with_max - 1
    while i >= 0 and lo < partition[i + 1]:
        h = partition[i + 1] - max(lo, partition[i])
        if max_num <= h:
            max_num, rank_with_max = h, i
        i -= 1
    i = rank_with_max + 1
    while i < P and partition[i] <= hi:
        h = min(hi, partition[i + 1] - 1) - partition[i] + 1
        if max_num < h:
            max_num, rank_with_max = h, i
        i += 1
    return partition[rank] - hi - 1 if rank_with_max < rank else partition[rank] - lo


def expected(lv: sfc.Leaves, base: Partition) -> list[int]:
    F = 1 << lv.dim
    g = base.global_first_quadrant.tolist()
    starts = families(lv)
    out = list(g)
    for q in range(1, base.size):
        inside = starts[(starts < g[q]) & (g[q] < starts + F)]
        if inside.size:
            s = int(inside[0])
            out[q] = g[q] - p4est_correction(g, q, s, s + F - 1)
    return out


def corrected(lv: sfc.Leaves, base: Partition, P: int) -> list[Partition]:
    coords_all = [lv.x, lv.y] + ([lv.z] if lv.z is not None else [])

    def body(comm: Any) -> Partition:
        a, n = family_window(base, comm.rank, lv.dim)
        return keep_families(
            base,
            lv.tree[a : a + n],
            lv.level[a : a + n],
            [c[a : a + n] for c in coords_all],
            maxlevel=sfc.MAXLEVEL[lv.dim],
            comm=comm,
        )

    return run_threads(P, body)


@settings(max_examples=80, deadline=None)
@given(dim=st.sampled_from([2, 3]), seed=st.integers(0, 10**6), P=st.integers(1, 9), how=st.sampled_from(["uniform", "weighted"]))
def test_keep_families_is_p4est_s_correction(dim: int, seed: int, P: int, how: str) -> None:
    lv = random_forest(dim, 3, seed=seed, level=1, rounds=2, fraction=0.4)
    N = lv.num_leaves
    if how == "uniform":
        base = Partition.uniform(N, P)
    else:
        w = np.random.default_rng(seed).integers(0, 50, N)
        base = Partition.weighted(w, size=P)
    got = corrected(lv, base, P)
    assert all(p == got[0] for p in got)
    new = got[0].global_first_quadrant.tolist()
    assert new == expected(lv, base)
    # No family split; every cut that split none is where it was.
    F = 1 << dim
    starts = families(lv)
    for q in range(1, P):
        assert not ((starts < new[q]) & (new[q] < starts + F)).any()
        if not ((starts < base.global_first_quadrant[q]) & (base.global_first_quadrant[q] < starts + F)).any():
            assert new[q] == base.global_first_quadrant[q]


def test_a_family_spread_over_three_ranks_goes_to_the_largest_share() -> None:
    lv = sfc.uniform_leaves(1, num_trees=1, dim=3)  # one family of 8
    base = Partition.from_counts([2, 1, 3, 2])
    got = corrected(lv, base, 4)[0]
    assert got.elem_counts.tolist() == [0, 0, 8, 0]  # rank 2 held the most
    tie = Partition.from_counts([4, 4])
    assert corrected(lv, tie, 2)[0].elem_counts.tolist() == [8, 0]  # a tie: the lower rank
    one = sfc.uniform_leaves(0, num_trees=3, dim=2)  # level-0 trees: no families
    assert corrected(one, Partition.uniform(3, 3), 3)[0] == Partition.uniform(3, 3)


def test_one_collective_and_errors_on_every_rank() -> None:
    lv = random_forest(2, 2, seed=1)
    base = Partition.uniform(lv.num_leaves, 4)

    def body(comm: Any) -> None:
        a, n = family_window(base, comm.rank, 2)
        keep_families(base, lv.tree[a : a + n], lv.level[a : a + n], [lv.x[a : a + n], lv.y[a : a + n]], maxlevel=30, comm=comm)

    assert collectives(4, body) == [1 + 1] * 4  # the call's meeting (Call.meet), then the one allreduce

    def short(comm: Any) -> None:  # every rank but 0 must pass its window
        keep_families(Partition.uniform(lv.num_leaves, 3), [], [], [[], []], maxlevel=30, comm=comm)

    with pytest.raises(PartitionError, match="family_window"):
        run_threads(3, short)
    with pytest.raises(PartitionError, match="a partition of 4 ranks on 3"):
        run_threads(3, lambda comm: keep_families(base, [], [], [[], []], maxlevel=30, comm=comm))


class Heat(ac.CheckpointSchema, name="heat families", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    T: ac.CellData = ac.Cells("<f8")


@pytest.mark.parametrize("spec", ["uniform", "weighted"])
@pytest.mark.parametrize("Q", [2, 3, 5])
def test_load_keeps_families_together(tmp_path: Path, spec: str, Q: int) -> None:
    lv = random_forest(2, 2, seed=Q, level=2, rounds=2)
    N = lv.num_leaves
    path = tmp_path / "h.scda"
    ac.save(Heat(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2), T=np.arange(N, dtype="<f8")), path)

    def read(comm: Any) -> tuple[Partition, bool]:
        loaded = ac.load(path, Heat, comm=comm, partition=spec, allow_for_coarsening=True)  # type: ignore[arg-type]
        a, b = loaded.partition.local_range(comm.rank)  # type: ignore[union-attr]
        ok = np.array_equal(loaded.state.T, np.arange(a, b)) and len(loaded.state.mesh) == b - a
        return loaded.partition, ok  # type: ignore[return-value]

    out = run_threads(Q, read)
    assert all(ok for _, ok in out)
    new = out[0][0].global_first_quadrant.tolist()
    starts = families(lv)
    assert not any(((starts < c) & (c < starts + 4)).any() for c in new[1:-1])
    plain = run_threads(Q, lambda comm: ac.load(path, Heat, comm=comm, partition=spec).partition)  # type: ignore[arg-type]
    assert new == expected(lv, plain[0])


def test_the_writer_partition_keeps_families_when_asked(tmp_path: Path) -> None:
    """partition="writer" with allow_for_coarsening: the writer's cuts that split a family move, as p4est's correction does."""
    lv = random_forest(2, 2, seed=3, level=2, rounds=2)
    N, P = lv.num_leaves, 3
    starts = families(lv)
    cuts = [0, N // 3 + 1, 2 * N // 3 - 1, N]  # the writer's partition
    writer = Partition.from_offsets(cuts)
    assert any(((starts < c) & (c < starts + 4)).any() for c in cuts[1:-1]), "the writer must split a family"
    path = tmp_path / "w.scda"

    def write(comm: Any) -> None:
        a, b = writer.local_range(comm.rank)
        mesh = ac.Forest(lv.tree[a:b], lv.level[a:b], lv.x[a:b], lv.y[a:b], num_trees=2)
        ac.save(Heat(mesh=mesh, T=np.arange(a, b, dtype="<f8")), path, comm=comm, run_record=True)

    run_threads(P, write)
    plain = run_threads(P, lambda comm: ac.load(path, Heat, comm=comm, partition="writer").partition)
    assert all(p == writer for p in plain)

    def read(comm: Any) -> tuple[Partition, bool]:
        loaded = ac.load(path, Heat, comm=comm, partition="writer", allow_for_coarsening=True)
        a, b = loaded.partition.local_range(comm.rank)  # type: ignore[union-attr]
        return loaded.partition, np.array_equal(loaded.state.T, np.arange(a, b))  # type: ignore[return-value]

    out = run_threads(P, read)
    assert all(ok for _, ok in out) and all(p == out[0][0] for p, _ in out)
    new = out[0][0].global_first_quadrant.tolist()
    assert new == expected(lv, writer) and new != cuts
    assert not any(((starts < c) & (c < starts + 4)).any() for c in new[1:-1])
