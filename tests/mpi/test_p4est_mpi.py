"""p4est files and conversions at the real MPI world size (MPI-IO): the same bytes on any number of ranks.

Run with ``mpiexec -n P python -m mpi4py -m pytest --with-mpi tests/mpi/test_p4est_mpi.py`` for several P.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from conftest import shared_tmpdir
from forests import families, random_forest

import amrckpt as ac
from _support import all_true, world
from amrckpt import sfc
from amrckpt.comm import SerialComm
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
            write_p4est(serial, whole, conn, data, comm=SerialComm())
            ck1 = tmp / "serial.scda"
            p4est_to_checkpoint(serial, ck1, comm=SerialComm())
            ok &= (_sha(serial), _sha(ck1)) == (digests[0], digests[2]) and digests[0] == digests[1]
        comm.Barrier()
    assert all_true(ok)


@pytest.mark.mpi
def test_load_keeps_families_at_world_size() -> None:
    """allow_for_coarsening over real MPI: the same partition as on threads, no family split, one allgather."""
    comm = world()

    class Heat(ac.CheckpointSchema, name="heat families mpi", version=1):
        mesh: ac.Forest = ac.Mesh(dim=3)
        T: ac.CellData = ac.Cells("<f8")

    lv = random_forest(3, 2, seed=9, level=1, rounds=2, fraction=0.5)
    N = lv.num_leaves
    with shared_tmpdir() as tmp:
        path = tmp / "h.scda"
        if comm.rank == 0:
            ac.save(
                Heat(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=2), T=np.arange(N, dtype="<f8")),
                path,
                comm=SerialComm(),
            )
        comm.Barrier()
        loaded = ac.load(path, Heat, comm=comm, partition="weighted", allow_for_coarsening=True)
        a, b = loaded.partition.local_range(comm.rank)  # type: ignore[union-attr]
        ok = np.array_equal(loaded.state.T, np.arange(a, b))
        cuts = loaded.partition.global_first_quadrant  # type: ignore[union-attr]
        ok &= comm.allgather(cuts.tolist()) == [cuts.tolist()] * comm.size
        starts = families(lv)
        ok &= not any(((starts < c) & (c < starts + 8)).any() for c in cuts[1:-1])
        comm.Barrier()
    assert all_true(ok)
