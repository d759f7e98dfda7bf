"""p4est files and conversions at the real MPI world size (MPI-IO): the same bytes on any number of ranks.

Run with ``mpiexec -n P python -m mpi4py -m pytest --with-mpi tests/mpi/test_p4est_mpi.py`` for several P.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from conftest import shared_tmpdir
from forests import random_forest

import amrckpt as ac
from _support import all_true, world
from amrckpt import sfc
from amrckpt.p4est import checkpoint_to_p4est, p4est_to_checkpoint, read_p4est, write_p4est


def _sha(path: object) -> str:
    with open(path, "rb") as f:  # type: ignore[call-overload]
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.mpi
@pytest.mark.parametrize("dim", [2, 3])
def test_p4est_write_read_convert_at_world_size(dim: int) -> None:
    comm = world()
    P, r = comm.size, comm.rank
    conn = sfc.Connectivity.star() if dim == 2 else sfc.Connectivity.brick((2, 2, 1), (False, True, False))
    lv = random_forest(dim, conn.num_trees, seed=dim, level=1, rounds=3)
    N = lv.num_leaves
    data = (np.arange(N * 6) % 253).astype(np.uint8).reshape(N, 6)
    a, b = N * r // P, N * (r + 1) // P
    z = None if lv.z is None else lv.z[a:b]
    mine = ac.Forest(lv.tree[a:b], lv.level[a:b], lv.x[a:b], lv.y[a:b], z, num_trees=conn.num_trees)
    with shared_tmpdir() as tmp:
        src = tmp / "f.p4est"
        write_p4est(src, mine, conn, data[a:b], comm=comm)
        pf = read_p4est(src, comm=comm)
        q0, q1 = pf.partition.local_range(r)
        ok = pf.forest.tree.tolist() == lv.tree[q0:q1].tolist() and np.array_equal(pf.data, data[q0:q1])
        ck, back = tmp / "f.scda", tmp / "g.p4est"
        p4est_to_checkpoint(src, ck, comm=comm)
        checkpoint_to_p4est(ck, back, comm=comm)
        digests = comm.allgather((_sha(src), _sha(back), _sha(ck)) if r == 0 else None)[0]
        # Written serially: the same bytes as at the world size.
        if r == 0:
            serial = tmp / "serial.p4est"
            whole = ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=conn.num_trees)
            write_p4est(serial, whole, conn, data)
            ck1 = tmp / "serial.scda"
            p4est_to_checkpoint(serial, ck1)
            ok &= (_sha(serial), _sha(ck1)) == (digests[0], digests[2]) and digests[0] == digests[1]
        comm.Barrier()
    assert all_true(ok)
