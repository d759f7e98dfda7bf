"""pytest configuration: hypothesis profiles, shared temporary files under MPI."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
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


@contextlib.contextmanager
def shared_tmpdir() -> Iterator[Path]:
    """A temporary directory made by rank 0 for all ranks, removed by rank 0 afterwards.

    Not pytest's ``tmp_path``: under mpiexec every rank's pytest would also
    create and garbage-collect numbered directories in the same base, and
    one rank's cleanup could remove a directory that another still uses.
    """
    comm = _world()
    path = Path(comm.bcast(tempfile.mkdtemp(prefix="amrckpt-mpi-") if comm.rank == 0 else None, root=0))
    try:
        yield path
    finally:
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def mpi_tmp() -> Iterator[Path]:
    """A temporary directory shared by all ranks (see :func:`shared_tmpdir`)."""
    with shared_tmpdir() as path:
        yield path


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Outside mpiexec: remove the MPICH segments that jobs killed or aborted by the tests left in /dev/shm.

    (:func:`killing.remove_orphaned_mpich_shm`: only this user's, and only
    those no process holds open or mapped.)
    """
    if not any(k in os.environ for k in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")):
        from killing import remove_orphaned_mpich_shm

        remove_orphaned_mpich_shm()
