"""Partitions of N leaves (array elements) over P ranks, and weighted splits.

Layer 3 of amrckpt.  Leaves are stored in space-filling-curve order
(:mod:`amrckpt.sfc`), so a partition is a split of ``[0, N)`` into P
contiguous ranges: rank ``p`` holds the global indices
``global_first_quadrant[p] <= i < global_first_quadrant[p + 1]``, in
p4est's terms (``p4est_t.global_first_quadrant``), or ``elem_counts[p]``
elements in libsc's (``sc_scda``: N_p).

Global indices and counts are int64, like p4est's ``p4est_gloidx_t``: a
partition holds at most ``2**63 - 1`` leaves.  The number of ranks is below
``2**31`` (an MPI ``int``).
"""

from ._families import family_window, keep_families
from ._partition import MAX_ELEMENTS, MAX_RANKS, Partition, transfer_counts

__all__ = ["MAX_ELEMENTS", "MAX_RANKS", "Partition", "family_window", "keep_families", "transfer_counts"]
