#!/usr/bin/env python3
"""Advection of a scalar on an adaptive forest of quadtrees, checkpointed and restarted by amrckpt.

A real MPI-parallel AMR solver, written as a model of how a simulation uses
amrckpt.  Run it with ``mpiexec -n P python -m mpi4py examples/advection_amr.py
--dir checkpoints --steps 400`` (``-m mpi4py``: an error on one rank aborts
the job instead of leaving the others waiting), kill it, and continue with ``--restart
latest`` on any number of processes.

The numerical method
--------------------
* Mesh: a brick of ``nx x ny`` unit-square quadtrees (tree ``ty * nx + tx``,
  row-major), leaves in Morton order, trees first, with p4est's conventions:
  integer anchor coordinates at level 30 (``2**30`` per tree side), ``level``,
  ``tree``.  Each rank owns a contiguous range of the curve (p4est's
  ``global_first_quadrant``).
* Equation: ``dq/dt + div(u q) = 0`` with the solid-body rotation
  ``u = 2 pi / period * (-(y - cy), x - cx)`` about the centre of the brick;
  zero inflow at the domain boundary.
* Scheme: first-order upwind finite volumes, explicit Euler,
  ``dt = cfl * h_min / |u|_max``.  A face between a leaf and its two finer
  neighbours is split into two sub-faces; each sub-face's normal velocity is
  taken at its midpoint, computed from the same integers on both sides, so
  the flux leaving one leaf is exactly the flux entering the other (the
  scheme conserves mass to rounding).
* Adaptation every ``adapt_every`` steps: a leaf whose value jumps by more than
  ``refine_tol`` to a face neighbour is refined, a complete family of four
  siblings where every jump is below ``coarsen_tol`` is coarsened; then 2:1
  face balance is enforced by a monotone fixed-point iteration on the target
  levels (a neighbour of a refined leaf is refined, a coarsening that would
  break the balance is cancelled), whose result does not depend on the
  partition.  Children take the parent's value corrected by the limited
  slopes of its reconstruction; a parent takes the mean of its children
  (both conservative).  Then the leaves are repartitioned uniformly by count
  along the curve (``Alltoallv`` of contiguous ranges,
  :func:`amrckpt.partition.transfer_counts`).
* Ghost layer (as ``p4est_ghost_new``, face neighbours only): every rank knows
  the curve position of each rank's first leaf (p4est's
  ``global_first_position``, one ``Allgather`` of P keys); a leaf whose face
  neighbours lie in another rank's range is a mirror sent to that rank.  Only
  mirrors travel (``Alltoallv``), never the whole mesh.  Face neighbours are
  found by locating two points beyond each face (``numpy.searchsorted`` on the
  keys of local leaves and ghosts).
* hp field: each leaf's tensor-product Legendre reconstruction of degree
  ``p`` in {0, 1, 2}, ``(p + 1)**2`` coefficients whose degree adapts to the
  local smoothness (0 where flat, 1 at kinks and extrema with minmod-limited
  slopes, 2 where smooth with a second difference).  Mixed terms are zero:
  only face neighbours enter.  It is stored as a variable-size field (an scda
  V section) and is what the weighted repartition of a restart balances.

Every value a rank computes depends only on its leaves and their face
neighbours, combined in an order that does not depend on the partition, so
the results are bit-identical for any number of processes (tested).

Checkpointing
-------------
The state (step, time, parameters, mesh, scalar, velocity, hp coefficients)
is the schema :class:`AdvectionState`; the class :class:`Simulation` is
decorated with :func:`amrckpt.manager.checkpointable`, and a
:class:`amrckpt.CheckpointManager` saves every ``--checkpoint-every`` steps,
on SIGTERM or SIGUSR1 (then the run stops), before the time limit of a
batch job (``--wall-time-margin``; then the run stops), and at the end.  ``--restart
latest`` loads the newest valid checkpoint with the weighted partition and
rebuilds the ghost layer (``__amrckpt_restored__``).

With ``--json``, rank 0 prints one JSON object per line (events ``start``,
``step``, ``checkpoint``, ``done``) for a driver such as
``examples/restart_demo.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

import amrckpt as ac
from amrckpt import sfc
from amrckpt.adapt import Adapt, Balance, Coarsen, HpTransfer, Refine
from amrckpt.partition import Partition, transfer_counts

L = sfc.MAXLEVEL[2]
"""Level of the integer coordinates (p4est's ``P4EST_MAXLEVEL``, 30)."""
ROOT = sfc.ROOT_LEN[2]
"""Side of a tree in integer coordinates, ``2**30``."""
_TREE_SHIFT = np.uint64(60)
"""A leaf's key is ``tree << 60 | morton(x, y)``: tree-major curve order."""
_NO_KEY = np.iinfo(np.uint64).max
_NORMALS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], dtype=np.int64)
"""Outward normals of faces 0..3 (-x, +x, -y, +y), p4est's face order."""


class Params(BaseModel):
    """Parameters of the run (stored as JSON in a block section of every checkpoint)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nx: int = Field(2, ge=1, le=5, description="trees in x (the brick is nx x ny unit squares)")
    ny: int = Field(1, ge=1, le=3, description="trees in y")
    min_level: int = Field(4, ge=1, le=16, description="coarsest level of a leaf")
    max_level: int = Field(7, ge=1, le=16, description="finest level of a leaf")
    cfl: float = Field(0.45, gt=0.0, le=0.5, description="Courant number at the finest level")
    adapt_every: int = Field(4, ge=1, description="steps between adaptations")
    refine_tol: float = Field(0.04, gt=0.0, description="refine where a face jump exceeds this")
    coarsen_tol: float = Field(0.01, ge=0.0, description="coarsen families whose face jumps are all below this")
    period: float = Field(1.0, gt=0.0, description="time of one rotation [s]")

    @model_validator(mode="after")
    def _levels(self) -> Params:
        if self.min_level > self.max_level:
            raise ValueError(f"min_level {self.min_level} > max_level {self.max_level}")
        if self.coarsen_tol >= self.refine_tol:
            raise ValueError("coarsen_tol must be below refine_tol")
        if self.nx * self.ny > 15:
            raise ValueError("at most 15 trees (the tree index takes the top 4 bits of a 64-bit key)")
        return self

    @property
    def num_trees(self) -> int:
        """Number of trees of the brick."""
        return self.nx * self.ny

    @property
    def omega(self) -> float:
        """Angular velocity [rad/s]."""
        return 2.0 * math.pi / self.period

    @property
    def dt(self) -> float:
        """Time step [s]: ``cfl * h_min / |u|_max`` (the largest speed is at the brick's corners)."""
        return self.cfl * 2.0**-self.max_level / (self.omega * math.hypot(self.nx / 2, self.ny / 2))


class AdvectionState(ac.CheckpointSchema, name="advection_amr", version=1):
    """What a checkpoint of the advection run holds."""

    step: int = ac.Inline(description="steps taken")
    time: float = ac.Inline(units="s", description="simulated time")
    params: Params = ac.Block(description="run parameters")
    mesh: ac.Forest = ac.Mesh(dim=2, description="the leaves of the brick of quadtrees, Morton order")
    q: ac.CellData = ac.Cells("<f8", units="1", description="advected scalar, mean over the leaf")
    velocity: ac.CellData = ac.Cells("<f8", shape=(2,), units="m/s", description="velocity at the leaf centre")
    recon: ac.HpData = ac.HpCells(
        "<f8", units="1", description="tensor Legendre coefficients c[a, b] (a, b <= p) of the leaf's degree-p reconstruction"
    )


# ------------------------------------------------------------------ geometry


def leaf_keys(tree: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return the curve position of leaves or points: ``tree << 60 | morton(x, y)``, (n,) uint64."""
    keys = sfc.morton_keys(x.reshape(-1), y.reshape(-1), check=False).reshape(x.shape)
    out: np.ndarray = (tree.astype(np.uint64) << _TREE_SHIFT) | keys
    return out


def leaf_size(level: np.ndarray) -> np.ndarray:
    """Return the side of leaves in integer coordinates, ``2**(30 - level)``, int64."""
    return np.left_shift(np.int64(1), L - level.astype(np.int64))


def initial_condition(x: np.ndarray, y: np.ndarray, p: Params) -> np.ndarray:
    """Return the initial scalar at points [m]: a sharp disc and a smooth Gaussian hill, both inside the rotation's reach."""
    cx, cy, s = p.nx / 2, p.ny / 2, p.ny
    r = np.hypot(x - (cx + 0.25 * s), y - cy)
    disc = 0.5 * (1.0 - np.tanh((r - 0.12 * s) / (0.012 * s)))
    hill = 0.8 * np.exp(-((x - (cx - 0.25 * s)) ** 2 + (y - cy) ** 2) / (2 * (0.05 * s) ** 2))
    out: np.ndarray = disc + hill
    return out


def velocity_at(x: np.ndarray, y: np.ndarray, p: Params) -> tuple[np.ndarray, np.ndarray]:
    """Return the velocity [m/s] at points [m]: solid-body rotation about the brick's centre."""
    return -p.omega * (y - p.ny / 2), p.omega * (x - p.nx / 2)


def _minmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(a * b > 0.0, np.where(np.abs(a) < np.abs(b), a, b), 0.0)
    return out


# ------------------------------------------------------------------ MPI helpers


def _exscan_counts(comm: Any, n: int) -> tuple[np.ndarray, int]:
    """Allgather the local counts (P integers); return them and this rank's first global index."""
    counts = np.array(comm.allgather(n), dtype=np.int64)
    return counts, int(counts[: comm.rank].sum())


@dataclass
class GhostLayer:
    """Who sends which leaves where, and where received ghosts go in the extended arrays.

    Extended arrays hold ``[ghosts from lower ranks, local leaves, ghosts from
    higher ranks, one zero]`` — sorted by curve position, so face neighbours
    are located by binary search; the last slot is the zero inflow value.
    """

    mirrors: np.ndarray
    """(m,) int64: local indices of the leaves sent, grouped by destination rank."""
    send_counts: np.ndarray
    send_displs: np.ndarray
    recv_counts: np.ndarray
    recv_displs: np.ndarray
    n_low: int
    n_local: int
    n_high: int

    @property
    def n_ext(self) -> int:
        """Length of an extended array (with the trailing zero slot)."""
        return self.n_low + self.n_local + self.n_high + 1

    def exchange(self, comm: Any, local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Return the extended array of ``local`` (float64 or uint64 or int64, shape (n,)): ghosts filled by one ``Alltoallv``.

        Collective.  Only the mirrors are sent.
        """
        from mpi4py import MPI

        if out is None:
            out = np.zeros(self.n_ext, dtype=local.dtype)
        out[self.n_low : self.n_low + self.n_local] = local
        if comm.size > 1:
            mpitype = {np.dtype(np.float64): MPI.DOUBLE, np.dtype(np.uint64): MPI.UINT64_T, np.dtype(np.int64): MPI.INT64_T}[
                local.dtype
            ]
            send = np.ascontiguousarray(local[self.mirrors])
            comm.Alltoallv(
                [send, (self.send_counts, self.send_displs), mpitype], [out, (self.recv_counts, self.recv_displs), mpitype]
            )
        return out


def _first_positions(comm: Any, keys: np.ndarray) -> np.ndarray:
    """Return, for each rank, the curve position of its first leaf (p4est's ``global_first_position``).

    One ``allgather`` of P keys.  An empty rank takes the position of the
    next non-empty one (so a binary search never lands on it); trailing empty
    ranks take the largest key.
    """
    firsts = comm.allgather(int(keys[0]) if keys.size else None)
    out = np.empty(len(firsts), dtype=np.uint64)
    nxt = int(_NO_KEY)
    for p in range(len(firsts) - 1, -1, -1):  # over ranks, not leaves
        nxt = firsts[p] if firsts[p] is not None else nxt
        out[p] = nxt
    return out


# ------------------------------------------------------------------ the simulation


@ac.manager.checkpointable(AdvectionState)
class Simulation:
    """The advection run on this rank: its leaves, their values, and the derived ghost layer.

    Collective construction: every rank of ``comm`` calls ``Simulation(params,
    comm)``; the initial mesh is refined around the initial condition
    (``max_level - min_level`` adaptations) and partitioned uniformly.

    Parameters
    ----------
    params : Params
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.

    Attributes
    ----------
    step, time : int, float
    params : Params
    mesh : amrckpt.Forest
        The local leaves (tree, level, x, y), Morton order.
    q : (n,) float64
        The scalar, mean over each leaf.
    velocity : (n, 2) float64
        Velocity at leaf centres [m/s].
    recon : amrckpt.HpData
        ``(p + 1)**2`` Legendre coefficients per leaf (float64).
    """

    restoring_adapted = False
    """Set while restoring onto other levels: velocity and reconstruction are then recomputed, not checked."""

    def __init__(self, params: Params, comm: Any = None) -> None:
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.params = params
        self.step, self.time = 0, 0.0
        self._since: tuple[int, float] | None = None  # (step, time) the time counts from, after a restart onto other levels
        self.adapt_seconds = 0.0
        self.step_seconds = 0.0
        self.leaf_updates = 0
        self.outflow = 0.0
        lv = params.min_level
        per_tree = 4**lv
        part = Partition.uniform(params.num_trees * per_tree, self.comm.size)
        g0, g1 = part.local_range(self.comm.rank)
        g = np.arange(g0, g1, dtype=np.int64)
        x, y = sfc.morton_decode((g % per_tree).astype(np.uint64) << np.uint64(2 * (L - lv)), 2)
        self._set_leaves(g // per_tree, np.full(g.size, lv, dtype=np.int64), x.astype(np.int64), y.astype(np.int64))
        self.q = self._initial_values()
        self._setup()
        for _ in range(params.max_level - params.min_level):
            self.adapt(coarsen=False)
            self.q = self._initial_values()
            self._setup()

    # -- state <-> derived data

    def _set_leaves(self, tree: np.ndarray, level: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        self.mesh = ac.Forest(tree, level, x, y, num_trees=self.params.num_trees)
        self._tree, self._level, self._x, self._y = tree, level, x, y

    def _initial_values(self) -> np.ndarray:
        cx, cy = self.centres()
        return initial_condition(cx, cy, self.params)

    def __amrckpt_restored__(self, loaded: ac.restart.Loaded[AdvectionState]) -> None:
        """Rebuild what a checkpoint does not hold (ghost layer, fluxes) on the communicator it was read on.

        Collective.  Checks that the restored velocity and reconstruction are
        exactly what the restored mesh and scalar give.
        """
        from mpi4py import MPI

        self.comm = loaded.comm if loaded.comm is not None else MPI.COMM_SELF
        # a run restarted onto other levels has another time step: its time counts on from the checkpoint's
        self._since = None if self.time == self.step * self.params.dt else (self.step, self.time)
        self.adapt_seconds = self.step_seconds = 0.0
        self.leaf_updates = 0
        self.outflow = 0.0
        m = self.mesh
        self._set_leaves(m.tree.astype(np.int64), m.level.astype(np.int64), m.x.astype(np.int64), m.y.astype(np.int64))
        self.q = np.array(self.q, dtype=np.float64)
        restored_recon, restored_velocity = self.recon, np.array(self.velocity)
        self._setup()
        ok = restored_recon == self.recon and np.array_equal(restored_velocity, self.velocity)
        if not Simulation.restoring_adapted and not all(self.comm.allgather(ok)):
            raise RuntimeError("the restored reconstruction or velocity differs from the one the restored mesh gives")

    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        """Return the physical centres [m] of the local leaves, two (n,) float64."""
        h = leaf_size(self._level)
        tx, ty = self._tree % self.params.nx, self._tree // self.params.nx
        return (tx * ROOT + self._x + h / 2) / ROOT, (ty * ROOT + self._y + h / 2) / ROOT

    def _setup(self) -> None:
        """Build the ghost layer, face neighbours, flux coefficients, velocity and reconstruction. Collective."""
        p, comm = self.params, self.comm
        n = self._tree.size
        self.keys = leaf_keys(self._tree, self._x, self._y)
        h = leaf_size(self._level)
        gx = (self._tree % p.nx) * ROOT + self._x
        gy = (self._tree // p.nx) * ROOT + self._y
        half = h >> 1
        # Two points beyond each face: (n, 4 faces, 2 points) in global integer coordinates.
        px = np.empty((n, 4, 2), dtype=np.int64)
        py = np.empty((n, 4, 2), dtype=np.int64)
        px[:, 0, :] = (gx - 1)[:, None]
        px[:, 1, :] = (gx + h)[:, None]
        py[:, 0:2, 0] = gy[:, None]
        py[:, 0:2, 1] = (gy + half)[:, None]
        py[:, 2, :] = (gy - 1)[:, None]
        py[:, 3, :] = (gy + h)[:, None]
        px[:, 2:4, 0] = gx[:, None]
        px[:, 2:4, 1] = (gx + half)[:, None]
        inside = (px >= 0) & (px < p.nx * ROOT) & (py >= 0) & (py < p.ny * ROOT)
        cxp, cyp = np.where(inside, px, 0), np.where(inside, py, 0)
        qkeys = leaf_keys((cyp // ROOT) * p.nx + cxp // ROOT, cxp % ROOT, cyp % ROOT)

        # Owners of the points (global_first_position), mirrors and counts.
        firsts = _first_positions(comm, self.keys)
        owner = np.searchsorted(firsts, qkeys, side="right").astype(np.int64) - 1
        remote = inside & (owner != comm.rank)
        leaf_of = np.broadcast_to(np.arange(n, dtype=np.int64)[:, None, None], (n, 4, 2))
        pairs = np.unique(owner[remote] * max(n, 1) + leaf_of[remote])
        dest, mirrors = pairs // max(n, 1), pairs % max(n, 1)
        send_counts = np.bincount(dest, minlength=comm.size).astype(np.int64)
        recv_counts = np.array(comm.alltoall(send_counts.tolist()), dtype=np.int64)
        n_low = int(recv_counts[: comm.rank].sum())
        recv_displs = np.zeros(comm.size, dtype=np.int64)
        recv_displs[1:] = np.cumsum(recv_counts)[:-1]
        recv_displs[comm.rank + 1 :] += n  # ghosts from higher ranks go after the local leaves
        send_displs = np.zeros(comm.size, dtype=np.int64)
        send_displs[1:] = np.cumsum(send_counts)[:-1]
        gl = GhostLayer(mirrors, send_counts, send_displs, recv_counts, recv_displs, n_low, n, int(recv_counts.sum()) - n_low)
        self.ghosts = gl

        ext_keys = gl.exchange(comm, self.keys)
        ext_keys[-1] = _NO_KEY
        ext_level = gl.exchange(comm, self._level)
        if np.any(ext_keys[1:-1] <= ext_keys[:-2]):
            raise RuntimeError("ghosts are not in curve order")
        zero = gl.n_ext - 1
        nb = np.searchsorted(ext_keys[:-1], qkeys, side="right").astype(np.int64) - 1
        nb = np.where(inside, nb, zero)
        span = np.left_shift(np.uint64(1), (2 * (L - ext_level[nb])).astype(np.uint64))
        contained = ~inside | ((nb >= 0) & (ext_keys[nb] <= qkeys) & (qkeys - ext_keys[np.maximum(nb, 0)] < span))
        if not contained.all():
            raise RuntimeError("a face neighbour is missing from the ghost layer")
        two = inside[:, :, 0] & (nb[:, :, 0] != nb[:, :, 1])  # two finer neighbours across the face
        lev = self._level[:, None]
        nlev = ext_level[nb]
        balanced = np.where(
            two[:, :, None], nlev == lev[:, :, None] + 1, ~inside | (nlev <= lev[:, :, None]) & (nlev >= lev[:, :, None] - 1)
        )
        if not balanced.all():
            raise RuntimeError("the mesh is not 2:1 face-balanced")
        self._nb, self._two, self._inside = nb, two, inside[:, :, 0]

        # Upwind flux coefficients per sub-face k = 2 * face + s: dq_i -= coef[i, k] * q_ext[up[i, k]].
        sub = np.where(two[:, :, None], (h >> 2)[:, None, None] + np.array([0, 1])[None, None, :] * (h >> 1)[:, None, None], 0)
        sub = np.where(two[:, :, None], sub, np.where(np.array([True, False])[None, None, :], half[:, None, None], 0))
        length = np.where(two[:, :, None], half[:, None, None], np.where(np.array([True, False]), h[:, None, None], 0))
        base_x = np.stack([gx, gx + h, gx, gx], axis=1)[:, :, None]
        base_y = np.stack([gy, gy, gy, gy + h], axis=1)[:, :, None]
        along_x = np.array([0, 0, 1, 1])[None, :, None]
        mx = (base_x + along_x * sub) / ROOT
        my = (base_y + (1 - along_x) * sub) / ROOT
        ux, uy = velocity_at(mx, my, p)
        un = ux * _NORMALS[None, :, 0, None] + uy * _NORMALS[None, :, 1, None]
        area = (h.astype(np.float64) / ROOT) ** 2
        coef = p.dt * un * (length / ROOT) / area[:, None, None]
        self_ext = (gl.n_low + np.arange(n, dtype=np.int64))[:, None, None]
        neighbour = np.where(two[:, :, None], nb, nb[:, :, :1])
        up = np.where(un > 0, self_ext, neighbour)  # boundary inflow: neighbour is the zero slot
        self._coef, self._up = coef.reshape(n, 8), up.reshape(n, 8)
        out_at = (~inside[:, :, :1] & (un > 0) & (length > 0)).reshape(-1)  # sub-faces where q leaves the domain
        self._outflow_at = np.flatnonzero(out_at)
        self._outflow_w = (coef * area[:, None, None]).reshape(-1)[out_at]
        cx, cy = self.centres()
        self.velocity = np.stack(velocity_at(cx, cy, p), axis=1)

        # Reconstruction geometry: neighbour distance in units of the leaf's size (1, 1.5 coarser, 0.75 finer).
        hn = leaf_size(ext_level[nb[:, :, 0]])
        self._dist = np.where(self._inside, (h[:, None] + hn) / (2.0 * h[:, None]), 1.0)
        self._nb_avg = np.where(self._inside[:, :, None], nb, self_ext)  # boundary: the leaf itself (zero gradient)
        self._ext_q = gl.exchange(comm, self.q)
        self._reconstruct()

    # -- numerics

    def _reconstruct(self) -> None:
        """Compute each leaf's degree and Legendre coefficients from the current values and ghosts."""
        q, e = self.q, self._ext_q
        qn = 0.5 * (e[self._nb_avg[:, :, 0]] + e[self._nb_avg[:, :, 1]])  # (n, 4): mean value across each face
        self._jump = np.max(np.abs(qn - q[:, None]), axis=1, initial=0.0)
        s_lo = (q[:, None] - qn[:, 0::2]) / self._dist[:, 0::2]  # (n, 2): one-sided slopes per leaf size, x and y
        s_hi = (qn[:, 1::2] - q[:, None]) / self._dist[:, 1::2]
        flat = np.max(np.maximum(np.abs(s_lo), np.abs(s_hi)), axis=1, initial=0.0) < 1e-9
        smooth = np.all((s_lo * s_hi > 0) & (np.abs(s_hi - s_lo) <= 0.5 * (np.abs(s_lo) + np.abs(s_hi))), axis=1)
        degree = np.where(flat, 0, np.where(smooth, 2, 1)).astype(np.int64)
        slope = np.where(
            smooth[:, None],
            (s_lo * self._dist[:, 1::2] + s_hi * self._dist[:, 0::2]) / self._dist.reshape(-1, 2, 2).sum(axis=2),
            _minmod(s_lo, s_hi),
        )
        c1 = np.where(flat[:, None], 0.0, 0.5 * slope)  # P1 coefficient: half the change across the leaf
        c2 = np.where(smooth[:, None], (s_hi - s_lo) / (self._dist[:, 0::2] + self._dist[:, 1::2]) / 6.0, 0.0)
        counts = (degree + 1) ** 2
        off = np.zeros(counts.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=off[1:])
        values = np.zeros(int(counts.sum()), dtype=np.float64)
        values[off] = q
        k1 = degree >= 1
        values[off[k1] + degree[k1] + 1] = c1[k1, 0]  # c[1, 0]
        values[off[k1] + 1] = c1[k1, 1]  # c[0, 1]
        k2 = degree == 2
        values[off[k2] + 6] = c2[k2, 0]  # c[2, 0]
        values[off[k2] + 2] = c2[k2, 1]  # c[0, 2]
        self.recon = ac.HpData(values, counts)
        self._slopes = c1

    def advance(self) -> None:
        """Take one time step (and adapt every ``adapt_every`` steps). Collective."""
        t0 = time.perf_counter()
        e = self._ext_q
        flux = self._coef[:, 0] * e[self._up[:, 0]]
        for k in range(1, 8):  # the same order on every rank: bit-identical for any P
            flux += self._coef[:, k] * e[self._up[:, k]]
        self.outflow += float(np.dot(self._outflow_w, self.q[self._outflow_at // 8]))
        self.q = self.q - flux
        self.step += 1
        if self._since is None:
            self.time = self.step * self.params.dt
        else:
            self.time = self._since[1] + (self.step - self._since[0]) * self.params.dt
        self.leaf_updates += self.q.size
        self.ghosts.exchange(self.comm, self.q, out=self._ext_q)
        self._reconstruct()
        self.step_seconds += time.perf_counter() - t0
        if self.step % self.params.adapt_every == 0:
            t0 = time.perf_counter()
            self.adapt()
            self._setup()
            self.adapt_seconds += time.perf_counter() - t0

    def total_mass(self) -> float:
        """Return the integral of q over the domain [m^2] (an allreduce: rounding may vary with P). Collective."""
        from mpi4py import MPI

        area = (leaf_size(self._level).astype(np.float64) / ROOT) ** 2
        return float(self.comm.allreduce(float(np.dot(self.q, area)), op=MPI.SUM))

    def total_outflow(self) -> float:
        """Return the mass [m^2] that left through the domain boundary since this object was built or restored. Collective.

        ``total_mass() + total_outflow()`` stays constant to rounding: the
        scheme and the adaptation conserve mass.
        """
        from mpi4py import MPI

        return float(self.comm.allreduce(self.outflow, op=MPI.SUM))

    def num_leaves(self) -> int:
        """Return the global number of leaves. Collective."""
        return int(sum(self.comm.allgather(self.q.size)))

    # -- adaptation

    def _window(self, t: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
        """Return the local leaves with the 3 before and 3 after them on the curve (for families across ranks). Collective.

        One ``allgather`` of at most 6 leaves per rank (O(P), not O(N)).
        """
        n = self.q.size
        _, g0 = _exscan_counts(self.comm, n)
        sel = np.unique(np.r_[np.arange(min(n, 3)), np.arange(max(n - 3, 0), n)]).astype(np.int64)
        mine = {
            "g": g0 + sel,
            "tree": self._tree[sel],
            "x": self._x[sel],
            "y": self._y[sel],
            "level": self._level[sel],
            "t": t[sel],
            "q": self.q[sel],
        }
        everyone = self.comm.allgather(mine)
        g1 = g0 + n
        out: dict[str, np.ndarray] = {}
        before = [{k: v[(d["g"] >= g0 - 3) & (d["g"] < g0)] for k, v in d.items()} for d in everyone]
        after = [{k: v[(d["g"] >= g1) & (d["g"] < g1 + 3)] for k, v in d.items()} for d in everyone]
        local = {"g": g0 + np.arange(n), "tree": self._tree, "x": self._x, "y": self._y, "level": self._level, "t": t, "q": self.q}
        for k in local:
            out[k] = np.concatenate([d[k] for d in before] + [local[k]] + [d[k] for d in after])
        order = np.argsort(out["g"], kind="stable")
        out = {k: v[order] for k, v in out.items()}
        return out, int(np.searchsorted(out["g"], g0))

    @staticmethod
    def _families(w: dict[str, np.ndarray]) -> np.ndarray:
        """Return the window positions of the first child of each complete family of four sibling leaves."""
        lev, x, y, tree = w["level"], w["x"], w["y"], w["tree"]
        m = lev.size
        if m < 4:
            return np.zeros(0, dtype=np.int64)
        h = leaf_size(lev)
        child = ((x // h) & 1) | (((y // h) & 1) << 1)
        j = np.arange(m - 3)
        ok = (lev[j] > 0) & (child[j] == 0)
        for k in (1, 2, 3):
            ok &= (lev[j + k] == lev[j]) & (child[j + k] == k) & (tree[j + k] == tree[j])
            ok &= ((x[j + k] & ~(2 * h[j] - 1)) == x[j]) & ((y[j + k] & ~(2 * h[j] - 1)) == y[j])
        return j[ok]

    def adapt(self, *, coarsen: bool = True) -> None:
        """Refine, coarsen, balance 2:1 and repartition uniformly. Collective.

        Marks leaves by the jump indicator, then raises target levels until
        every pair of face neighbours differs by at most one level and every
        family coarsens completely or not at all (each round: one ghost
        exchange of the targets, one small allgather for families that
        straddle ranks, one allreduce); the least such fixed point does not
        depend on the partition.
        """
        from mpi4py import MPI

        p, n = self.params, self.q.size
        lev = self._level
        t = lev.copy()
        t[(self._jump > p.refine_tol) & (lev < p.max_level)] += 1
        if coarsen:
            t[(self._jump < p.coarsen_tol) & (lev > p.min_level)] -= 1
        gl = self.ghosts
        while True:
            ext_t = gl.exchange(self.comm, t)
            nb_max = np.max(np.where(self._inside[:, :, None], ext_t[self._nb], -1), axis=(1, 2), initial=-1)
            new = np.maximum(t, nb_max - 1)
            w, off = self._window(new)
            wt = w["t"].copy()
            fam = self._families(w)
            member = np.zeros(wt.size, dtype=bool)
            for k in range(4):
                member[fam + k] = True
            keep = np.zeros(fam.size, dtype=bool)
            for k in range(4):
                keep |= wt[fam + k] >= w["level"][fam]
            for k in range(4):
                wt[fam[keep] + k] = np.maximum(wt[fam[keep] + k], w["level"][fam[keep]])
            lone = ~member & (wt < w["level"])
            wt[lone] = w["level"][lone]
            new = wt[off : off + n]
            changed = bool(np.any(new != t))
            t = new
            if not self.comm.allreduce(changed, op=MPI.LOR):
                break

        # Apply: refine into 4 children, coarsen complete families onto the first child's owner.
        w, off = self._window(t)
        fam = self._families(w)
        fam = fam[w["t"][fam] < w["level"][fam]]
        first_of = np.full(w["t"].size, -1, dtype=np.int64)
        for k in range(4):
            first_of[fam + k] = fam
        loc = np.arange(off, off + n)
        is_first = first_of[loc] == loc
        coarsened = first_of[loc] >= 0
        nout = np.where(t > lev, 4, np.where(coarsened, is_first.astype(np.int64), 1))
        src = np.repeat(np.arange(n), nout)
        k_child = np.arange(src.size) - np.repeat(np.cumsum(nout) - nout, nout)
        refined = (t > lev)[src]
        hc = leaf_size(lev[src] + 1)
        cx, cy = k_child & 1, k_child >> 1
        x = self._x[src] + np.where(refined, cx * hc, 0)
        y = self._y[src] + np.where(refined, cy * hc, 0)
        level = lev[src] + np.where(refined, 1, 0) - np.where(coarsened[src], 1, 0)
        q = self.q[src] + np.where(refined, self._slopes[src, 0] * (cx - 0.5) + self._slopes[src, 1] * (cy - 0.5), 0.0)
        if fam.size:
            wq = w["q"]
            parent_q = ((wq[fam] + wq[fam + 1]) + (wq[fam + 2] + wq[fam + 3])) * 0.25
            out_pos = (np.cumsum(nout) - nout)[is_first]
            q[out_pos] = parent_q[np.searchsorted(fam, loc[is_first])]
        self._repartition(self._tree[src], level, x, y, q)

    def _repartition(self, tree: np.ndarray, level: np.ndarray, x: np.ndarray, y: np.ndarray, q: np.ndarray) -> None:
        """Move the leaves to the uniform partition of their new count (``Alltoallv`` of contiguous ranges). Collective."""
        from mpi4py import MPI

        comm = self.comm
        counts, _ = _exscan_counts(comm, q.size)
        old = Partition.from_counts(counts)
        new = Partition.uniform(old.N, comm.size)
        send, recv = transfer_counts(old, new, comm.rank)
        meta = np.stack([tree, level, x, y], axis=1).astype(np.int64)
        nrecv = int(recv.sum())
        out_meta = np.empty((nrecv, 4), dtype=np.int64)
        out_q = np.empty(nrecv, dtype=np.float64)
        sd, rd = np.r_[0, np.cumsum(send)[:-1]], np.r_[0, np.cumsum(recv)[:-1]]
        comm.Alltoallv([meta, (4 * send, 4 * sd), MPI.INT64_T], [out_meta, (4 * recv, 4 * rd), MPI.INT64_T])
        comm.Alltoallv([q, (send, sd), MPI.DOUBLE], [out_q, (recv, rd), MPI.DOUBLE])
        self._set_leaves(out_meta[:, 0].copy(), out_meta[:, 1].copy(), out_meta[:, 2].copy(), out_meta[:, 3].copy())
        self.q = out_q

    def check(self) -> None:
        """Check the forest: curve order, no overlaps, complete cover, across ranks (gathers all leaves: for tests). Collective."""
        parts = self.comm.allgather((self._tree, self._level, self._x, self._y))
        tree, level, x, y = (np.concatenate([pp[i] for pp in parts]) for i in range(4))
        sfc.check_linear_forest(tree, level, x, y, num_trees=self.params.num_trees, complete=True)


# ------------------------------------------------------------------ results


def field_hashes(path: str) -> dict[str, str]:
    """Return the sha256 of every field of a checkpoint, read serially in global curve order.

    ``mesh`` hashes the little-endian bytes of tree (int32), level (int8), x
    and y (int32); cell fields their float64 bytes; ``recon`` the per-leaf
    counts (int64) then the values.  Equal hashes mean bit-identical states,
    whatever the process counts that computed and wrote them.  Not collective
    (no MPI).
    """
    import hashlib

    state = ac.load(path, AdvectionState, comm=ac.comm.SerialComm()).state  # this process alone, even in an MPI job
    m = state.mesh

    def sha(*arrays: np.ndarray) -> str:
        h = hashlib.sha256()
        for a in arrays:
            h.update(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
        return h.hexdigest()

    return {
        "step": str(state.step),
        "time": repr(state.time),
        "mesh": sha(m.tree, m.level, m.x, m.y),
        "q": sha(state.q),
        "velocity": sha(state.velocity),
        "recon": sha(state.recon.counts, state.recon.values),
    }


# ------------------------------------------------------------------ the program


def _emit(comm: Any, as_json: bool, event: str, **fields: Any) -> None:
    if comm.rank != 0:
        return
    if as_json:
        print(json.dumps({"event": event, **fields}), flush=True)
    else:
        body = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in fields.items())
        print(f"[{event}] {body}", flush=True)


def brick_connectivity(p: Params) -> sfc.Connectivity:
    """Return the run's brick as a p4est connectivity in its own tree numbering (``ty * nx + tx``), faces only.

    What :class:`amrckpt.adapt.Balance` needs to balance across the trees'
    faces (p4est's own brick numbers trees along a Morton curve, not by rows).
    """
    tx, ty = np.meshgrid(np.arange(p.nx), np.arange(p.ny), indexing="xy")
    tx, ty = tx.reshape(-1), ty.reshape(-1)
    tree = ty * p.nx + tx
    ttt = np.stack([tree] * 4, axis=1)
    ttf = np.tile(np.arange(4), (tree.size, 1))
    for face, (dx, dy) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
        nx_, ny_ = tx + dx, ty + dy
        inside = (nx_ >= 0) & (nx_ < p.nx) & (ny_ >= 0) & (ny_ < p.ny)
        ttt[inside, face] = (ny_ * p.nx + nx_)[inside]
        ttf[inside, face] = face ^ 1
    vx, vy = np.meshgrid(np.arange(p.nx + 1), np.arange(p.ny + 1), indexing="xy")
    vertices = np.stack([vx.reshape(-1), vy.reshape(-1), np.zeros(vx.size)], axis=1).astype(np.float64)
    v0 = ty * (p.nx + 1) + tx
    ttv = np.stack([v0, v0 + 1, v0 + p.nx + 1, v0 + p.nx + 2], axis=1)
    return sfc.Connectivity(2, vertices, ttv, ttt, ttf)


def restore(manager: ac.CheckpointManager[AdvectionState], adapt: str, brick: Params) -> Simulation | None:
    """Restore the newest checkpoint, one level finer or coarser with ``adapt`` (``"refine"``, ``"coarsen"``). Collective.

    ``brick``: parameters whose ``nx``, ``ny`` are the run's (the command line's).

    amrckpt adapts while it loads (:mod:`amrckpt.adapt`): ``Refine(levels=1)``
    gives each leaf its four children, which take the parent's ``q``
    (injection: the integral of q is kept); ``Coarsen(levels=1)`` replaces
    every complete family by its parent, whose ``q`` is the children's mean
    (summed pairwise in a fixed order: the integral is kept up to the
    rounding of three additions per family, and a refinement undone gives
    the values back bit for bit).  The levels of the run's parameters move
    with the mesh; the velocity and the reconstruction, derived from mesh
    and ``q``, are recomputed on the new mesh (``__amrckpt_restored__``).
    Coarsening is followed by p4est's 2:1 face balance (:class:`Balance`).
    """
    if adapt == "none":
        sim: Simulation | None = manager.restore_latest(into=Simulation, partition="weighted")
        return sim
    shift = 1 if adapt == "refine" else -1

    def placeholder(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One zero per parent: the reconstruction is recomputed on the new mesh."""
        return np.zeros(counts.size // 4), np.ones(counts.size // 4, dtype=np.int64)

    recon = HpTransfer(coarsen=placeholder)
    if shift > 0:
        spec = Adapt(Refine(levels=1), transfers={"recon": recon})
    else:  # coarsening every family breaks the 2:1 balance that the scheme needs: p4est's balance after it
        conn = brick_connectivity(brick)
        spec = Adapt(Coarsen(levels=1), Balance("face", connectivity=conn), transfers={"recon": recon})
    Simulation.restoring_adapted = True
    try:
        sim = manager.restore_latest(into=Simulation, partition="weighted", adapt=spec)
    finally:
        Simulation.restoring_adapted = False
    if sim is not None:
        p = sim.params
        lo, hi = max(1, p.min_level + shift), max(1, p.max_level + shift)
        sim.params = p.model_copy(update={"min_level": lo, "max_level": hi})
        sim._since = (sim.step, sim.time)
        sim._setup()
    return sim


def main(argv: list[str] | None = None) -> int:
    """Run (or continue) the advection simulation under ``mpiexec``; return the exit status."""
    from mpi4py import MPI

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="advection-checkpoints", help="checkpoint directory")
    ap.add_argument("--steps", type=int, default=400, help="run until this step")
    ap.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    ap.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    ap.add_argument("--restart", choices=["latest", "none"], default="none", help="continue from the newest valid checkpoint")
    ap.add_argument(
        "--adapt",
        choices=["none", "refine", "coarsen"],
        default="none",
        help="with --restart latest: continue one level finer (or coarser) than the checkpoint (amrckpt.adapt)",
    )
    ap.add_argument("--report-every", type=int, default=10, help="steps between progress reports")
    ap.add_argument("--json", action="store_true", help="progress as JSON lines (for a driver)")
    ap.add_argument("--background", action="store_true", help="save in a background thread")
    ap.add_argument(
        "--cache",
        default=None,
        help="a node-local cache directory ({node}, {job} replaced): saves go there first, flushed to --dir (NodeCache)",
    )
    ap.add_argument("--flush-every", type=int, default=0, help="with --cache: flush every this many steps (0: at the end only)")
    ap.add_argument(
        "--wall-time-margin",
        type=float,
        default=60.0,
        help="in a batch job, checkpoint and stop this many seconds (at least) before the time limit; 0: never (BeforeWallTime)",
    )
    ap.add_argument("--wall-time-refresh", type=float, default=None, help="seconds between re-reads of the job's time limit")
    ap.add_argument("--pace", type=float, default=0.0, help="least wall time of a step [s]: stands in for a costly step (demos)")
    ap.add_argument("--done-file", default=None, help="create this file when the run reaches --steps (for chains of batch jobs)")
    for name, field in Params.model_fields.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=field.default, help=field.description)
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    params = Params(**{name: getattr(args, name) for name in Params.model_fields})

    policy = ac.EveryNSteps(args.checkpoint_every) | ac.OnSignal()
    if args.wall_time_margin > 0:  # inert outside a batch job; in one, the end comes from the scheduler (rank 0 asks)
        policy = policy | ac.manager.BeforeWallTime(min_margin=args.wall_time_margin, refresh=args.wall_time_refresh)
    t_start = time.perf_counter()
    cache = ac.manager.NodeCache(args.cache) if args.cache else None
    flush = ac.EveryNSteps(args.flush_every) if args.cache and args.flush_every > 0 else None
    with ac.CheckpointManager(
        args.dir,
        AdvectionState,
        comm=comm,
        save_policy=policy,
        keep_policy=ac.manager.KeepLast(args.keep),
        background=args.background,
        cache=cache,
        flush_policy=flush,
    ) as manager:
        sim = restore(manager, args.adapt, params) if args.restart == "latest" else None
        restored = sim is not None
        if sim is None:
            sim = Simulation(params, comm)
        elif sim.params != params:
            _emit(comm, args.json, "note", message="parameters come from the checkpoint; the command line's are ignored")
        _emit(
            comm,
            args.json,
            "start",
            ranks=comm.size,
            step=sim.step,
            time=sim.time,
            leaves=sim.num_leaves(),
            restored=restored,
            steps=args.steps,
            mass=sim.total_mass(),
        )

        def save(force: bool = False) -> bool:
            t0 = time.perf_counter()
            if not manager.save(sim.step, sim, force=force):
                return False
            seconds = round(time.perf_counter() - t0, 4)
            _emit(comm, args.json, "checkpoint", step=sim.step, seconds=seconds, path=str(manager.path_of(sim.step)))
            return True

        saved_at = -1
        while sim.step < args.steps and not manager.halt_requested:
            t_step = time.monotonic()
            sim.advance()
            if args.pace > 0:
                time.sleep(max(0.0, args.pace - (time.monotonic() - t_step)))
            if save():
                saved_at = sim.step
            if sim.step % args.report_every == 0 or sim.step == args.steps:
                _emit(comm, args.json, "step", step=sim.step, time=sim.time, leaves=sim.num_leaves())
        if saved_at != sim.step and sim.step == args.steps and manager.restored_step != sim.step:
            save(force=True)  # the final state (not when it is the checkpoint just restored: that step exists)
        manager.wait()
    if args.done_file and sim.step >= args.steps and comm.rank == 0:
        with open(args.done_file, "w") as fh:
            fh.write(f"{sim.step}\n")
    rates = comm.gather(sim.leaf_updates / sim.step_seconds if sim.step_seconds else 0.0, root=0)
    adapt = comm.gather(sim.adapt_seconds, root=0)
    _emit(
        comm,
        args.json,
        "done",
        step=sim.step,
        time=sim.time,
        leaves=sim.num_leaves(),
        mass=sim.total_mass(),
        halted=bool(manager.halt_requested),
        seconds=round(time.perf_counter() - t_start, 3),
        leaves_per_second_per_rank=[round(r) for r in rates] if rates else [],
        adapt_seconds=[round(a, 3) for a in adapt] if adapt else [],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
