"""A real Slurm for the tests of tests/slurm; every test is skipped, with the reason, where Slurm is not up.

Bring Slurm up with ``sudo bash .ci/slurm-up`` (CI does).  At the end, the
counts (jobs run, checkpoints taken before the limit, bit-identical resumes)
are printed in pytest's summary.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_jobs import TALLY, Slurm, slurm_problem


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.jobs:
        terminalreporter.write_sep("-", "Slurm")
        terminalreporter.write_line(
            f"{TALLY.jobs} Slurm jobs run; {TALLY.before_limit} checkpoints taken before the time limit; "
            f"{TALLY.identical} resumes bit-identical to an uninterrupted run"
        )
        for note in TALLY.notes:
            terminalreporter.write_line("  " + note)


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[Slurm]:
    problem = slurm_problem()
    if problem is not None:
        if os.environ.get("AMRCKPT_REQUIRE_SLURM") == "1":  # CI brought Slurm up: its absence is a failure
            pytest.fail(f"AMRCKPT_REQUIRE_SLURM=1, but {problem}")
        pytest.skip(problem)
    s = Slurm(tmp_path)
    yield s
    # Leave no job behind (a failed test may have left one pending or running; a chain submits its own successors).
    ids = [j.id for j in s.jobs]
    if ids:
        subprocess.run(["scancel", "--quiet", *ids], check=False, capture_output=True)
    for name in sorted({j.name for j in s.jobs}):  # and the links a chain submitted itself (same name)
        subprocess.run(["scancel", "--quiet", f"--name={name}"], check=False, capture_output=True)
