"""The node cache on another job shape (thread ranks): cached steps of another process count or node layout.

Four thread ranks on two simulated nodes cache steps 2 and 3 and stop
without a flush (as if killed).  A restart on another shape flushes the
newest into the shared directory with its own ranks (a direct save's
bytes) and loads it; with a node's pieces on no node it warns, takes the
directory's newest, and its retention keeps the cached steps.
``tests/test_cache_kill.py`` does the same with real ``mpiexec`` jobs.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection
from test_cache import assert_restored, sha, state

import amrckpt as ac
from amrckpt.comm import run_threads
from amrckpt.errors import CachedStepsUnreachableWarning
from amrckpt.manager import EveryNSteps, list_cache
from amrckpt.manager.cache._layout import node_directories


def cache_of(tmp_path: Path, node_size: int | None, partners: int = 1) -> ac.manager.NodeCache:
    return ac.manager.NodeCache(str(tmp_path / "cache" / "{node}"), partners=partners, node_size=node_size)


def killed_job(tmp_path: Path, partners: int = 1, flushed: int | None = None) -> None:
    """Four ranks on two nodes: ``flushed`` saved and flushed, then steps 2 and 3 cached only (closed without a flush)."""

    def body(comm: Any) -> None:
        cache = cache_of(tmp_path, 2, partners)
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, save_policy=EveryNSteps(1), cache=cache) as mgr:
            if flushed is not None:
                mgr.save(flushed, state(flushed, comm))
                mgr.flush()
            for s in (2, 3):
                mgr.save(s, state(s, comm))
            mgr.close(flush=False)

    run_threads(4, body)


def ls(tmp_path: Path) -> str:
    cmd = [sys.executable, "-m", "amrckpt", "ls", str(tmp_path / "shared"), "--cache", str(tmp_path / "cache" / "{node}")]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout


@pytest.mark.parametrize(("Q", "node_size"), [(3, 2), (4, None), (2, 1)])
def test_a_restart_on_another_shape_flushes_the_cached_step_then_loads_it(tmp_path: Path, Q: int, node_size: int | None) -> None:
    killed_job(tmp_path)
    assert "a restart takes the cached step 3 (written by 4 ranks on 2 nodes)" in ls(tmp_path)

    def body(comm: Any) -> tuple[Any, ...]:
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, cache=cache_of(tmp_path, node_size)) as mgr:
            loaded = mgr.restore_latest()
            assert_restored(loaded, comm.rank, 3)
            out = (mgr.restored_step, mgr.restored_from, mgr.all_steps())
            mgr.close(flush=False)
        return out

    assert run_threads(Q, body) == [(3, "cache", [3])] * Q
    ac.save(state(3), tmp_path / "direct.scda")
    assert sha(tmp_path / "shared" / "ckpt-000000000003.scda") == sha(tmp_path / "direct.scda")
    record = ac.manager.read_history(tmp_path / "shared")[3]
    assert record["writer_size"] == 4 and record["reason"] == "step 3 is a multiple of 1"  # the cached step's records
    assert [(c.step, c.size, c.complete) for c in list_cache(tmp_path / "cache" / "{node}")] == [(2, 4, True), (3, 4, True)]
    assert "(written by 4 ranks" not in ls(tmp_path)  # flushed: a restart takes the directory's file


def test_a_restart_that_cannot_reach_some_pieces_warns_and_keeps_the_cached_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    killed_job(tmp_path, partners=0, flushed=0)
    shutil.rmtree(tmp_path / "cache" / "1")  # node 1 lost, and no partner copy of its ranks' pieces
    out = ls(tmp_path)
    assert "the cached step 3 (written by 4 ranks on 2 nodes) cannot be reached from here: the pieces of ranks 2, 3 (node 1)" in out
    assert "so a restart takes the directory's newest, ckpt-000000000000.scda (step 0)" in out

    def body(comm: Any) -> tuple[Any, ...]:
        with ac.CheckpointManager(
            tmp_path / "shared", Advection, comm=comm, save_policy=EveryNSteps(1), cache=cache_of(tmp_path, 2)
        ) as mgr:
            mgr.restore_latest()
            for s in (5, 7, 9, 11):  # the new job goes on: its cache's retention runs after each save
                mgr.save(s, state(s, comm))
            mgr.close(flush=False)
            return mgr.restored_step, mgr.restored_from

    with caplog.at_level(logging.WARNING, logger="amrckpt"), pytest.warns(CachedStepsUnreachableWarning) as warned:
        assert run_threads(3, body) == [(0, "directory")] * 3
    text = str(warned[0].message)
    assert "the steps 2, 3, written by 4 ranks on 2 nodes: the pieces of ranks 2, 3 (node 1) are in no cache directory" in text
    assert "The restart takes the directory's newest (step 0) instead" in text
    assert text in caplog.text  # logged at WARNING too
    node0 = {c.step: c.size for c in list_cache(tmp_path / "cache" / "0")}
    assert node0 == {2: 4, 3: 4, 9: 3, 11: 3}  # the killed job's steps kept; the new job's own beyond keep=2 removed


def test_node_directories_expand_the_template(tmp_path: Path) -> None:
    for name in ("0", "1", "07", "x", "12"):
        (tmp_path / "c" / name / "sub").mkdir(parents=True)
    assert list(node_directories(tmp_path / "c" / "{node}" / "sub")) == [0, 1, 12]
    (tmp_path / "c" / "3").symlink_to(tmp_path / "c" / "1")  # a link is no node's directory
    assert list(ac.manager.NodeCache(str(tmp_path / "c" / "{node}")).existing()) == [0, 1, 12]
    (tmp_path / "n" / "node-2").mkdir(parents=True)
    assert node_directories(tmp_path / "n") == {2: tmp_path / "n" / "node-2"}  # without {node}: node-<n> below it


@pytest.mark.parametrize(("Q", "node_size"), [(3, 2), (4, 2)])
def test_restore_of_a_step_only_the_caches_hold_flushes_it_then_loads_it(tmp_path: Path, Q: int, node_size: int) -> None:
    """``restore(2)``, step 2 in the caches only: flushed first (by the same shape, or by another), then loaded."""
    killed_job(tmp_path)

    def body(comm: Any) -> list[int]:
        with ac.CheckpointManager(tmp_path / "shared", Advection, comm=comm, cache=cache_of(tmp_path, node_size)) as mgr:
            assert_restored(mgr.restore(2), comm.rank, 2)
            with pytest.raises(ac.errors.StepNotFoundError):
                mgr.restore(1)  # in no cache either
            steps = mgr.all_steps()
            mgr.close(flush=False)
        return steps

    assert run_threads(Q, body) == [[2]] * Q
    ac.save(state(2), tmp_path / "direct.scda")
    assert sha(tmp_path / "shared" / "ckpt-000000000002.scda") == sha(tmp_path / "direct.scda")
