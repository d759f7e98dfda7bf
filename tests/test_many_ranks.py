"""Correctness at many ranks (oversubscribed): save on P = 32 and 64 with empty ranks, load on other Q, uniform and weighted.

Each P is one ``mpiexec`` of tests/many_ranks_job.py; the bytes are
compared with a serial save, and an error on one rank must be raised on
every rank with nothing written.  Slow (about a minute per P on two cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().parent / "many_ranks_job.py"


@pytest.mark.slow
@pytest.mark.parametrize("P", [32, 64])
def test_save_and_load_at_many_ranks(tmp_path: Path, P: int) -> None:
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if mpiexec is None:
        pytest.skip("no mpiexec")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_"))}
    cmd = [mpiexec, "-n", str(P), sys.executable, "-m", "mpi4py", str(JOB), str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"many ranks: P={P} ok" in out.stdout
