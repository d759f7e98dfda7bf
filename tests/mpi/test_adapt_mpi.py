"""Adapting while loading under mpiexec: the files saved from adapted states are the same bytes at P = 1..4,
and refining then coarsening back, restarted on other process counts, gives the original file.

Run at 4 processes (``mpiexec -n 4 python -m mpi4py -m pytest --with-mpi -m mpi tests/mpi/test_adapt_mpi.py``);
sub-communicators of the first P ranks cover P = 1..4 in one job.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, global_state

import amrckpt as ac
from _support import all_true, sub_comm, world
from amrckpt import sfc
from amrckpt.adapt import Adapt, Balance, Coarsen, HpTransfer, Refine

pytestmark = pytest.mark.mpi

G = global_state(seed=11, max_level=6)


def _save_original(path: Path) -> None:
    """Rank 0 writes the original state alone (COMM_SELF); the others wait."""
    from mpi4py import MPI

    w = world()
    if w.rank == 0:
        ac.save(G.local(0, G.N), path, comm=MPI.COMM_SELF)
    w.Barrier()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hot(forest: sfc.Forest, fields: Any) -> np.ndarray:
    return np.asarray(fields["rho"] > 0.3)


def test_adapted_checkpoints_have_one_sha256_at_any_process_count(mpi_tmp: Path) -> None:
    w = world()
    W = min(w.size, 4)
    _save_original(mpi_tmp / "orig.scda")
    spec = Adapt(Refine(levels=2, marker=_hot, maxlevel=7), transfers={"modes": HpTransfer(degree=4)})
    for P in range(1, W + 1):
        sub = sub_comm(P)
        if sub is not None:
            for how in ("uniform", "weighted"):
                loaded = ac.load(mpi_tmp / "orig.scda", Advection, comm=sub, adapt=spec, partition=how)
                ac.save(loaded.state, mpi_tmp / f"fine{P}{how}.scda", comm=sub)
            sub.Free()
        w.Barrier()
    shas = {_sha(mpi_tmp / f"fine{P}{how}.scda") for P in range(1, W + 1) for how in ("uniform", "weighted")}
    assert all_true(len(shas) == 1)


def test_refine_then_coarsen_back_after_restarts_on_other_counts(mpi_tmp: Path) -> None:
    w = world()
    W = min(w.size, 4)
    _save_original(mpi_tmp / "orig.scda")
    ok = True
    for P in range(1, W + 1):
        Q = W + 1 - P  # coarsen on another process count
        sub = sub_comm(P)
        if sub is not None:
            fine = ac.load(mpi_tmp / "orig.scda", Advection, comm=sub, adapt=Refine(levels=2))
            ac.save(fine.state, mpi_tmp / f"r{P}.scda", comm=sub)
            sub.Free()
        w.Barrier()
        sub = sub_comm(Q)
        if sub is not None:
            back = ac.load(mpi_tmp / f"r{P}.scda", Advection, comm=sub, adapt=Coarsen(levels=2), allow_for_coarsening=True)
            ac.save(back.state, mpi_tmp / f"b{P}.scda", comm=sub)
            sub.Free()
        w.Barrier()
        ok &= _sha(mpi_tmp / f"b{P}.scda") == _sha(mpi_tmp / "orig.scda")
    assert all_true(ok)


def test_a_bad_marker_fails_every_rank(mpi_tmp: Path) -> None:
    w = world()
    _save_original(mpi_tmp / "orig.scda")

    def short_on_rank_1(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.ones(len(forest) - (w.rank == 1), dtype=bool)

    raised = False
    try:
        ac.load(mpi_tmp / "orig.scda", Advection, comm=w, adapt=Refine(marker=short_on_rank_1))
    except ac.errors.AdaptError as exc:
        raised = "marker" in str(exc) if w.size > 1 else False
    assert all_true(raised or w.size == 1)


def test_balance_on_partitioned_forests_has_one_sha256(mpi_tmp: Path) -> None:
    w = world()
    W = min(w.size, 4)
    _save_original(mpi_tmp / "orig.scda")
    conn = sfc.Connectivity.brick((2, 1))

    def deep(forest: sfc.Forest, fields: Any) -> np.ndarray:
        return np.asarray((forest.y % 5 == 0) & (forest.level >= 4))

    spec = Adapt(Refine(levels=3, marker=deep, maxlevel=9), Balance("full", connectivity=conn))
    for P in range(1, W + 1):
        sub = sub_comm(P)
        if sub is not None:
            loaded = ac.load(mpi_tmp / "orig.scda", Advection, comm=sub, adapt=spec, partition="weighted")
            ac.save(loaded.state, mpi_tmp / f"bal{P}.scda", comm=sub)
            sub.Free()
        w.Barrier()
    assert all_true(len({_sha(mpi_tmp / f"bal{P}.scda") for P in range(1, W + 1)}) == 1)
