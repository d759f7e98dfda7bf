"""Fault injection (amrckpt.testing: FaultyComm, FaultyBackend, inject_faults): serial and thread ranks.

The trials (tests/fault_trials.py) save under seeded I/O and MPI faults and
check that every rank raises the same exception of amrckpt's tree, that no
rank hangs (thread ranks: collectives time out after 30 s), and that the
previous checkpoint stays the newest valid one, bit for bit.  The longer
campaign is ``python tests/slow/fault_campaign.py --trials 1000``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from checkpoint_cases import Advection
from fault_trials import Trials, TrialSpec, state

import amrckpt as ac
from amrckpt.comm import SerialComm, run_threads
from amrckpt.manager import EveryNSteps
from amrckpt.testing import FaultyBackend, FaultyComm, FaultyFileSystem, _faults
from amrckpt.testing._faults import FaultSpec, inject_faults

REPO = Path(__file__).resolve().parents[2]


def _trials(comm: ac.comm.Comm, directory: Path, first: int, n: int) -> list:  # type: ignore[type-arg]
    t = Trials(directory, comm)
    try:
        return [t.run(TrialSpec.draw(s, comm.size)) for s in range(first, first + n)]
    finally:
        t.close()


def test_off_by_default() -> None:
    assert _faults.ACTIVE is None


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_random_faults_on_thread_ranks(tmp_path: Path, P: int) -> None:
    outcomes = run_threads(P, _trials, tmp_path, 100 * P, 40, timeout=30)
    first = outcomes[0]
    assert [o.result for o in first] == [o.result for o in outcomes[-1]]
    bad = [(o.spec, o.result, o.problems) for o in first if o.problems]
    assert not bad
    results = Counter(o.result for o in first)
    assert results["saved"] and sum(results.values()) - results["saved"] >= 20, results
    assert _faults.ACTIVE is None


def test_serial_comm_faults(tmp_path: Path) -> None:
    outcomes = _trials(SerialComm(), tmp_path, 7000, 40)
    assert not [(o.spec, o.result, o.problems) for o in outcomes if o.problems]


def test_faults_are_deterministic(tmp_path: Path) -> None:
    def run(d: Path) -> list[tuple[str, int, str]]:
        faulty = {"comm": FaultyComm(None), "access": ac.scda.FileAccess(backend=FaultyBackend)}
        with ac.CheckpointManager(d, Advection, save_policy=EveryNSteps(1), **faulty) as mgr:  # type: ignore[arg-type]
            with inject_faults(7, seed=11, kinds={"write", "read", "sync", "mpi"}) as plan:
                for step in range(1, 6):
                    try:
                        mgr.save(step, state(step, None))
                    except ac.errors.AmrckptError:
                        pass
        return [(f.kind, f.call, f.what.replace(str(d), "")) for f in plan.injected]

    a, b = run(tmp_path / "a"), run(tmp_path / "b")
    assert a == b and a


def test_every_call_fails_with_the_errno_asked_for(tmp_path: Path) -> None:
    access = ac.scda.FileAccess(backend=FaultyBackend)
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(1), access=access) as mgr:
        mgr.save(1, state(1, None))
        with inject_faults(1, kinds={"write"}, errno=errno.ENOSPC), pytest.raises(ac.errors.ScdaIOError) as info:
            mgr.save(2, state(2, None))
        assert info.value.errno == errno.ENOSPC and "injected" in str(info.value)
        assert [r.step for r in mgr.history()] == [1]
        assert not list(tmp_path.glob(".ckpt-*"))


def test_a_failed_directory_fsync_takes_the_rename_back(tmp_path: Path) -> None:
    """The rename is done when the directory fsync fails: the commit must be undone, not left half-reported."""
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(1), fs=FaultyFileSystem()) as mgr:
        mgr.save(1, state(1, None))
        old = mgr.path_of(1).read_bytes()
        with inject_faults(1, kinds={"fsync"}), pytest.raises(ac.errors.ScdaIOError, match="cannot commit"):
            mgr.save(2, state(2, None))
        assert not mgr.path_of(2).exists()
        # The same step again: the file it replaced comes back.
        with inject_faults(1, kinds={"fsync"}), pytest.raises(ac.errors.ScdaIOError):
            mgr.save(1, state(2, None), overwrite=True, force=True)
        assert mgr.path_of(1).read_bytes() == old and mgr.metadata(1).record["step"] == 1
        assert mgr.metadata(1).record_problem is None  # the records it replaced came back with it
        assert not list(tmp_path.glob(".ckpt-*"))
        assert mgr.latest().step == 1  # type: ignore[union-attr]


def test_a_failed_commit_agreement_takes_the_rename_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A communication error at the commit agreement (after the rename) undoes the rename."""
    from amrckpt.comm import Call

    at: list[int] = []

    def agree(self: Call, what: str = "") -> None:
        if what == "commit" and _faults.ACTIVE is not None:
            at.append(next(iter(_faults.ACTIVE[-1]._comm_calls.values()))[0])  # collectives before this one
        real(self, what)

    real = Call.agree
    monkeypatch.setattr(Call, "agree", agree)
    with ac.CheckpointManager(tmp_path, Advection, comm=FaultyComm(None), save_policy=EveryNSteps(1)) as mgr:
        mgr.save(1, state(1, None))
        with inject_faults(10**9, kinds={"mpi"}):
            mgr.save(2, state(2, None))
        k = at[-1]
        seed = next(s for s in range(10**6) if _fails_only_call(s, k + 1, k))
        with inject_faults(k + 1, seed=seed, kinds={"mpi"}, limit=1) as plan, pytest.raises(ac.errors.CommError, match="injected"):
            mgr.save(3, state(3, None))
        assert [f.call for f in plan.injected] == [k]
        assert not mgr.path_of(3).exists() and mgr.latest().step == 2  # type: ignore[union-attr]
        assert not list(tmp_path.glob(".ckpt-*"))


def _fails_only_call(seed: int, every_n: int, k: int) -> bool:
    plan = _faults.FaultPlan(FaultSpec(every_n, seed))
    return all((plan._draw(2, 0, j) % every_n == 0) == (j == k) for j in range(k + 1))


def test_failed_saves_leak_no_file_descriptors(tmp_path: Path) -> None:
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    if fds is None:
        pytest.skip("no /proc/self/fd")
    outcomes = _trials(SerialComm(), tmp_path, 9000, 60)
    assert sum(o.result != "saved" for o in outcomes) >= 20
    assert len(os.listdir("/proc/self/fd")) == fds


def test_spec_from_the_environment_string() -> None:
    spec = FaultSpec.parse("every_n=20,seed=7,ranks=1:3,kinds=write:mpi,limit=1,errno=ENOSPC")
    assert spec == FaultSpec(20, 7, frozenset({1, 3}), frozenset({"write", "mpi"}), 1, errno.ENOSPC)
    with pytest.raises(ValueError, match="unknown fault kinds"):
        FaultSpec(3, kinds=frozenset({"disk"}))


def test_environment_variable_injects_in_a_subprocess(tmp_path: Path) -> None:
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import amrckpt as ac\n"
        "from fault_trials import state\n"
        "from checkpoint_cases import Advection\n"
        "from amrckpt.testing import FaultyBackend\n"
        f"mgr = ac.CheckpointManager({str(tmp_path)!r}, Advection, access=ac.scda.FileAccess(backend=FaultyBackend))\n"
        "try:\n"
        "    mgr.save(1, state(1, None), force=True)\n"
        "except ac.errors.ScdaIOError as exc:\n"
        "    print('raised', exc.errno)\n"
    )
    env = dict(os.environ, AMRCKPT_FAULTS="every_n=1,kinds=write,errno=EDQUOT")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == f"raised {errno.EDQUOT}", out.stderr
