"""The benchmarks run (small sizes, no thresholds): they cannot rot unnoticed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from _support import REPO


def run_quick(script: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """Run ``benchmarks/<script> --quick`` on 2 ranks; return its JSON result and its output."""
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    assert mpiexec, "mpiexec comes with the test extra (the mpich wheel)"
    out = tmp_path / "result.json"
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "mpi4py", str(REPO / "benchmarks" / script)]
    proc = subprocess.run(
        [*cmd, "--quick", "--dir", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["P"] == 2
    return result, proc.stdout


def test_bench_scda_quick(tmp_path: Path) -> None:
    result, stdout = run_quick("bench_scda.py", tmp_path)
    assert {(r["case"], r["regime"]) for r in result["a_section"]} == {
        ("A write", "new"),
        ("A read", "new"),
        ("A write", "warm"),
        ("A read", "warm"),
    }
    assert all(r["ratio"] > 0 for r in result["a_section"])
    assert len(result["entries"]["format_per_s_by_rank"]) == 2
    assert [c["level"] for c in result["compression"]] == [1, 9]
    assert "ratio" in stdout


def test_bench_schema_quick(tmp_path: Path) -> None:
    result, _ = run_quick("bench_schema.py", tmp_path)
    assert {"write warm schema/scda", "read schema/scda", "read scda/raw"} <= set(result["ratios"])
    assert all(v["median"] > 0 for v in result["ratios"].values())
    assert not list(tmp_path.glob("amrckpt-bench-*"))  # cleaned up


def test_bench_manager_quick(tmp_path: Path) -> None:
    result, _ = run_quick("bench_manager.py", tmp_path)
    assert set(result["runs"]) == {"none", "blocking", "background", "raw"}
    assert all(len(r["save_call_s"]) == 3 for runs in result["runs"].values() for r in runs)
    assert result["ratios"]["background blocked / blocking save (means)"] > 0
    assert not list(tmp_path.glob("amrckpt-bench-manager-*"))  # cleaned up
