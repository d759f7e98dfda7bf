"""The conformance suite of byte backends (amrckpt.testing.BackendTests) on the POSIX backend and its faulty wrapper,
serially and on thread ranks; tests/mpi/test_backends_mpi.py runs it under mpiexec, MPI-IO included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amrckpt.comm import SerialComm, run_threads
from amrckpt.testing import BackendTests, FaultyBackend


class _Serial(BackendTests):
    def run(self, fn: Any, *args: Any) -> list[Any]:
        return [fn(SerialComm(), *args)]

    @pytest.fixture
    def backend_dir(self, tmp_path: Path) -> Path:
        return tmp_path


class _Threads(BackendTests):
    ranks = 3

    def run(self, fn: Any, *args: Any) -> list[Any]:
        return run_threads(self.ranks, fn, *args, timeout=60)

    @pytest.fixture
    def backend_dir(self, tmp_path: Path) -> Path:
        return tmp_path


class TestPosixSerial(_Serial):
    backend = "posix"


class TestDefaultBackendSerial(_Serial):
    backend = None


class TestPosixOnThreeThreads(_Threads):
    backend = "posix"


class TestPosixOnFourThreads(_Threads):
    backend = "posix"
    ranks = 4


class TestFaultyPosixSerial(_Serial):
    backend = FaultyBackend.over("posix")
    faulty = True


class TestFaultyPosixOnThreads(_Threads):
    backend = FaultyBackend
    faulty = True
