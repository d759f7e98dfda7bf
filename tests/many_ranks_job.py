"""One MPI job of tests/test_many_ranks.py: save on P ranks (some empty), load on Q ranks, uniform and weighted.

Run as ``mpiexec -n P python -m mpi4py tests/many_ranks_job.py DIR``; exits 0
when every check passed on every rank (``python -m mpi4py`` aborts the job
on an exception, so no rank waits).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import amrckpt as ac
from amrckpt import sfc
from amrckpt.errors import SchemaError


class Many(ac.CheckpointSchema, name="many-ranks", version=1):
    """A forest, a cell field, an hp field (0 to 4 values per leaf) and an inline step."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")
    modes: ac.HpData = ac.HpCells("<f8")


LEVEL = 4  # 2 trees of 4**4 leaves: 512 leaves
LEAVES = sfc.uniform_leaves(LEVEL, num_trees=2, dim=2)
N = len(LEAVES.tree)
HP = np.arange(N) % 5
HP_OFF = np.concatenate([[0], np.cumsum(HP)])


def state_of(lo: int, hi: int) -> Many:
    """The leaves ``[lo, hi)`` of the global state."""
    lv = LEAVES
    mesh = ac.Forest(lv.tree[lo:hi].copy(), lv.level[lo:hi].copy(), lv.x[lo:hi].copy(), lv.y[lo:hi].copy(), num_trees=2)
    values = np.arange(HP_OFF[lo], HP_OFF[hi], dtype=np.float64) * 0.5
    return Many(step=7, mesh=mesh, rho=np.arange(lo, hi, dtype=np.float64), modes=ac.HpData(values, HP[lo:hi]))


def check(loaded: ac.restart.Loaded[Many], comm: MPI.Comm) -> None:
    """The loaded part is the global state's leaves of the loaded partition."""
    gfq = loaded.partition.global_first_quadrant
    lo, hi = int(gfq[comm.rank]), int(gfq[comm.rank + 1])
    st = loaded.state
    assert st.step == 7
    assert np.array_equal(st.rho, np.arange(lo, hi, dtype=np.float64)), (comm.size, comm.rank)
    assert np.array_equal(st.mesh.tree, LEAVES.tree[lo:hi]) and np.array_equal(st.mesh.x, LEAVES.x[lo:hi])
    assert np.array_equal(st.modes.counts, HP[lo:hi])
    assert np.array_equal(st.modes.values, np.arange(HP_OFF[lo], HP_OFF[hi], dtype=np.float64) * 0.5)


def main() -> None:
    world = MPI.COMM_WORLD
    P, r = world.size, world.rank
    d = Path(sys.argv[1])
    # A partition with empty ranks: every third rank has no leaves, the others share the 512 leaves.
    full = [p for p in range(P) if p % 3 != 1]
    counts = [0] * P
    for i, p in enumerate(full):
        counts[p] = N * (i + 1) // len(full) - N * i // len(full)
    lo = sum(counts[:r])
    path = d / f"many-P{P}.scda"
    res = ac.save(state_of(lo, lo + counts[r]), path, comm=world)
    assert res.partition is not None and res.partition.elem_counts.tolist() == counts
    # Serial equivalence: the same bytes as one process writing the whole state.
    if r == 0:
        ac.save(state_of(0, N), d / f"many-serial-P{P}.scda", comm=MPI.COMM_SELF)
        a = hashlib.sha256(path.read_bytes()).hexdigest()
        b = hashlib.sha256((d / f"many-serial-P{P}.scda").read_bytes()).hexdigest()
        assert a == b, "the bytes depend on the number of ranks"
    world.Barrier()
    # Load on other numbers of ranks Q (the first Q ranks of the job), uniform and weighted.
    for Q in sorted({1, 3, max(1, P // 2 + 1), P}):
        sub = world.Split(0 if r < Q else MPI.UNDEFINED, r)
        if sub != MPI.COMM_NULL:
            for how in ("uniform", "weighted"):
                check(ac.load(path, Many, comm=sub, partition=how), sub)
            sub.Free()
        world.Barrier()
    # An error on one rank is raised on every rank, and nothing is written.
    bad = d / f"many-bad-P{P}.scda"
    st = state_of(lo, lo + counts[r])
    if r == P - 1:
        st.rho = np.zeros(counts[r] + 1)
    try:
        ac.save(st, bad, comm=world)
    except SchemaError as exc:
        assert f"[rank {P - 1}]" in str(exc) or P == 1, str(exc)
    else:
        raise AssertionError("a wrong length on one rank was not raised")
    world.Barrier()
    assert not bad.exists()
    if r == 0:
        print(f"many ranks: P={P} ok", flush=True)


if __name__ == "__main__":
    main()
