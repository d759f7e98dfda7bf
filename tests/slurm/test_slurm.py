"""amrckpt under a real Slurm (22.05 on CI): the job scripts of examples/slurm/ with one- and two-minute time limits.

* wall time alone (no ``--signal``): the job checkpoints and ends COMPLETED before its limit, and the
  chain's next job continues on another task count, bit-identical to an uninterrupted run;
* ``--signal=USR1@N`` with srun, and ``--signal=B:USR1@N`` with mpiexec and a forwarding trap: checkpoint,
  clean end, resume on another task count bit-identical;
* ``scancel`` (SIGTERM) and ``scontrol requeue``: the next run restarts from the newest checkpoint, the one
  taken at the SIGTERM; no partial file is ever restored or left behind;
* a time limit shortened with ``scontrol update`` while the job runs is honoured;
* ``srun --mpi=none -n 2`` (no PMI: two MPI worlds of one) is refused before anything is written.

Every test is skipped, with the reason, where Slurm is not up (``sudo bash .ci/slurm-up`` brings it up),
unless ``AMRCKPT_REQUIRE_SLURM=1`` (set by .ci/run), which makes that a failure.  10 to 13 minutes.
The jobs run the example solver with ``--pace`` (a least wall time per step) so that a one-minute job
reaches a predictable step; resumes run unpaced.  Slurm sends ``--signal`` up to 60 s early (its event
resolution), so a signal test only asserts that the checkpoint was taken at the signal, whenever it came, and
its jobs get two minutes (``@30``: 30 to 90 s after the start, never before the handler is installed).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from slurm_jobs import SOLVER, TALLY, Job, Slurm

import amrckpt as ac
from amrckpt.manager._scheduler import parse_duration

sys.path.insert(0, str(SOLVER.parent))
import advection_amr as adv

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 1300
"""Where every run ends: a paced first job (25 steps/s at most, halted within 60 s) stays below it."""
SIGNAL_STEPS = 2600
"""Where the signal tests end: their first job (2 minutes, the signal within 90 s) stays below it."""
PACED = "--json --pace 0.04 --checkpoint-every 100 --report-every 100"
UNPACED = "--json --checkpoint-every 100 --report-every 100"


@cache
def reference(steps: int) -> dict[str, str]:
    """Field hashes of an uninterrupted run to ``steps`` on 2 processes (mpiexec, outside Slurm)."""
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="amrckpt-slurm-ref-"))
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "-n", "2", sys.executable, str(SOLVER), "--dir", str(work), "--steps", str(steps)]
    cmd += ["--checkpoint-every", str(steps), "--wall-time-margin", "0", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=_clean_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return adv.field_hashes(str(work / f"ckpt-{steps:012d}.scda"))


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "PMI_", "PMIX_", "OMPI_"))}


def history(directory: Path) -> list[ac.manager.CheckpointRecord]:
    with ac.CheckpointManager(directory, adv.AdvectionState) as manager:
        return manager.history()


def logged(directory: Path) -> list[dict[str, Any]]:
    """Every checkpoint ever committed in ``directory``, oldest first (the manager's history log; retention removes files)."""
    lines = (directory / "amrckpt-history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def assert_clean(directory: Path) -> None:
    """Every checkpoint verifies, and no partial file was left behind."""
    partial = sorted(p.name for p in directory.glob(".ckpt-*"))
    assert not partial, partial
    for r in history(directory):
        assert r.valid, (r.path, r.problem)


def assert_identical(directory: Path, steps: int, what: str) -> None:
    final = directory / f"ckpt-{steps:012d}.scda"
    assert final.exists(), sorted(p.name for p in directory.iterdir())
    assert adv.field_hashes(str(final)) == reference(steps), f"{what}: the resumed run differs from the uninterrupted one"
    TALLY.identical += 1


def saved_before_limit(job: Job, info: dict[str, str], reason: str) -> int:
    """The step of the job's checkpoint taken for ``reason``; asserts it was committed before the job's limit."""
    start, limit = int(info["StartTime"]), parse_duration(info["TimeLimit"])
    assert limit is not None
    records = [r for r in logged(job.cwd / "ckpt") if reason in (r.get("reason") or "")]
    assert records, f"no checkpoint for {reason!r}:\n{job.output()}"
    r = records[-1]
    committed = datetime.datetime.fromisoformat(r["saved_at"].replace("Z", "+00:00")).timestamp() + r["save_seconds"]
    assert committed - start < limit, (committed - start, limit, r)
    TALLY.before_limit += 1
    return int(r["step"])


def test_wall_time_alone_then_the_chain_continues_on_another_task_count(slurm: Slurm) -> None:
    """No --signal: BeforeWallTime learns the end from scontrol (Slurm 22.05 exports none), checkpoints, the job COMPLETES."""
    first = slurm.sbatch(
        "chain.sbatch", "--time=1", "--ntasks=4", name="chain",
        CKPT_DIR="ckpt", STEPS=str(STEPS), MARGIN="20", NEXT_NTASKS="2", SOLVER_ARGS=PACED,
        SBATCH_TIMELIMIT="1",  # the links' --time: sbatch's input variable, which the job passes on to its successor
    )  # fmt: skip
    info = first.wait(timeout=240)
    assert info["JobState"] == "COMPLETED", first.output()
    assert int(info["EndTime"]) - int(info["StartTime"]) < 60
    done = first.events("done")[-1]
    assert done["halted"] and done["step"] < STEPS, first.output()
    step = saved_before_limit(first, info, "of wall time left")
    assert step == done["step"]
    # The next links (each submitted by the one before, --dependency=afterany) run on 2 tasks until one finishes the run
    # (the second, unless the machine is so loaded that it too meets its limit).
    done_file = first.cwd / "ckpt" / "DONE"
    links, last_step = [first], step
    while not done_file.exists():
        assert len(links) < 6, "the chain did not finish in 5 links"
        previous = links[-1].output().splitlines()
        next_id = next(line.rsplit(" ", 1)[1] for line in previous if "next link: job" in line and f"job {links[-1].id}" in line)
        link = Job(next_id, first.cwd, first.name)
        info = link.wait(timeout=240)
        TALLY.jobs += 1
        assert info["JobState"] == "COMPLETED", link.output()
        start = [e for e in link.events("start") if e["step"] == last_step]
        assert start and start[-1]["ranks"] == 2 and start[-1]["restored"], link.output()
        last_step = link.events("done")[-1]["step"]
        links.append(link)
    assert done_file.read_text().strip() == str(STEPS)
    next_id = links[1].id
    assert_clean(first.cwd / "ckpt")
    assert_identical(first.cwd / "ckpt", STEPS, "chain 4 -> 2 tasks")
    TALLY.notes.append(f"wall time alone: job {first.id} saved step {step}, COMPLETED within its 1-min limit; job {next_id} on 2")


@pytest.mark.parametrize(
    ("launcher", "signal", "ntasks"),
    [("srun", "--signal=USR1@30", 3), ("mpiexec", "--signal=B:USR1@30", 2), ("mpiexec", "--signal=USR1@30", 3)],
    ids=["srun", "mpiexec-B-trap", "mpiexec-steps"],
)
def test_signal_then_resume_on_another_task_count(slurm: Slurm, launcher: str, signal: str, ntasks: int) -> None:
    """--signal=USR1@30: srun's tasks get it; under mpiexec, Hydra's proxy (a step) forwards it, or B: the batch shell's trap."""
    script = f"{launcher}.sbatch"
    # Slurm sends --signal up to 60 s early: a 1-minute job could get it before Python has installed its handler (and die of
    # SIGUSR1's default action). With 2 minutes and @30 it comes 30 to 90 s after the start, before step 2250 (paced).
    steps = SIGNAL_STEPS
    first = slurm.sbatch(
        script, "--time=2", "--ntasks=4", signal, name="first", CKPT_DIR="ckpt", STEPS=str(steps), MARGIN="5", SOLVER_ARGS=PACED
    )
    info = first.wait(timeout=240)
    assert info["JobState"] == "COMPLETED", first.output()
    done = first.events("done")[-1]
    assert done["halted"], first.output()
    step = saved_before_limit(first, info, "SIGUSR1")
    assert step == done["step"]
    late = signal.replace("@30", "@1")  # 5 minutes and @1: not before 239 s, even on a loaded machine (the script's @90: at once)
    resume = slurm.sbatch(
        script, "--time=5", f"--ntasks={ntasks}", late, name="resume",
        CKPT_DIR="ckpt", STEPS=str(steps), MARGIN="5", SOLVER_ARGS=UNPACED,
    )  # fmt: skip
    info = resume.wait(timeout=330)
    assert info["JobState"] == "COMPLETED", resume.output()
    start = resume.events("start")[-1]
    assert start["restored"] and start["step"] == step and start["ranks"] == ntasks
    assert_clean(first.cwd / "ckpt")
    assert_identical(first.cwd / "ckpt", steps, f"{launcher}: 4 -> {ntasks} tasks")
    TALLY.notes.append(f"{launcher} {signal}: job {first.id} saved step {step} at SIGUSR1, resumed on {ntasks} by job {resume.id}")


def _wait_for_step(job: Job, step: int, timeout: float = 90.0) -> None:
    t0 = time.monotonic()
    while not any(e.get("step", 0) >= step for e in job.events("step")):
        assert time.monotonic() - t0 < timeout, job.output()
        assert job.state() in ("PENDING", "RUNNING", "CONFIGURING"), job.output()
        time.sleep(0.5)


def test_scancel_checkpoints_at_sigterm_and_the_next_job_restarts_there(slurm: Slurm) -> None:
    first = slurm.sbatch(
        "srun.sbatch", "--time=2", "--ntasks=4", "--signal=USR1@1", name="first",
        CKPT_DIR="ckpt", STEPS=str(STEPS), MARGIN="5", SOLVER_ARGS=PACED,
    )  # fmt: skip
    _wait_for_step(first, 200)
    subprocess.run(["scancel", first.id], check=True)
    info = first.wait(timeout=60)
    assert info["JobState"] == "CANCELLED", first.output()
    records = logged(first.cwd / "ckpt")
    assert "SIGTERM" in records[-1]["reason"], records
    step = records[-1]["step"]
    resume = slurm.sbatch(
        "srun.sbatch", "--time=5", "--ntasks=3", "--signal=USR1@1", name="resume",
        CKPT_DIR="ckpt", STEPS=str(STEPS), MARGIN="5", SOLVER_ARGS=UNPACED,
    )  # fmt: skip
    assert resume.wait(timeout=330)["JobState"] == "COMPLETED", resume.output()
    start = resume.events("start")[-1]
    assert start["restored"] and start["step"] == step
    assert_clean(first.cwd / "ckpt")
    assert_identical(first.cwd / "ckpt", STEPS, "scancel, 4 -> 3 tasks")
    TALLY.notes.append(f"scancel: job {first.id} saved step {step} at SIGTERM (CANCELLED), resumed on 3 by job {resume.id}")


def test_requeue_restarts_from_the_newest_checkpoint(slurm: Slurm) -> None:
    steps = 600
    job = slurm.sbatch(
        "srun.sbatch", "--time=2", "--ntasks=4", "--signal=USR1@1", "--requeue", name="requeued",
        CKPT_DIR="ckpt", STEPS=str(steps), MARGIN="5", SOLVER_ARGS=PACED,
    )  # fmt: skip
    _wait_for_step(job, 200)
    subprocess.run(["scontrol", "requeue", job.id], check=True)
    job.wait(timeout=60, states={"PENDING"})
    # A requeued job waits 2 minutes (its BeginTime); let it start now.
    subprocess.run(["scontrol", "update", f"JobId={job.id}", "StartTime=now"], check=True)
    info = job.wait(timeout=240)
    assert info["JobState"] == "COMPLETED" and info.get("Restarts") == "1", job.output()
    starts = job.events("start")
    assert len(starts) == 2 and not starts[0]["restored"] and starts[1]["restored"], job.output()
    # The first run's last checkpoint, taken at the requeue's SIGTERM (off the every-100 schedule), is where the second
    # run starts.  Its step record went with the checkpoint when retention (KeepLast(3)) deleted it, so the job's own
    # events say which step it was.
    events = job.events()
    second = next(i for i, e in enumerate(events) if e["event"] == "start" and e["restored"])
    saved = [e["step"] for e in events[:second] if e["event"] == "checkpoint"]
    assert saved and saved[-1] % 100 and starts[1]["step"] == saved[-1], (starts, saved)
    assert_clean(job.cwd / "ckpt")
    assert_identical(job.cwd / "ckpt", steps, "requeue, 4 -> 4 tasks")
    TALLY.notes.append(f"requeue: job {job.id} saved step {saved[-1]} at SIGTERM and restarted there")


def test_a_time_limit_shortened_during_the_job_is_honoured(slurm: Slurm) -> None:
    # chain.sbatch without a successor: no --signal, which Slurm could send at once once the limit is cut.
    job = slurm.sbatch(
        "chain.sbatch", "--time=3", "--ntasks=4", name="cut", MAX_LINKS="1",
        CKPT_DIR="ckpt", STEPS="100000", MARGIN="20", SOLVER_ARGS=PACED + " --wall-time-refresh 5",
    )  # fmt: skip
    _wait_for_step(job, 100)
    subprocess.run(["scontrol", "update", f"JobId={job.id}", "TimeLimit=1"], check=True)
    info = job.wait(timeout=240)
    assert info["JobState"] == "COMPLETED", job.output()
    assert info["TimeLimit"] == "00:01:00"
    assert int(info["EndTime"]) - int(info["StartTime"]) < 60
    step = saved_before_limit(job, info, "of wall time left")
    assert_clean(job.cwd / "ckpt")
    TALLY.notes.append(f"scontrol update TimeLimit=1 (from 3): job {job.id} saved step {step} before the new limit")


def test_srun_without_pmi_is_refused_before_anything_is_written(slurm: Slurm, tmp_path: Path) -> None:
    ckpt = tmp_path / "never"
    cmd = ["srun", "--mpi=none", "-n", "2", "--time=1", sys.executable, str(SOLVER), "--dir", str(ckpt), "--steps", "10"]
    r = subprocess.run(cmd, cwd=tmp_path, env=slurm.env, capture_output=True, text=True, timeout=120, check=False)
    TALLY.jobs += 1
    assert r.returncode != 0
    assert r.stderr.count("LaunchError") >= 2, r.stderr  # on both tasks
    assert "srun --mpi=pmi2" in r.stderr and "SLURM_STEP_NUM_TASKS=2" in r.stderr
    assert not ckpt.exists()


def test_two_level_checkpoints_flush_before_the_limit_and_resume_on_another_task_count(slurm: Slurm) -> None:
    """examples/slurm/cache.sbatch: cached saves on node-local storage, flushed every 200 steps and before the wall
    time (SIGUSR1); the next job, on another number of tasks, continues from the newest flushed file, bit for bit."""
    cache_dir = str(slurm.cwd / "node-cache-{node}")
    first = slurm.sbatch(
        "cache.sbatch", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2", "--time=1", "--signal=USR1@25", name="cached",
        CKPT_DIR="ckpt", CACHE_DIR=cache_dir, FLUSH_EVERY="200", STEPS=str(STEPS), MARGIN="20", SOLVER_ARGS=PACED,
    )  # fmt: skip
    info = first.wait(timeout=150)
    assert info["JobState"] == "COMPLETED", first.output()
    steps = [r["step"] for r in logged(first.cwd / "ckpt")]
    assert steps and steps[-1] < STEPS, (steps, first.output())  # stopped by the limit, the newest step flushed
    assert any(slurm.cwd.glob("node-cache-*")), "nothing was cached on the node"
    resume = slurm.sbatch(
        "cache.sbatch", "--nodes=1", "--ntasks=3", "--ntasks-per-node=3", "--time=5", name="cached-resume",
        CKPT_DIR="ckpt", CACHE_DIR=cache_dir, FLUSH_EVERY="200", STEPS=str(STEPS), MARGIN="5", SOLVER_ARGS=UNPACED,
    )  # fmt: skip
    assert resume.wait(timeout=330)["JobState"] == "COMPLETED", resume.output()
    start = resume.events("start")[-1]
    assert start["restored"] and start["step"] == steps[-1], (start, steps)
    assert_clean(first.cwd / "ckpt")
    assert_identical(first.cwd / "ckpt", STEPS, "node cache, 2 -> 3 tasks")
    TALLY.notes.append(f"node cache: job {first.id} flushed step {steps[-1]} before its limit, resumed on 3 by job {resume.id}")
