"""The conformance suite of byte backends (amrckpt.testing.BackendTests) under mpiexec: MPI-IO, POSIX and the faulty wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _support import world
from amrckpt.comm import MPIComm
from amrckpt.testing import BackendTests, FaultyBackend

pytestmark = pytest.mark.mpi


class _World(BackendTests):
    def run(self, fn: Any, *args: Any) -> list[Any]:
        return [fn(MPIComm(world()), *args)]  # this process's rank; the test asserts on every rank

    @pytest.fixture
    def backend_dir(self, mpi_tmp: Path) -> Path:
        return mpi_tmp


class TestMPIIO(_World):
    backend = "mpiio"


class TestPosixUnderMPI(_World):
    backend = "posix"


class TestFaultyMPIIO(_World):
    backend = FaultyBackend.over("mpiio")
    faulty = True
