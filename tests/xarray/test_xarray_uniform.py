"""The covering grid: a hand-computed case, the volume integral, dask, and a distributed reduction over a checkpoint."""

from __future__ import annotations

import math
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


WORKER_OVERHEAD = 4 << 20
"""Bytes a dask worker allocates during a reduction besides the chunks it holds: task states, messages, the reader's
metadata (measured with tracemalloc: 1.0 to 3.1 MB for 32 to 128 tasks, after a first computation)."""


def _trace_start() -> None:
    """On a worker: start tracing Python and numpy allocations (numpy reports its buffers to tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    tracemalloc.reset_peak()


def _trace_peak() -> int:
    """On a worker: the peak of traced bytes since :func:`_trace_start`; stop tracing."""
    import tracemalloc

    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_a_distributed_reduction_equals_load_within_twice_a_chunk(tmp_path: Path) -> None:
    """Sums and a mean over 2**20 leaves on a LocalCluster of 2 processes, each reading its own chunks.

    Each worker's peak of allocations during a reduction (tracemalloc, run in
    the worker by ``client.run`` around the computation, after a first one
    that imports and opens what it needs) stays under twice the variable's
    largest chunk plus :data:`WORKER_OVERHEAD`; for ``vel`` a worker that
    held all its chunks at once would not (the bound is below the bytes of
    each worker's half), and a persisted ``vel`` is seen to exceed it.
    Measured: 1.0 to 3.1 MB a worker, for bounds of 4.3 to 5.2 MB.
    """
    distributed = pytest.importorskip("distributed")

    class Field(ac.CheckpointSchema, name="field", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2)
        rho: ac.CellData = ac.Cells("<f8")
        vel: ac.CellData = ac.Cells("<f8", shape=(2,), compress=True, chunks=4096)

    lv = ac.sfc.uniform_leaves(9, num_trees=4, dim=2)
    N = lv.num_leaves
    rng = np.random.default_rng(1)
    ac.save(Field(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=4), rho=rng.random(N),
                  vel=rng.standard_normal((N, 2))), tmp_path / "f.scda")  # fmt: skip
    st = ac.load(tmp_path / "f.scda", Field).state
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        for chunk_nbytes in (128 << 10, 512 << 10):
            with xr.open_dataset(tmp_path / "f.scda", engine=AmrckptBackendEntrypoint, chunks={}, chunk_nbytes=chunk_nbytes) as ds:
                assert len(ds.rho.chunks[0]) >= 16
                float(ds.rho.sum().compute())  # the workers import and open what they need
                reductions = {
                    "rho.sum": (lambda: ds.rho.sum().compute(), ds.rho, st.rho.sum()),
                    "rho.mean": (lambda: ds.rho.mean().compute(), ds.rho, st.rho.mean()),
                    "vel.sum": (lambda: ds.vel.sum("leaf").compute(), ds.vel, st.vel.sum(0)),
                }
                for what, (reduce, var, want) in reductions.items():
                    chunk = max(var.chunks[0]) * var.dtype.itemsize * math.prod(var.shape[1:])
                    bound = 2 * chunk + WORKER_OVERHEAD
                    if var is ds.vel:  # the widest variable: a worker holding its half at once would fail
                        assert var.nbytes // 2 > bound, f"{what}: a bound above half the data would not tell"
                    client.run(_trace_start)
                    got = reduce()
                    peaks = client.run(_trace_peak)
                    assert np.allclose(got.values, want, rtol=1e-12), what
                    assert len(peaks) == 2 and max(peaks.values()) < bound, (
                        f"{what}, chunks of {chunk} bytes: worker peaks {sorted(peaks.values())} bytes, bound {bound}"
                    )
                client.run(_trace_start)  # the measure sees chunks held: a persisted vel puts half of it on each worker
                held = ds.vel.data.persist()
                distributed.wait(held)
                peaks = client.run(_trace_peak)
                assert sum(peaks.values()) >= ds.vel.nbytes and max(peaks.values()) > 2 * chunk + WORKER_OVERHEAD
                del held
