"""The benchmarks run (small sizes, no thresholds): they cannot rot unnoticed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from _support import REPO


def test_bench_scda_quick(tmp_path: Path) -> None:
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    assert mpiexec, "mpiexec comes with the test extra (the mpich wheel)"
    out = tmp_path / "scda.json"
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "mpi4py", str(REPO / "benchmarks" / "bench_scda.py")]
    proc = subprocess.run(
        [*cmd, "--quick", "--dir", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["P"] == 2
    assert {(r["case"], r["regime"]) for r in result["a_section"]} == {
        ("A write", "new"),
        ("A read", "new"),
        ("A write", "warm"),
        ("A read", "warm"),
    }
    assert all(r["ratio"] > 0 for r in result["a_section"])
    assert len(result["entries"]["format_per_s_by_rank"]) == 2
    assert [c["level"] for c in result["compression"]] == [1, 9]
    assert "ratio" in proc.stdout
