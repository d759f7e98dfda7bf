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


@pytest.mark.parametrize(
    ("info", "env", "creates"),
    [(None, "", False), ({"striping_factor": "4"}, "", True), ({"romio_lustre_co_ratio": "1"}, "", True), (None, "hints", True)],
    ids=["no hints", "striping_factor", "a Lustre hint", "ROMIO_HINTS"],
)
def test_mpi_file_open_creates_only_where_a_hint_needs_romio_s_create(
    mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch, info: Any, env: str, creates: bool
) -> None:
    """Rank 0 creates a new file and MPI_File_open opens it without MPI_MODE_CREATE (ROMIO's create deadlocks when its close
    fails: tests/test_fiu_campaign.py), unless a hint that ROMIO applies only when it creates the file is given."""
    from mpi4py import MPI

    if env:
        hints_file = mpi_tmp / "romio-hints"
        if world().rank == 0:
            hints_file.write_text("striping_factor 4\n", encoding="utf-8")
        world().Barrier()
        monkeypatch.setenv("ROMIO_HINTS", str(hints_file))
    path = mpi_tmp / f"new-{len(env)}-{creates}-{sorted(info or {})}.bin"
    f = _mpiio.MPIIOBackend(str(path), "w", MPIComm(world()), info)
    try:
        amode = f._fh.Get_amode()
        f.write_gathered([(world().rank, memoryview(b"x"))], 1)
    finally:
        f.close(None)
    assert bool(amode & MPI.MODE_CREATE) is creates
    assert path.read_bytes() == b"x" * world().size
