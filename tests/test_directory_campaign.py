"""The checkpoint directory's fault campaign, in CI: 40 SIGKILLs during background saves at P = 4, 24 disk-full trials.

``tests/slow/directory_campaign.py`` is the campaign (its docstring says what
each trial checks); this runs it, bounded (about two minutes on two cores),
and fails unless every trial recovered: every kill restarted bit for bit
from a checkpoint that verifies with its records; in every disk-full trial
each failed save raised ``ScdaIOError(ENOSPC)`` on every rank and nothing
was lost, and at least 20 of the 24 trials hit a full disk.  The disk-full
half needs root (a 2 MiB tmpfs per trial); without it the script says so and
runs the kills only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CAMPAIGN = Path(__file__).parent / "slow" / "directory_campaign.py"


@pytest.mark.slow
def test_directory_campaign(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    out = tmp_path / "campaign.json"
    run = subprocess.run(
        [sys.executable, str(CAMPAIGN), "--kills", "40", "--enospc", "24", "--seed", "3", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "40 tried, 40 recovered bit for bit" in run.stdout, run.stdout
    print(run.stdout.strip().splitlines()[-2:])
