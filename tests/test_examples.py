"""The examples run, at small sizes, so that they cannot rot.

``restart_demo.py --quick --ranks 3,2,1`` is the issue's CI form of the demo:
a job on 3 ranks is killed with SIGKILL, restarts on 2, and must end
bit-identical to an uninterrupted run on 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def python(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def test_restart_demo_quick_is_bit_identical(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("tqdm")
    pytest.importorskip("psutil")
    r = python(str(EXAMPLES / "restart_demo.py"), "--quick", "--ranks", "3,2,1", "--workdir", str(tmp_path / "demo"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BIT-IDENTICAL" in r.stdout
    assert "A was killed with SIGKILL after step" in r.stdout
    png = tmp_path / "demo" / "final_mesh.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "B: --restart latest" in r.stdout and "leaves/s per rank" in r.stdout


def test_advection_runs_serially_and_restarts_with_restart_latest(tmp_path: Path) -> None:
    """Without mpiexec (a singleton MPI process): run to step 12, then continue to 24 from the newest checkpoint."""
    pytest.importorskip("mpi4py")
    small = ["--min-level", "3", "--max-level", "5", "--checkpoint-every", "6", "--json", "--dir", "ck"]
    first = python(str(EXAMPLES / "advection_amr.py"), *small, "--steps", "12", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    again = python(str(EXAMPLES / "advection_amr.py"), *small, "--steps", "24", "--restart", "latest", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    events = [json.loads(line) for line in again.stdout.splitlines()]
    start = next(e for e in events if e["event"] == "start")
    assert start["restored"] is True and start["step"] == 12
    done = events[-1]
    assert done["event"] == "done" and done["step"] == 24 and all(r > 0 for r in done["leaves_per_second_per_rank"])
    assert sorted(p.name for p in (tmp_path / "ck").glob("*.scda"))[-1] == "ckpt-000000000024.scda"


def test_restart_latest_without_checkpoints_starts_fresh(tmp_path: Path) -> None:
    pytest.importorskip("mpi4py")
    r = python(
        str(EXAMPLES / "advection_amr.py"),
        "--min-level",
        "3",
        "--max-level",
        "4",
        "--steps",
        "2",
        "--restart",
        "latest",
        "--json",
        "--dir",
        "ck",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    start = json.loads(r.stdout.splitlines()[0])
    assert start["event"] == "start" and start["restored"] is False and start["step"] == 0


def test_restart_demo_refuses_a_foreign_directory_and_keeps_it(tmp_path: Path) -> None:
    work = tmp_path / "mine"
    (work / "results").mkdir(parents=True)
    (work / "thesis.tex").write_text("months of work")
    (work / "results" / "run1.h5").write_bytes(b"data")
    r = python(str(EXAMPLES / "restart_demo.py"), "--quick", "--workdir", str(work), cwd=tmp_path)
    assert r.returncode != 0
    assert "the demo did not make" in r.stderr
    assert (work / "thesis.tex").read_text() == "months of work" and (work / "results" / "run1.h5").read_bytes() == b"data"
    assert sorted(p.name for p in work.iterdir()) == ["results", "thesis.tex"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = python(str(EXAMPLES / "restart_demo.py"), "--quick", "--workdir", str(afile), cwd=tmp_path)
    assert r.returncode != 0 and "not a directory" in r.stderr and afile.read_text() == "x"


def test_restart_demo_workdir_removes_only_its_own_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import restart_demo

    new = tmp_path / "new"
    restart_demo.prepare_workdir(new)  # a new directory: made and marked
    assert (new / restart_demo.MARKER).is_file()
    (new / "resumed").mkdir()
    (new / "resumed" / "ckpt-000000000020.scda").write_bytes(b"old")
    (new / "final_mesh.png").write_bytes(b"old")
    (new / "notes.txt").write_text("the user's")
    restart_demo.prepare_workdir(new)  # an earlier run's directory: only the demo's entries go
    assert sorted(p.name for p in new.iterdir()) == [restart_demo.MARKER, "notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    restart_demo.prepare_workdir(empty)
    assert [p.name for p in empty.iterdir()] == [restart_demo.MARKER]


def test_advection_with_a_node_cache_flushes_and_restarts_on_another_process_count(tmp_path: Path) -> None:
    """examples/slurm/cache.sbatch's command at small size: 2 ranks save into a node cache, flush every 6 steps and at
    the end (the flushed files are a direct save's bytes); a job on 3 ranks then continues from the newest flushed file."""
    pytest.importorskip("mpi4py")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    if not Path(mpiexec).exists():
        pytest.skip("no mpiexec beside the interpreter (pip install mpich)")
    small = ["--min-level", "3", "--max-level", "5", "--checkpoint-every", "3", "--json", "--dir", "ck"]
    cache = ["--cache", str(tmp_path / "cache-{node}"), "--flush-every", "6"]

    def job(P: int, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [mpiexec, "-n", str(P), sys.executable, "-m", "mpi4py", str(EXAMPLES / "advection_amr.py"), *small, *args]
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)

    first = job(2, "--steps", "12", *cache)
    assert first.returncode == 0, first.stderr[-3000:]
    flushed = sorted(p.name for p in (tmp_path / "ck").glob("ckpt-*.scda"))
    assert flushed and flushed[-1] == "ckpt-000000000012.scda", flushed  # the close flushed the newest cached step
    assert list(tmp_path.glob("cache-*")), "nothing was cached on the node"
    again = job(3, "--steps", "18", "--restart", "latest", *cache)
    assert again.returncode == 0, again.stderr[-3000:]
    events = [json.loads(line) for line in again.stdout.splitlines() if line.startswith("{")]
    start = next(e for e in events if e["event"] == "start")
    assert start["restored"] is True and start["step"] == 12, start
    assert events[-1]["event"] == "done" and events[-1]["step"] == 18


def test_advection_restarts_one_level_finer_and_back_keeping_the_mass(tmp_path: Path) -> None:
    """A coarse run, continued one level finer (load(adapt=Refine)), then one level coarser (Coarsen, Balance)."""
    pytest.importorskip("mpi4py")
    small = ["--min-level", "3", "--max-level", "5", "--checkpoint-every", "6", "--json", "--dir", "ck"]

    def run(*args: str) -> list[dict[str, Any]]:
        r = python(str(EXAMPLES / "advection_amr.py"), *small, *args, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        return [e for e in map(json.loads, r.stdout.splitlines()) if e["event"] in ("start", "done")]

    coarse = run("--steps", "12")
    fine = run("--steps", "18", "--restart", "latest", "--adapt", "refine")
    back = run("--steps", "24", "--restart", "latest", "--adapt", "coarsen")
    for before, after in ((coarse[-1], fine[0]), (fine[-1], back[0])):
        assert after["event"] == "start" and after["restored"] and after["step"] == before["step"]
        assert after["mass"] == pytest.approx(before["mass"], rel=1e-14, abs=0)
    assert fine[0]["leaves"] == 4 * coarse[-1]["leaves"]
    assert back[0]["leaves"] < fine[-1]["leaves"]
