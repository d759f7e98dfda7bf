"""Jobs killed with SIGKILL at random moments restart from the last committed checkpoint, bit for bit.

A handful of kills run here; ``python tests/slow/kill_campaign.py --trials 200``
runs many more.  A SIGTERM to one rank makes every rank checkpoint at the
same step and exit cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from checkpoint_cases import Advection, assert_state_equal
from kill_job import state_at
from killing import campaign, job, kill_once, remove_orphaned_mpich_shm

import amrckpt as ac


@pytest.mark.parametrize(("P", "Q", "delay", "background"), [(2, 3, 2.5, False), (3, 1, 3.5, False), (4, 2, 3.0, True)])
def test_sigkill_at_random_moments(tmp_path: Path, P: int, Q: int, delay: float, background: bool) -> None:
    trial = kill_once(tmp_path, P, Q, delay - 2.0, background=background, after_first_commit=True)
    assert trial.recovered, trial
    assert trial.restored is not None  # the job ran long enough to commit something


def test_short_campaign(tmp_path: Path) -> None:
    trials = campaign(tmp_path, 4, seed=7, max_delay=4.0)
    assert all(t.recovered for t in trials), [t for t in trials if not t.recovered]


def test_sigterm_on_one_rank_checkpoints_all_ranks_and_exits(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    proc = subprocess.Popen(
        job(3, tmp_path / "ckpt", "--steps", "100000", "--every", "1000", "--signal", "--pids", str(pids)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 60
    while len(list(pids.glob("rank-*"))) < 3 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)

    os.kill(int((pids / "rank-1").read_text()), signal.SIGTERM)  # rank 1 only
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    halts = sorted(int((pids / f"halt-{r}").read_text()) for r in range(3))
    assert len(set(halts)) == 1, halts  # every rank stopped after the same step
    step = halts[0]
    with ac.CheckpointManager(tmp_path / "ckpt", Advection) as mgr:
        loaded = mgr.restore_latest()
        assert mgr.restored_step == step
        assert_state_equal(loaded.state, state_at(step, None, 1000))


def test_the_segments_of_killed_jobs_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """MPICH's segments that no process holds open or mapped are a killed job's: removed; one held open stays."""
    live, orphan, other = tmp_path / "mpich_shm_1a2b_0", tmp_path / "mpich_shm_3c4d_0", tmp_path / "not_mpich"
    for f in (live, orphan, other):
        f.write_bytes(b"x" * 4096)
    fd = os.open(live, os.O_RDONLY)
    try:
        assert remove_orphaned_mpich_shm(tmp_path) == [orphan.name]
    finally:
        os.close(fd)
    assert live.exists() and other.exists() and not orphan.exists()
