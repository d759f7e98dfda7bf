"""Adapting while loading (amrckpt.adapt through ac.load): refine, coarsen, balance, degree changes, on 1 to 4 ranks.

The ranks are threads (amrckpt.comm.run_threads); tests/mpi/test_adapt_mpi.py runs the same under mpiexec.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, global_state

import amrckpt as ac
from amrckpt import sfc
from amrckpt.adapt import Adapt, Balance, CellTransfer, Coarsen, HpTransfer, Refine, apply_hp, change_degree
from amrckpt.comm import run_threads
from amrckpt.errors import AdaptError
from amrckpt.partition import Partition

G = global_state(seed=7, max_level=5)


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("adapt") / "original.scda"
    ac.save(G.local(0, G.N), path)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_save(P: int, src: Path, dst: Path, adapt: Any, **kw: Any) -> list[Any]:
    def body(comm: Any) -> Any:
        loaded = ac.load(src, Advection, comm=comm, adapt=adapt, **kw)
        ac.save(loaded.state, dst, comm=comm)
        return loaded

    return run_threads(P, body)


def _volume(level: np.ndarray) -> np.ndarray:
    return np.ldexp(1.0, -2 * level.astype(np.int64))


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_refine_then_coarsen_gives_the_state_back_bit_for_bit(tmp_path: Path, original: Path, P: int) -> None:
    fine, back = tmp_path / "fine.scda", tmp_path / "back.scda"
    got = _load_save(P, original, fine, Refine(levels=1))
    assert sum(len(g.state.mesh) for g in got) == 4 * G.N
    assert [int(g.partition.elem_counts[r]) for r, g in enumerate(got)] == [len(g.state.mesh) for g in got]
    assert got[0].partition == Partition.uniform(4 * G.N, P)
    _load_save(max(1, 5 - P), fine, back, Coarsen(levels=1))  # restarted on another process count
    assert _sha(back) == _sha(original)


def test_adapted_files_are_the_same_bytes_at_any_process_count(tmp_path: Path, original: Path) -> None:
    def hot(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.asarray(fields["rho"] > 0.5)

    spec = Adapt(Refine(levels=2, marker=hot, maxlevel=6), transfers={"modes": HpTransfer(degree=2)})
    shas = set()
    for P in (1, 2, 3, 4):
        for how in ("uniform", "weighted"):
            _load_save(P, original, tmp_path / f"{P}{how}.scda", spec, partition=how)
            shas.add(_sha(tmp_path / f"{P}{how}.scda"))
    assert len(shas) == 1
    c1, c4 = tmp_path / "c1.scda", tmp_path / "c4.scda"
    _load_save(1, tmp_path / "1uniform.scda", c1, Adapt(Coarsen(levels=3, minlevel=2)))
    _load_save(4, tmp_path / "1uniform.scda", c4, Adapt(Coarsen(levels=3, minlevel=2)), allow_for_coarsening=True)
    assert _sha(c1) == _sha(c4)


def test_coarsening_keeps_the_integral(tmp_path: Path, original: Path) -> None:
    before = float(np.sum(G.rho * _volume(G.leaves.level)))

    def body(comm: Any) -> Any:
        return ac.load(original, Advection, comm=comm, adapt=Coarsen(levels=2), fields=["mesh", "rho"])

    got = run_threads(3, body)
    after = sum(float(np.sum(g.state.rho * _volume(g.state.mesh.level))) for g in got)
    assert sum(len(g.state.mesh) for g in got) < G.N
    assert after == pytest.approx(before, rel=1e-14, abs=0)
    assert all(np.all(g.state.mesh.level >= 0) for g in got)


def test_raising_then_lowering_the_degree_gives_the_coefficients_back(tmp_path: Path, original: Path) -> None:
    up, down = tmp_path / "up.scda", tmp_path / "down.scda"
    got = _load_save(2, original, up, Adapt(transfers={"modes": HpTransfer(degree=5)}))
    assert all(np.all(g.state.modes.counts == 36) for g in got)
    _load_save(3, up, down, Adapt(transfers={"modes": HpTransfer(degree=3)}))
    want = change_degree(G.local(0, G.N).modes, 3, 2)
    assert ac.load(down, Advection).state.modes == want
    # the leaves of degree 3 have their coefficients back, bit for bit
    got3 = ac.load(down, Advection).state.modes
    deg3 = np.repeat(G.counts == 16, 16)
    assert np.array_equal(got3.values[deg3], G.modes[np.repeat(G.counts == 16, G.counts)])


def test_user_transfers_and_a_balanced_load(tmp_path: Path, original: Path) -> None:
    def kids(parents: np.ndarray) -> np.ndarray:
        return np.repeat(parents[:, None] * 2.0, 4, axis=1)

    def mean(children: np.ndarray) -> np.ndarray:
        return children.sum(axis=1) / 8.0

    t = {"rho": CellTransfer(refine=kids, coarsen=mean)}
    _load_save(2, original, tmp_path / "u.scda", Adapt(Refine(), transfers=t))
    _load_save(3, tmp_path / "u.scda", tmp_path / "b.scda", Adapt(Coarsen(), transfers=t))
    assert np.array_equal(ac.load(tmp_path / "b.scda", Advection).state.rho, G.rho)
    conn = sfc.Connectivity.brick((2, 1))

    def deep(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.asarray(np.arange(len(forest)) % 13 == 0)

    got = ac.load(original, Advection, adapt=Adapt(Refine(levels=3, marker=deep), Balance("face", connectivity=conn)))
    refined = sfc.refine(sfc.Forest(*_leaves(), num_trees=2), 3, np.arange(G.N) % 13 == 0).forest
    want = sfc.balance(refined, conn, "face")
    assert got.state.mesh == want.forest
    assert got.state.rho.shape == (len(want.forest),)


def _leaves() -> tuple[Any, ...]:
    lv = G.leaves
    return lv.tree, lv.level, lv.x, lv.y


def test_bad_input_is_an_adapt_error_on_every_rank(tmp_path: Path, original: Path) -> None:
    def short(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.ones(len(forest) - (forest.tree[0] == 0 if len(forest) else 0), dtype=bool)

    def ints(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.ones(len(forest), dtype=np.int8)

    def wrong(parents: np.ndarray) -> np.ndarray:
        return parents

    cases = [
        (Refine(marker=short), "shape"),
        (Refine(marker=ints), "bool"),
        (Refine(maxlevel=40), "maxlevel"),
        (Coarsen(minlevel=-1), "minlevel"),
        (Adapt(Refine(), transfers={"rho": CellTransfer(refine=wrong)}), "returned shape"),
        (Adapt(Refine(), transfers={"modes": CellTransfer()}), "HpTransfer"),
        (Balance("face", connectivity=sfc.Connectivity.star()), "does not fit"),
    ]
    for spec, match in cases:

        def body(comm: Any, spec: Any = spec) -> Any:
            return ac.load(original, Advection, comm=comm, adapt=spec)

        with pytest.raises(AdaptError, match=match) as info:
            run_threads(3, body)
        assert all(isinstance(e, AdaptError) for e in getattr(info.value, "rank_exceptions", {}).values())
    with pytest.raises(AdaptError, match="partition"):
        ac.load(original, Advection, adapt=Refine(), partition="writer")
    with pytest.raises(AdaptError, match="Balance"):
        ac.load(original, Advection, adapt=Balance())  # the file stores no connectivity


def test_manager_restores_one_level_finer_and_back(tmp_path: Path) -> None:
    def body(comm: Any) -> tuple[int, bool]:
        with ac.CheckpointManager(tmp_path / "run", Advection, comm=comm) as mgr:
            P, r = comm.size, comm.rank
            mgr.save(10, G.local(G.N * r // P, G.N * (r + 1) // P), force=True)
            fine = mgr.restore_latest(adapt=Refine(levels=1))
            mgr.save(11, fine.state, force=True)
            back = mgr.restore(11, adapt=Coarsen(levels=1))
            lo, hi = back.partition.local_range(r)
            same = back.state.mesh == G.local(lo, hi).mesh and np.array_equal(back.state.rho, G.rho[lo:hi])
            return len(fine.state.mesh), same

    got = run_threads(2, body)
    assert sum(n for n, _ in got) == 4 * G.N
    assert all(same for _, same in got)


@pytest.mark.parametrize("connect", ["face", "full"])
def test_balance_on_1_to_4_ranks_gives_the_serial_forest(tmp_path: Path, original: Path, connect: str) -> None:
    conn = sfc.Connectivity.brick((2, 1))

    def deep(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.asarray((forest.x % 7 == 0) & (forest.tree == 1))  # a mark of the leaf alone

    spec = Adapt(Refine(levels=3, marker=deep), Balance(connect, connectivity=conn))
    shas = set()
    for P in (1, 2, 3, 4):
        got = _load_save(P, original, tmp_path / f"b{P}.scda", spec)
        shas.add(_sha(tmp_path / f"b{P}.scda"))
        if P == 1:
            f = sfc.Forest(*_leaves(), num_trees=2)
            want = sfc.balance(sfc.refine(f, 3, deep(f, {})).forest, conn, connect).forest
            assert got[0].state.mesh == want and len(want) > len(sfc.refine(f, 3, deep(f, {})).forest)
    assert len(shas) == 1


class Star(ac.CheckpointSchema, name="star", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")


class Shell(ac.CheckpointSchema, name="shell", version=1):
    mesh: ac.Forest = ac.Mesh(dim=3)
    rho: ac.CellData = ac.Cells("<f8")


@pytest.mark.parametrize(
    ("schema", "conn"), [(Star, sfc.Connectivity.star()), (Shell, sfc.Connectivity.shell())], ids=["star", "shell"]
)
def test_parallel_balance_across_rotated_trees(tmp_path: Path, schema: Any, conn: sfc.Connectivity) -> None:
    d = conn.dim
    lv = sfc.uniform_leaves(1, conn.num_trees, d)
    f = sfc.Forest(*lv, num_trees=conn.num_trees)
    ac.save(schema(mesh=f, rho=np.arange(len(f), dtype=float)), tmp_path / "in.scda")

    def spots(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.asarray((fields["rho"] % 5 == 0) & (forest.x == 0))

    spec = Adapt(Refine(levels=3 if d == 2 else 2, marker=spots), Balance("full", connectivity=conn))

    def body(comm: Any) -> Any:
        loaded = ac.load(tmp_path / "in.scda", schema, comm=comm, adapt=spec)
        ac.save(loaded.state, tmp_path / f"out{comm.size}.scda", comm=comm)
        return loaded.state.mesh

    serial = run_threads(1, body)[0]
    run_threads(3, body)
    assert _sha(tmp_path / "out1.scda") == _sha(tmp_path / "out3.scda")
    refined = sfc.refine(f, 3 if d == 2 else 2, (np.arange(len(f)) % 5 == 0) & (f.x == 0)).forest
    assert serial == sfc.balance(refined, conn, "full").forest


def test_tiny_forests_leave_ranks_empty_and_still_adapt(tmp_path: Path) -> None:
    """Six leaves on seven ranks: refined, balanced, coarsened back three levels, the same bytes as on one."""
    ac.save(Star(mesh=sfc.Forest(*sfc.uniform_leaves(0, 6, 2), num_trees=6), rho=np.arange(6.0)), tmp_path / "s.scda")
    conn = sfc.Connectivity.star()

    def body(comm: Any) -> Any:
        up = ac.load(tmp_path / "s.scda", Star, comm=comm, adapt=Adapt(Refine(levels=2), Balance(connectivity=conn)))
        ac.save(up.state, tmp_path / f"up{comm.size}.scda", comm=comm)
        down = ac.load(tmp_path / f"up{comm.size}.scda", Star, comm=comm, adapt=Coarsen(levels=3), allow_for_coarsening=True)
        ac.save(down.state, tmp_path / f"down{comm.size}.scda", comm=comm)
        return len(up.state.mesh), len(down.state.mesh)

    assert sum(n for n, _ in run_threads(1, body)) == 6 * 16
    got = run_threads(7, body)
    assert sum(n for n, _ in got) == 6 * 16 and sum(m for _, m in got) == 6
    assert _sha(tmp_path / "up1.scda") == _sha(tmp_path / "up7.scda")
    assert _sha(tmp_path / "down7.scda") == _sha(tmp_path / "s.scda")


def test_hp_user_functions_and_their_shapes() -> None:
    rng = np.random.default_rng(1)
    counts = rng.integers(1, 5, 8)
    data = ac.HpData(rng.standard_normal(int(counts.sum())), counts)
    mask = np.arange(8) % 3 == 0
    step = sfc.AdaptStep("refine", mask)

    def kids(values: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.concatenate([np.tile(v, 4) for v in np.split(values, np.cumsum(c)[:-1])])  # a test's own loop
        return out * 0.5, np.repeat(c, 4)

    got = apply_hp(data, step, 2, HpTransfer(refine=kids))
    want = apply_hp(data, step, 2, HpTransfer())
    assert np.array_equal(got.counts, want.counts)
    assert np.array_equal(
        got.values[np.repeat(np.repeat(mask, np.where(mask, 4, 1)), got.counts)] * 2,
        want.values[np.repeat(np.repeat(mask, np.where(mask, 4, 1)), want.counts)],
    )
    with pytest.raises(AdaptError, match="counts"):
        apply_hp(data, step, 2, HpTransfer(refine=lambda v, c: (v, c)))
    conv = change_degree(ac.HpData(np.arange(4.0), [4]), 3, 2)
    assert conv.counts.tolist() == [16] and conv.values.reshape(4, 4)[:2, :2].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert np.count_nonzero(conv.values) == 3
    with pytest.raises(AdaptError, match="tensor-product"):
        change_degree(ac.HpData(np.arange(3.0), [3]), 1, 2)


@pytest.mark.parametrize("P", [2, 3, 5, 6])
def test_families_kept_after_an_adaptation_are_keep_families_of_the_whole_forest(tmp_path: Path, original: Path, P: int) -> None:
    """The cuts moved off families after a refinement (windows sent between ranks) are keep_families' on the serial result."""

    def hot(forest: Any, fields: Any) -> Any:
        return np.asarray(fields["rho"]) > 0.6

    serial = ac.load(original, Advection, adapt=Refine(marker=hot)).state.mesh
    assert len(serial) > 4 * P

    def body(comm: Any) -> Any:
        loaded = ac.load(original, Advection, comm=comm, adapt=Refine(marker=hot), allow_for_coarsening=True)
        target = Partition.uniform(len(serial), comm.size)
        s, k = ac.partition.family_window(target, comm.rank, 2)
        coords = [serial.x[s : s + k], serial.y[s : s + k]]
        ref = ac.partition.keep_families(target, serial.tree[s : s + k], serial.level[s : s + k], coords, maxlevel=30, comm=comm)
        return loaded.partition.global_first_quadrant, ref.global_first_quadrant

    for got, ref in run_threads(P, body):
        assert np.array_equal(got, ref)
