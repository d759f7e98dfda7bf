"""Checkpoints over MPI-IO: write on P ranks, read on Q, for every P and Q up to the world size.

Run at 4 processes, this covers P, Q in {1, 2, 3, 4} inside one mpiexec by
splitting the communicator.  Every assertion uses values agreed on by all
ranks, so a failure fails every rank instead of leaving some waiting.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from _support import all_true, sub_comm, world
from amrckpt.comm import SerialComm

pytestmark = pytest.mark.mpi

G = global_state(seed=3, max_level=6)


def test_write_on_P_read_on_Q(mpi_tmp: Path) -> None:
    w = world()
    W = w.size
    for P in range(1, W + 1):
        sub = sub_comm(P)
        if sub is not None:
            ac.save(G.for_rank(sub), mpi_tmp / f"P{P}.scda", comm=sub)
            sub.Free()
        w.Barrier()
    serial = ac.load(mpi_tmp / "P1.scda", Advection, comm=SerialComm()).state  # what a serial read returns
    ok = True
    for P in range(1, W + 1):
        for Q in range(1, W + 1):
            sub = sub_comm(Q)
            if sub is None:
                continue
            for how in ("uniform", "weighted"):
                loaded = ac.load(mpi_tmp / f"P{P}.scda", Advection, comm=sub, partition=how)
                lo, hi = loaded.partition.local_range(sub.rank)
                try:
                    assert_state_equal(loaded.state, G.local(lo, hi))
                    assert loaded.state.mesh == _slice_forest(serial.mesh, lo, hi)
                    assert np.array_equal(loaded.state.rho, serial.rho[lo:hi])
                except AssertionError:
                    ok = False
                if how == "uniform":
                    ok &= (lo, hi) == (G.N * sub.rank // Q, G.N * (sub.rank + 1) // Q)
                ok &= loaded.info.provenance is None
            sub.Free()
    assert all_true(ok)


def _slice_forest(m: ac.Forest, lo: int, hi: int) -> ac.Forest:
    return ac.Forest(m.tree[lo:hi], m.level[lo:hi], m.x[lo:hi], m.y[lo:hi], num_trees=m.num_trees)


def test_file_does_not_depend_on_P(mpi_tmp: Path) -> None:
    """Format 2: the whole file written over MPI-IO on the world (1-4 ranks), through save and the manager,
    has the sha256 of a serial save: one state, one file."""
    w = world()
    path = mpi_tmp / "world.scda"
    res = ac.save(G.for_rank(w), path, comm=w)
    with ac.CheckpointManager(mpi_tmp / "mgr", Advection, comm=w, save_policy=ac.EveryNSteps(1)) as mgr:
        mgr.save(G.step, G.for_rank(w))
    if w.rank == 0:
        ac.save(G.local(0, G.N), mpi_tmp / "serial.scda", comm=SerialComm())
    w.Barrier()
    names = ("world.scda", "serial.scda", f"mgr/ckpt-{G.step:012d}.scda")
    digest = w.bcast([hashlib.sha256((mpi_tmp / n).read_bytes()).hexdigest() for n in names] if w.rank == 0 else None)
    assert len(set(digest)) == 1
    assert res.run is not None and res.run.writer_size == w.size and res.run.mpi_library is not None
    assert ac.verify(path, comm=w).ok


def test_schema_errors_on_every_rank(mpi_tmp: Path) -> None:
    w = world()
    st = G.for_rank(w)
    if w.rank == w.size - 1:
        st.rho = st.rho.astype("<f4")
    with pytest.raises(ac.errors.SchemaError) as info:
        ac.save(st, mpi_tmp / "bad.scda", comm=w)
    assert set(info.value.rank_errors) == {w.size - 1}
    assert "'rho'" in str(info.value)


def test_damage_is_reported_on_every_rank(mpi_tmp: Path) -> None:
    w = world()
    path = mpi_tmp / "damaged.scda"
    ac.save(G.for_rank(w), path, comm=w)
    info = ac.read_info(path, comm=w)
    e = info.index.entry("rho")
    if w.rank == 0:
        blob = bytearray(path.read_bytes())
        blob[e.offset + 200] ^= 0x01
        path.write_bytes(bytes(blob))
    w.Barrier()
    with pytest.raises(ac.errors.ChecksumError, match="'rho'"):
        ac.load(path, Advection, comm=w)
    report = ac.verify(path, comm=w)
    assert not report.ok and len(report.problems) == 1 and "'rho'" in report.problems[0].message


def test_a_load_reads_collectively_only(mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every MPI-IO call of a load, on every rank: one open, one file view and one collective read per phase (two with
    an hp field or the compressed field ``vel``, in the same plan), one close; no independent read on any rank (the
    root reads the metadata with POSIX reads)."""
    from amrckpt.scda import _mpiio

    w = world()
    path = mpi_tmp / "collective.scda"
    ac.save(G.for_rank(w), path, comm=w)
    calls: list[str] = []

    class Counting:
        def __init__(self, fh: object) -> None:
            self._fh = fh

        def __getattr__(self, name: str) -> object:
            attr = getattr(self._fh, name)
            calls.append(name)
            return attr

    orig = _mpiio.MPIIOBackend.__init__

    def counting_init(self: _mpiio.MPIIOBackend, *a: object, **k: object) -> None:
        calls.append("Open")
        orig(self, *a, **k)  # type: ignore[arg-type]
        self._fh = Counting(self._fh)

    monkeypatch.setattr(_mpiio.MPIIOBackend, "__init__", counting_init)
    loaded = ac.load(path, Advection, comm=w)
    monkeypatch.undo()
    lo, hi = loaded.partition.local_range(w.rank)  # type: ignore[union-attr]
    assert np.array_equal(loaded.state.rho, G.local(lo, hi).rho)
    assert np.array_equal(loaded.state.modes.values, G.local(lo, hi).modes.values)
    assert np.array_equal(loaded.state.vel, G.local(lo, hi).vel)
    assert sorted(calls) == sorted(["Open", "Set_view", "Read_all", "Set_view", "Read_all", "Close"]), calls
    assert all_true(True)


@pytest.mark.parametrize("hints", [None, {"romio_no_indep_rw": "true"}], ids=["independent rest", "rest through a view"])
def test_large_pieces_by_contiguous_calls_give_the_same_file_and_state(
    mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch, hints: dict[str, str] | None
) -> None:
    """Pieces above the thresholds (lowered here) move by contiguous collective calls of their own, the rest by
    independent calls (or, where the hint romio_no_indep_rw forbids them, through a file view): the bytes written and
    the state read are those of the one-view path, on uneven partitions too (a rank without leaves makes the same
    calls with nothing)."""
    from amrckpt.scda import _backend, _plan

    w = world()
    ref = mpi_tmp / "view.scda"
    ac.save(G.for_rank(w), ref, comm=w)
    monkeypatch.setattr(_backend, "CONTIGUOUS_NBYTES", 64)
    monkeypatch.setattr(_plan, "_AGREE_CALLS_NBYTES", 0)
    monkeypatch.setattr(_plan, "CHUNK_NBYTES", 256)  # large pieces read in parts, one collective read each
    ok = True
    for counts in (None, [0] * (w.size - 1) + [G.N]):
        path = mpi_tmp / f"contiguous-{counts is None}.scda"
        ac.save(G.for_rank(w, counts), path, comm=w, access=ac.FileAccess(info=hints))
        w.Barrier()
        ok &= hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(ref.read_bytes()).digest()
        loaded = ac.load(path, Advection, comm=w, access=ac.FileAccess(info=hints))
        lo, hi = loaded.partition.local_range(w.rank)
        try:
            assert_state_equal(loaded.state, G.local(lo, hi))
        except AssertionError:
            ok = False
    assert all_true(ok)


def test_a_read_that_fails_in_a_plan_read_in_groups_fails_the_load_on_every_rank(
    mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large plan is read in groups (one collective read per large piece, in parts): EIO in the first read of any
    non-empty subset of ranks, rank 0 included, is the ScdaIOError of every rank; the failing ranks join the other
    groups' reads with nothing, so none waits."""
    import errno
    import itertools

    from amrckpt.scda import _backend, _plan
    from amrckpt.testing import FaultyBackend, inject_faults

    w = world()
    path = mpi_tmp / "groups.scda"
    ac.save(G.for_rank(w), path, comm=w)
    monkeypatch.setattr(_backend, "CONTIGUOUS_NBYTES", 64)
    monkeypatch.setattr(_plan, "_AGREE_CALLS_NBYTES", 0)
    monkeypatch.setattr(_plan, "CHUNK_NBYTES", 256)
    ok = True
    for k in range(1, w.size + 1):
        for ranks in itertools.combinations(range(w.size), k):
            got = "loaded"
            with inject_faults(1, ranks=ranks, kinds={"read"}, errno=errno.EIO, limit=1):
                try:
                    ac.load(path, Advection, comm=w, access=ac.FileAccess(backend=FaultyBackend))
                except ac.errors.AmrckptError as exc:
                    got = f"{type(exc).__name__} {getattr(exc, 'errno', None)}"
            ok &= got == f"ScdaIOError {errno.EIO}"
    loaded = ac.load(path, Advection, comm=w)  # and without faults, the same file loads
    lo, hi = loaded.partition.local_range(w.rank)
    assert_state_equal(loaded.state, G.local(lo, hi))
    assert all_true(ok)
