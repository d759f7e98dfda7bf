"""The example AMR solver (examples/advection_amr.py) under MPI: bit-identical for any process count, valid meshes, conservation.

Run at 1, 2, 3 and 4 processes.  Rank 0 also runs the same simulation on
``COMM_SELF`` and every field's sha256 must equal the parallel run's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import amrckpt as ac

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import advection_amr as adv

from _support import all_true, world

pytestmark = pytest.mark.mpi

SMALL = adv.Params(min_level=3, max_level=6, adapt_every=3)
STEPS = 45


def run(comm: Any, steps: int = STEPS) -> tuple[adv.Simulation, float]:
    sim = adv.Simulation(SMALL, comm)
    m0 = sim.total_mass()
    for _ in range(steps):
        sim.advance()
    return sim, m0


def test_fields_are_bit_identical_to_a_serial_run(mpi_tmp: Path) -> None:
    from mpi4py import MPI

    comm = world()
    sim, _ = run(comm)
    sim.save(mpi_tmp / "parallel.scda", comm=comm)
    if comm.rank == 0:
        ref, _ = run(MPI.COMM_SELF)
        ref.save(mpi_tmp / "serial.scda", comm=MPI.COMM_SELF)
    comm.Barrier()
    same = adv.field_hashes(str(mpi_tmp / "parallel.scda")) == adv.field_hashes(str(mpi_tmp / "serial.scda"))
    assert all_true(same)


def test_the_mesh_stays_a_complete_balanced_forest_and_mass_is_conserved() -> None:
    comm = world()
    sim, m0 = run(comm)
    sim.check()  # complete linear forest across ranks; 2:1 balance is checked by every ghost-layer build
    assert sim.num_leaves() > 8 * 4**SMALL.min_level // 4  # it refined
    levels = np.unique(np.concatenate(comm.allgather(sim.mesh.level)))
    assert levels.min() >= SMALL.min_level and levels.max() == SMALL.max_level
    drift = abs(sim.total_mass() + sim.total_outflow() - m0) / m0
    assert all_true(drift < 1e-13), drift
    counts = np.array(comm.allgather(len(sim.mesh)))
    assert counts.max() - counts.min() <= 1  # uniform repartition after the last adaptation


def test_restart_on_another_process_count_continues_bit_identically(mpi_tmp: Path) -> None:
    """Save at step 21 on all ranks, restore on the first max(1, P-1) ranks (weighted), continue; compare with a straight run."""
    from mpi4py import MPI

    comm = world()
    sim, _ = run(comm, 21)
    sim.save(mpi_tmp / "mid.scda", comm=comm)
    q = max(1, comm.size - 1)
    sub = comm.Split(0 if comm.rank < q else MPI.UNDEFINED, comm.rank)
    ok = True
    if sub != MPI.COMM_NULL:
        loaded = ac.load(mpi_tmp / "mid.scda", adv.AdvectionState, comm=sub, partition="weighted")
        assert loaded.comm is sub
        resumed = adv.Simulation.from_checkpoint(loaded)  # rebuilds the ghost layer on `sub`
        while resumed.step < STEPS:
            resumed.advance()
        resumed.save(mpi_tmp / "resumed.scda", comm=sub)
        sub.Free()
    straight, _ = run(comm)
    straight.save(mpi_tmp / "straight.scda", comm=comm)
    ok = adv.field_hashes(str(mpi_tmp / "resumed.scda")) == adv.field_hashes(str(mpi_tmp / "straight.scda"))
    assert all_true(ok)
