"""Partitions of N leaves over P ranks: the :class:`Partition` value, uniform and weighted splits, transfers."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..comm import Call, as_comm, collective
from ..errors import PartitionError

__all__ = ["MAX_ELEMENTS", "MAX_RANKS", "Partition", "transfer_counts"]

MAX_ELEMENTS = 2**63 - 1
"""The largest global element count N (int64, as p4est's ``p4est_gloidx_t``)."""
MAX_RANKS = 2**31 - 1
"""The largest number of ranks P (an MPI ``int``)."""


def _index(value: Any, what: str) -> int:
    """Return ``value`` as a Python int, or raise PartitionError.

    Raises
    ------
    PartitionError
        On this rank, if ``value`` is not an integer.
    """
    try:
        return operator.index(value)
    except TypeError as exc:
        raise PartitionError(f"{what} must be an integer, not {type(value).__name__}") from exc


def _count_array(values: Any, what: str, length: int | None = None) -> np.ndarray:
    """Return a 1-D int64 copy of integer ``values``, checking range and length.

    Raises
    ------
    PartitionError
        On this rank, if ``values`` are not 1-D integers, not of ``length`` entries, or beyond the int64 limit.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise PartitionError(f"{what} must be 1-D, not of shape {arr.shape}")
    if length is not None and arr.shape[0] != length:
        raise PartitionError(f"{what} must have {length} entries, not {arr.shape[0]}")
    if arr.dtype.kind == "O":
        ints = [_index(v, what) for v in arr.tolist()]  # O(P): Python ints that may not fit int64
        bad = [i for i, v in enumerate(ints) if not -(2**63) <= v <= MAX_ELEMENTS]
        if bad:
            raise PartitionError(f"{what}[{bad[0]}] = {ints[bad[0]]} exceeds the int64 limit {MAX_ELEMENTS} (p4est_gloidx_t)")
        return np.array(ints, dtype=np.int64)
    if arr.dtype.kind == "u":
        if arr.size and arr.max() > MAX_ELEMENTS:
            i = int(np.argmax(arr > MAX_ELEMENTS))
            raise PartitionError(f"{what}[{i}] = {int(arr[i])} exceeds the int64 limit {MAX_ELEMENTS} (p4est_gloidx_t)")
    elif arr.dtype.kind != "i" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise PartitionError(f"{what} must hold integers, not {arr.dtype}")
    return arr.astype(np.int64)  # always a copy: the partition owns its arrays


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class Partition:
    """A split of N elements, in global order, into P contiguous ranges.

    An immutable value object: equal partitions compare equal and hash
    alike, whatever their construction.  Build it with :meth:`from_counts`,
    :meth:`from_offsets`, :meth:`uniform`, :meth:`weighted` or
    :meth:`from_local_count`; the constructor takes both arrays and checks
    that they agree.

    Attributes
    ----------
    elem_counts : (P,) numpy.ndarray of numpy.int64
        N_p, the elements of each rank (libsc ``elem_counts``), read-only.
    global_first_quadrant : (P + 1,) numpy.ndarray of numpy.int64
        C_p, the global index of the first element of each rank, with
        ``C_0 = 0`` and ``C_P = N`` (p4est ``global_first_quadrant``),
        read-only.

    Raises
    ------
    PartitionError
        If P < 1, a count is negative, the offsets do not start at 0 or
        decrease, N exceeds :data:`MAX_ELEMENTS`, or the arrays disagree.

    """

    elem_counts: np.ndarray
    global_first_quadrant: np.ndarray

    def __post_init__(self) -> None:
        counts = _count_array(self.elem_counts, "elem_counts")
        gfq = _count_array(self.global_first_quadrant, "global_first_quadrant", counts.shape[0] + 1)
        _validate(counts, gfq)
        object.__setattr__(self, "elem_counts", _readonly(counts))
        object.__setattr__(self, "global_first_quadrant", _readonly(gfq))

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_counts(cls, elem_counts: Any) -> Partition:
        """Build the partition with the given elements per rank.

        Parameters
        ----------
        elem_counts : (P,) array_like of int
            N_p >= 0 for each rank; P >= 1.

        Returns
        -------
        Partition
            Not collective.

        Raises
        ------
        PartitionError
            If a count is negative, P is 0, or the sum exceeds :data:`MAX_ELEMENTS`.

        """
        counts = _count_array(elem_counts, "elem_counts")
        _check_size(counts.shape[0])
        if counts.size and counts.min() < 0:
            i = int(np.argmax(counts < 0))
            raise PartitionError(f"elem_counts[{i}] = {int(counts[i])} is negative")
        gfq = np.zeros(counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=gfq[1:])
        # Each partial sum of non-negative int64 wraps (to a smaller value) iff it overflows.
        if (gfq[1:] < gfq[:-1]).any():
            raise PartitionError(f"sum(elem_counts) exceeds the int64 limit {MAX_ELEMENTS} (p4est_gloidx_t)")
        return cls(counts, gfq)

    @classmethod
    def from_offsets(cls, global_first_quadrant: Any) -> Partition:
        """Build the partition with the given first global index per rank.

        Parameters
        ----------
        global_first_quadrant : (P + 1,) array_like of int
            C_0 = 0 <= C_1 <= ... <= C_P = N (p4est ``global_first_quadrant``).

        Returns
        -------
        Partition
            Not collective.

        Raises
        ------
        PartitionError
            If the offsets do not start at 0, decrease, have fewer than 2
            entries or exceed :data:`MAX_ELEMENTS`.

        """
        gfq = _count_array(global_first_quadrant, "global_first_quadrant")
        if gfq.shape[0] < 2:
            raise PartitionError(f"global_first_quadrant needs P + 1 >= 2 entries, not {gfq.shape[0]}")
        return cls(np.diff(gfq), gfq)

    @classmethod
    def uniform(cls, N: int, size: int) -> Partition:
        """Split N elements evenly over ``size`` ranks, as p4est does.

        Rank p starts at ``floor(N * p / P)`` (p4est ``p4est_partition_cut_gloidx``,
        used by ``p4est_partition`` without weights and ``p4est_load``),
        computed exactly in integers: counts differ by at most one, and with
        N < P the empty ranks are spread out.

        Parameters
        ----------
        N : int
            The number of elements, ``0 <= N <= MAX_ELEMENTS``.
        size : int
            The number of ranks, ``1 <= P <= MAX_RANKS``.

        Returns
        -------
        Partition
            Not collective.

        Raises
        ------
        PartitionError
            If N or P is out of range.

        """
        N = _index(N, "N")
        P = _index(size, "size")
        _check_size(P)
        if not 0 <= N <= MAX_ELEMENTS:
            raise PartitionError(f"N = {N} is outside [0, {MAX_ELEMENTS}] (int64 global indices, as p4est_gloidx_t)")
        return cls.from_offsets(_uniform_cuts(N, P))

    @classmethod
    def from_local_count(cls, local_count: int, comm: Any = None) -> Partition:
        """Build the partition in which each rank holds ``local_count`` elements.

        Collective: one ``MPI_Allgather`` of one int64 per rank, which also
        agrees on errors (a failed rank sends -1; only then one more
        allgather collects the errors' descriptions).

        Parameters
        ----------
        local_count : int
            N_p of the calling rank, ``>= 0``.
        comm : None, mpi4py.MPI.Comm or Comm, optional
            The communicator (default serial); P is its size.

        Returns
        -------
        Partition
            The same on every rank.

        Raises
        ------
        PartitionError
            On every rank, if a rank's count is negative or not an integer,
            or the sum exceeds :data:`MAX_ELEMENTS`.

        """

        def count() -> int:
            n = _index(local_count, "local_count")
            if n < 0:
                raise PartitionError(f"local_count = {n} is negative")
            return n

        with collective(as_comm(comm), "Partition.from_local_count") as call:  # None: this process alone (no file is touched)
            return cls.from_counts(call.allgather_int(call.run(count) or 0, what="local_count"))

    @classmethod
    def weighted(cls, local_weights: Any, comm: Any = None, *, size: int | None = None) -> Partition:
        """Repartition N distributed elements into ranges of nearly equal weight.

        Collective.  The calling ranks hold the N elements in global order,
        rank r a contiguous block with weights ``local_weights`` (rank 0 the
        first block).  The new partition splits the same N elements into
        ``size`` contiguous ranges: with ``S_i`` the sum of the weights of
        elements ``0 .. i - 1`` and W the total, element i covers the weight
        interval ``[S_i, S_{i+1})``, and new rank q (``0 < q < P``) starts at
        the element whose interval contains the cut point ``W * q / P``::

            C_q = min {i : S_{i+1} > W * q / P} = min {i : S_{i+1} > floor(W * q / P)},

        with ``C_0 = 0`` and ``C_P = N``; the comparison is exact.  Hence
        each rank's load differs from ``W / P`` by less than the largest
        single weight (for float weights: up to the rounding described
        below), an element of zero weight stays with the element
        before it, an element that straddles several cut points leaves the
        ranks between empty, and the result does not change when all
        weights are scaled: constant weights give :meth:`uniform` (whose
        ``floor(N * q / P)`` is this rule for unit weights).  If every weight
        is zero (or N = 0) the result is ``uniform(N, size)``.  (p4est's
        weighted ``p4est_partition`` starts rank q instead at the first
        element whose exclusive prefix reaches ``floor(W * q / P)``: the two
        rules differ only in where an element that straddles a cut point,
        and zero weights next to a cut, go.)

        The result depends only on the N weights in order, never on how
        they are currently distributed: integer weights (e.g. the bytes of
        variable-size elements) are summed exactly and must total at most
        ``2**63 - 1``; float weights are first rounded down, element by
        element, to the fixed-point integers ``floor(w * 2**(B - e))`` where
        ``2**(e - 1) <= max(w) < 2**e`` and ``B = 63 - N.bit_length()``
        (so that the total fits int64), i.e. to a resolution of at least
        ``max(w) * 2**-B``.  The weights are never gathered: each rank
        searches its own cumulative weights (``numpy.searchsorted``) for
        the P - 1 cut points.  Three collectives for integer weights, four
        for floats, and nothing of size P but the result: one allreduce of
        sums and maxima agrees on errors and gives N, the integer total and
        the largest weight; one exclusive scan gives this rank's first
        element and weight prefix; for float weights one allreduce sums the
        quantized weights; one allreduce (``MPI_MAX`` of an int64 array)
        combines the P - 1 cuts.

        Parameters
        ----------
        local_weights : (n_r,) array_like of int or float
            The non-negative, finite weights of this rank's elements, in
            global order.  If any rank with elements passes floats, all
            weights are treated as floats.
        comm : None, mpi4py.MPI.Comm or Comm, optional
            The communicator over which the elements are distributed
            (default serial: ``local_weights`` are all N weights).
        size : int, optional
            P, the number of ranks of the new partition (default: the size of
            ``comm``).

        Returns
        -------
        Partition
            Of N elements over ``size`` ranks; the same on every rank.

        Raises
        ------
        PartitionError
            On every rank, if any rank's weights are not a 1-D array of
            non-negative finite numbers, the integer weights total more than
            ``2**63 - 1``, N exceeds :data:`MAX_ELEMENTS`, or ``size`` is
            out of range or differs between ranks.
        CollectiveError
            On every rank, if a rank failed otherwise (e.g. ``local_weights``
            could not be made an array).

        """
        with collective(as_comm(comm), "Partition.weighted") as call:  # None: this process alone (no file is touched)
            return _weighted(local_weights, call, call.size if size is None else size)

    # ------------------------------------------------------------------ queries

    @property
    def size(self) -> int:
        """P, the number of ranks."""
        return int(self.elem_counts.shape[0])

    @property
    def N(self) -> int:
        """N, the global number of elements."""
        return int(self.global_first_quadrant[-1])

    def local_range(self, rank: int) -> tuple[int, int]:
        """Return ``(start, stop)``: the global indices held by ``rank``.

        Parameters
        ----------
        rank : int
            ``0 <= rank < P``.

        Returns
        -------
        tuple of int
            ``(C_rank, C_{rank+1})``; empty when they are equal.  Not collective.

        Raises
        ------
        PartitionError
            If ``rank`` is out of range.

        """
        r = _index(rank, "rank")
        if not 0 <= r < self.size:
            raise PartitionError(f"rank {r} is outside [0, {self.size})")
        return int(self.global_first_quadrant[r]), int(self.global_first_quadrant[r + 1])

    def owner(self, global_indices: Any) -> np.ndarray:
        """Return the rank that holds each global index.

        Parameters
        ----------
        global_indices : array_like of int
            Indices in ``[0, N)``, any shape.

        Returns
        -------
        numpy.ndarray of numpy.int64
            Same shape: the unique rank p with ``C_p <= i < C_{p+1}`` (empty
            ranks never own anything).  Not collective.

        Raises
        ------
        PartitionError
            If an index is not an integer or is outside ``[0, N)``.

        """
        idx = np.asarray(global_indices)
        if idx.dtype.kind not in "iu" and not (idx.size == 0 and idx.dtype.kind == "f"):
            raise PartitionError(f"global indices must be integers, not {idx.dtype}")
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= self.N:
                flat = idx.reshape(-1)
                i = int(np.argmax((flat < 0) | (flat >= self.N)))
                raise PartitionError(f"global index {int(flat[i])} (entry {i}) is outside [0, N = {self.N})")
        ranks = np.searchsorted(self.global_first_quadrant, idx.astype(np.int64, copy=False), side="right") - 1
        return np.asarray(ranks, dtype=np.int64)

    # ------------------------------------------------------------------ value semantics

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return self.size == other.size and bool(np.array_equal(self.elem_counts, other.elem_counts))

    def __hash__(self) -> int:
        return hash(self.elem_counts.tobytes())

    def __repr__(self) -> str:
        counts = self.elem_counts.tolist()
        shown = (
            ", ".join(map(str, counts))
            if len(counts) <= 8
            else ", ".join(map(str, counts[:4])) + ", ..., " + ", ".join(map(str, counts[-2:]))
        )
        return f"Partition(N={self.N}, size={self.size}, elem_counts=[{shown}])"

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray]:
        return (self.elem_counts, self.global_first_quadrant)

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray]) -> None:
        counts, gfq = (np.array(a, dtype=np.int64) for a in state)
        _validate(counts, gfq)
        object.__setattr__(self, "elem_counts", _readonly(counts))
        object.__setattr__(self, "global_first_quadrant", _readonly(gfq))


def _check_size(P: int) -> None:
    if not 1 <= P <= MAX_RANKS:
        raise PartitionError(f"the number of ranks must be in [1, {MAX_RANKS}], not {P}")


def _validate(counts: np.ndarray, gfq: np.ndarray) -> None:
    """Check that int64 ``counts`` (P,) and offsets ``gfq`` (P + 1,) describe one partition.

    Raises
    ------
    PartitionError
        On this rank, if the offsets do not start at 0, decrease, or disagree with ``counts``.
    """
    _check_size(counts.shape[0])
    if gfq[0] != 0:
        raise PartitionError(f"global_first_quadrant[0] must be 0, not {int(gfq[0])}")
    down = gfq[1:] < gfq[:-1]
    if down.any():
        p = int(np.argmax(down))
        raise PartitionError(
            f"global_first_quadrant decreases at rank {p}: {int(gfq[p])} > {int(gfq[p + 1])} (counts must be non-negative)"
        )
    if not np.array_equal(np.diff(gfq), counts):
        p = int(np.argmax(np.diff(gfq) != counts))
        raise PartitionError(f"elem_counts[{p}] = {int(counts[p])} disagrees with the offsets {int(gfq[p])}..{int(gfq[p + 1])}")


def _uniform_cuts(N: int, P: int) -> np.ndarray:
    """Return ``floor(N * p / P)`` for p = 0..P, exactly, as int64 (N < 2**63, P < 2**31)."""
    q, r = divmod(N, P)
    p = np.arange(P + 1, dtype=np.int64)
    # N*p/P = q*p + r*p/P with q*p <= N < 2**63 and r*p < P**2 < 2**62: no overflow.
    return q * p + (r * p) // P


def _local_int_sum(w: np.ndarray, wmax: int) -> int:
    """Return the exact sum of non-negative int64 ``w`` whose maximum is ``wmax``."""
    if wmax * w.shape[0] <= MAX_ELEMENTS:
        return int(w.sum())
    # Split into 32-bit halves so that neither partial sum can overflow.
    hi = int((w >> 32).sum())
    lo = int((w & 0xFFFFFFFF).sum())
    return (hi << 32) + lo


def _local_stats(local_weights: Any) -> tuple[np.ndarray, tuple[int, int, float | int]]:
    """Validate this rank's weights; return them and ``(count, is_float, max weight)``.

    Raises
    ------
    PartitionError
        On this rank, if the weights are not 1-D integers or floats, or a weight is negative, not finite, or above
        2**63 - 1.
    """
    w = np.asarray(local_weights)
    if w.ndim != 1:
        raise PartitionError(f"local_weights must be 1-D, not of shape {w.shape}")
    kind = w.dtype.kind
    if kind not in "biuf":
        raise PartitionError(f"local_weights must be integers or floats, not {w.dtype}")
    n = int(w.shape[0])
    if n == 0:
        return w, (0, 0, 0)
    if kind == "f":
        w = w.astype(np.float64, copy=False)
        if not np.isfinite(w).all():
            i = int(np.argmax(~np.isfinite(w)))
            raise PartitionError(f"local_weights[{i}] = {w[i]} is not finite")
        if w.min() < 0:
            i = int(np.argmax(w < 0))
            raise PartitionError(f"local_weights[{i}] = {w[i]} is negative")
        return w, (n, 1, float(w.max()))
    if kind == "u" and w.max() > MAX_ELEMENTS:
        i = int(np.argmax(w > MAX_ELEMENTS))
        raise PartitionError(f"local_weights[{i}] = {int(w[i])} exceeds 2**63 - 1")
    w = w.astype(np.int64, copy=False)
    if w.min() < 0:
        i = int(np.argmax(w < 0))
        raise PartitionError(f"local_weights[{i}] = {int(w[i])} is negative")
    return w, (n, 0, int(w.max()))


def _weighted(local_weights: Any, call: Call, size: Any) -> Partition:
    """Implement :meth:`Partition.weighted` (collective: 3 collectives for integer weights, 4 for floats).

    Nothing of size P is sent or built but the result: an allreduce of
    sums and maxima (errors, P, N, the integer total, float or not, the
    largest weight), an exclusive scan (this rank's first element and
    weight prefix), for float weights one sum of the quantized weights, and
    the allreduce of the P - 1 cut points (an int64 array).

    Raises
    ------
    PartitionError
        On every rank, if ``size`` differs between the ranks, N exceeds the int64 limit, or the integer weights total
        more than 2**63 - 1.
    """

    def local() -> tuple[int, np.ndarray, tuple[int, int, float | int], int]:
        P = _index(size, "size")
        _check_size(P)
        w, stats = _local_stats(local_weights)
        return P, w, stats, (0 if stats[1] else _local_int_sum(w, int(stats[2])))

    P, w, stats, isum = call.run(local) or (0, np.zeros(0, dtype=np.int64), (0, 0, 0), 0)
    n = stats[0]
    # The largest weight as the bits of a float64 (monotonic for non-negative floats; float() rounds monotonically):
    # only its binary exponent (float weights) and whether it is 0 matter.
    wbits = int(np.float64(float(stats[2])).view(np.int64))
    # Collective 1: agree on errors; N, the integer total, P (the maxima of P and of -P, offset to stay >= 0),
    # float or not, the largest weight.
    red = call.reduction("weights").sum("N", n).sum("weight", isum).max("size", P).min("size", P)
    got = red.max("float", stats[1]).max("largest weight bits", wbits).run()
    N, Wint, is_float, wmax_bits = got.sum("N"), got.sum("weight"), got.max("float"), got.max("largest weight bits")
    if got.max("size") != got.min("size"):  # an error: one more allgather names every size
        sizes = call.allgather_int(P, what="size")
        raise PartitionError(f"size must be the same on every rank, not {sorted(set(sizes.tolist()))}")
    if N > MAX_ELEMENTS:
        raise PartitionError(f"N = {N} exceeds the int64 limit {MAX_ELEMENTS} (p4est_gloidx_t)")
    wmax = float(np.int64(wmax_bits).view(np.float64))
    if wmax == 0:
        return Partition.uniform(N, P)
    if is_float:
        # Deterministic fixed point: the same integer for the same weight on any rank.
        B = 63 - N.bit_length()
        e = int(np.frexp(wmax)[1])
        wq = np.floor(np.ldexp(w.astype(np.float64, copy=False), B - e)).astype(np.int64)
        local_sum = int(wq.sum())  # < n * 2**B <= 2**63 - 1
    else:
        wq = w
        local_sum = isum
    # Collective 2: this rank's first element and weight prefix S_first.
    scan = call.reduction("weights: prefix").sum("elements", n).sum("weight", local_sum).below()
    first, prefix = scan.sum("elements"), scan.sum("weight")
    # Collective 3 (float weights): the total of the quantized weights.
    W = call.reduction("weights").sum("quantized", local_sum).run().sum("quantized") if is_float else Wint
    if W > MAX_ELEMENTS:
        raise PartitionError(f"the integer weights total {W}, more than 2**63 - 1")
    cand = np.full(P - 1, N, dtype=np.int64)
    if n and P > 1:
        incl = np.cumsum(wq)  # S_{i+1} - prefix for this rank's elements i
        # The first element whose inclusive prefix exceeds floor(W*q/P); for
        # q < P it exists on exactly one rank (W > 0), the others keep N.
        j = np.searchsorted(incl, _uniform_cuts(W, P)[1:-1] - np.int64(prefix), side="right")
        inside = j < n
        cand[inside] = first + j[inside]
    gfq = np.empty(P + 1, dtype=np.int64)
    gfq[0] = 0
    if P > 1:  # Last collective: C_q is the smallest candidate over the ranks (a max of negatives), as an int64 array.
        np.negative(call.allreduce_array(np.negative(cand), "max"), out=gfq[1:P])
    gfq[P] = N
    return Partition.from_offsets(gfq)


def transfer_counts(old: Partition, new: Partition, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the elements ``rank`` sends and receives to go from ``old`` to ``new``.

    Pure arithmetic on the offsets (vectorized, O(P)), for an
    ``MPI_Alltoallv`` whose displacements are the exclusive prefix sums of
    the counts.  The partitions may have different sizes (e.g. a file
    written on P_old ranks, read on P_new): a rank beyond a partition's size
    holds nothing in it.

    Parameters
    ----------
    old, new : Partition
        Two partitions of the same N elements.
    rank : int
        The calling rank, ``0 <= rank < max(old.size, new.size)``.

    Returns
    -------
    send_counts : (new.size,) numpy.ndarray of numpy.int64
        ``send_counts[q]``: elements of ``rank``'s old range that new rank q
        holds, ``|[C_rank, C_rank+1) ∩ [D_q, D_q+1)|``.
    recv_counts : (old.size,) numpy.ndarray of numpy.int64
        ``recv_counts[p]``: elements of ``rank``'s new range that old rank p
        holds.  Not collective.

    Raises
    ------
    PartitionError
        If the partitions have different N or ``rank`` is out of range.

    """
    if not isinstance(old, Partition) or not isinstance(new, Partition):
        raise PartitionError("old and new must be Partition objects")
    if old.N != new.N:
        raise PartitionError(f"the partitions hold different numbers of elements: {old.N} and {new.N}")
    r = _index(rank, "rank")
    if not 0 <= r < max(old.size, new.size):
        raise PartitionError(f"rank {r} is outside [0, {max(old.size, new.size)})")
    return _overlaps(old, r, new), _overlaps(new, r, old)


def _overlaps(mine: Partition, rank: int, other: Partition) -> np.ndarray:
    """Return ``|range of rank in mine ∩ range of q in other|`` for every rank q of ``other``."""
    if rank >= mine.size:
        return np.zeros(other.size, dtype=np.int64)
    start, stop = mine.local_range(rank)
    g = other.global_first_quadrant
    counts: np.ndarray = np.maximum(np.minimum(g[1:], stop) - np.maximum(g[:-1], start), 0)
    return counts
