"""Helpers of the Slurm tests: submit the scripts of examples/slurm/, follow jobs, count what was run.

Bring Slurm up with ``sudo bash .ci/slurm-up`` (CI does).  The tests submit
the job scripts of ``examples/slurm/`` as a user would, with one-minute time
limits, and read the job's state with ``scontrol``.  At the end, the counts
(jobs run, checkpoints taken before the limit, bit-identical resumes) are
printed in pytest's summary.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCRIPTS = EXAMPLES / "slurm"
SOLVER = EXAMPLES / "advection_amr.py"
FINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def slurm_problem() -> str | None:
    """Why Slurm cannot run the tests here, or None if it can."""
    for cmd in ("sbatch", "scontrol", "squeue", "srun"):
        if shutil.which(cmd) is None:
            return f"{cmd} not found: Slurm is not installed (sudo bash .ci/slurm-up installs and starts it)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20, check=False)
        nodes = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Slurm does not answer ({exc}): sudo bash .ci/slurm-up"
    if "UP" not in ping.stdout:
        return f"slurmctld is not up ({ping.stdout.strip() or ping.stderr.strip()}): sudo bash .ci/slurm-up"
    if not set(nodes.stdout.split()) & {"idle", "mixed", "allocated", "completing"}:
        return f"no Slurm node takes jobs (sinfo: {nodes.stdout.strip()!r}): sudo bash .ci/slurm-up"
    return None


@dataclass
class Tally:
    """What the Slurm tests ran and saw, for the summary line."""

    jobs: int = 0
    before_limit: int = 0
    identical: int = 0
    notes: list[str] = field(default_factory=list)


TALLY = Tally()


@dataclass
class Job:
    """A submitted job: its id, its directory, its output file."""

    id: str
    cwd: Path
    name: str

    def info(self) -> dict[str, str]:
        """``scontrol show job`` as a dict, times in Unix seconds."""
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", self.id],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            env=dict(os.environ, SLURM_TIME_FORMAT="%s"),
        ).stdout
        return dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", out))

    def state(self) -> str:
        return self.info().get("JobState", "?")

    def wait(self, timeout: float = 180.0, states: set[str] = FINAL) -> dict[str, str]:
        """Wait until the job is in one of ``states``; return its info."""
        t0 = time.monotonic()
        while True:
            info = self.info()
            if info.get("JobState") in states:
                return info
            if time.monotonic() - t0 > timeout:
                subprocess.run(["scancel", self.id], check=False)
                raise AssertionError(f"job {self.id} still {info.get('JobState')} after {timeout:.0f} s:\n{self.output()}")
            time.sleep(0.5)

    def output(self) -> str:
        p = self.cwd / f"{self.name}-{self.id}.out"
        return p.read_text(errors="replace") if p.exists() else ""

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The solver's JSON events (``--json``) in the job's output, oldest first."""
        out = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                with_event = json.loads(line)
                if kind is None or with_event.get("event") == kind:
                    out.append(with_event)
        return out


class Slurm:
    """Submits the scripts of examples/slurm/ from a test's directory, with the solver and knobs in the environment."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        bindir = str(Path(sys.executable).parent)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "PMI_", "PMIX_", "OMPI_"))}
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # the jobs' python and mpiexec: this venv's
        env["SOLVER"] = str(SOLVER)
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env
        self.jobs: list[Job] = []
        self.tag = uuid.uuid4().hex[:8]  # job names of this test only: a chain's successors are cancelled by name

    def sbatch(self, script: str, *options: str, name: str = "job", **knobs: str) -> Job:
        """Submit ``examples/slurm/<script>`` as job ``<name>-<tag>`` with sbatch ``options`` and the solver's ``knobs``."""
        name = f"{name}-{self.tag}"
        cmd = ["sbatch", "--parsable", f"--job-name={name}", f"--output={name}-%j.out", "--open-mode=append", *options]
        cmd.append(str(SCRIPTS / script))
        r = subprocess.run(cmd, cwd=self.cwd, env=dict(self.env, **knobs), capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        TALLY.jobs += 1
        job = Job(r.stdout.strip().split(";")[0], self.cwd, name)
        self.jobs.append(job)
        return job
