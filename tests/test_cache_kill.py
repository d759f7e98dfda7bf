"""Two-level checkpoints under SIGKILL, at P = 4 on two simulated nodes (real mpiexec).

- killed after cached saves, before their flush: the restart takes the newest cached step, bit for bit;
- one node's cache deleted as well: the restart rebuilds it from the partner copies;
- every cache gone: the restart (on another P) takes the newest flushed file;
- restarted on another shape (3 ranks, or 4 with the hosts as nodes): the newest cached step is flushed, then loaded;
  with a node's pieces on no node, the directory's newest is taken with a warning and the cached steps are kept;
- killed at random moments while flushes run: nothing committed is lost, every flushed file is a direct save's bytes.

``test_campaign_of_40_kills`` (slow, run in CI) runs 40 random kills (tests/slow/cache_kill_campaign.py).

The caches are on the disk (a recycled pieces file written with ``pwritev``)
or, with ``shm_root``, on ``/dev/shm`` (a tmpfs: written through a shared
mapping), where a kill can land inside a copy into a mapped file.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_killing import LEVEL, campaign, restart, restart_run, restarted, run_and_kill, shared_files_ok, wipe
from checkpoint_cases import Advection
from kill_job import state_at

import amrckpt as ac
from amrckpt.manager import list_cache


@pytest.fixture
def shm_root() -> Iterator[Path]:
    """A directory on /dev/shm (a tmpfs), removed afterwards."""
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    d = Path(tempfile.mkdtemp(prefix="amrckpt-kill-", dir="/dev/shm"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_killed_before_flush_restarts_from_cache_then_partner(tmp_path: Path) -> None:
    run = run_and_kill(tmp_path, 4, flush_every=0, after=4, delay=0.3)
    assert run.last is not None and not run.crashed
    assert not list((tmp_path / "shared").glob("ckpt-*.scda"))  # nothing was flushed
    step, equal, source = restart(tmp_path, 4)
    assert (equal, source) == ("equal", "cache"), (step, equal)
    assert step is not None and step >= run.last
    assert shared_files_ok(tmp_path) == ""  # the restart flushed it: a direct save's bytes
    # the next job is killed too; then node 0's cache is lost: the partner copies on node 1 rebuild it
    wipe(tmp_path / "shared")
    wipe(tmp_path / "cache")
    run = run_and_kill(tmp_path, 4, flush_every=0, after=3, delay=0.2)
    assert run.last is not None and not run.crashed
    wipe(tmp_path / "cache" / "0")
    step2, equal, source = restart(tmp_path, 4)
    assert (equal, source) == ("equal", "cache"), (step2, equal)
    assert step2 is not None and step2 >= run.last


def test_every_cache_gone_restarts_from_the_newest_flushed_file_on_another_P(tmp_path: Path) -> None:
    assert not run_and_kill(tmp_path, 4, flush_every=4, after=6, delay=0.2).crashed
    flushed = sorted(int(f.name[5:17]) for f in (tmp_path / "shared").glob("ckpt-*.scda"))
    assert flushed, "no flush happened"
    wipe(tmp_path / "cache")
    step, equal, source = restart(tmp_path, 3)
    assert (step, equal, source) == (flushed[-1], "equal", "directory")


@pytest.mark.parametrize("where", ["disk", "shm"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_during_flushes_loses_nothing(tmp_path: Path, request: pytest.FixtureRequest, seed: int, where: str) -> None:
    root = tmp_path if where == "disk" else request.getfixturevalue("shm_root")
    rng = random.Random(seed)
    run = run_and_kill(root, 4, flush_every=2, after=rng.randint(2, 6), delay=rng.uniform(0.0, 0.5))
    assert run.last is not None and not run.crashed
    note = shared_files_ok(root)
    step, equal, _ = restart(root, 4)
    assert note == "" and equal == "equal", (note, step, equal)
    assert step is not None and step >= run.last


@pytest.mark.slow
def test_campaign_of_40_kills(shm_root: Path) -> None:
    """On /dev/shm: after the first saves every cached save writes through a kept mapping of a recycled file."""
    trials = campaign(shm_root, 40, seed=11)
    assert all(t.recovered for t in trials), [t for t in trials if not t.recovered]
    assert sum(t.source == "cache" for t in trials) >= 10  # the campaign exercises the cache, not only the directory


def ls_cache(root: Path) -> str:
    """``amrckpt ls --cache`` of the killed job's directories, the cache given as NodeCache's template."""
    cmd = [sys.executable, "-m", "amrckpt", "ls", str(root / "shared"), "--cache", str(root / "cache" / "{node}")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False).stdout


def flushed_before(root: Path, cached: set[int]) -> int:
    """Put an older step into the shared directory, as a flush before the kill would have (a direct save's bytes); return it."""
    step = min(cached) - 2
    with ac.CheckpointManager(root / "shared", Advection, keep_policy=ac.manager.KeepAll()) as mgr:
        mgr.save(step, state_at(step, None, 2, LEVEL), force=True)
    return step


@pytest.mark.parametrize("shape", [("3",), ("4", "--no-node-size")], ids=["3 ranks", "4 ranks without node_size"])
def test_a_restart_on_another_shape_flushes_the_newest_cached_step_then_loads_it(tmp_path: Path, shape: tuple[str, ...]) -> None:
    """Killed at P = 4 on two nodes with steps in the caches newer than the directory's: a restart on 3 ranks, or on 4
    with the hosts as nodes, flushes the newest cached step (a direct save's bytes), then loads it, bit for bit."""
    run = run_and_kill(tmp_path, 4, flush_every=0, after=4, delay=0.2)
    assert run.last is not None and not run.crashed
    cached = {c.step for c in list_cache(tmp_path / "cache" / "{node}") if c.complete}
    newest, older = max(cached), flushed_before(tmp_path, cached)
    out = ls_cache(tmp_path)
    assert f"a restart takes the cached step {newest} (written by 4 ranks on 2 nodes)" in out, out
    assert "reads it in place from the pieces and flushes it at close()" in out
    assert "another process count or node layout first flushes it from the pieces into the directory" in out
    step, equal, source = restart(tmp_path, *shape)
    assert (step, equal, source) == (newest, "equal", "cache"), (step, equal, older)
    assert sorted(int(f.name[5:17]) for f in (tmp_path / "shared").glob("ckpt-*.scda")) == [older, newest]
    assert shared_files_ok(tmp_path) == ""  # the flush on the new shape wrote a direct save's bytes
    record = ac.manager.read_history(tmp_path / "shared")[newest]
    assert (record["writer_size"], record["reason"]) == (4, f"step {newest} is a multiple of 2")  # the killed job's records
    assert cached <= {c.step for c in list_cache(tmp_path / "cache" / "{node}")}  # no cached step removed
    assert "first flushes it" not in ls_cache(tmp_path)  # flushed now: the restart takes the directory's


def test_a_restart_that_cannot_reach_a_nodes_pieces_warns_and_keeps_the_cached_steps(tmp_path: Path) -> None:
    """No partner copies, node 1's cache deleted: a restart on 3 ranks takes the directory's newest with a warning
    naming the cached steps, the shape that wrote them and the ranks missing; going on, its retention removes none."""
    run = run_and_kill(tmp_path, 4, flush_every=0, after=4, delay=0.2, extra=("--partners", "0"))
    assert run.last is not None and not run.crashed
    cached = sorted(c.step for c in list_cache(tmp_path / "cache" / "{node}") if c.complete)
    older = flushed_before(tmp_path, set(cached))
    wipe(tmp_path / "cache" / "1")
    out = ls_cache(tmp_path)
    gone = "cannot be reached from here: the pieces of ranks 2, 3 (node 1)"
    assert all(f"the cached step {s} (written by 4 ranks on 2 nodes) {gone}" in out for s in cached), out
    assert f"so a restart takes the directory's newest, ckpt-{older:012d}.scda (step {older})" in out, out
    saves = (max(cached) + 6 - older) // 2  # odd steps beyond the cached ones: the cache's retention runs on them
    check = restart_run(tmp_path, 3, "--then-save", str(saves))
    assert restarted(check, 3) == (older, "equal", "directory"), check.stderr[-3000:]
    warning = " ".join(check.stderr.split())
    assert "CachedStepsUnreachableWarning" in warning, warning[-3000:]
    steps = f"the step{'s' if len(cached) > 1 else ''} {', '.join(map(str, cached))}"  # one step killed in, or several
    assert f"{steps}, written by 4 ranks on 2 nodes: the pieces of ranks 2, 3 (node 1)" in warning, warning[-3000:]
    assert f"The restart takes the directory's newest (step {older}) instead" in warning
    kept = {c.step: c for c in list_cache(tmp_path / "cache" / "{node}")}
    assert all(s in kept and kept[s].size == 4 for s in cached), sorted(kept)  # none removed by the retention
    assert max(kept) == older + 2 * saves - 1 > max(cached)  # the new job's own saves went past them
