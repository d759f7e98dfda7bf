"""The conformance suite of byte backends (amrckpt.testing.BackendTests) on the POSIX backend and its faulty wrapper,
serially and on thread ranks; tests/mpi/test_backends_mpi.py runs it under mpiexec, MPI-IO included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amrckpt.comm import SerialComm, run_threads
from amrckpt.errors import ScdaUsageError
from amrckpt.scda import ByteSink, FileAccess, PosixBackend, open_backend, open_sink, open_source
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


def test_an_opener_of_a_sink_or_a_source_only_is_refused_where_a_full_backend_is_needed(tmp_path: Path) -> None:
    """open_backend needs write, read and the rest: a sink-only or source-only opener is a ScdaUsageError naming what it lacks."""

    class SinkOnly:
        def __init__(self, path: str, comm: Any) -> None:
            self._b = PosixBackend(path, "w", comm)
            self.comm, self.path = comm, path

        def write_gathered(self, pieces: Any, nrounds: int, ncontiguous: int = 0) -> None:
            self._b.write_gathered(pieces, nrounds, ncontiguous)

        def sync(self, size: int | None = None) -> None:
            self._b.sync(size)

        def close(self, size: int | None = None) -> None:
            self._b.close(size)

    access = FileAccess(backend=lambda p, m, c, a, d: SinkOnly(p, c))
    path = str(tmp_path / "f.bin")
    with pytest.raises(ScdaUsageError, match=r"no write, read, read_gathered, file_size\): it is a sink of whole files only"):
        open_backend(path, "w", SerialComm(), access=access)
    with pytest.raises(ScdaUsageError, match=r"does not serve reads .*it is a sink"):
        open_source(path, SerialComm(), access=access)
    sink = open_sink(path, SerialComm(), access=access)
    assert isinstance(sink, ByteSink)
    sink.close()
