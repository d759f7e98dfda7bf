"""A failure at every OS call site amrckpt reaches on a collective path, under real ``mpiexec`` (issue 33).

The rule: no OS call (open, read, write, close, fsync, rename, unlink,
mmap, thread start...) on a collective path may raise past the agreement on
one rank.  ``tests/os_sweep_job.py`` wraps every such primitive in the job's
processes, counts the calls amrckpt makes during one save (direct, MPI-IO,
background, node cache with partner copies and a flush) or one
``restore_latest``, and then runs the operation again once per call, with
that call failing (``EIO``; ``ENOMEM`` for ``mmap``; a thread that cannot
start) on rank 0, on the last rank, or on every rank.  Every run must end
on every rank the same way, within the collective timeout: ``ok``, or one
error of amrckpt's tree that carries the errno (``ScdaIOError``,
``ManagerIOError``) or says a thread could not start; never a hang, a
foreign exception or an error without its errno.  At the end, a restart
without faults must restore the newest step whose save returned, bit for
bit, with nothing set aside as damaged.  A call site added later is swept
by the same test, with no list to keep.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "os_sweep_job.py"
CLEAN = {("ScdaIOError", 5), ("ManagerIOError", 5), ("ScdaIOError", 12), ("ManagerIOError", 12), ("ThreadStartError", None)}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="MPI jobs are run on Linux")

CASES = [
    ("direct", "0", 2),
    ("direct", "last", 2),
    ("direct", "all", 3),
    ("mpiio", "0", 3),
    ("background", "last", 2),
    ("background", "all", 2),
    ("cached", "0", 2),
    ("cached", "last", 2),
    ("cached", "all", 3),
    ("restore", "0", 2),
    ("restore", "all", 3),
]


def _mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found (install the test extra: pip install -e '.[test]')")
    return exe


@pytest.mark.parametrize(("mode", "failing", "P"), CASES, ids=[f"{m}-{f}-P{p}" for m, f, p in CASES])
def test_a_failure_at_every_os_call_is_one_agreed_error(tmp_path: Path, mode: str, failing: str, P: int) -> None:
    out = tmp_path / "out.json"
    env = dict(os.environ, AMRCKPT_COLLECTIVE_TIMEOUT="10", PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    cmd = [_mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", str(JOB), mode, failing, str(tmp_path), str(out)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the sweep hung: {str(exc.stderr)[-5000:]}") from exc
    assert p.returncode == 0, p.stderr[-8000:]  # the stall watchdog ends a job stuck inside MPI: a failure here
    doc = json.loads(out.read_text())
    assert doc["calls"] > 0 or (mode, failing) == ("restore", "last"), doc["calls"]
    problems = []
    for runs in zip(*doc["ranks"], strict=True):  # one run per failing call: every rank's outcome
        k, *_ = runs[0]
        ends = {(r[1], r[2]) for r in runs}
        if len(ends) != 1:
            problems.append(f"call {k}: not agreed: {runs}")
        elif ends.pop() not in CLEAN | {("ok", None)}:
            problems.append(f"call {k} ({runs[0][4] or 'site not seen'}): {runs[0][1]} errno={runs[0][2]}: {runs[0][3]}")
    assert not problems, "\n".join(problems)
    assert (doc["restored"], doc["equal"]) == (doc["returned"], True), doc
    assert not [n for n in doc["aside"] if ".damaged-" in n], doc["aside"]
