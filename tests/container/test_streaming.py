"""A streaming save (issue 34): the bytes that exist written while the helper thread CRCs them and packs the mesh.

A deferred write of at least ``STREAM_NBYTES`` per rank through the POSIX
backend settles without waiting for a CRC32, writes what exists
(``ScdaWriter.flush``) while the helper thread CRCs it and packs the mesh's
records (``scda.Checksummed.later``), agrees on the CRC32s, then writes the
records, the index and the footer.  The threshold is lowered here so that
small states stream; the bytes must be those of a save that does not, on
any number of ranks, and every error of any rank must be every rank's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from _support import collectives
from amrckpt._crc import crc32
from amrckpt.comm import run_threads
from amrckpt.container import _writer
from amrckpt.errors import AmrckptError, ScdaIOError
from amrckpt.scda import _backend
from amrckpt.schema import check_local

G = global_state(seed=11, max_level=5)
POSIX = ac.FileAccess(backend="posix")


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def counted_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the POSIX backend's gathered writes (every rank's, thread ranks share the list)."""
    calls: list[int] = []
    orig = _backend.PosixBackend.write_gathered

    def write_gathered(self: Any, pieces: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(len(pieces))
        orig(self, pieces, *args, **kwargs)

    monkeypatch.setattr(_backend.PosixBackend, "write_gathered", write_gathered)
    return calls


def test_a_large_enough_save_streams_and_writes_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serial and on 2 and 3 thread ranks (POSIX): a streaming save makes two gathered writes and the bytes of one."""
    state = G.local(0, G.N)
    ac.save(state, tmp_path / "one.scda")  # below the threshold: one write
    want = sha(tmp_path / "one.scda")
    monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
    calls = counted_writes(monkeypatch)
    ac.save(state, tmp_path / "serial.scda")
    assert len(calls) == 2 and sha(tmp_path / "serial.scda") == want
    for P in (2, 3):
        calls.clear()
        path = tmp_path / f"p{P}.scda"
        run_threads(P, lambda comm, path=path: ac.save(G.for_rank(comm), path, comm=comm, access=POSIX))
        assert len(calls) == 2 * P and sha(path) == want, P
    assert_state_equal(ac.load(tmp_path / "p3.scda", Advection).state, state)


@pytest.mark.parametrize("P", [2, 3])
def test_a_streaming_save_makes_one_collective_more_than_a_one_write_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, P: int
) -> None:
    """The CRC32s' reduction ("write: crc32s") is the one exchange streaming adds; every rank makes the same count."""

    def save(comm: Any, path: Path) -> None:
        ac.save(G.for_rank(comm), path, comm=comm, access=POSIX)

    one = collectives(P, save, tmp_path / "one.scda")
    monkeypatch.setattr(_writer, "STREAM_NBYTES", 0)
    streamed = collectives(P, save, tmp_path / "streamed.scda")
    assert len(set(one)) == 1 and streamed == [one[0] + 1] * P, (one, streamed)
    assert sha(tmp_path / "one.scda") == sha(tmp_path / "streamed.scda")


def test_a_streaming_save_packs_the_mesh_in_the_helper_thread(stream: None) -> None:
    """A mesh of arrays is packed later (scda.Checksummed.later); one that is a view of its records is not packed again."""
    state = G.local(0, G.N)
    mesh = check_local(state, checksum=True)[list(Advection.__amrckpt_fields__).index("mesh")]
    produced = mesh.payload.data
    assert isinstance(produced, ac.scda.Checksummed) and type(produced.data).__name__ == "Produced"
    assert produced.data.view().tobytes() == state.mesh.to_records().tobytes()
    assert produced.crc.result() == crc32(state.mesh.to_records())
    viewing = ac.Forest.from_records(state.mesh.to_records(), num_trees=2, copy=False)
    again = state.model_copy(update={"mesh": viewing})
    data = check_local(again, checksum=True)[list(Advection.__amrckpt_fields__).index("mesh")].payload.data
    assert isinstance(data, ac.scda.Checksummed) and isinstance(data.data, np.ndarray)  # its own records, not packed


@pytest.mark.parametrize("P", [1, 2, 3])
@pytest.mark.parametrize("where", ["first write", "second write", "packing"])
def test_an_error_of_one_rank_while_streaming_is_every_ranks_and_leaves_no_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: None, P: int, where: str
) -> None:
    """The last rank fails in the first gathered write, in the second, or in packing its records in the helper thread:
    every rank raises the same error, the manager commits nothing, and the step before stays the newest."""
    orig_write = _backend.PosixBackend.write_gathered
    orig_pack = ac.Forest.to_records
    seen: dict[int, int] = {}
    bad = P - 1

    def write_gathered(self: Any, pieces: Any, *args: Any, **kwargs: Any) -> None:
        r = self.comm.rank
        seen[r] = seen.get(r, 0) + 1
        if r == bad and where != "packing" and seen[r] == (1 if where == "first write" else 2) and failing[0]:
            raise ScdaIOError(5, f"{self.path!r}: cannot write (injected on rank {r})")
        orig_write(self, pieces, *args, **kwargs)

    def to_records(self: Any, **kwargs: Any) -> Any:
        if where == "packing" and failing[0] and len(self) == len(G.for_rank(_Rank(bad, P)).mesh):
            raise MemoryError("injected: no memory to pack the records")
        return orig_pack(self, **kwargs)

    failing = [False]
    monkeypatch.setattr(_backend.PosixBackend, "write_gathered", write_gathered)
    monkeypatch.setattr(ac.Forest, "to_records", to_records)

    def body(comm: Any) -> str:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, access=POSIX) as mgr:
            mgr.save(1, G.for_rank(comm), force=True)
            seen.clear()
            failing[0] = True
            try:
                mgr.save(2, G.for_rank(comm), force=True)
            except AmrckptError as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                failing[0] = False
            return "ok"

    got = run_threads(P, body)
    assert len(set(got)) == 1 and got[0] != "ok", got
    assert ("cannot write" in got[0]) if where != "packing" else ("MemoryError" in got[0] or "memory" in got[0]), got[0]
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.scda")) == ["ckpt-000000000001.scda"]


class _Rank:
    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
