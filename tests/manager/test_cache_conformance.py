"""The sink and source conformance suite (amrckpt.testing.SinkSourceTests) on a node cache's pieces and its cached steps.

Each rank's sink writes its own pieces file (:class:`PiecesBackend`, what a
cached save writes through); the source reads them back as a restart from the
cache does (:class:`CachedBackend` over each rank's pieces, the bytes a rank
lacks exchanged with the rank that holds them), serially and on thread ranks.
The same suite runs on POSIX and MPI-IO through :class:`amrckpt.testing.BackendTests`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amrckpt.comm import Comm, SerialComm, current_call, run_threads
from amrckpt.manager.cache._pieces import pieces_name, read_pieces
from amrckpt.manager.cache._pieces_io import PiecesBackend
from amrckpt.manager.cache._read import pieces_access, root_extra
from amrckpt.scda import FileAccess
from amrckpt.testing import SinkSourceTests


class _Cache(SinkSourceTests):
    """Files as a node cache holds a step: one pieces file per rank beside ``path``, read back as a restart reads them."""

    @staticmethod
    def _pieces_file(path: str, rank: int) -> Path:
        return Path(f"{path}.{pieces_name(rank)}")

    def sink_access(self, path: str, comm: Comm) -> FileAccess:
        def open_pieces(p: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> PiecesBackend:
            return PiecesBackend(self._pieces_file(p, comm.rank), comm)

        return FileAccess(backend=open_pieces)

    def source_access(self, path: str, comm: Comm) -> FileAccess:
        call = current_call(comm)
        assert call is not None
        pieces = read_pieces(self._pieces_file(path, comm.rank))
        size, extra = root_extra(call, pieces)
        return pieces_access(pieces, size, path, comm.rank, extra)

    @pytest.fixture
    def backend_dir(self, tmp_path: Path) -> Path:
        return tmp_path


class TestCacheSerial(_Cache):
    def run(self, fn: Any, *args: Any) -> list[Any]:
        return [fn(SerialComm(), *args)]


class TestCacheOnThreeThreads(_Cache):
    def run(self, fn: Any, *args: Any) -> list[Any]:
        return run_threads(3, fn, *args, timeout=60)
