"""The checkpoint manager: policies, retention, atomic commits, discovery, background saves, the decorator."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state
from pydantic import BaseModel, ConfigDict

import amrckpt as ac
from amrckpt.comm import run_threads
from amrckpt.manager import (
    BeforeWallTime,
    Decision,
    EveryNSeconds,
    EveryNSteps,
    KeepEvery,
    KeepLast,
    ManagerError,
    Moment,
    Never,
    OnFileTrigger,
    OnSignal,
    slurm_end_time,
)

STATES = {s: global_state(seed=s % 7, max_level=4) for s in range(0, 200, 5)}


def state_at(step: int, comm: Any = None) -> Advection:
    """The state of the test simulation at ``step`` (its mesh changes every 5 steps), on this rank."""
    g = STATES[step - step % 5]
    st = g.local(0, g.N) if comm is None else g.for_rank(comm)
    st.step = step
    return st


# -- policies ------------------------------------------------------------------


def m(
    step: int,
    now: float = 1000.0,
    last_step: int | None = None,
    last_time: float = 0.0,
    saves: tuple[float, ...] = (),
    last_save: float | None = None,
) -> Moment:
    return Moment(step, now, last_step, last_time, saves, last_save)


def test_policies() -> None:
    assert EveryNSteps(10).decide(m(20)).save and not EveryNSteps(10).decide(m(21)).save
    assert not EveryNSteps(10).decide(m(20, last_step=20)).save  # not twice for the same step
    assert EveryNSeconds(60).decide(m(1, now=100.0, last_time=30.0)).save
    assert not EveryNSeconds(60).decide(m(1, now=80.0, last_time=30.0)).save
    assert not Never().decide(m(1)).save
    wall = BeforeWallTime(end_time=10_000.0, min_margin=60)
    assert not wall.decide(m(1, now=9_000.0)).save
    d = wall.decide(m(2, now=9_950.0))
    assert d.save and d.halt and "50 s" in d.reason
    assert wall.decide(m(3, now=9_960.0, last_save=9_900.0)).save  # the last save was before the margin
    assert not wall.decide(m(3, now=9_960.0, last_save=9_950.0)).save  # once: a save inside the margin happened
    # The margin grows with the longest save: 2 x 100 s + 30 s.
    learned = BeforeWallTime(end_time=10_000.0, min_margin=60)
    assert learned.decide(m(1, now=9_780.0, saves=(100.0,))).save
    combined = EveryNSteps(100) | EveryNSeconds(3600) | Never()
    assert combined.decide(m(300)).save and not combined.decide(m(301, now=10.0, last_time=0.0)).save
    assert (Decision(True, False, "a") | Decision(False, True, "b")) == Decision(True, True, "a; b")
    with pytest.raises(ac.errors.AmrckptError):
        EveryNSteps(0)


def test_slurm_end_time() -> None:
    assert slurm_end_time({"SLURM_JOB_END_TIME": "1700000000"}) == 1.7e9
    assert slurm_end_time({"SLURM_JOB_START_TIME": "1000", "SLURM_TIMELIMIT": "10"}) == 1600.0
    assert slurm_end_time({}) is None


def test_signal_policy_only_sets_a_flag() -> None:
    policy = OnSignal(signals=(signal.SIGUSR1,))
    policy.start()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.01)
        d = policy.decide(m(7))
        assert d.save and d.halt and "SIGUSR1" in d.reason
        assert not policy.decide(m(8)).save  # consumed
    finally:
        policy.stop()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


def test_file_trigger(tmp_path: Path) -> None:
    trigger = tmp_path / "checkpoint-now"
    policy = OnFileTrigger(trigger)
    assert not policy.decide(m(1)).save
    trigger.touch()
    assert policy.decide(m(2)).save and not trigger.exists()


def test_retention_policies() -> None:
    steps = [10, 20, 30, 40, 50, 60]
    assert KeepLast(2).keep(steps) == {50, 60}
    assert KeepEvery(30).keep(steps) == {30, 60}
    assert (KeepLast(1) | KeepEvery(20)).keep(steps) == {20, 40, 60}


# -- saving and restoring ----------------------------------------------------------


def test_save_commit_history_and_retention(tmp_path: Path) -> None:
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10), keep_policy=KeepLast(2) | KeepEvery(50)) as mgr:
        saved = [s for s in range(0, 71, 5) if mgr.save(s, state_at(s))]
        assert saved == [0, 10, 20, 30, 40, 50, 60, 70]
        assert mgr.save(71, state_at(70), force=True)
        names = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".scda")
        assert names == [f"ckpt-{s:012d}.scda" for s in (0, 50, 70, 71)]  # last 2 and every 50th
        assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
        hist = mgr.history()
        assert [r.step for r in hist] == [0, 50, 70, 71] and all(r.valid for r in hist)
        r = hist[-1]
        assert r.time == 1.25 and r.writer_size == 1 and r.nbytes == os.path.getsize(r.path)
        assert r.reason == "forced" and r.save_seconds is not None and r.save_seconds > 0 and r.saved_at
        assert mgr.latest().step == 71  # type: ignore[union-attr]


def test_restore_latest_on_another_number_of_ranks(tmp_path: Path) -> None:
    def write(comm: Any) -> None:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10)) as mgr:
            for s in range(0, 31, 5):
                mgr.save(s, state_at(s, comm))

    def read(comm: Any) -> int:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm) as mgr:
            loaded = mgr.restore_latest()
            lo, hi = loaded.partition.local_range(comm.rank)
            assert_state_equal(loaded.state, _with_step(STATES[30].local(lo, hi), 30))
            assert mgr.restored_step == 30
            return loaded.info.writer_size  # from the run record the manager keeps beside the file

    run_threads(3, write)
    assert run_threads(2, read) == [3, 3]


def test_restore_falls_back_when_the_newest_is_damaged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10), keep_policy=KeepLast(5)) as mgr:
        for s in (10, 20, 30):
            mgr.save(s, state_at(s))
    newest = tmp_path / f"ckpt-{30:012d}.scda"
    rho = ac.read_info(newest).index.entry("rho")
    blob = bytearray(newest.read_bytes())
    blob[rho.offset + 300] ^= 0x04  # damage in the data: only a full load notices
    newest.write_bytes(bytes(blob))
    middle = tmp_path / f"ckpt-{20:012d}.scda"
    middle.write_bytes(middle.read_bytes()[:-40])  # cut short: the footer is gone
    kept = {s: (tmp_path / f"ckpt-{s:012d}.scda").read_bytes() for s in (20, 30)}
    with ac.CheckpointManager(tmp_path, Advection) as mgr:
        assert [r.valid for r in mgr.history()] == [True, False, True]
        with pytest.warns(ac.errors.CheckpointSkippedWarning) as seen:
            loaded = mgr.restore_latest()
        assert mgr.restored_step == 10 == loaded.step
        assert_state_equal(loaded.state, state_at(10))
        assert [(s.step, s.unreadable) for s in loaded.skipped] == [(30, False), (20, False)] and mgr.skipped == loaded.skipped
    text = " ".join(str(w.message) for w in seen)
    assert len(seen) == 2 and "ChecksumError" in text and "footer" in text
    for s in loaded.skipped:  # kept aside, byte for byte, under a name that is no step
        assert s.kept_as is not None and Path(s.kept_as).read_bytes() == kept[s.step] and not Path(s.path).exists()
        assert Path(s.kept_as).name.startswith(f"ckpt-{s.step:012d}.scda.damaged-")


def test_failed_save_leaves_nothing_and_keeps_the_previous(tmp_path: Path) -> None:
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(1)) as mgr:
        mgr.save(1, state_at(1))
        bad = state_at(2)
        bad.rho = bad.rho.astype("<f4")
        with pytest.raises(ac.errors.SchemaError, match="'rho'"):
            mgr.save(2, bad)
        assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".amrckpt")) == [
            "amrckpt-history.jsonl",
            f"ckpt-{1:012d}.scda",
            f"ckpt-{1:012d}.scda.run.json",
            f"ckpt-{1:012d}.scda.step.json",
        ]
        assert mgr.latest().step == 1  # type: ignore[union-attr]


def test_stale_partial_files_are_removed_and_a_second_manager_is_refused(tmp_path: Path) -> None:
    stale = tmp_path / f".ckpt-{5:012d}.scda.partial-deadbeef"
    tmp_path.mkdir(exist_ok=True)
    stale.write_bytes(b"half a checkpoint")
    with ac.CheckpointManager(tmp_path, Advection) as mgr:
        assert not stale.exists()
        with pytest.raises(ManagerError, match="in use by another manager"):
            ac.CheckpointManager(tmp_path, Advection)
        assert mgr.latest() is None and mgr.restore_latest() is None
    with ac.CheckpointManager(tmp_path, Advection):  # released on close
        pass
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(ManagerError, match="cannot use"):
        ac.CheckpointManager(tmp_path / "file" / "sub", Advection)  # a file where a directory should be


def test_a_signal_on_one_rank_makes_every_rank_save_and_halt(tmp_path: Path) -> None:
    def body(comm: Any) -> tuple[list[int], bool]:
        policy = OnSignal(signals=())
        saved = []
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(100) | policy) as mgr:
            for s in range(1, 20):
                if comm.rank == 2 and s == 7:
                    policy.trigger()  # as if SIGTERM reached rank 2 only
                if mgr.save(s, state_at(s, comm)):
                    saved.append(s)
                if mgr.halt_requested:
                    break
        return saved, mgr.halt_requested

    results = run_threads(3, body)
    assert results == [([7], True)] * 3
    assert [p.name for p in tmp_path.glob("ckpt-*.scda")] == [f"ckpt-{7:012d}.scda"]
    with ac.CheckpointManager(tmp_path, Advection) as mgr:
        assert mgr.history()[0].reason == "received SIGTERM"  # rank 0 records rank 2's reason


def test_background_saves(tmp_path: Path) -> None:
    def body(comm: Any) -> list[int]:
        with ac.CheckpointManager(
            tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10), background=True, keep_policy=KeepLast(9)
        ) as mgr:
            for s in range(0, 41, 5):
                st = state_at(s, comm)
                st.rho = st.rho.copy()  # the simulation's own array (state_at slices shared ones)
                mgr.save(s, st)
                st.rho[:] = -1.0  # the simulation goes on at once: the checkpoint holds a copy
        with ac.CheckpointManager(tmp_path, Advection, comm=comm) as mgr:
            return [r.step for r in mgr.history() if r.valid]

    assert run_threads(2, body)[0] == [0, 10, 20, 30, 40]
    loaded = ac.load(tmp_path / f"ckpt-{40:012d}.scda", Advection)
    assert_state_equal(loaded.state, state_at(40))


def test_background_errors_surface_on_every_rank(tmp_path: Path) -> None:
    def body(comm: Any) -> str:
        mgr = ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(1), background=True)
        st = state_at(5, comm)
        if comm.rank == 1:
            st.vel = st.vel[:, :1]  # invalid: found by the background save
        mgr.save(1, st)
        try:
            mgr.wait()
        except ac.errors.SchemaError as exc:
            return str(exc)
        finally:
            mgr.close()
        return "no error"

    msgs = run_threads(2, body)
    assert len(set(msgs)) == 1 and "'vel'" in msgs[0] and "[rank 1]" in msgs[0]
    assert not list(tmp_path.glob("*.scda")) and not list(tmp_path.glob(".*partial*"))


def _with_step(st: Advection, step: int) -> Advection:
    st.step = step
    return st


# -- the decorator ----------------------------------------------------------------


@ac.manager.checkpointable(Advection, attributes={"rho": "density"})
class PlainSim:
    def __init__(self, g: Any) -> None:
        st = g.local(0, g.N)
        for name in Advection.model_fields:
            setattr(self, name, getattr(st, name))
        self.density = self.rho
        del self.rho
        self.derived = "built in __init__"

    def __amrckpt_restored__(self, loaded: Any) -> None:
        self.derived = f"rebuilt for leaves {loaded.partition.local_range(0)}"


@ac.manager.checkpointable(Advection)
@dataclasses.dataclass
class DataSim:
    step: int
    time: float
    params: Any
    mesh: ac.Forest
    rho: np.ndarray
    vel: np.ndarray
    modes: ac.HpData
    scratch: list[int] = dataclasses.field(default_factory=list)


@ac.manager.checkpointable(Advection)
class ModelSim(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    step: int
    time: float
    params: Any
    mesh: ac.Forest
    rho: np.ndarray
    vel: np.ndarray
    modes: ac.HpData


@pytest.mark.parametrize("cls", [PlainSim, DataSim, ModelSim])
def test_checkpointable_classes(cls: Any, tmp_path: Path) -> None:
    g = STATES[10]
    if cls is PlainSim:
        sim = PlainSim(g)
    else:
        st = g.local(0, g.N)
        sim = cls(**{k: getattr(st, k) for k in Advection.model_fields})
    sim.save(tmp_path / "sim.scda")
    back = cls.restore(tmp_path / "sim.scda")
    assert type(back) is cls
    rho = back.density if cls is PlainSim else back.rho
    assert np.array_equal(rho, g.rho) and back.mesh == g.local(0, g.N).mesh and back.step == g.step
    if cls is PlainSim:
        assert back.derived == f"rebuilt for leaves (0, {g.N})"
    with ac.CheckpointManager(tmp_path / "mgr", Advection, save_policy=EveryNSteps(1)) as mgr:
        mgr.save(3, sim)
        again = mgr.restore_latest(into=cls)
        assert type(again) is cls and again.step == g.step


def test_checkpointable_errors() -> None:
    with pytest.raises(ac.errors.SchemaError, match="no fields"):
        ac.manager.checkpointable(Advection, attributes={"nope": "x"})

    @ac.manager.checkpointable(Advection)
    class Partial:
        step = 1

    with pytest.raises(ac.errors.SchemaError, match="no attribute 'time'"):
        Partial().to_checkpoint()  # type: ignore[attr-defined]


def test_restore_latest_with_the_writing_partition(tmp_path: Path) -> None:
    """The run record beside each checkpoint gives restore_latest(partition="writer") the leaves each rank wrote."""
    g = STATES[10]
    counts = [g.N - 2, 1, 1]

    def write(comm: Any) -> None:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10)) as mgr:
            mgr.save(10, _with_step(g.for_rank(comm, counts), 10))

    def read(comm: Any) -> tuple[int, int]:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm) as mgr:
            loaded = mgr.restore_latest(partition="writer")
            lo, hi = loaded.partition.local_range(comm.rank)
            assert_state_equal(loaded.state, _with_step(g.local(lo, hi), 10))
            return lo, hi

    run_threads(3, write)
    assert (tmp_path / f"ckpt-{10:012d}.scda.run.json").is_file()
    assert run_threads(3, read) == [(0, g.N - 2), (g.N - 2, g.N - 1), (g.N - 1, g.N)]
    with pytest.raises(ac.errors.SchemaError, match="written on 3 ranks; this job has 2"):
        run_threads(2, read)


@dataclasses.dataclass
class _Custom:
    """A user-defined policy: its reason is free text (here, one that differs between ranks)."""

    rank: int

    def decide(self, moment: Any) -> Decision:
        return Decision(self.rank >= 1, False, f"custom from rank {self.rank}" if self.rank >= 1 else "")


def _decisions(tmp_path: Path, P: int, policy_of: Any, prepare: Any = None) -> list[tuple[Decision, int]]:
    """Every rank's decision at step 10, and the collectives it took."""
    from amrckpt.testing import CountingComm

    def body(comm: Any) -> tuple[Decision, int]:
        policy = policy_of(comm.rank)
        cc = CountingComm(comm)
        with ac.CheckpointManager(tmp_path / f"P{P}", Advection, comm=cc, save_policy=policy) as mgr:
            if prepare is not None:
                prepare(comm.rank, policy)
            before = cc.total - cc.counts["meet"]
            d = mgr.decide(10)
            return d, cc.total - cc.counts["meet"] - before  # the call's meeting (Call.meet) aside: one per call

    return run_threads(P, body)


def test_decide_takes_one_collective_and_one_more_for_another_ranks_reason(tmp_path: Path) -> None:
    """One allreduce decides and carries rank 0's reason; one more carries the lowest saving rank's if it is not rank 0."""
    sig = lambda r, p: p.policies[1].trigger(signal.SIGUSR1) if r == 2 else None  # noqa: E731
    got = _decisions(tmp_path, 3, lambda r: EveryNSteps(5) | OnSignal(signals=()), sig)
    assert got == [(Decision(True, True, "step 10 is a multiple of 5"), 1)] * 3  # rank 0's reason; rank 2's signal halts
    got = _decisions(tmp_path, 3, lambda r: EveryNSteps(3) | OnSignal(signals=()), sig)
    assert got == [(Decision(True, True, "received SIGUSR1"), 2)] * 3
    got = _decisions(tmp_path, 2, lambda r: EveryNSteps(3))
    assert got == [(Decision(False, False, ""), 1)] * 2
    end = time.time() + 50.4
    got = _decisions(tmp_path, 3, lambda r: BeforeWallTime(end_time=end, min_margin=100) | OnFileTrigger(tmp_path / "x"))
    assert got[0] == got[1] == got[2] and got[0][1] == 1 and got[0][0].halt
    assert got[0][0].reason in ("50 s of wall time left", "49 s of wall time left")  # rank 0's seconds left


def test_decide_takes_a_user_policys_reason_from_the_lowest_rank_that_gave_it(tmp_path: Path) -> None:
    """The reason is the lowest saving rank's text (another rank's by one more allreduce); the same on every rank."""
    got = _decisions(tmp_path, 4, lambda r: EveryNSteps(5) | _Custom(r))
    assert got == [(Decision(True, False, "step 10 is a multiple of 5"), 1)] * 4
    got = _decisions(tmp_path, 4, lambda r: EveryNSteps(7) | _Custom(r))
    assert got == [(Decision(True, False, "custom from rank 1"), 2)] * 4


def test_decide_with_policies_that_differ_between_ranks(tmp_path: Path) -> None:
    """Ranks with different policies: the lowest saving rank's whole text, the same on every rank."""
    got = _decisions(tmp_path, 3, lambda r: EveryNSteps(5) if r else EveryNSteps(3) | OnFileTrigger(tmp_path / "x"))
    assert got == [(Decision(True, False, "step 10 is a multiple of 5"), 2)] * 3
