"""The conformance suite of byte backends (amrckpt.testing.BackendTests) under mpiexec: MPI-IO, POSIX and the faulty wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _support import world
from amrckpt.comm import MPIComm
from amrckpt.scda import _mpiio
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


class TestMPIIOAfterAnError(_World):
    """The MPI-IO suite once rank 0 alone has seen an MPI-IO error: every file agrees to move its data by independent calls."""

    backend = "mpiio"

    @pytest.fixture(autouse=True)
    def _an_error_seen_on_rank_0(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(_mpiio, "_errors_seen", world().rank == 0)
        monkeypatch.setattr(_mpiio, "_warned", True)
        gathered = _mpiio.MPIIOBackend._gathered

        def independent_only(self: Any, *args: Any, **kwargs: Any) -> Any:
            assert self.independent_only, "a file opened after an MPI-IO error moves its data by independent calls"
            return gathered(self, *args, **kwargs)

        monkeypatch.setattr(_mpiio.MPIIOBackend, "_gathered", independent_only)
