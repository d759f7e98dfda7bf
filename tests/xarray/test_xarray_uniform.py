"""The covering grid: a hand-computed case, the volume integral, dask, and a distributed reduction over a checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import amrckpt as ac
from _support import random_forest

xr = pytest.importorskip("xarray")
from amrckpt.xarray import AmrckptBackendEntrypoint, to_uniform  # noqa: E402

M = ac.sfc.MAXLEVEL[2]


class Small(ac.CheckpointSchema, name="small", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2, brick=(1, 1), lower=(0.0, 0.0), upper=(2.0, 2.0), units="m")
    q: ac.CellData = ac.Cells("<f8")


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """One tree of side 2 m: its lower-left quadrant refined into four leaves (values 1..4), the others 10, 20, 30."""
    h1, h2 = 1 << (M - 1), 1 << (M - 2)
    x = np.array([0, h2, 0, h2, h1, 0, h1])
    y = np.array([0, 0, h2, h2, 0, h1, h1])
    lev = np.array([2, 2, 2, 2, 1, 1, 1])
    path = tmp_path / "small.scda"
    ac.save(Small(mesh=ac.Forest(np.zeros(7, int), lev, x, y, num_trees=1), q=np.array([1.0, 2, 3, 4, 10, 20, 30])), path)
    return path


def test_a_hand_computed_grid(small: Path) -> None:
    with xr.open_dataset(small, engine=AmrckptBackendEntrypoint) as ds:
        u1 = to_uniform(ds, 1)
        assert u1.q.dims == ("y", "x") and np.array_equal(u1.x.values, [0.5, 1.5])
        assert np.array_equal(u1.q.values, [[2.5, 10.0], [20.0, 30.0]])  # the refined quadrant averaged
        u2 = ds.amr.to_uniform(2)
        want = np.array([[1, 2, 10, 10], [3, 4, 10, 10], [20, 20, 30, 30], [20, 20, 30, 30]], dtype=float)
        assert np.array_equal(u2.q.values, want)  # coarser leaves injected
        assert np.array_equal(to_uniform(ds, 0).q.values, [[(2.5 + 60) / 4]])
        part = to_uniform(ds, 2, bbox=[(0.0, 1.0), (0.0, 2.0)])  # the cells whose centre has x < 1
        assert np.array_equal(part.q.values, want[:, :2]) and np.array_equal(part.x.values, [0.25, 0.75])


def test_the_volume_integral_is_kept(tmp_path: Path) -> None:
    class Brick(ac.CheckpointSchema, name="brick3", version=1):
        mesh: ac.Forest = ac.Mesh(dim=3, brick=(2, 1, 1))
        q: ac.CellData = ac.Cells("<f8")
        v: ac.CellData = ac.Cells("<f4", shape=(2,))

    lv = random_forest(4, num_trees=2, dim=3, max_level=4)
    rng = np.random.default_rng(0)
    st = Brick(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=2), q=rng.random(lv.num_leaves),
               v=rng.random((lv.num_leaves, 2)).astype("<f4"))  # fmt: skip
    path = tmp_path / "b.scda"
    ac.save(st, path)
    vol = np.ldexp(1.0, -3 * lv.level.astype(int))
    with xr.open_dataset(path, engine=AmrckptBackendEntrypoint) as ds:
        for level in (0, 2, 5):
            u = to_uniform(ds, level)
            assert u.q.shape == (1 << level, 1 << level, 2 << level)
            cell = 8.0**-level
            assert float(u.q.sum()) * cell == pytest.approx(float((st.q * vol).sum()), rel=1e-12)
            assert np.allclose(u.v.sum(("x", "y", "z")).values * cell, (st.v * vol[:, None]).sum(0), rtol=1e-6)
        with xr.open_dataset(path, engine=AmrckptBackendEntrypoint, chunks={}, chunk_nbytes=512) as dc:
            lazy = to_uniform(dc, 3)
            assert lazy.q.chunks is not None  # lazy
            assert np.allclose(lazy.q.values, to_uniform(ds, 3).q.values, rtol=1e-13)


def test_a_distributed_reduction_equals_load(tmp_path: Path) -> None:
    """Sum and mean of a cell field over 1e5 leaves on a LocalCluster of 2 processes, each reading its own chunks."""
    distributed = pytest.importorskip("distributed")

    class Field(ac.CheckpointSchema, name="field", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2)
        rho: ac.CellData = ac.Cells("<f8")
        vel: ac.CellData = ac.Cells("<f8", shape=(2,), compress=True, chunks=4096)

    lv = random_forest(1, num_trees=2, dim=2, max_level=9, refine=0.9)
    N = lv.num_leaves
    rng = np.random.default_rng(1)
    ac.save(Field(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2), rho=rng.random(N),
                  vel=rng.standard_normal((N, 2))), tmp_path / "f.scda")  # fmt: skip
    st = ac.load(tmp_path / "f.scda", Field).state
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster),
        xr.open_dataset(tmp_path / "f.scda", engine=AmrckptBackendEntrypoint, chunks={}, chunk_nbytes=128 << 10) as ds,
    ):
        assert len(ds.rho.chunks[0]) >= 4
        s, m, vs = ds.rho.sum().compute(), ds.rho.mean().compute(), ds.vel.sum("leaf").compute()
        assert float(s) == pytest.approx(float(st.rho.sum()), rel=1e-12)
        assert float(m) == pytest.approx(float(st.rho.mean()), rel=1e-12)
        assert np.allclose(vs.values, st.vel.sum(0), rtol=1e-12)
