"""The node-local level (NodeCache) without MPI: serial, thread ranks, faults in the flush, damaged pieces, ls --cache."""

from __future__ import annotations

import errno
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from amrckpt.comm import run_threads
from amrckpt.manager import EveryNSteps, KeepLast, list_cache
from amrckpt.manager.cache._pieces import read_pieces
from amrckpt.testing import FaultyBackend, FaultyFileSystem, inject_faults

G = global_state(seed=5, max_level=5)


def state(step: int, comm: Any = None) -> Advection:
    st = G.for_rank(comm) if comm is not None else G.local(0, G.N)
    st.step = step
    st.rho = st.rho + step
    return st


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_flushed_is_the_direct_save(tmp_path: Path, step: int) -> None:
    """The file the cache flushed for ``step`` has the sha256 of ``ac.save`` of the same state."""
    ac.save(state(step), tmp_path / "direct.scda")
    assert sha(tmp_path / "shared" / f"ckpt-{step:012d}.scda") == sha(tmp_path / "direct.scda")


def cache_one_step(tmp_path: Path) -> ac.manager.NodeCache:
    """Save step 1 into a node cache of one node, unflushed (as if the job were killed); return the cache."""
    cache = ac.manager.NodeCache(tmp_path / "cache")
    with ac.CheckpointManager(tmp_path / "shared", Advection, save_policy=EveryNSteps(1), cache=cache) as mgr:
        mgr.save(1, state(1))
        mgr.close(flush=False)
    return cache


def assert_restored(loaded: Any, rank: int, step: int) -> None:
    """The leaves ``loaded`` gives this rank hold the state of ``step``."""
    lo, hi = loaded.partition.local_range(rank)
    want = G.local(lo, hi)
    want.step, want.rho = step, want.rho + step
    assert_state_equal(loaded.state, want)


def test_serial_cache_on_the_host_flushed_at_close_is_the_direct_save(tmp_path: Path) -> None:
    cache = ac.manager.NodeCache(tmp_path / "cache", keep=2)  # no {node}: node-<n> below it; the nodes are the hosts
    with ac.CheckpointManager(tmp_path / "shared", Advection, save_policy=EveryNSteps(1), cache=cache) as mgr:
        for s in range(4):
            mgr.save(s, state(s))
        assert mgr.all_steps() == []  # nothing flushed before close (no flush policy)
    assert [c.step for c in list_cache(tmp_path / "cache" / "node-0")] == [2, 3]
    assert_flushed_is_the_direct_save(tmp_path, 3)
    assert ac.manager.read_history(tmp_path / "shared")[3]["reason"]  # the step record was published with the flush


def test_thread_ranks_partners_and_flush(tmp_path: Path) -> None:
    def body(comm: Any) -> bool:
        cache = ac.manager.NodeCache(str(tmp_path / "cache" / "{node}"), partners=1, node_size=1)
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, save_policy=EveryNSteps(1), cache=cache) as mgr:
            mgr.save(1, state(1, comm))
            mgr.close(flush=False)
        comm.barrier()
        if comm.rank == 0:
            import shutil

            shutil.rmtree(tmp_path / "cache" / "1")  # node 1 lost: rank 1's pieces come from its partner, node 2
        comm.barrier()
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, cache=cache) as mgr:
            loaded = mgr.restore_latest()
            assert_restored(loaded, comm.rank, 1)
            assert mgr.all_steps() == []  # read in place from the pieces (rank 1's from its partner): nothing flushed
            return mgr.restored_from == "cache"  # and flushed at close

    assert all(run_threads(3, body))
    assert_flushed_is_the_direct_save(tmp_path, 1)


def test_a_restart_from_the_cache_reads_no_shared_file(tmp_path: Path) -> None:
    cache = cache_one_step(tmp_path)
    with ac.CheckpointManager(tmp_path / "shared", Advection, cache=cache) as mgr:
        loaded = mgr.restore_latest()
        assert (mgr.restored_step, mgr.restored_from, mgr.all_steps()) == (1, "cache", [])
        assert_state_equal(loaded.state, state(1))
        loaded = mgr.restore_latest(fields=["rho"])  # only some fields: still bytes of the rank's own pieces
        assert mgr.all_steps() == [] and np.array_equal(loaded.state.rho, state(1).rho)
    assert mgr.all_steps() == [1]  # flushed at close (SCR flushes the newest checkpoint at the end of a run)
    assert_flushed_is_the_direct_save(tmp_path, 1)


def test_short_writes_make_a_whole_cached_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the pieces file's header went out in one ``pwrite``; a short one (legal POSIX; libfiu's
    posix/io/rw/pwrite/reduce) left a cached step committed with a cut header, found incomplete by its flush
    (fiu trial t1000008: "the cached step 2 is incomplete: no copy of the pieces of ranks [0]")."""
    import os

    real = os.pwrite

    def short(fd: int, data: Any, offset: int) -> int:
        view = memoryview(data).cast("B")
        return real(fd, view[: max(1, view.nbytes // 2)], offset)

    monkeypatch.setattr(os, "pwrite", short)
    cache = cache_one_step(tmp_path)
    monkeypatch.undo()
    with ac.CheckpointManager(tmp_path / "shared", Advection, cache=cache) as mgr:
        loaded = mgr.restore_latest()
        assert (mgr.restored_step, mgr.restored_from) == (1, "cache")
        assert_state_equal(loaded.state, state(1))
    assert_flushed_is_the_direct_save(tmp_path, 1)


def test_a_restart_from_the_cache_crcs_every_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load in place checks every byte it uses by the file's CRC32s: the pieces files' own are not computed too."""
    from _support import count_crc_bytes
    from amrckpt import _crc

    cache = cache_one_step(tmp_path)
    nbytes = json.loads(next((tmp_path / "cache").glob("node-0/ckpt-*.cache/step.json")).read_text())["nbytes"]
    crcd = count_crc_bytes(monkeypatch, (_crc, "_crc32"))
    with ac.CheckpointManager(tmp_path / "shared", Advection, cache=cache) as mgr:
        loaded = mgr.restore_latest()
        assert (mgr.restored_step, mgr.restored_from) == (1, "cache")
        # Every byte once, and a few headers again (the pieces file's, the root's metadata): not the data twice.
        assert 0 < crcd[0] <= nbytes + 1024, (crcd[0], nbytes)
        mgr.close(flush=False)
    assert_state_equal(loaded.state, state(1))


def test_cached_reads_hand_each_piece_over_once_filled() -> None:
    """The load's CRC32s start while the next pieces are copied: ``filled`` gets the pieces filled whole, before the end."""
    from amrckpt.comm import SerialComm
    from amrckpt.manager.cache._pieces import Pieces
    from amrckpt.manager.cache._read import CachedBackend, NotInPiecesError, PieceMap

    held = Pieces(0, 1, [(0, memoryview(b"a" * 100)), (200, memoryview(b"b" * 50))])
    backend = CachedBackend(PieceMap(held, 300, "step", 0), SerialComm())
    first, second, third = bytearray(100), bytearray(40), bytearray(100)
    seen: list[list[int]] = []

    def filled(pieces: list[tuple[int, Any]]) -> None:
        seen.append([off for off, _ in pieces])
        assert bytes(pieces[0][1]) == b"a" * 100  # filled when handed over

    with pytest.raises(NotInPiecesError, match=r"bytes 150\.\.200"):
        backend.read_gathered([(0, first), (205, second), (150, third)], 1, filled=filled)
    assert seen == [[0, 205]]  # not the piece lacking bytes 150..200
    assert bytes(second) == b"b" * 40


def test_a_damaged_byte_found_by_the_load_in_place_is_checked_and_skipped(tmp_path: Path) -> None:
    """A byte of the cells damaged in the only copy: the load fails, the pieces' CRC32 names it, the step is skipped."""
    cache = cache_one_step(tmp_path)
    f = next((tmp_path / "cache").glob("node-0/ckpt-*.cache/rank-000000.pieces"))
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40  # in the middle of the data, a byte every load reads
    f.write_bytes(bytes(data))
    with ac.CheckpointManager(tmp_path / "shared", Advection, cache=cache) as mgr:
        assert mgr.restore_latest() is None
        assert mgr.all_steps() == []  # never flushed: a flush writes checked pieces only
        mgr.close(flush=False)


@pytest.mark.parametrize("how", ["uneven", "writer"])
def test_a_restart_with_another_partition(tmp_path: Path, how: str) -> None:
    """Another partition reads in place (the ranks send each other what they lack); "writer" needs the flushed file."""

    def body(comm: Any) -> bool:
        cache = ac.manager.NodeCache(str(tmp_path / "cache" / "{node}"), node_size=1)
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, save_policy=EveryNSteps(1), cache=cache) as mgr:
            mgr.save(1, state(1, comm))
            mgr.close(flush=False)
        other = ac.partition.Partition.from_counts([G.N - 10, 4, 6]) if how == "uneven" else "writer"
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, cache=cache) as mgr:
            loaded = mgr.restore_latest(partition=other)
            assert_restored(loaded, comm.rank, 1)
            return mgr.all_steps() == ([] if how == "uneven" else [1]) and mgr.restored_from == "cache"

    assert all(run_threads(3, body))
    assert_flushed_is_the_direct_save(tmp_path, 1)


@pytest.mark.parametrize("kinds", [{"write"}, {"rename"}, {"fsync"}])
def test_a_failed_flush_leaves_the_cached_step_and_the_directory(tmp_path: Path, kinds: set[str]) -> None:
    cache = ac.manager.NodeCache(tmp_path / "cache")
    kw: dict[str, Any] = {"save_policy": EveryNSteps(1), "keep_policy": KeepLast(5), "cache": cache}
    with ac.CheckpointManager(
        tmp_path / "shared", Advection, fs=FaultyFileSystem(), access=ac.scda.FileAccess(backend=FaultyBackend), **kw
    ) as mgr:
        mgr.save(1, state(1))
        mgr.flush()
        mgr.save(2, state(2))
        before = sorted(p.name for p in (tmp_path / "shared").iterdir())
        with inject_faults(1, kinds=kinds, errno=errno.EIO), pytest.raises(ac.errors.AmrckptError):
            mgr.flush()
        assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == before
        assert [(c.step, c.complete) for c in list_cache(tmp_path / "cache" / "node-0")] == [(1, True), (2, True)]
        assert mgr.flush() == 2  # the cached step is intact: flushed now
    assert_flushed_is_the_direct_save(tmp_path, 2)


def test_damaged_or_cut_pieces_are_refused(tmp_path: Path) -> None:
    cache = cache_one_step(tmp_path)
    f = next((tmp_path / "cache").glob("node-0/ckpt-*.cache/rank-000000.pieces"))
    read_pieces(f).close()
    data = f.read_bytes()
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ac.errors.ManagerError, match="CRC32"):
        read_pieces(f)
    f.write_bytes(data[:-10])
    with pytest.raises(ac.errors.ManagerError, match="bytes"):
        read_pieces(f)
    with ac.CheckpointManager(tmp_path / "shared", Advection, cache=cache) as mgr:
        assert mgr.restore_latest() is None  # the one cached step is damaged, nothing flushed: nothing to restart from


def test_ls_shows_both_levels(tmp_path: Path) -> None:
    cache = ac.manager.NodeCache(str(tmp_path / "cache" / "{node}"))
    with ac.CheckpointManager(
        tmp_path / "shared", Advection, save_policy=EveryNSteps(1), flush_policy=EveryNSteps(2), cache=cache
    ) as mgr:
        for s in range(4):
            mgr.save(s, state(s))
        mgr.close(flush=False)
    ls = [sys.executable, "-m", "amrckpt", "ls", str(tmp_path / "shared"), "--cache", str(tmp_path / "cache")]
    out = subprocess.run(ls, capture_output=True, text=True, check=True).stdout
    assert "complete, flushed" in out and "complete, not flushed" in out and "takes the cached step 3" in out
    doc = json.loads(subprocess.run([*ls, "--json"], capture_output=True, text=True, check=True).stdout)
    assert [(c["step"], c["flushed"], c["complete"]) for c in doc["cache"]["steps"]] == [(2, True, True), (3, False, True)]


class HaltAt:
    """A save policy that saves every step and asks to halt at one step (as BeforeWallTime does near the limit)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def decide(self, moment: ac.manager.Moment) -> ac.manager.Decision:
        halt = moment.step == self.step
        return ac.manager.Decision(True, halt, "halt" if halt else "every step")


def test_a_halt_flushes_the_step_in_the_background(tmp_path: Path) -> None:
    cache = ac.manager.NodeCache(tmp_path / "cache")
    with ac.CheckpointManager(tmp_path / "shared", Advection, save_policy=HaltAt(3), cache=cache) as mgr:
        for s in range(10):
            mgr.save(s, state(s))
            if mgr.halt_requested:
                break
        mgr.wait()
        assert mgr.all_steps() == [3]  # flushed at the halt, before close
        mgr.close(flush=False)


def test_a_link_planted_as_the_node_cache_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "node-0").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ac.errors.ManagerError, match="not a directory"):
        ac.CheckpointManager(tmp_path / "shared", Advection, cache=ac.manager.NodeCache(tmp_path / "cache"))
    assert not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("P", [2, 3])
def test_collectives_per_save_cached_and_direct(tmp_path: Path, P: int) -> None:
    """A save's collective calls, counted by kind on every rank, whatever P: 12 for a cached save, 15 for a direct one.

    A cached save: the decision (its reason from rank 0), the step's check with
    the metrics, the state's check (an allreduce and an exclusive scan), the
    compressed field's chunks (a relay of their heads to the rank below, an
    exclusive scan and an allreduce of their sizes), the write's agreement
    and its close, the partition (an allgather), the node's commit, and the
    flush decision; its temporary directory's name needs none (a count of
    the manager's saves).  A direct save commits into the shared directory
    instead (a token and check of the directory, the collective file's open
    and close).
    """
    from collections import Counter

    from amrckpt.testing import CountingComm

    def body(comm: Any) -> dict[str, Counter[str]]:
        cc = CountingComm(comm)
        out = {}
        for kind in ("cached", "direct"):
            cache = ac.manager.NodeCache(tmp_path / f"cache-{P}") if kind == "cached" else None
            with ac.CheckpointManager(tmp_path / f"{kind}-{P}", Advection, comm=cc, save_policy=EveryNSteps(1), cache=cache) as mgr:
                for s in range(3):  # from the third on a cached save recycles a pieces file
                    mgr.save(s, state(s, comm))
                mgr.wait()
                before = Counter(cc.counts)
                mgr.save(3, state(3, comm))
                out[kind] = Counter(cc.counts) - before
                mgr.close(flush=False)
        return out

    got = run_threads(P, body)
    assert all(g == got[0] for g in got)
    # one meeting per call (its bounded first exchange: amrckpt.comm.Call.meet)
    assert got[0]["cached"] == Counter(meet=1, allreduce_columns=8, exscan_columns=2, relay_down=1, allgather_array=1)
    assert got[0]["direct"] == Counter(meet=1, allreduce_columns=10, exscan_columns=2, relay_down=1, barrier=1, allgather_array=1)


def test_every_log_record_carries_rank_and_size(tmp_path: Path) -> None:
    """docs/manager.md's format ``%(rank)s/%(size)s``: the uneven-nodes warning (a plain module logger) formats too."""
    import logging

    class Strict(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.setFormatter(logging.Formatter("%(rank)s/%(size)s %(levelname)s %(message)s"))
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(self.format(record))  # a record without rank raises here, in the logging call

        def handleError(self, record: logging.LogRecord) -> None:
            raise AssertionError(f"a record could not be formatted: {record.getMessage()}")

    handler = Strict()
    log = logging.getLogger("amrckpt")
    old = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:

        def body(comm: Any) -> None:
            cache = ac.manager.NodeCache(str(tmp_path / "cache" / "{node}"), partners=1, node_size=2)  # nodes of 2 and 1 ranks
            with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, save_policy=EveryNSteps(1), cache=cache) as mgr:
                mgr.save(1, state(1, comm))

        run_threads(3, body)
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    uneven = [line for line in handler.lines if "different numbers of ranks" in line]
    assert uneven and uneven[0].startswith("0/") and all(line.split()[0].count("/") == 1 for line in handler.lines)


def _failing_flushes(monkeypatch: pytest.MonkeyPatch, failing: set[int]) -> None:
    """Make the flushes of the steps in ``failing`` raise an I/O error (EIO) in the flush thread."""
    from amrckpt.manager.cache import _node as _twolevel

    real = _twolevel.flush_step

    def flush_step(comm: Any, level: Any, layout: Any, directory: Any, step: int, **kw: Any) -> int:
        if step in failing:
            raise ac.errors.ManagerIOError(errno.EIO, f"injected: the flush of step {step} failed")
        return real(comm, level, layout, directory, step, **kw)

    monkeypatch.setattr(_twolevel, "flush_step", flush_step)


def test_a_failed_background_flush_made_moot_by_a_newer_one_fails_no_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Seed 1000193 of the libfiu campaign: a later save raised an earlier flush's error after it had cached its own step."""
    _failing_flushes(monkeypatch, {2})
    cache = ac.manager.NodeCache(tmp_path / "cache", keep=10)
    kw: dict[str, Any] = {"save_policy": EveryNSteps(1), "flush_policy": EveryNSteps(2), "cache": cache}
    with ac.CheckpointManager(tmp_path / "shared", Advection, **kw) as mgr:
        for s in range(1, 7):
            mgr.save(s, state(s))  # none raises: the flush of 4 succeeded after the one of 2 failed
        mgr.wait()
        assert mgr.all_steps() == [4, 6]
    assert "the background flush of the cached step 2 failed" in caplog.text


def test_a_failed_background_flush_is_raised_by_the_next_save_before_it_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The error names the flush and its errno; the save that raises it caches nothing, the steps saved before stay."""
    _failing_flushes(monkeypatch, {2, 4})
    cache = ac.manager.NodeCache(tmp_path / "cache", keep=10)
    kw: dict[str, Any] = {"save_policy": EveryNSteps(1), "flush_policy": EveryNSteps(2), "cache": cache}
    with ac.CheckpointManager(tmp_path / "shared", Advection, **kw) as mgr:
        for s in range(1, 5):
            mgr.save(s, state(s))  # the error of step 2's flush is kept while step 4's flush runs
        with pytest.raises(ac.errors.ManagerIOError, match="flush of step 4") as got:
            mgr.save(5, state(5))
        assert got.value.errno == errno.EIO
        assert [c.step for c in list_cache(tmp_path / "cache" / "node-0")] == [1, 2, 3, 4]  # 5 was not saved
        mgr.close(flush=False)
    monkeypatch.undo()  # the file system works again
    with ac.CheckpointManager(tmp_path / "shared", Advection, cache=cache) as mgr:
        assert mgr.restore_latest() is not None and mgr.restored_step == 4  # the newest step whose save returned


def test_close_flushes_the_newest_cached_step_after_its_background_flush_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background flush that failed keeps close from nothing: the newest cached step is flushed, then the error raised."""
    from amrckpt.manager.cache import _node as _twolevel

    real, tries = _twolevel.flush_step, []

    def flush_step(comm: Any, level: Any, layout: Any, directory: Any, step: int, **kw: Any) -> int:
        tries.append(step)
        if len(tries) == 1:
            raise ac.errors.ManagerIOError(errno.EIO, f"injected: the flush of step {step} failed")
        return real(comm, level, layout, directory, step, **kw)

    monkeypatch.setattr(_twolevel, "flush_step", flush_step)
    cache = ac.manager.NodeCache(tmp_path / "cache", keep=10)
    kw: dict[str, Any] = {"save_policy": EveryNSteps(1), "flush_policy": EveryNSteps(4), "cache": cache}
    mgr = ac.CheckpointManager(tmp_path / "shared", Advection, **kw)
    for s in range(1, 5):
        mgr.save(s, state(s))  # the flush of 4 starts in the background, and fails
    with pytest.raises(ac.errors.ManagerIOError, match="flush of step 4") as got:
        mgr.close()
    assert got.value.errno == errno.EIO and tries == [4, 4]
    with ac.CheckpointManager(tmp_path / "shared", Advection) as mgr:
        assert mgr.all_steps() == [4]


def test_a_flush_thread_that_cannot_start_fails_the_next_save_not_the_cached_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libfiu seed 1000052: the flush thread of step 4 could not start (mmap), and the save of step 4, whose step was
    cached, raised ThreadStartError; the restart then restored that step: a save that raised but committed."""
    from amrckpt.comm import Call

    real = Call.start_thread

    def start_thread(self: Call, target: Any, name: str) -> Any:
        if name == "amrckpt-flush-4":
            raise self.agreed(ac.errors.ThreadStartError(f"cannot start the thread {name!r}: injected"))
        return real(self, target, name)

    monkeypatch.setattr(Call, "start_thread", start_thread)
    cache = ac.manager.NodeCache(tmp_path / "cache", keep=10)
    kw: dict[str, Any] = {"save_policy": EveryNSteps(1), "flush_policy": EveryNSteps(2), "cache": cache}
    with ac.CheckpointManager(tmp_path / "shared", Advection, **kw) as mgr:
        for s in range(1, 5):
            mgr.save(s, state(s))  # step 4 is cached; its flush could not start: reported by the next save
        with pytest.raises(ac.errors.ThreadStartError, match="amrckpt-flush-4"):
            mgr.save(5, state(5))
        assert [c.step for c in list_cache(tmp_path / "cache" / "node-0")] == [1, 2, 3, 4]  # 5 was not saved
        mgr.save(5, state(5))  # the next try saves
    assert mgr.all_steps()[-1] == 5  # flushed at close


@pytest.mark.parametrize("agreed", [True, False])
def test_a_cached_step_is_committed_as_a_step_commit_over_a_directory(tmp_path: Path, agreed: bool) -> None:
    """The step it replaces is set aside until the commit is agreed on: removed then, else put back."""
    from amrckpt.manager.cache._level import CacheLevel

    level = CacheLevel(tmp_path, "ckpt", sync=False)
    level.open(True)
    for token, text in (("00", "old"), ("01", "new")):
        commit = level.new_commit(7, token)
        level.make_partial(7, token)
        (commit.tmp / "rank-000000.pieces").write_text(text)
        level.publish(commit, {"step": 7})
        if token == "00" or agreed:
            commit.finish()
        else:
            commit.roll_back()
    level.close()
    assert (level.step_path(7) / "rank-000000.pieces").read_text() == ("new" if agreed else "old")
    assert level.info(7) == {"step": 7}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".amrckpt.lock", level.step_path(7).name]


def test_a_cached_step_that_cannot_be_renamed_back_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libfiu seed 7000036: a node's commit not agreed on, and its rename back failing, left a step whose save raised."""
    from amrckpt._files import LOCAL
    from amrckpt.manager.cache._level import CacheLevel

    level = CacheLevel(tmp_path, "ckpt", sync=False)
    level.open(True)
    commit = level.new_commit(7, "00")
    level.make_partial(7, "00")
    level.publish(commit, {"step": 7})

    def replace(src: Any, dst: Any) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(type(LOCAL), "replace", lambda self, src, dst: replace(src, dst))
    commit.roll_back()
    level.close()
    assert level.steps() == {} and [p.name for p in tmp_path.iterdir()] == [".amrckpt.lock"]
