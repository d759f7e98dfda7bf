"""Tests of amrckpt.partition: Partition, uniform and weighted splits, transfers."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import collectives
from amrckpt.comm import run_threads
from amrckpt.errors import AmrckptError, CollectiveError, PartitionError
from amrckpt.partition import MAX_ELEMENTS, MAX_RANKS, Partition, transfer_counts

# --------------------------------------------------------------------------- references


def ref_uniform(N: int, P: int) -> list[int]:
    return [N * p // P for p in range(P + 1)]


def ref_weighted(weights: list[int], P: int) -> list[int]:
    """The documented cut rule in plain Python ints: C_q = min {i : S_{i+1} * P > W * q}."""
    N = len(weights)
    S = [0]
    for w in weights:
        S.append(S[-1] + w)
    W = S[-1]
    if W == 0:
        return ref_uniform(N, P)
    gfq = [0]
    for q in range(1, P):
        gfq.append(next(i for i in range(N) if S[i + 1] * P > W * q))
    return [*gfq, N]


def quantized(weights: np.ndarray) -> list[int]:
    """The documented fixed point of float weights: floor(w * 2**(B - e))."""
    N = weights.shape[0]
    B = 63 - N.bit_length()
    e = math.frexp(float(weights.max()))[1]
    return [math.floor(math.ldexp(float(w), B - e)) for w in weights]


def split_of(N: int, P: int, rng: np.random.Generator | None) -> list[int]:
    """Offsets of a current distribution: uniform, or random with empty ranks."""
    if rng is None:
        return ref_uniform(N, P)
    inner = sorted(rng.integers(0, N + 1, P - 1).tolist())
    return [0, *inner, N]


def weighted_threads(weights: np.ndarray, P: int, offsets: list[int], size: int | None = None) -> list[Partition]:
    def fn(comm):
        r = comm.rank
        return Partition.weighted(weights[offsets[r] : offsets[r + 1]], comm, size=size)

    return run_threads(P, fn)


# --------------------------------------------------------------------------- construction


def test_from_counts_and_offsets_agree():
    p = Partition.from_counts([3, 0, 4, 1])
    q = Partition.from_offsets([0, 3, 3, 7, 8])
    assert p == q and hash(p) == hash(q)
    assert p.size == 4 and p.N == 8
    assert p.elem_counts.dtype == p.global_first_quadrant.dtype == np.int64
    assert p.elem_counts.tolist() == [3, 0, 4, 1]
    assert p.global_first_quadrant.tolist() == [0, 3, 3, 7, 8]
    assert Partition(np.array([3, 0, 4, 1]), [0, 3, 3, 7, 8]) == p
    assert p != Partition.from_counts([3, 0, 5])
    assert p != Partition.from_counts([3, 0, 4, 1, 0])
    assert p != "Partition"
    assert len({p, q, Partition.uniform(8, 4)}) == 2


def test_arrays_are_read_only_copies():
    counts = np.array([1, 2, 3])
    p = Partition.from_counts(counts)
    counts[0] = 7
    assert p.elem_counts.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="read-only"):
        p.elem_counts[0] = 5
    with pytest.raises(ValueError, match="read-only"):
        p.global_first_quadrant[1] = 5
    with pytest.raises(AttributeError):
        p.elem_counts = np.array([6])  # type: ignore[misc]


def test_repr_and_pickle():
    p = Partition.from_counts([3, 0, 4])
    assert repr(p) == "Partition(N=7, size=3, elem_counts=[3, 0, 4])"
    big = Partition.uniform(100, 10)
    assert repr(big) == "Partition(N=100, size=10, elem_counts=[10, 10, 10, 10, ..., 10, 10])"
    for obj in (p, big):
        back = pickle.loads(pickle.dumps(obj))
        assert back == obj and not back.elem_counts.flags.writeable


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Partition.from_counts([1, -1]), r"elem_counts\[1\] = -1 is negative"),
        (lambda: Partition.from_counts([]), r"number of ranks must be in \[1, "),
        (lambda: Partition.from_counts([[1, 2]]), "1-D"),
        (lambda: Partition.from_counts([1.5]), "integers"),
        (lambda: Partition.from_counts([2**62, 2**62]), "exceeds the int64 limit"),
        (lambda: Partition.from_counts([2**63]), "exceeds the int64 limit"),
        (lambda: Partition.from_counts(np.array([2**63], dtype=np.uint64)), "exceeds the int64 limit"),
        (lambda: Partition.from_offsets([0]), "P \\+ 1 >= 2"),
        (lambda: Partition.from_offsets([1, 2]), r"global_first_quadrant\[0\] must be 0"),
        (lambda: Partition.from_offsets([0, 5, 3]), "decreases at rank 1: 5 > 3"),
        (lambda: Partition.from_offsets([0, 10**20]), "exceeds the int64 limit"),
        (lambda: Partition([1, 2], [0, 1, 4]), r"elem_counts\[1\] = 2 disagrees"),
        (lambda: Partition([1, 2], [0, 1]), "must have 3 entries"),
        (lambda: Partition.uniform(-1, 2), "outside"),
        (lambda: Partition.uniform(10**20, 4), "int64"),
        (lambda: Partition.uniform(5, 0), "number of ranks"),
        (lambda: Partition.uniform(5, MAX_RANKS + 1), "number of ranks"),
        (lambda: Partition.uniform(5.0, 2), "N must be an integer"),
    ],
)
def test_invalid_partitions_raise(call, message):
    with pytest.raises(PartitionError, match=message) as info:
        call()
    assert isinstance(info.value, AmrckptError) and isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- uniform


@given(N=st.integers(0, 10**6), P=st.integers(1, 300))
def test_uniform_is_floor_formula(N, P):
    p = Partition.uniform(N, P)
    assert p.global_first_quadrant.tolist() == ref_uniform(N, P)
    assert p.N == N and p.size == P
    assert p.elem_counts.max() - p.elem_counts.min() <= 1


def test_uniform_fewer_elements_than_ranks():
    p = Partition.uniform(3, 7)
    assert p.elem_counts.tolist() == [0, 0, 1, 0, 1, 0, 1]
    assert p.global_first_quadrant.tolist() == ref_uniform(3, 7)
    assert Partition.uniform(0, 3).elem_counts.tolist() == [0, 0, 0]


@pytest.mark.parametrize("N", [2**53 + 1, 10**18 + 7, MAX_ELEMENTS])
@pytest.mark.parametrize("P", [1, 3, 7, 1000, 65537])
def test_uniform_is_exact_for_huge_N(N, P):
    # N * p overflows int64 and exceeds float precision: the formula must stay exact.
    p = Partition.uniform(N, P)
    assert p.global_first_quadrant.tolist() == ref_uniform(N, P)


def test_uniform_limit_is_int64():
    # 10**20 leaves would not fit p4est_gloidx_t either; the limit is documented.
    assert MAX_ELEMENTS == 2**63 - 1
    with pytest.raises(PartitionError, match="int64"):
        Partition.uniform(10**20, 10**6)
    assert Partition.uniform(MAX_ELEMENTS, 2).N == MAX_ELEMENTS


# --------------------------------------------------------------------------- queries


@given(counts=st.lists(st.integers(0, 6), min_size=1, max_size=12))
def test_owner_and_local_range(counts):
    p = Partition.from_counts(counts)
    ref = np.repeat(np.arange(len(counts)), counts)
    idx = np.arange(p.N)
    np.testing.assert_array_equal(p.owner(idx), ref)
    assert p.owner(idx).dtype == np.int64
    for r in range(p.size):
        start, stop = p.local_range(r)
        assert stop - start == counts[r]
        assert (ref[start:stop] == r).all()
    if p.N:
        assert int(p.owner(p.N - 1)) == ref[-1]
        np.testing.assert_array_equal(p.owner(idx.reshape(1, -1)), ref.reshape(1, -1))
        np.testing.assert_array_equal(p.owner(idx.astype(np.uint32)), ref)


def test_owner_skips_empty_ranks_and_rejects_out_of_range():
    p = Partition.from_counts([0, 0, 3, 0, 2, 0])
    assert p.owner([0, 1, 2, 3, 4]).tolist() == [2, 2, 2, 4, 4]
    assert p.owner(np.zeros(0, dtype=np.int64)).shape == (0,)
    assert p.owner([]).shape == (0,)
    with pytest.raises(PartitionError, match=r"global index 5 \(entry 1\) is outside \[0, N = 5\)"):
        p.owner([0, 5])
    with pytest.raises(PartitionError, match="outside"):
        p.owner([-1])
    with pytest.raises(PartitionError, match="integers"):
        p.owner([0.5])
    with pytest.raises(PartitionError, match="outside"):
        Partition.from_counts([0, 0]).owner([0])
    with pytest.raises(PartitionError, match=r"rank 6 is outside \[0, 6\)"):
        p.local_range(6)
    with pytest.raises(PartitionError, match="rank -1"):
        p.local_range(-1)


# --------------------------------------------------------------------------- weighted, serial


@given(weights=st.lists(st.integers(0, 50), max_size=60), P=st.integers(1, 9))
def test_weighted_integer_is_p4est_rule(weights, P):
    p = Partition.weighted(np.array(weights, dtype=np.int64), size=P)
    assert p.size == P and p.N == len(weights)
    assert p.global_first_quadrant.tolist() == ref_weighted(weights, P)


@given(weights=st.lists(st.integers(0, 2**40), min_size=1, max_size=60), P=st.integers(1, 9))
def test_weighted_is_balanced_within_max_weight(weights, P):
    p = Partition.weighted(weights, size=P)
    W, M = sum(weights), max(weights)
    S = np.concatenate([[0], np.cumsum(np.array(weights, dtype=object))])
    loads = [S[b] - S[a] for a, b in zip(p.global_first_quadrant[:-1], p.global_first_quadrant[1:], strict=True)]
    assert sum(loads) == W
    if W:
        # |load - W/P| < M, exactly: |P*load - W| < P*M
        assert all(abs(P * load - W) < P * M for load in loads)


def test_weighted_unit_weights_are_uniform():
    for N, P in [(0, 3), (5, 7), (100, 7), (1001, 13), (3, 1)]:
        assert Partition.weighted(np.ones(N, dtype=np.int64), size=P) == Partition.uniform(N, P)
        assert Partition.weighted(np.full(N, 12345, dtype=np.int64), size=P) == Partition.uniform(N, P)
        for c in (0.25, 1.0, 0.1, 3e300, 5e-320):
            assert Partition.weighted(np.full(N, c), size=P) == Partition.uniform(N, P)


def test_weighted_all_zero_falls_back_to_uniform():
    assert Partition.weighted(np.zeros(10, dtype=np.int64), size=4) == Partition.uniform(10, 4)
    assert Partition.weighted(np.zeros(10), size=4) == Partition.uniform(10, 4)
    assert Partition.weighted(np.zeros(0), size=3) == Partition.uniform(0, 3)
    assert Partition.weighted([], size=1) == Partition.uniform(0, 1)


def test_weighted_giant_weight():
    weights = [1, 1, 1, 1000, 1, 1]
    p = Partition.weighted(weights, size=3)
    # W = 1005: the cut points 335 and 670 both lie in the giant's interval [3, 1003),
    # so it starts rank 1, and rank 2 starts there as well (rank 1 is empty).
    assert p.global_first_quadrant.tolist() == [0, 3, 3, 6]
    assert p.global_first_quadrant.tolist() == ref_weighted(weights, 3)
    only = Partition.weighted([0, 0, 7, 0, 0], size=4)
    assert only.global_first_quadrant.tolist() == [0, 2, 2, 2, 5] == ref_weighted([0, 0, 7, 0, 0], 4)
    huge = [2**61, 1, 2**61 - 2]
    assert Partition.weighted(huge, size=2).global_first_quadrant.tolist() == ref_weighted(huge, 2)


def test_weighted_integer_sums_are_exact_and_bounded():
    # Partial sums beyond 2**53: exact integer arithmetic, not floats.
    weights = [2**55 + 1, 3, 2**55 + 5, 7, 2**55 + 11, 1]
    for P in range(1, 8):
        got = Partition.weighted(np.array(weights, dtype=np.int64), size=P)
        assert got.global_first_quadrant.tolist() == ref_weighted(weights, P)
    with pytest.raises(PartitionError, match="more than 2\\*\\*63 - 1"):
        Partition.weighted(np.array([2**62, 2**62, 2**62], dtype=np.int64), size=2)
    with pytest.raises(PartitionError, match="exceeds 2\\*\\*63 - 1"):
        Partition.weighted(np.array([2**63], dtype=np.uint64), size=2)


@given(
    weights=st.lists(st.floats(0, 1e6, allow_subnormal=False), min_size=1, max_size=60),
    P=st.integers(1, 9),
)
def test_weighted_float_is_rule_on_documented_fixed_point(weights, P):
    w = np.array(weights)
    p = Partition.weighted(w, size=P)
    if w.max() == 0:
        assert p == Partition.uniform(len(weights), P)
        return
    assert p.global_first_quadrant.tolist() == ref_weighted(quantized(w), P)
    # And balanced, up to the (tiny) quantization error.
    W, M = float(w.sum()), float(w.max())
    S = np.concatenate([[0.0], np.cumsum(w)])
    tol = M * (1 + 1e-9) + 1e-9 * W  # the bound M, plus quantization and rounding slack
    for a, b in zip(p.global_first_quadrant[:-1], p.global_first_quadrant[1:], strict=True):
        assert abs((S[b] - S[a]) - W / P) < tol


def test_weighted_float_resolution():
    # Cut point 1 + 2**-41 lies in the tiny element's interval [1, 1 + 2**-40): it starts rank 1.
    assert Partition.weighted([1.0, 2.0**-40, 1.0], size=2).global_first_quadrant.tolist() == [0, 1, 3]
    # Below the documented resolution max(w) * 2**-B (B = 63 - N.bit_length() = 61) a weight counts as 0.
    assert Partition.weighted([1.0, 2.0**-70, 1.0], size=2).global_first_quadrant.tolist() == [0, 2, 3]


def test_weighted_accepts_dtypes():
    ref = ref_weighted([1, 2, 3, 4, 5, 6], 3)
    for dtype in (np.int8, np.int32, np.uint16, np.uint64, np.int64):
        assert Partition.weighted(np.arange(1, 7, dtype=dtype), size=3).global_first_quadrant.tolist() == ref
    assert Partition.weighted(np.array([True, False, True, True]), size=2).global_first_quadrant.tolist() == ref_weighted(
        [1, 0, 1, 1], 2
    )
    # Float weights that are small integers give the exact integer answer.
    assert Partition.weighted(np.arange(1, 7, dtype=np.float32), size=3).global_first_quadrant.tolist() == ref


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1, -1, 2], r"local_weights\[1\] = -1 is negative"),
        ([1.0, -0.5], r"local_weights\[1\] = -0.5 is negative"),
        ([1.0, np.nan], r"local_weights\[1\] = nan is not finite"),
        ([np.inf], "not finite"),
        ([[1, 2]], "1-D"),
        (["a"], "integers or floats"),
        ([1j], "integers or floats"),
    ],
)
def test_weighted_rejects_bad_weights(weights, message):
    with pytest.raises(PartitionError, match=message):
        Partition.weighted(np.array(weights))


def test_weighted_rejects_bad_size():
    with pytest.raises(PartitionError, match="number of ranks"):
        Partition.weighted([1, 2], size=0)
    with pytest.raises(PartitionError, match="size must be an integer"):
        Partition.weighted([1, 2], size=2.5)


# --------------------------------------------------------------------------- weighted, threads


@pytest.mark.parametrize("P", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("kind", ["int", "float"])
def test_weighted_does_not_depend_on_current_distribution(P, kind):
    rng = np.random.default_rng(100 + P)
    N = 200
    if kind == "int":
        weights = rng.integers(0, 1000, N)
        weights[rng.random(N) < 0.3] = 0
    else:
        weights = rng.exponential(1.0, N) ** 3
    expect = Partition.weighted(weights, size=P)
    for trial in range(6):
        offsets = split_of(N, P, None if trial == 0 else rng)
        results = weighted_threads(weights, P, offsets)
        assert all(r == expect for r in results), (offsets, results, expect)
    # And for another number of new ranks than current ones.
    for newP in (1, 2, 7):
        results = weighted_threads(weights, P, split_of(N, P, rng), size=newP)
        assert all(r == Partition.weighted(weights, size=newP) for r in results)


@settings(max_examples=30)
@given(
    weights=st.lists(st.integers(0, 2**20), max_size=40),
    P=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_weighted_threads_match_serial_reference(weights, P, seed):
    w = np.array(weights, dtype=np.int64)
    offsets = split_of(len(weights), P, np.random.default_rng(seed))
    results = weighted_threads(w, P, offsets)
    expect = ref_weighted(weights, P)
    assert all(r.global_first_quadrant.tolist() == expect for r in results)


def test_weighted_mixed_int_ranks_and_empty_float_ranks():
    # An empty float array (np.zeros(0)) on one rank does not make integer weights floats.
    weights = [2**60 + 3, 1, 2**60 + 1, 5]

    def fn(comm):
        local = np.zeros(0) if comm.rank == 1 else np.array(weights[:2] if comm.rank == 0 else weights[2:], dtype=np.int64)
        return Partition.weighted(local, comm)

    assert all(r.global_first_quadrant.tolist() == ref_weighted(weights, 3) for r in run_threads(3, fn))


def test_weighted_errors_are_agreed_by_all_ranks():
    def fn(comm):
        w = np.array([1.0, -1.0]) if comm.rank == 2 else np.ones(3)
        return Partition.weighted(w, comm)

    with pytest.raises(PartitionError, match=r"is negative \[rank 2\]") as info:
        run_threads(4, fn)
    failures = info.value.rank_exceptions
    assert sorted(failures) == [0, 1, 2, 3]
    assert all(isinstance(e, PartitionError) for e in failures.values())
    assert info.value.rank_errors.keys() == {2}

    def mismatched(comm):
        return Partition.weighted(np.ones(2), comm, size=2 + comm.rank % 2)

    with pytest.raises(PartitionError, match="size must be the same on every rank") as info:
        run_threads(3, mismatched)
    assert sorted(info.value.rank_exceptions) == [0, 1, 2]

    def overflow(comm):
        return Partition.weighted(np.array([2**62], dtype=np.int64), comm)

    with pytest.raises(PartitionError, match="more than 2\\*\\*63 - 1") as info:
        run_threads(3, overflow)
    assert sorted(info.value.rank_exceptions) == [0, 1, 2]


def test_unexpected_local_failure_is_agreed():
    def fn(comm):
        return Partition.weighted([[1], [2, 3]] if comm.rank == 1 else [1.0], comm)

    with pytest.raises(CollectiveError, match="rank 1 failed: ValueError") as info:
        run_threads(3, fn)
    assert all(isinstance(e, CollectiveError) for e in info.value.rank_exceptions.values())


def test_from_local_count():
    results = run_threads(4, lambda comm: Partition.from_local_count(3 * comm.rank, comm))
    assert all(r == Partition.from_counts([0, 3, 6, 9]) for r in results)
    assert Partition.from_local_count(5) == Partition.from_counts([5])

    with pytest.raises(PartitionError, match=r"local_count = -1 is negative \[rank 1\]") as info:
        run_threads(3, lambda comm: Partition.from_local_count(-comm.rank, comm))
    assert sorted(info.value.rank_exceptions) == [0, 1, 2]


def test_weighted_collectives():
    """3 collectives for integer weights, 4 for floats (P = 1: no cut allreduce); none carries O(P) data."""
    # each count includes the call's first meeting (amrckpt.comm.Call.meet: bounded, before any blocking collective)
    assert collectives(4, lambda c: Partition.weighted(np.arange(c.rank + 2), c)) == [1 + 3] * 4
    assert collectives(4, lambda c: Partition.weighted(np.linspace(0, 1, c.rank + 2), c)) == [1 + 4] * 4
    assert collectives(3, lambda c: Partition.weighted(np.zeros(2), c)) == [1 + 1] * 3  # all weights zero: uniform
    assert collectives(3, lambda c: Partition.weighted([1, 2], c, size=1)) == [1 + 2] * 3
    assert collectives(4, lambda c: Partition.from_local_count(c.rank, c)) == [1 + 1] * 4


class _Rank0:
    """Rank 0 of a job of ``size`` ranks whose other ranks hold nothing: every reduction is this rank's values."""

    def __init__(self, size: int) -> None:
        self.size, self.rank = size, 0

    def barrier(self) -> None:
        pass

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        raise AssertionError("Partition.weighted must not gather one value per rank")

    def allgather_array(self, values):
        raise AssertionError("Partition.weighted must not gather one value per rank")

    def allreduce_array(self, values, op):
        assert isinstance(values, np.ndarray)
        return values.copy()

    def allreduce_columns(self, columns):
        assert sum(map(len, columns[:3])) < 16, "only the cut allreduce is O(P), and it takes an array"
        return columns

    def exscan_columns(self, columns):
        return None

    def relay_down(self, data, *, send, receive, forward):
        return None

    def sendrecv(self, data, dest, source):
        return None

    def meet(self, values, timeout, poll=None):
        return np.array(values, dtype=np.int64)

    def dup(self):
        return self

    def free(self):
        pass


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_weighted_builds_nothing_of_size_p_but_arrays(dtype):
    """No Python list (or allgather) of length P: the memory per rank of P is that of a few int64 arrays (old: 195 B)."""
    import tracemalloc

    w = np.random.default_rng(0).integers(1, 5, 1000).astype(dtype)
    peaks = []
    for P in (1000, 100_000):
        tracemalloc.start()
        try:
            part = Partition.weighted(w, _Rank0(P))
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert part.N == 1000 and part.size == P
    assert (peaks[1] - peaks[0]) / 99_000 < 100  # bytes per rank: ~67 (8 int64 temporaries); a list of ints adds > 36


# --------------------------------------------------------------------------- transfers


def test_transfer_counts_example():
    old = Partition.from_counts([4, 0, 2])
    new = Partition.from_counts([1, 3, 2])
    send, recv = transfer_counts(old, new, 0)
    assert send.tolist() == [1, 3, 0] and recv.tolist() == [1, 0, 0]
    assert send.dtype == recv.dtype == np.int64
    send, recv = transfer_counts(old, new, 1)
    assert send.tolist() == [0, 0, 0] and recv.tolist() == [3, 0, 0]
    send, recv = transfer_counts(old, new, 2)
    assert send.tolist() == [0, 0, 2] and recv.tolist() == [0, 0, 2]


@given(
    old_counts=st.lists(st.integers(0, 5), min_size=1, max_size=8),
    data=st.data(),
)
def test_transfer_counts_are_consistent(old_counts, data):
    old = Partition.from_counts(old_counts)
    P_new = data.draw(st.integers(1, 8))
    cuts = sorted(data.draw(st.lists(st.integers(0, old.N), min_size=P_new - 1, max_size=P_new - 1)))
    new = Partition.from_offsets([0, *cuts, old.N])
    ranks = range(max(old.size, new.size))
    send = np.array([transfer_counts(old, new, r)[0] for r in ranks])  # (R, new.size)
    recv = np.array([transfer_counts(old, new, r)[1] for r in ranks])  # (R, old.size)
    # What p sends to q is what q receives from p.
    np.testing.assert_array_equal(send[: old.size, :], recv[: new.size, :].T)
    # Everything is sent and received once.
    np.testing.assert_array_equal(send.sum(axis=1)[: old.size], old.elem_counts)
    np.testing.assert_array_equal(recv.sum(axis=1)[: new.size], new.elem_counts)
    assert (send[old.size :] == 0).all() and (recv[new.size :] == 0).all()
    # Against an element-by-element reference.
    owner_old, owner_new = old.owner(np.arange(old.N)), new.owner(np.arange(old.N))
    ref = np.zeros((old.size, new.size), dtype=np.int64)
    np.add.at(ref, (owner_old, owner_new), 1)
    np.testing.assert_array_equal(send[: old.size], ref)


def test_transfer_counts_rejects():
    a, b = Partition.from_counts([1, 2]), Partition.from_counts([2, 2])
    with pytest.raises(PartitionError, match="different numbers of elements: 3 and 4"):
        transfer_counts(a, b, 0)
    with pytest.raises(PartitionError, match=r"rank 2 is outside \[0, 2\)"):
        transfer_counts(a, a, 2)
    with pytest.raises(PartitionError, match="Partition objects"):
        transfer_counts([1, 2], a, 0)  # type: ignore[arg-type]
