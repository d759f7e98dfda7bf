"""benchmarks/bench_p4est.py runs (small, no thresholds): it cannot rot unnoticed.

Its round trip as a p4est code pays it (libp8est through ctypes in one process, on Open MPI: p4est's
quadrant arrays viewed, saved, loaded and rebuilt with p8est_inflate) must give back p4est's forest: every
forest it loads, by p4est or by amrckpt, has p4est's checksum and is p8est_is_equal (with data) to the saved one.
"""

from __future__ import annotations

import json
import shutil
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
    ranks = ["1", "2"] if shutil.which("mpiexec.openmpi", path="/usr/bin:/usr/local/bin") else ["1"]
    bench = [sys.executable, str(REPO / "benchmarks" / "bench_p4est.py")]
    cmd = [*bench, "--quick", "--dir", str(tmp_path), "--json", str(out), "--ranks", *ranks]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    result = json.loads(out.read_text())
    assert result["byte_identical_back"] and result["octants"] > 1000
    assert set(result["ratio"]) == {"amrckpt save", "amrckpt load", "trusted save", "trusted load"}
    assert "ratio amrckpt / p4est" in res.stdout
    assert set(result["round_trip"]) == {f"P{r}" for r in ranks}
    for trip in result["round_trip"].values():  # correctness, not timing: the same forest and data, every round
        assert trip["same_forest"] == {"p4est": True, "amrckpt": True, "trusted": True}
        new_file = {"amrckpt save new", "trusted save new"}  # the round trip also saves to a new file
        assert trip["octants"] == result["octants"] and set(trip["ratio"]) == set(result["ratio"]) | new_file
        assert all(len(v) == 1 for v in trip["seconds"].values())
    assert "round trip as a p4est code pays it, P = 1" in res.stdout
    assert not list(tmp_path.glob("amrckpt-bench-p4est-*"))  # cleaned up
