"""The checkpoint directory's file-system faults under real mpiexec, at P = 1 and 3 (jobs of tests/directory_job.py).

Each test failed before the directory became one object (the commit with
its records, agreed rank-0 steps) and MPI-IO errors got their errno:

* ``enospc``: a full disk under MPI-IO raised ``ScdaIOError`` with errno 5
  (EIO) instead of ENOSPC (ROMIO reports a failed write as ``MPI_ERR_IO``);
* ``eacces``: one rank that cannot open a file made every rank raise errno 5
  (the others' "open failed on a remote node" won the agreement);
* ``full-open``: a manager opened on a full disk raised (the lock's owner
  line could not be written) instead of opening;
* ``records-full``: the checkpoint committed without its records, whose
  metrics were lost; ``KeepBest | KeepLast`` then deleted the best step;
* ``prefix``: a relative directory ``ufs:y`` was opened by ROMIO as ``y``;
* a parallel ``python -m mpi4py -m amrckpt verify`` of a damaged file ended in
  ``MPI_Abort`` messages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from killing import mpiexec
from small_fs import can_mount, tmpfs

import amrckpt as ac

HERE = Path(__file__).resolve().parent
JOB = HERE / "directory_job.py"


def job(case: str, P: int, d: Path, backend: str = "mpiio") -> dict[str, Any]:
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", str(JOB), case, str(d), "--backend", backend]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and len(lines) == 1, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[0].removeprefix("RESULT "))
    return result


def needs_root() -> None:
    why = can_mount()
    if why is not None:
        pytest.skip(why)


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("backend", ["mpiio", "posix"])
def test_a_full_disk_is_enospc_on_every_rank(tmp_path: Path, P: int, backend: str) -> None:
    needs_root()
    with tmpfs(tmp_path / "small") as d:
        r = job("enospc", P, d, backend)
    assert [(c, e) for c, e, _ in r["save"]] == [("ScdaIOError", 28)] * P, r["save"]
    assert r["again"] == [["ok", None, ""]] * P and r["steps"] == [1, 3]


@pytest.mark.parametrize("P", [1, 3])
def test_one_rank_that_cannot_open_a_file_is_eacces_on_every_rank(tmp_path: Path, P: int) -> None:
    needs_root()  # a rank drops root's rights
    d = tmp_path / "perm"
    d.mkdir()
    r = job("eacces", P, d)
    assert [(c, e) for c, e, _ in r["open"]] == [("ScdaPermissionError", 13)] * P, r["open"]
    assert r["verify"] == [[False, ["unreadable"]]] * P


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("backend", ["mpiio", "posix"])
def test_a_manager_opens_on_a_full_disk(tmp_path: Path, P: int, backend: str) -> None:
    needs_root()
    with tmpfs(tmp_path / "small") as d:
        r = job("full-open", P, d, backend)
    assert r["open"] == [["ok", None, ""]] * P, r["open"]
    for restored, failed, steps in r["restored"]:
        assert restored == 1 and failed[:2] == ["ScdaIOError", 28] and steps == [1, 3]
    assert r["later"] == [["ok", None, ""]] * P


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("backend", ["mpiio", "posix"])
def test_metrics_are_never_lost_and_the_best_step_never_deleted(tmp_path: Path, P: int, backend: str) -> None:
    needs_root()
    with tmpfs(tmp_path / "small") as d:
        r = job("records-full", P, d, backend)
    assert [(c, e) for c, e, _ in r["full"]] == [("ScdaIOError", 28)] * P, r["full"]  # the commit failed: nothing of step 4
    assert r["steps_full"] == [2, 3]
    assert r["steps"] == [4, 5] and r["metrics"] == {"4": {"loss": 0.1}, "5": {"loss": 0.2}}


@pytest.mark.parametrize("P", [1, 3])
def test_a_directory_named_like_a_romio_prefix(tmp_path: Path, P: int) -> None:
    r = job("prefix", P, tmp_path)
    assert r["save"] == [[["ok", None, ""], [1]]] * P and r["verified"]
    names = (
        "amrckpt-history.jsonl",
        "ckpt-000000000001.scda",
        "ckpt-000000000001.scda.run.json",
        "ckpt-000000000001.scda.step.json",
    )
    assert r["files"] == [f"ufs:y/{n}" for n in names]


@pytest.mark.parametrize("P", [1, 3])
def test_parallel_verify_of_a_damaged_file_exits_1_without_mpi_abort(tmp_path: Path, P: int) -> None:
    from checkpoint_cases import global_state

    g = global_state(seed=1, max_level=3)
    path = tmp_path / "c.scda"
    ac.save(g.local(0, g.N), path)
    blob = bytearray(path.read_bytes())
    blob[ac.read_info(path).index.entry("rho").offset + 100] ^= 1
    path.write_bytes(blob)
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", "-m", "amrckpt", "verify", "--no-progress", str(path)]
    for _ in range(3):  # the end of the job races with nothing: the same every time
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 1, out.stdout + out.stderr
        assert out.stdout.startswith("DAMAGED ") and out.stdout.count("DAMAGED") == 1  # rank 0 prints
        assert out.stderr == "" and "TERMINATION" not in out.stdout, out.stdout + out.stderr
