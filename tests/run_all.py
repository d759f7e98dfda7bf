#!/usr/bin/env python3
"""Run amrckpt's whole test suite: the serial tests, then the MPI tests at 1, 2, 3 and 4 processes.

First ``ruff check``, ``ruff format --check``, ``mypy --strict`` and
import-linter's contracts (the layers of the package, ``pyproject.toml``),
then the tests.

Usage::

    python tests/run_all.py                 # everything, as CI runs it
    python tests/run_all.py --quick         # without the tests marked slow
    python tests/run_all.py --nprocs 2,3    # MPI tests at these process counts only
    python tests/run_all.py -- -k interop   # extra pytest arguments for every run

Each MPI run is ``mpiexec -n P python -m mpi4py -m pytest --with-mpi -m mpi``:
``python -m mpi4py`` aborts the whole job when a rank dies, so a failure
cannot leave the other ranks waiting; a timeout bounds every run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in the repository, echoed and timed; return its exit code (124 on timeout)."""
    print("+", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.run(cmd, cwd=REPO, env=env, timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
        print(f"!! timed out after {timeout:.0f} s", flush=True)
        rc = 124
    print(f"-- exit {rc} after {time.monotonic() - t0:.1f} s", flush=True)
    return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip tests marked slow")
    ap.add_argument("--nprocs", default="1,2,3,4", help="process counts for the MPI tests (default 1,2,3,4)")
    ap.add_argument("--timeout", type=float, default=2700, help="seconds per run (the serial run: 25 to 30 min on 2 shared cores)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    marks = "not slow" if args.quick else ""
    failures = []

    for name, cmd in (
        ("ruff", [sys.executable, "-m", "ruff", "check", "amrckpt", "tests", "benchmarks", "examples"]),
        ("ruff format", [sys.executable, "-m", "ruff", "format", "--check", "amrckpt", "tests", "benchmarks", "examples"]),
        ("mypy", [sys.executable, "-m", "mypy", "amrckpt"]),
        ("import contracts", [str(Path(sys.executable).parent / "lint-imports")]),
    ):
        if run(cmd, args.timeout, env):
            failures.append(name)

    serial = [sys.executable, "-m", "pytest", "-m", f"not mpi{' and ' + marks if marks else ''}", *args.pytest_args]
    if run(serial, args.timeout, env):
        failures.append("serial")

    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        print("!! mpiexec not found: install the test extra (pip install -e '.[test]') or an MPI", flush=True)
        return 1
    mpi_env = dict(env, HYPOTHESIS_PROFILE="mpi")
    for n in [int(x) for x in args.nprocs.split(",") if x]:
        cmd = [
            mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "pytest", "--with-mpi",
            "-m", f"mpi{' and ' + marks if marks else ''}", "-p", "no:cacheprovider", "-q", *args.pytest_args,
        ]  # fmt: skip
        if run(cmd, args.timeout, mpi_env):
            failures.append(f"mpi P={n}")

    print("FAILED: " + ", ".join(failures) if failures else "all test runs passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
