"""benchmarks/bench_p4est.py runs (small, no thresholds): it cannot rot unnoticed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from p4est import build

from _support import REPO

REASON = build.skip_reason()


@pytest.mark.skipif(REASON is not None, reason=f"the real libp4est is not available: {REASON}")
def test_bench_p4est_quick(tmp_path: Path) -> None:
    out = tmp_path / "p4est.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_p4est.py"), "--quick", "--dir", str(tmp_path), "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    result = json.loads(out.read_text())
    assert result["byte_identical_back"] and result["octants"] > 1000
    assert set(result["ratio"]) == {"amrckpt save", "amrckpt load", "trusted save", "trusted load"}
    assert "ratio amrckpt / p4est" in res.stdout
    assert not list(tmp_path.glob("amrckpt-bench-p4est-*"))  # cleaned up
