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
