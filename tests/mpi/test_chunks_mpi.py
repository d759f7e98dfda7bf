"""Layout chunks over MPI (run at 1, 2, 3 and 4 processes): the mesh, cells and hp fields in shuffled, deflated chunks.

The file's bytes are those of a serial save whatever the number of ranks and
their leaves (ranks with no leaves, ranks with fewer leaves than a chunk);
a load under a uniform, a weighted or the writing partition gives every
rank its leaves' arrays.  Every assertion uses values agreed on by all
ranks, so a failure fails every rank instead of leaving some waiting.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Packed, assert_packed_equal, packed_state

import amrckpt as ac
from _support import all_true, world
from amrckpt.comm import MPIComm, SerialComm

pytestmark = pytest.mark.mpi

S = packed_state()


def _counts(shape: str, P: int) -> list[int]:
    """Leaves per rank: uniform; every other rank empty; all but the last rank with 2 leaves (chunks of 5 and 7 span ranks)."""
    N = S.N
    if shape == "empty":
        counts = [0 if q % 2 else 3 for q in range(P)]
    elif shape == "small":
        counts = [2] * P
    else:
        return [N * (q + 1) // P - N * q // P for q in range(P)]
    counts[-1] += N - sum(counts)
    return counts


def _digest(path: Path) -> str:
    w = world()
    return str(w.bcast(hashlib.sha256(path.read_bytes()).hexdigest() if w.rank == 0 else None, root=0))


@pytest.mark.parametrize("shape", ["uniform", "empty", "small"])
def test_chunked_hp_cells_and_mesh_bytes_equal_the_serial_ones(mpi_tmp: Path, shape: str) -> None:
    w = world()
    comm = MPIComm(w)
    counts = _counts(shape, w.size)
    path = mpi_tmp / f"packed-{shape}.scda"
    ac.save(S.for_rank(comm, counts), path, comm=comm)
    ref = mpi_tmp / f"serial-{shape}.scda"
    if w.rank == 0:
        ac.save(S.local(0, S.N), ref, comm=SerialComm())
    w.Barrier()
    assert all_true(_digest(path) == _digest(ref))


@pytest.mark.parametrize("how", ["uniform", "weighted", "writer"])
def test_chunked_hp_cells_and_mesh_load_on_any_partition(mpi_tmp: Path, how: str) -> None:
    w = world()
    comm = MPIComm(w)
    path = mpi_tmp / f"load-{how}.scda"
    ac.save(S.for_rank(comm, _counts("empty", w.size)), path, comm=comm, run_record=True)
    part: Any = how
    loaded = ac.load(path, Packed, comm=comm, partition=part)
    lo, hi = loaded.partition.local_range(w.rank)  # type: ignore[union-attr]
    ok = True
    try:
        assert_packed_equal(loaded.state, S.local(lo, hi))
        if how == "writer":
            assert (lo, hi) == (sum(_counts("empty", w.size)[: w.rank]), sum(_counts("empty", w.size)[: w.rank + 1]))
    except AssertionError:
        ok = False
    assert all_true(ok)
    bounds = w.allgather((lo, hi))
    assert bounds[0][0] == 0 and bounds[-1][1] == S.N and all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


def test_a_damaged_hp_chunk_is_a_checksum_error_on_every_rank(mpi_tmp: Path) -> None:
    w = world()
    comm = MPIComm(w)
    path = mpi_tmp / "damaged.scda"
    ac.save(S.for_rank(comm), path, comm=comm)
    if w.rank == 0:
        e = [x for x in ac.read_info(path, comm=SerialComm()).index.sections if x.name == "modes"][1]
        raw = bytearray(path.read_bytes())
        raw[e.end - 40] ^= 0x5A
        path.write_bytes(bytes(raw))
    w.Barrier()
    msg = ""
    try:
        ac.load(path, Packed, comm=comm)
    except ac.errors.ChecksumError as exc:
        msg = str(exc)
    assert all_true("'modes'" in msg)
