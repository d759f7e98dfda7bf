"""Two-level checkpoints under SIGKILL, at P = 4 on two simulated nodes (real mpiexec).

- killed after cached saves, before their flush: the restart takes the newest cached step, bit for bit;
- one node's cache deleted as well: the restart rebuilds it from the partner copies;
- every cache gone: the restart (on another P) takes the newest flushed file;
- killed at random moments while flushes run: nothing committed is lost, every flushed file is a direct save's bytes.

``test_campaign_of_40_kills`` (slow, run in CI) runs 40 random kills (tests/slow/cache_kill_campaign.py).

The caches are on the disk (a recycled pieces file written with ``pwritev``)
or, with ``shm_root``, on ``/dev/shm`` (a tmpfs: written through a shared
mapping), where a kill can land inside a copy into a mapped file.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_killing import campaign, restart, run_and_kill, shared_files_ok, wipe


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
