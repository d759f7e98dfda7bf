"""Partitions at the real MPI world size.

Run with ``mpiexec -n P python -m mpi4py -m pytest --with-mpi tests/mpi/test_partition_mpi.py``
for several P.  Every rank draws the same weights from a seeded RNG and computes
the expected partition serially; only its own slice goes into the collective call.
"""

from __future__ import annotations

import numpy as np
import pytest

from _support import world
from amrckpt.errors import PartitionError
from amrckpt.partition import Partition, transfer_counts


def current_offsets(N: int, P: int, how: str, seed: int) -> list[int]:
    """The same current distribution on every rank: uniform, random, or all on one rank."""
    if how == "uniform":
        return Partition.uniform(N, P).global_first_quadrant.tolist()
    if how == "last":
        return [0] * P + [N]
    rng = np.random.default_rng(seed)
    return [0, *sorted(rng.integers(0, N + 1, P - 1).tolist()), N]


def all_weights(kind: str, N: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "int":
        w = rng.integers(0, 10_000, N)
        w[rng.random(N) < 0.2] = 0
        return w
    if kind == "bytes":
        return rng.integers(0, 2**40, N, dtype=np.int64)
    if kind == "giant":
        w = np.ones(N, dtype=np.int64)
        w[N // 3 : N // 3 + 1] = 10**6
        return w
    if kind == "zero":
        return np.zeros(N)
    return rng.lognormal(0.0, 2.0, N)


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["int", "bytes", "float", "giant", "zero"])
@pytest.mark.parametrize("how", ["uniform", "random", "last"])
@pytest.mark.parametrize("N", [0, 1, 7, 1000, 100_003])
def test_weighted_matches_serial(kind, how, N):
    comm = world()
    P, rank = comm.Get_size(), comm.Get_rank()
    seed = 1000 * N + len(kind)
    weights = all_weights(kind, N, seed)
    expect = Partition.weighted(weights, size=P)  # serial, from all weights, on every rank
    offsets = current_offsets(N, P, how, seed + 1)
    got = Partition.weighted(weights[offsets[rank] : offsets[rank + 1]], comm)
    assert got == expect
    assert got.N == N and got.size == P
    # Every rank computed the same partition.
    assert comm.allgather(got.global_first_quadrant.tolist()) == [expect.global_first_quadrant.tolist()] * P
    # Balance: each rank's load is within the largest weight of W / P.
    if N and kind in ("int", "bytes", "giant"):
        S = np.concatenate([[0], np.cumsum(weights)])
        lo, hi = got.local_range(rank)
        assert abs(P * int(S[hi] - S[lo]) - int(S[-1])) < P * int(weights.max())


@pytest.mark.mpi
@pytest.mark.parametrize("size", [1, 2, 5])
def test_weighted_for_another_number_of_ranks(size):
    comm = world()
    P, rank = comm.Get_size(), comm.Get_rank()
    weights = all_weights("float", 5000, 7)
    offsets = current_offsets(5000, P, "random", 8)
    got = Partition.weighted(weights[offsets[rank] : offsets[rank + 1]], comm, size=size)
    assert got == Partition.weighted(weights, size=size)


@pytest.mark.mpi
def test_weighted_error_is_raised_on_every_rank():
    comm = world()
    P, rank = comm.Get_size(), comm.Get_rank()
    bad = P - 1
    w = np.array([1.0, -2.0]) if rank == bad else np.ones(3)
    with pytest.raises(PartitionError, match="is negative") as info:
        Partition.weighted(w, comm)
    assert set(info.value.rank_errors) == {bad}
    comm.Barrier()


@pytest.mark.mpi
def test_from_local_count_and_transfer_with_alltoallv():
    from mpi4py import MPI

    comm = world()
    P, rank = comm.Get_size(), comm.Get_rank()
    old = Partition.from_local_count(3 + 5 * rank, comm)
    assert old.elem_counts.tolist() == [3 + 5 * r for r in range(P)]
    lo, hi = old.local_range(rank)
    mine = np.arange(lo, hi, dtype=np.int64)  # each element carries its global index
    new = Partition.weighted((mine % 7).astype(np.int64), comm)
    send, recv = transfer_counts(old, new, rank)
    assert send.sum() == hi - lo
    received = np.empty(int(recv.sum()), dtype=np.int64)
    sdispl = np.concatenate([[0], np.cumsum(send)[:-1]])
    rdispl = np.concatenate([[0], np.cumsum(recv)[:-1]])
    comm.Alltoallv([mine, send, sdispl, MPI.INT64_T], [received, recv, rdispl, MPI.INT64_T])
    nlo, nhi = new.local_range(rank)
    np.testing.assert_array_equal(received, np.arange(nlo, nhi))
