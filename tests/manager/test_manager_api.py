"""The manager API that orbax and torch.distributed.checkpoint users expect, agreed on every rank.

``all_steps``, ``latest_step``, ``restore(step)``, ``delete(step)``,
``metadata(step)``; metrics and metadata per save; ``KeepBest`` and
``KeepEveryNSeconds``; ``StepAlreadyExistsError`` and ``overwrite``; the
handle of a (background) save; the rank-aware logger; ``abort_on_error``.
Ranks are threads here (1 to 4); ``tests/mpi/test_manager_mpi.py`` repeats
the essentials over MPI.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from amrckpt.comm import run_threads
from amrckpt.manager import HISTORY, EveryNSteps, KeepAll, KeepBest, KeepEveryNSeconds, KeepLast

G = {s: global_state(seed=s % 7, max_level=4) for s in range(0, 80, 10)}


def state(step: int, comm: Any) -> Advection:
    g = G[step - step % 10]
    st = g.local(0, g.N) if comm is None else g.for_rank(comm)
    st.step = step
    return st


def history_lines(d: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (d / HISTORY).read_text().splitlines()]


def outcome(call: Any) -> str:
    """What a call did: "ok", or the class name and message of its error."""
    try:
        call()
    except ac.errors.AmrckptError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


# -- discovery: all_steps, latest_step, metadata, restore(step), delete(step) ---------------


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_steps_metadata_restore_delete_on_P_ranks(tmp_path: Path, P: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def body(comm: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10), keep_policy=KeepAll()) as mgr:
            out["empty"] = (mgr.all_steps(), mgr.latest_step())
            for s in (10, 20, 30):
                mgr.save(s, state(s, comm), metrics={"loss": 1.0 / s, "ranks": comm.size}, metadata={"git": "abc123", "s": [s]})
            out["steps"] = (mgr.all_steps(), mgr.latest_step())
            md = mgr.metadata(20)
            out["md"] = (md.step, Path(md.path).name, md.metrics, md.metadata, md.info.manifest.schema_name, md.record["reason"])
            loaded = mgr.restore(20)
            lo, hi = loaded.partition.local_range(comm.rank)
            want = G[20].local(lo, hi)
            want.step = 20
            assert_state_equal(loaded.state, want)
            out["restored"] = mgr.restored_step
            mgr.delete(20)
            out["after_delete"] = mgr.all_steps()
            out["errors"] = [outcome(lambda: mgr.restore(20)), outcome(lambda: mgr.delete(20)), outcome(lambda: mgr.metadata(20))]
            out["history"] = [(r.step, r.metrics, r.metadata) for r in mgr.history()]
        return out

    got = run_threads(P, body, timeout=60)
    assert all(g == got[0] for g in got)  # every rank the same
    g = got[0]
    assert g["empty"] == ([], None)
    assert g["steps"] == ([10, 20, 30], 30)
    assert g["md"] == (
        20,
        "ckpt-000000000020.scda",
        {"loss": 0.05, "ranks": P},
        {"git": "abc123", "s": [20]},
        "advection2d",
        "step 20 is a multiple of 10",
    )
    assert g["restored"] == 20 and g["after_delete"] == [10, 30]
    assert all(e.startswith("StepNotFoundError: no checkpoint of step 20") for e in g["errors"]), g["errors"]
    assert g["history"] == [
        (10, {"loss": 0.1, "ranks": P}, {"git": "abc123", "s": [10]}),
        (30, {"loss": 1 / 30, "ranks": P}, {"git": "abc123", "s": [30]}),
    ]
    assert [e["step"] for e in history_lines(tmp_path)] == [10, 30]  # delete removed the record too
    assert isinstance(ac.errors.StepNotFoundError("x"), LookupError)


def test_all_steps_and_latest_step_open_no_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from amrckpt.manager import _directory, _manager

    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        for s in (10, 20):
            mgr.save(s, state(s, None))
        (tmp_path / "ckpt-000000000030.scda").write_bytes(b"not a checkpoint")  # listed: a final name means committed

        def no_reading(*a: Any, **k: Any) -> Any:
            raise AssertionError("all_steps/latest_step read a checkpoint")

        monkeypatch.setattr(_directory, "read_info", no_reading)
        monkeypatch.setattr(_manager, "load", no_reading)
        assert mgr.all_steps() == [10, 20, 30] and mgr.latest_step() == 30
        monkeypatch.undo()
        assert mgr.latest().step == 20  # type: ignore[union-attr]  # latest() verifies


# -- saving a step that exists -------------------------------------------------------------------


@pytest.mark.parametrize("P", [1, 3])
def test_existing_or_lower_step_raises_unless_overwrite(tmp_path: Path, P: int) -> None:
    def body(comm: Any) -> list[str]:
        out = []
        policy = {"save_policy": EveryNSteps(10), "keep_policy": KeepAll()}
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, **policy) as mgr:  # type: ignore[arg-type]
            mgr.save(10, state(10, comm), metrics={"v": 1})
            mgr.save(20, state(20, comm), metrics={"v": 1})
        before = (tmp_path / "ckpt-000000000020.scda").read_bytes() if comm.rank == 0 else b""
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, **policy) as mgr:  # type: ignore[arg-type]
            out.append(outcome(lambda: mgr.save(20, state(20, comm), metrics={"v": 2})))  # the policy asks for 20
            out.append(outcome(lambda: mgr.save(20, state(20, comm), force=True)))  # force is about the policy only
            out.append(outcome(lambda: mgr.save(15, state(15, comm), force=True)))
            if comm.rank == 0:
                assert (tmp_path / "ckpt-000000000020.scda").read_bytes() == before
            comm.barrier()
            out.append(outcome(lambda: mgr.save(20, state(20, comm), metrics={"v": 3}, force=True, overwrite=True)))
            out.append(outcome(lambda: mgr.save(15, state(15, comm), force=True, overwrite=True)))
            out.append(str([(r.step, r.metrics) for r in mgr.history()]))
        return out

    got = run_threads(P, body, timeout=60)
    assert all(g == got[0] for g in got)
    exists, forced, lower, over, over_lower, hist = got[0]
    assert exists.startswith("StepAlreadyExistsError: step 20 has a checkpoint (ckpt-000000000020.scda): pass overwrite=True")
    assert forced.startswith("StepAlreadyExistsError: step 20 has a checkpoint")
    assert lower.startswith("StepAlreadyExistsError: step 15 is lower than the newest checkpoint, step 20")
    assert over == "ok" and over_lower == "ok"
    assert hist == str([(10, {"v": 1}), (15, None), (20, {"v": 3})])
    steps = [e["step"] for e in history_lines(tmp_path)]
    assert sorted(steps) == [10, 15, 20] and len(steps) == 3  # one record per step: no duplicate for the overwrite
    assert not list(tmp_path.glob(".ckpt-*")) and not list(tmp_path.glob(f".{HISTORY}*"))
    assert issubclass(ac.errors.StepAlreadyExistsError, ac.errors.ManagerError)


def test_a_step_that_restore_found_damaged_may_be_saved_again(tmp_path: Path) -> None:
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        for s in (10, 20):
            mgr.save(s, state(s, None))
    newest = tmp_path / "ckpt-000000000020.scda"
    blob = bytearray(newest.read_bytes())
    blob[ac.read_info(newest).index.entry("rho").offset + 10] ^= 1  # data damaged, metadata intact
    newest.write_bytes(blob)
    damaged = newest.read_bytes()
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        with pytest.warns(ac.errors.CheckpointSkippedWarning, match="step 20 .* is damaged: ChecksumError"):
            assert mgr.restore_latest() is not None and mgr.restored_step == 10
        assert mgr.save(20, state(20, None))  # the run goes on from 10 and writes 20 again; the damaged one is kept aside
        assert ac.verify(newest).ok and [e["step"] for e in history_lines(tmp_path)] == [10, 20]
    [aside] = tmp_path.glob("ckpt-000000000020.scda.damaged-*[0-9a-f]")
    assert aside.read_bytes() == damaged
    newest.write_bytes(newest.read_bytes()[:-50])  # cut short: not even the metadata verify
    cut = newest.read_bytes()
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        with pytest.warns(ac.errors.CheckpointSkippedWarning, match="step 20 .* is damaged: IncompleteCheckpointError"):
            assert mgr.save(20, state(20, None))  # a damaged checkpoint does not block a save, and is not overwritten
    assert sorted(p.read_bytes() for p in tmp_path.glob("ckpt-000000000020.scda.damaged-*[0-9a-f]")) == sorted([damaged, cut])


# -- metrics and metadata --------------------------------------------------------------------------


def test_metrics_and_metadata_must_be_json_and_agreed(tmp_path: Path) -> None:
    def body(comm: Any) -> list[str]:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10)) as mgr:
            bad = {"x": object()} if comm.rank == 1 else {"x": 1}
            return [
                outcome(lambda: mgr.save(10, state(10, comm), metrics=bad)),
                outcome(lambda: mgr.save(10, state(10, comm), metadata={"rank": comm.rank})),
                outcome(lambda: mgr.save(10, state(10, comm), metrics=[1, 2])),  # type: ignore[arg-type]
                str(mgr.all_steps()),
            ]

    got = run_threads(3, body, timeout=60)
    assert all(g == got[0] for g in got)
    not_json, differ, not_dict, steps = got[0]
    assert not_json.startswith("ManagerError: save: metrics and metadata must be JSON") and "[rank 1]" in not_json
    assert differ.startswith("ManagerError: save: metrics or metadata differ between ranks ([1, 2] differ from rank 0)")
    assert not_dict.startswith("ManagerError: save: metrics must be a dict")
    assert steps == "[]"  # nothing written


# -- retention by metric and by time ------------------------------------------------------------


def test_keep_best_chooses_by_metric() -> None:
    hist = {
        1: {"metrics": {"loss": 0.5}},
        2: {"metrics": {"loss": 0.1}},
        3: {"metrics": {"loss": math.nan}},
        4: {},
        5: {"metrics": {"loss": 0.3}},
    }
    hist[6] = {"metrics": {"loss": 0.1, "acc": 0.9}}
    steps = sorted(hist)
    assert KeepBest("loss", 2).keep_with_history(steps, hist) == {2, 6}  # a tie goes to the newer... both fit
    assert KeepBest("loss", 1).keep_with_history(steps, hist) == {6}
    assert KeepBest("loss", 2, mode="max").keep_with_history(steps, hist) == {1, 5}
    assert KeepBest("acc", 3, mode="max").keep_with_history(steps, hist) == {6}
    assert KeepBest("loss", 2).keep(steps) == set()  # without history nothing can be judged
    assert (KeepBest("loss", 1) | KeepLast(1)).keep_with_history(steps, hist) == {6}
    assert (KeepBest("loss", 1, mode="max") | KeepLast(1)).keep_with_history(steps, hist) == {1, 6}
    for bad in ({"metric": "x", "n": 0}, {"metric": "x", "n": True}, {"metric": "x", "n": 1, "mode": "best"}):
        with pytest.raises(ac.errors.AmrckptError):
            KeepBest(**bad)  # type: ignore[arg-type]


def test_keep_every_n_seconds_chooses_by_save_time() -> None:
    hist: dict[int, dict[str, Any]] = {s: {"saved_at_unix": 1000.0 + 10 * s} for s in range(10)}  # a save every 10 s
    hist[10] = {"saved_at": "1970-01-01T00:18:20Z"}  # 1100 s, to the second (an old record)
    hist[11] = {}
    steps = sorted(hist)
    assert KeepEveryNSeconds(30).keep_with_history(steps, hist) == {0, 3, 6, 9}
    assert KeepEveryNSeconds(25).keep_with_history(steps, hist) == {0, 3, 6, 9}
    assert KeepEveryNSeconds(50).keep_with_history(steps, hist) == {0, 5, 10}
    assert KeepEveryNSeconds(30).keep(steps) == set()
    with pytest.raises(ac.errors.AmrckptError):
        KeepEveryNSeconds(0)


@pytest.mark.parametrize("P", [1, 2, 4])
def test_keep_best_in_a_manager(tmp_path: Path, P: int) -> None:
    losses = {10: 0.9, 20: 0.2, 30: 0.5, 40: 0.1, 50: 0.7, 60: 0.8}

    def body(comm: Any) -> list[int]:
        keep = KeepBest("loss", 2)
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10), keep_policy=keep) as mgr:
            for s, loss in losses.items():
                mgr.save(s, state(s, comm), metrics={"loss": loss})
            return mgr.all_steps()

    got = run_threads(P, body, timeout=60)
    assert got == [[20, 40, 60]] * P  # the two best, and the newest (never deleted)


def test_keep_every_n_seconds_in_a_manager(tmp_path: Path) -> None:
    with ac.CheckpointManager(
        tmp_path, Advection, save_policy=EveryNSteps(10), keep_policy=KeepEveryNSeconds(3600) | KeepLast(1)
    ) as mgr:
        for s in (10, 20, 30):
            mgr.save(s, state(s, None))
        assert mgr.all_steps() == [10, 30]  # the first, then none within the hour; the newest
        assert all(isinstance(e["saved_at_unix"], float) for e in history_lines(tmp_path))


# -- the handle of a save ------------------------------------------------------------------------


def test_save_handle_in_the_foreground(tmp_path: Path) -> None:
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        h = mgr.save(10, state(10, None))
        assert h and h.saved and h.done() and h.result() == mgr.path_of(10) and h.exception() is None
        no = mgr.save(11, state(10, None))
        assert not no and no.done() and no.result() is None
        assert "saved=False" in repr(no)


@pytest.mark.parametrize("P", [1, 3])
def test_save_handle_of_background_saves(tmp_path: Path, P: int) -> None:
    def body(comm: Any) -> list[str]:
        out = []
        with ac.CheckpointManager(tmp_path, Advection, comm=comm, save_policy=EveryNSteps(10), background=True) as mgr:
            h = mgr.save(10, state(10, comm))
            out.append(f"{bool(h)} {h.result(timeout=60).name}")  # type: ignore[union-attr]
            out.append(str(h.done()))
            bad = state(20, comm)
            if comm.rank == comm.size - 1:
                bad.vel = bad.vel[:, :1]  # invalid on one rank: found by the background save
            h = mgr.save(20, bad)
            out.append(type(h.exception()).__name__)  # reported by the handle ...
            out.append(outcome(mgr.wait))  # ... so not raised again
            h = mgr.save(30, bad)
            out.append(outcome(h.result))
            out.append(outcome(h.result))  # result() raises each time
            out.append(outcome(mgr.wait))
            mgr.save(40, bad)  # not looked at: the next call raises it
            out.append(outcome(lambda: mgr.save(50, state(50, comm))).split(":")[0])
            out.append(str(mgr.all_steps()))
        return out

    got = run_threads(P, body, timeout=60)
    assert all(g == got[0] for g in got)
    assert got[0][:3] == ["True ckpt-000000000010.scda", "True", "SchemaError"]
    assert got[0][3] == "ok" and got[0][4].startswith("SchemaError") and got[0][5] == got[0][4] and got[0][6] == "ok"
    assert got[0][7:] == ["SchemaError", "[10]"]


# -- logging -------------------------------------------------------------------------------------


def test_the_package_logger_has_a_null_handler_and_prints_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("amrckpt").handlers)
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        mgr.save(10, state(10, None))
        mgr.save(20, state(20, None))
        mgr.delete(20)  # logged (info): not printed
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_warnings_come_once_per_job_not_once_per_rank(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with ac.CheckpointManager(tmp_path, Advection, save_policy=EveryNSteps(10)) as mgr:
        mgr.save(10, state(10, None))
    (tmp_path / "ckpt-000000000020.scda").write_bytes(b"damaged")

    def body(comm: Any) -> int | None:
        with ac.CheckpointManager(tmp_path, Advection, comm=comm) as mgr:
            mgr.restore_latest()
            mgr.log.rank_warning("rank %d differs", comm.rank)
            return mgr.restored_step

    with caplog.at_level(logging.INFO, logger="amrckpt"), pytest.warns(ac.errors.CheckpointSkippedWarning) as seen:
        assert run_threads(4, body, timeout=60) == [10] * 4
    assert len(seen) == 1  # the warning of rank 0 only
    skipping = [r for r in caplog.records if "skipped and kept aside" in r.getMessage()]
    assert len(skipping) == 1 and skipping[0].rank == 0 and skipping[0].size == 4  # type: ignore[attr-defined]
    tagged = sorted(r.getMessage() for r in caplog.records if "differs" in r.getMessage())
    assert tagged == [f"rank {r} of 4: rank {r} differs" for r in range(4)]
    files = ("_manager.py", "_directory.py", "test_manager_api.py")
    assert all(r.name == "amrckpt.manager" and r.filename.endswith(files) for r in caplog.records)


# -- abort_on_error ----------------------------------------------------------------------------


def test_abort_on_error_is_a_no_op_without_mpi(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError), ac.CheckpointManager(tmp_path, Advection, abort_on_error=True):
        1 / 0  # noqa: B018


ABORT_JOB = textwrap.dedent(
    """
    import logging
    import sys
    from mpi4py import MPI
    import amrckpt as ac
    from checkpoint_cases import Advection

    comm = MPI.COMM_WORLD
    # The log in a file: flushed at each record, whereas stderr may be cut when the process manager kills the job
    logging.basicConfig(filename=f"{sys.argv[1]}.rank{comm.rank}.log", level=logging.INFO)
    abort = sys.argv[2] == "abort"
    try:
        with ac.CheckpointManager(sys.argv[1], Advection, comm=comm, abort_on_error=abort):
            if comm.rank == 1:
                raise RuntimeError("a bug on rank 1 only")
    except RuntimeError:
        if not abort:
            raise
    comm.Barrier()  # rank 0 waits here for rank 1, which is gone
    print("rank", comm.rank, "passed the barrier", flush=True)
    """
)


def _mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found")
    return exe


def test_abort_on_error_ends_the_whole_job(tmp_path: Path) -> None:
    """Without ``-m mpi4py``, an exception on one rank leaves the other waiting; abort_on_error ends the job."""
    script = tmp_path / "job.py"
    script.write_text(ABORT_JOB)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), str(Path(ac.__file__).parents[1])])
    )
    cmd = [_mpiexec(), "-n", "2", sys.executable, str(script), str(tmp_path / "ckpt"), "abort"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert p.returncode != 0 and "passed the barrier" not in p.stdout, p.stdout + p.stderr
    log = Path(f"{tmp_path / 'ckpt'}.rank1.log").read_text()
    assert "aborting the MPI job" in log and "RuntimeError: a bug on rank 1 only" in log, log + p.stderr


def test_a_save_on_a_closed_manager_is_a_manager_error(tmp_path: Path) -> None:
    """Before: an ScdaUsageError, an error of the file layer, for a manager's state."""
    mgr = ac.CheckpointManager(tmp_path / "ckpt", Advection)
    mgr.close()
    with pytest.raises(ac.errors.ManagerError, match=r"the manager is closed .*open a new CheckpointManager"):
        mgr.save(10, state(10, None), force=True)
    assert not list((tmp_path / "ckpt").glob("ckpt-*"))
