"""Two-level checkpoints over MPI: node caches (simulated nodes), flush, partner copies, restart from the nearest copy.

Run at 1, 2, 3 and 4 processes.  ``node_size`` simulates nodes on one
machine: at P = 4, two nodes of two ranks.  Every assertion uses values
agreed on by all ranks.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from _support import all_true, world
from amrckpt.manager import EveryNSteps, KeepLast

pytestmark = pytest.mark.mpi

G = {s: global_state(seed=s // 10 + 3, max_level=5) for s in (0, 10, 20, 30)}


def state(step: int, comm: Any) -> Advection:
    st = G[step].for_rank(comm)
    st.step = step
    return st


def node_size(P: int) -> int:
    return max(1, P // 2)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manager(tmp: Path, comm: Any, **kw: Any) -> ac.CheckpointManager[Advection]:
    cache = ac.manager.NodeCache(str(tmp / "cache" / "{node}"), partners=1, keep=kw.pop("keep", 2), node_size=node_size(comm.size))
    return ac.CheckpointManager(tmp / "shared", Advection, comm=comm, save_policy=EveryNSteps(10), cache=cache, **kw)


def restored_ok(loaded: Any, step: int, comm: Any) -> bool:
    lo, hi = loaded.partition.local_range(comm.rank)
    want = G[step].local(lo, hi)
    want.step = step
    try:
        assert_state_equal(loaded.state, want)
    except AssertionError:
        return False
    return True


def test_flushed_file_is_the_direct_save(mpi_tmp: Path) -> None:
    """The flushed file's sha256 equals a direct save's of the same state, at every P; the cache keeps ``keep`` steps."""
    w = world()
    with manager(mpi_tmp, w, flush_policy=EveryNSteps(20)) as mgr:
        for s in (0, 10, 20, 30):
            mgr.save(s, state(s, w))
        mgr.wait()
        flushed_before_close = mgr.all_steps()
    ok = flushed_before_close == [0, 20]
    for s in (0, 20, 30):
        ac.save(state(s, w), mpi_tmp / f"direct-{s}.scda", comm=w)
    w.Barrier()
    if w.rank == 0:
        for s in (0, 20, 30):  # 0 and 20 by the policy, 30 at close; 10 was never flushed
            ok &= sha(mpi_tmp / "shared" / f"ckpt-{s:012d}.scda") == sha(mpi_tmp / f"direct-{s}.scda")
        ok &= not (mpi_tmp / "shared" / f"ckpt-{10:012d}.scda").exists()
        nodes = sorted((mpi_tmp / "cache").iterdir())
        ok &= len(nodes) == -(-w.size // node_size(w.size))
        for n in nodes:
            ok &= sorted(p.name for p in n.glob("ckpt-*.cache")) == [f"ckpt-{20:012d}.cache", f"ckpt-{30:012d}.cache"]
    assert all_true(ok)


def test_recycled_pieces_files_on_dev_shm_give_the_direct_save(mpi_tmp: Path) -> None:
    """A cache on /dev/shm (a tmpfs): each save after the second writes through the mapping of the step its
    retention removes (states of four sizes: the file shrinks and grows); flushes still equal the direct saves.
    """
    w = world()
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    root = Path(w.bcast(tempfile.mkdtemp(prefix="amrckpt-mpi-", dir=shm) if w.rank == 0 else None))
    ok = True
    try:
        cache = ac.manager.NodeCache(str(root / "{node}"), partners=1, keep=2, node_size=node_size(w.size))
        with ac.CheckpointManager(
            mpi_tmp / "shared", Advection, comm=w, save_policy=EveryNSteps(10), cache=cache, flush_policy=EveryNSteps(20)
        ) as mgr:
            level = mgr._level.level  # type: ignore[attr-defined]
            ok &= level.tmpfs
            mine = f"rank-{w.rank:06d}.pieces"
            for s in (0, 10, 20, 30):
                before = os.stat(level.step_path(s - 20) / mine).st_ino if s >= 20 else None
                mgr.save(s, state(s, w))
                if before is not None:
                    ok &= os.stat(level.step_path(s) / mine).st_ino == before
                mgr.wait()  # the flush of 0 ended: 0 is not protected when 20 recycles it
            ok &= len(level.mappings) <= 3
        ok &= len(level.mappings) == 0
        for s in (0, 20, 30):
            ac.save(state(s, w), mpi_tmp / f"direct-{s}.scda", comm=w)
        w.Barrier()
        if w.rank == 0:
            for s in (0, 20, 30):  # 0 and 20 by the policy, 30 at close
                ok &= sha(mpi_tmp / "shared" / f"ckpt-{s:012d}.scda") == sha(mpi_tmp / f"direct-{s}.scda")
    finally:
        w.Barrier()
        if w.rank == 0:
            shutil.rmtree(root, ignore_errors=True)
    assert all_true(ok)


def test_direct_sha256_of_every_step(mpi_tmp: Path) -> None:
    """Every flushed step (flush_policy every step) equals its direct save."""
    w = world()
    with manager(mpi_tmp, w, flush_policy=EveryNSteps(10), keep_policy=KeepLast(10)) as mgr:
        for s in (0, 10, 20):
            mgr.save(s, state(s, w))
    for s in (0, 10, 20):
        ac.save(state(s, w), mpi_tmp / f"direct-{s}.scda", comm=w)
    w.Barrier()
    ok = True
    if w.rank == 0:
        for s in (0, 10, 20):
            ok &= sha(mpi_tmp / "shared" / f"ckpt-{s:012d}.scda") == sha(mpi_tmp / f"direct-{s}.scda")
    assert all_true(ok)


def test_restart_from_cache_then_partner_then_directory(mpi_tmp: Path) -> None:
    """Not flushed: from the cache; one node's cache gone: from partner copies; every cache gone: the newest flushed."""
    w = world()
    with manager(mpi_tmp, w, flush_policy=EveryNSteps(20)) as mgr:
        for s in (0, 10, 20, 30):
            mgr.save(s, state(s, w))
        mgr.close(flush=False)  # 0 and 20 flushed, 30 only in the caches
    ok = True
    with manager(mpi_tmp, w) as mgr:
        loaded = mgr.restore_latest()
        ok &= mgr.restored_step == 30 and mgr.restored_from == "cache" and restored_ok(loaded, 30, w)
        ok &= mgr.all_steps() == [0, 20]  # read in place from the caches: nothing flushed
        mgr.close(flush=False)
    w.Barrier()
    if w.rank == 0:
        shutil.rmtree(mpi_tmp / "cache" / "0")  # node 0's cache is lost
    w.Barrier()
    with manager(mpi_tmp, w) as mgr:
        loaded = mgr.restore_latest()
        want_from = "cache" if w.size > 1 else "directory"  # one node has no partner: its cache gone, the directory's 20
        want_step = 30 if w.size > 1 else 20
        ok &= mgr.restored_step == want_step and mgr.restored_from == want_from and restored_ok(loaded, want_step, w)
        ok &= mgr.all_steps() == [0, 20]  # read in place (node 0's pieces from its partners): nothing flushed
        mgr.close(flush=False)
    w.Barrier()
    if w.rank == 0:
        shutil.rmtree(mpi_tmp / "cache")
    w.Barrier()
    with manager(mpi_tmp, w) as mgr:
        loaded = mgr.restore_latest()
        ok &= mgr.restored_step == 20 and mgr.restored_from == "directory" and restored_ok(loaded, 20, w)
    assert all_true(ok)


def test_damaged_pieces_fall_back(mpi_tmp: Path) -> None:
    """A damaged pieces file: the partner's copy is used; damaged everywhere: the directory's newest step."""
    w = world()
    with manager(mpi_tmp, w, flush_policy=EveryNSteps(20)) as mgr:
        for s in (10, 20, 30):
            mgr.save(s, state(s, w))
        mgr.close(flush=False)
    w.Barrier()
    if w.rank == 0:
        own = mpi_tmp / "cache" / "0" / f"ckpt-{30:012d}.cache" / "rank-000000.pieces"
        data = bytearray(own.read_bytes())
        data[-1] ^= 0xFF
        own.write_bytes(bytes(data))
    w.Barrier()
    ok = True
    with manager(mpi_tmp, w) as mgr:
        loaded = mgr.restore_latest()
        if w.size > 1:
            ok &= mgr.restored_step == 30 and mgr.restored_from == "cache" and restored_ok(loaded, 30, w)
            ok &= mgr.all_steps() == [20]  # read in place, rank 0's pieces from its partner
        else:
            ok &= mgr.restored_step == 20 and mgr.restored_from == "directory" and restored_ok(loaded, 20, w)
        mgr.close(flush=False)
    w.Barrier()
    if w.rank == 0:
        for p in (mpi_tmp / "cache").glob(f"*/ckpt-{30:012d}.cache/rank-000000.pieces"):
            data = bytearray(p.read_bytes())
            data[-1] ^= 0x0F
            p.write_bytes(bytes(data))
    w.Barrier()
    with manager(mpi_tmp, w) as mgr:
        loaded = mgr.restore_latest()
        ok &= mgr.restored_step == 20 and mgr.restored_from == "directory" and restored_ok(loaded, 20, w)
    assert all_true(ok)


def test_restart_on_another_P_reads_the_directory(mpi_tmp: Path) -> None:
    """Cached by P ranks, restarted on one: the cache is not this layout's; the flushed file is read."""
    w = world()
    with manager(mpi_tmp, w) as mgr:
        for s in (10, 20):
            mgr.save(s, state(s, w))
    ok = True
    if w.rank == 0:
        from mpi4py import MPI

        with manager(mpi_tmp, MPI.COMM_SELF) as mgr:
            loaded = mgr.restore_latest()
            ok &= mgr.restored_step == 20 and restored_ok(loaded, 20, MPI.COMM_SELF)
    assert all_true(ok)


def test_a_failed_read_in_place_on_any_subset_of_ranks_falls_back_to_the_flush(
    mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the cached pieces that fails on any non-empty subset of ranks, rank 0 included, fails on every rank.

    The load agrees on the error, and the manager flushes the step and loads it from the directory: the same state.
    """
    from amrckpt.manager.cache._read import PieceMap

    def fill(self: PieceMap, offset: int, buf: Any) -> list[tuple[int, int]]:
        raise ac.errors.ScdaIOError(5, f"injected: cannot read bytes {offset}.. of the cached pieces")

    w = world()
    with manager(mpi_tmp, w) as mgr:
        mgr.save(10, state(10, w))
        mgr.close(flush=False)
    ok = True
    for mask in range(1, 2**w.size):
        with monkeypatch.context() as m:
            if mask >> w.rank & 1:
                m.setattr(PieceMap, "fill", fill)
            with manager(mpi_tmp, w) as mgr:
                loaded = mgr.restore_latest()
                ok &= mgr.restored_step == 10 and mgr.restored_from == "cache" and restored_ok(loaded, 10, w)
                ok &= mgr.all_steps() == [10]  # flushed, then loaded from the directory
                mgr.delete(10)  # the next subset reads the cache again
                mgr.close(flush=False)
    with manager(mpi_tmp, w) as mgr:  # and with no failure: in place
        loaded = mgr.restore_latest()
        ok &= mgr.restored_from == "cache" and restored_ok(loaded, 10, w) and mgr.all_steps() == []
        mgr.close(flush=False)
    assert all_true(ok)


def test_nodes_of_different_sizes_keep_partner_copies_by_position(mpi_tmp: Path) -> None:
    """P - 1 ranks on node 0, one on node 1 (SCR's partner sets): node 1's rank and rank 0 copy each other's pieces."""
    w = world()
    if w.size < 3:
        pytest.skip("needs nodes of different sizes: at least 3 ranks")
    cache = ac.manager.NodeCache(str(mpi_tmp / "cache" / "{node}"), partners=1, node_size=w.size - 1)
    with ac.CheckpointManager(mpi_tmp / "shared", Advection, comm=w, save_policy=EveryNSteps(10), cache=cache) as mgr:
        mgr.save(10, state(10, w))
        mgr.close(flush=False)
    ok = True
    if w.rank == 0:
        names = sorted(p.name for p in (mpi_tmp / "cache").glob("*/ckpt-*.cache/rank-*.pieces"))
        ok &= names.count(f"rank-{w.size - 1:06d}.pieces") == 2 and names.count("rank-000000.pieces") == 2
        ok &= names.count("rank-000001.pieces") == 1  # a rank with no partner of its position: one copy
        shutil.rmtree(mpi_tmp / "cache" / "1")  # node 1 lost: its rank's pieces come from rank 0's partner copy
    w.Barrier()
    with ac.CheckpointManager(mpi_tmp / "shared", Advection, comm=w, cache=cache) as mgr:
        loaded = mgr.restore_latest()
        ok &= mgr.restored_step == 10 and mgr.restored_from == "cache" and restored_ok(loaded, 10, w)
        ok &= mgr.all_steps() == []
        mgr.close(flush=False)
    w.Barrier()
    if w.rank == 0:
        shutil.rmtree(mpi_tmp / "cache" / "0")  # node 0 lost too: rank 1's only copy is gone
    w.Barrier()
    with ac.CheckpointManager(mpi_tmp / "shared", Advection, comm=w, cache=cache) as mgr:
        ok &= mgr.restore_latest() is None  # nothing flushed, the cached step incomplete: nothing to restart from
    assert all_true(ok)
