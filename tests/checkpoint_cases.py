"""Schemas and global states shared by the schema, restart and MPI tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel

import amrckpt as ac
from _support import random_forest


class Params(BaseModel):
    cfl: float = 0.4
    scheme: str = "upwind"
    velocity: tuple[float, float] = (1.0, 0.5)


class Advection(ac.CheckpointSchema, name="advection2d", version=2):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    params: Params = ac.Block()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f8", shape=(2,), compress=True)
    modes: ac.HpData = ac.HpCells("<f8", description="(p+1)^2 modal coefficients")


# -- a 3D state of every kind of cell field (the exporters' tests) -------------------------------------------


class Heat3D(ac.CheckpointSchema, name="heat3d", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    mesh: ac.Forest = ac.Mesh(dim=3)
    T: ac.CellData = ac.Cells("<f4", units="K")
    grad: ac.CellData = ac.Cells("<f8", shape=(3,), units="K/m")
    flag: ac.CellData = ac.Cells("?")
    z: ac.CellData = ac.Cells("<c16")
    rec: ac.CellData = ac.Cells([("p", "<f4"), ("n", "<i2", (2,))])
    modes: ac.HpData = ac.HpCells("<f8")


def heat3d(seed: int, step: int, max_level: int = 3) -> tuple[Heat3D, Any]:
    lv = random_forest(seed, num_trees=2, dim=3, max_level=max_level)
    N = lv.num_leaves
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, N)
    state = Heat3D(
        step=step,
        time=0.25 * step,
        mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=2),
        T=rng.random(N).astype("<f4"),
        grad=rng.standard_normal((N, 3)),
        flag=rng.random(N) < 0.5,
        z=rng.standard_normal(N) + 1j * rng.standard_normal(N),
        rec=np.array([(k, (k, -k)) for k in range(N)], dtype=[("p", "<f4"), ("n", "<i2", (2,))]),
        modes=ac.HpData(rng.standard_normal(int(counts.sum())), counts),
    )
    return state, lv


@dataclass
class GlobalState:
    """All leaves and data in global order; ``local(lo, hi)`` is a rank's part."""

    leaves: Any
    rho: np.ndarray
    vel: np.ndarray
    counts: np.ndarray
    modes: np.ndarray
    step: int = 42
    time: float = 1.25

    @property
    def N(self) -> int:
        return int(self.rho.shape[0])

    def local(self, lo: int, hi: int, schema: type[Advection] = Advection) -> Advection:
        off = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        lv = self.leaves
        return schema(
            step=self.step,
            time=self.time,
            params=Params(),
            mesh=ac.Forest(lv.tree[lo:hi], lv.level[lo:hi], lv.x[lo:hi], lv.y[lo:hi], num_trees=2),
            rho=self.rho[lo:hi],
            vel=self.vel[lo:hi],
            modes=ac.HpData(self.modes[off[lo] : off[hi]], self.counts[lo:hi]),
        )

    def for_rank(self, comm: Any, counts: list[int] | None = None) -> Advection:
        P, r = comm.size, comm.rank
        if counts is None:
            lo, hi = self.N * r // P, self.N * (r + 1) // P
        else:
            lo, hi = sum(counts[:r]), sum(counts[: r + 1])
        return self.local(lo, hi)


def global_state(seed: int = 0, max_level: int = 5) -> GlobalState:
    leaves = random_forest(seed, num_trees=2, dim=2, max_level=max_level)
    N = leaves.num_leaves
    rng = np.random.default_rng(seed)
    rho = rng.random(N)
    vel = rng.standard_normal((N, 2))
    degree = rng.integers(0, 4, N)
    counts = (degree + 1) ** 2
    modes = rng.standard_normal(int(counts.sum()))
    return GlobalState(leaves, rho, vel, counts, modes)


def assert_state_equal(got: Advection, want: Advection) -> None:
    assert got.step == want.step and got.time == want.time and got.params == want.params
    assert got.mesh == want.mesh
    assert got.rho.dtype == want.rho.dtype and np.array_equal(got.rho, want.rho)
    assert np.array_equal(got.vel, want.vel)
    assert got.modes == want.modes


class Packed(ac.CheckpointSchema, name="packed", version=1):
    """``compress=True`` on every kind with bulk data: the mesh, cells and hp fields in shuffled, deflated chunks."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2, compress=True, chunks=7)
    rho: ac.CellData = ac.Cells("<f8", compress=True, chunks=7)
    modes: ac.HpData = ac.HpCells("<f8", compress=True, chunks=7)  # u1 counts; chunks straddle every partition
    pairs: ac.HpData = ac.HpCells("<i2", shape=(2,), compress=True, chunks=5)  # u2 counts (300 values on some leaves)
    wide: ac.HpData = ac.HpCells("<f4", compress=True)  # DEFAULT_CHUNK leaves: one chunk holds every leaf


@dataclass
class PackedState:
    """All leaves and values of :class:`Packed` in global order; ``local(lo, hi)`` is a rank's part."""

    leaves: Any
    rho: np.ndarray
    hp: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (values, counts)

    @property
    def N(self) -> int:
        return int(self.rho.shape[0])

    def local(self, lo: int, hi: int) -> Packed:
        lv = self.leaves
        hp = {}
        for name, (values, counts) in self.hp.items():
            off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            hp[name] = ac.HpData(values[off[lo] : off[hi]], counts[lo:hi])
        mesh = ac.Forest(lv.tree[lo:hi], lv.level[lo:hi], lv.x[lo:hi], lv.y[lo:hi], num_trees=2)
        return Packed(step=7, mesh=mesh, rho=self.rho[lo:hi], **hp)

    def for_rank(self, comm: Any, counts: list[int] | None = None) -> Packed:
        P, r = comm.size, comm.rank
        counts = counts or [self.N * (p + 1) // P - self.N * p // P for p in range(P)]
        lo = sum(counts[:r])
        return self.local(lo, lo + counts[r])


def packed_state(seed: int = 5, max_level: int = 5) -> PackedState:
    """A random 2D forest of two trees; hp counts with runs of empty leaves (whole chunks without values)."""
    rng = np.random.default_rng(seed)
    lv = random_forest(seed, num_trees=2, dim=2, max_level=max_level)
    N = lv.num_leaves
    i = np.arange(N)
    modes_c = np.where((i // 9) % 4 == 1, 0, (i % 3 + 1) ** 2).astype(np.int64)  # 9 empty leaves in a row: empty chunks
    pairs_c = np.where(i % 13 == 0, 300, i % 3).astype(np.int64)
    wide_c = (i % 5).astype(np.int64)
    s = np.linspace(0.0, 1.0, int(modes_c.sum()))
    return PackedState(
        lv,
        np.sin(7 * np.linspace(0.0, 1.0, N)),
        {
            "modes": (np.cos(9 * s) + 1e-3 * rng.standard_normal(s.size), modes_c),
            "pairs": (rng.integers(-999, 999, (int(pairs_c.sum()), 2)).astype("<i2"), pairs_c),
            "wide": (rng.standard_normal(int(wide_c.sum())).astype("<f4"), wide_c),
        },
    )


def assert_packed_equal(got: Packed, want: Packed) -> None:
    """Equal leaves and values, field by field."""
    assert np.array_equal(got.mesh.to_records(), want.mesh.to_records())
    assert np.array_equal(got.rho, want.rho)
    for name in ("modes", "pairs", "wide"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.values.dtype == w.values.dtype and np.array_equal(g.counts, w.counts) and np.array_equal(g.values, w.values)
