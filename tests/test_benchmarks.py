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
    cases = {(r["case"], r["regime"]) for r in result["a_section"]}
    assert cases == {("A write", "new"), ("A read", "new"), ("A write", "warm"), ("A read", "warm"), ("A read Q=1", "warm")}
    assert {r["size"] for r in result["a_section"] if r["regime"] == "new"} == {"2 MiB", "8 MiB"}
    assert {(r["case"], r["regime"]) for r in result["v_section"]} == {(c.replace("A", "V"), reg) for c, reg in cases}
    comp = {(r["case"], r["elem_size"], r["level"]) for r in result["compressed"]}
    assert comp == {(f"{k} {op} compressed", e, lv) for k in "AV" for op in ("write", "read") for e in (64, 4096) for lv in (1, 9)}
    for r in result["a_section"] + result["v_section"] + result["compressed"]:
        assert r["ratio"] > 0 and r["scda_s"]["min"] <= r["scda_s"]["median"] <= r["scda_s"]["max"]
    assert len(result["entries"]["format_per_s_by_rank"]) == 2
    assert [(c["elem_size"], c["level"]) for c in result["compression"]] == [(64, 1), (64, 9), (4096, 1), (4096, 9)]
    assert result["machine"]["cpus"] >= 1
    assert "ratio" in stdout
    assert not list(tmp_path.glob("amrckpt-bench-*"))  # cleaned up


def test_bench_peers_quick(tmp_path: Path) -> None:
    result, stdout = run_quick("bench_peers.py", tmp_path)
    cases = {(r["case"], r["op"], r["regime"]) for r in result["rows"]}
    for case in ("scda", "scda serial", "raw MPI-IO", "numpy"):
        assert {(case, op, reg) for op in ("write", "read") for reg in ("new", "warm")} <= cases
    assert ("scda gzip", "write", "new") in cases
    for peer in ("h5py", "adios2"):  # optional peers: measured if installed, else skipped with a message
        assert ((peer, "write", "new") in cases) == (peer in result["versions"])
        if peer not in result["versions"]:
            assert f"{peer} is not installed" in stdout
    assert all(r["ratio"] > 0 and r["file_over_data"] > 0 for r in result["rows"])
    assert not list(tmp_path.glob("amrckpt-bench-*"))


def test_bench_scaling_quick(tmp_path: Path) -> None:
    result, _ = run_quick("bench_scaling.py", tmp_path)
    assert [r["leaves"] for r in result["runs"]] == [10_000, 100_000]
    for r in result["runs"]:
        assert set(r["ops"]) == {"save new", "raw write new", "save warm", "raw write warm", "load", "raw read"}
        assert all(len(o["by_rank_median_s"]) == 2 for o in r["ops"].values())
        assert all(v > 0 for v in r["over_raw"].values())
    assert not list(tmp_path.glob("amrckpt-bench-*"))


def test_plot_performance(tmp_path: Path) -> None:
    """The figures and tables of docs/performance.md, regenerated from the committed results into a copy."""
    doc = tmp_path / "performance.md"
    doc.write_text((REPO / "docs" / "performance.md").read_text())
    cmd = [sys.executable, str(REPO / "benchmarks" / "plot_performance.py"), "--img", str(tmp_path / "img"), "--doc", str(doc)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (tmp_path / "img").glob("*.png")) == sorted(
        p.name for p in (REPO / "docs" / "img").glob("perf-*.png")
    )
    assert doc.read_text() == (REPO / "docs" / "performance.md").read_text()  # the committed doc is up to date


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


def test_bench_ranks_quick(tmp_path: Path) -> None:
    result, _ = run_quick("bench_ranks.py", tmp_path)
    assert set(result["over_raw"]) == {"save", "load"}
    save = result["counts"]["save"]
    assert save["max"].get("mpiio.Write_at", 0) == 0 and save["max"]["mpiio.Write_all"] == 1  # one collective write
    assert save["comm_collectives"] <= 1 + 5 + result["fields"]  # 1: the call's bounded meeting (Call.meet)
    load = result["counts"]["load"]
    assert load["max"].get("mpiio.Read_at", 0) == 0 and load["max"]["mpiio.Read_all"] <= 2  # collective reads only
    assert load["comm_collectives"] <= 1 + 5  # the meeting, then 5 whatever the number of fields
    assert result["tracemalloc"]["save"]["peak_max"] > 0


def test_bench_constants_quick(tmp_path: Path) -> None:
    result, _ = run_quick("bench_constants.py", tmp_path)
    assert {"barrier", "allreduce_8xint64", "set_view_write_all_1kB"} <= set(result["seconds"])


def test_bench_cache_quick(tmp_path: Path) -> None:
    result, stdout = run_quick("bench_cache.py", tmp_path)
    modes = {"cached", "cached+partner", "cached, no CRC32 (ablation)", "direct", "raw", "raw, overwriting"}
    modes |= {"cached, between direct saves", "restart from cache", "restart from directory"}
    assert set(result["seconds"]) == modes
    assert result["ratios"]["cached_over_raw"] > 0 and result["ratios"]["cached_over_direct"] > 0
    assert result["ratios"]["cached_over_raw_overwriting"] > 0 and result["ratios"]["cached_between_direct_saves_over_raw"] > 0
    assert result["ratios"]["restart_cache_over_directory"] > 0 and result["ratios"]["ablation_cached_without_crc32_over_raw"] > 0
    assert "cached / raw" in stdout and "restart from the cache (in place)" in stdout


def test_bench_end_to_end_quick(tmp_path: Path) -> None:
    """Save and load against raw MPI-IO of the same bytes, and compress=True against h5py (where installed)."""
    result, out = run_quick("bench_end_to_end.py", tmp_path)
    assert result["benchmark"] and result["hp"] and result["machine"]["git"] is not None
    assert "ratio" in out


def test_bench_adapt_quick(tmp_path: Path) -> None:
    result, stdout = run_quick("bench_adapt.py", tmp_path)
    assert set(result["seconds"]) == {"load coarse", "refine", "load fine", "coarsen"}
    assert set(result["ratios"]) == {"refine / load coarse", "refine / load fine", "coarsen / load fine"}
    assert set(result["ratios_fastest"]) == set(result["ratios"])
    assert all(v > 0 for v in result["ratios"].values()) and "refine / load fine" in stdout
