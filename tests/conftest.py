"""pytest configuration: hypothesis profiles, shared temporary files under MPI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Under MPI every rank must draw the same examples: derandomized, no database.
settings.register_profile(
    "mpi", max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _world():  # type: ignore[no-untyped-def]
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def mpi_tmp(tmp_path: Path) -> Iterator[Path]:
    """A temporary directory shared by all ranks (rank 0's ``tmp_path``)."""
    comm = _world()
    path = Path(comm.bcast(str(tmp_path) if comm.rank == 0 else None, root=0))
    yield path
    comm.Barrier()
