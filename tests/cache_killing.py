"""Kill a job that saves into node caches (two simulated nodes) and check what a restart finds (tests and the slow campaign)."""

from __future__ import annotations

import hashlib
import random
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kill_job import state_at
from killing import kill_tree, mpiexec

import amrckpt as ac

HERE = Path(__file__).resolve().parent
LEVEL = 6


def job(P: int, root: Path, *args: str) -> list[str]:
    cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", str(HERE / "cache_job.py")]
    return [*cmd, str(root / "shared"), str(root / "cache"), "--level", str(LEVEL), *args]


@dataclass
class Run:
    """A killed job: the steps it reported cached, and whether it had ended on its own before the kill (a failure)."""

    cached: list[int]
    crashed: bool = False

    @property
    def last(self) -> int | None:
        return max(self.cached) if self.cached else None


def run_and_kill(
    root: Path, P: int, *, flush_every: int, after: int, delay: float, every: int = 2, extra: tuple[str, ...] = ()
) -> Run:
    """Start the job on P ranks, wait for ``after`` cached saves (at most 120 s), sleep ``delay`` s, SIGKILL it."""
    args = ["--steps", "100000", "--every", str(every), "--flush-every", str(flush_every), "--step-seconds", "0.01", *extra]
    proc = subprocess.Popen(job(P, root, *args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    buf = b""
    while sum(x.startswith("CACHED") for x in lines) < after and time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
            buf += chunk
            *done, rest = buf.split(b"\n")
            lines += [d.decode() for d in done]
            buf = rest
    time.sleep(delay)
    crashed = proc.poll() is not None  # the job runs 100000 steps: it ends before the kill only if it failed
    kill_tree(proc.pid, str(root / "shared"))
    out, _ = proc.communicate()
    lines += (buf + out).decode().splitlines()
    return Run([int(x.split()[1]) for x in lines if x.startswith("CACHED")], crashed)


def restart(root: Path, Q: int, *extra: str) -> tuple[int | None, str, str]:
    """Restore on Q ranks; return (step, "equal"/"unequal", "cache"/"directory"), or (None, problem, "")."""
    return restarted(restart_run(root, Q, *extra), Q)


def restart_run(root: Path, Q: int, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run the restart job on Q ranks (``cache_job.py --check-restore``, with ``extra`` options); return it, output captured."""
    return subprocess.run(job(Q, root, "--check-restore", *extra), capture_output=True, text=True, timeout=300)


def restarted(check: subprocess.CompletedProcess[str], Q: int) -> tuple[int | None, str, str]:
    """What :func:`restart` returns, from the restart job's output."""
    said = [line.split() for line in check.stdout.splitlines() if line.startswith("RESTORED")]
    if check.returncode != 0 or len(said) != 1:
        return None, f"the restart on {Q} ranks failed: {check.stderr[-2000:]}", ""
    if said[0][1] == "none":
        return None, "none", ""
    return int(said[0][1]), said[0][2], said[0][3]


def shared_files_ok(root: Path, every: int = 2) -> str:
    """Every file under a final name in the shared directory verifies and is a direct save's bytes ("" if so)."""
    note = ""
    for f in sorted((root / "shared").glob("ckpt-*.scda")):
        report = ac.verify(f)
        if not report.ok:
            note += f"{f.name} does not verify: {report.problems}; "
            continue
        step = int(f.name[5:17])
        direct = root / f"direct-{step}.scda"
        ac.save(state_at(step, None, every, LEVEL), direct)
        if hashlib.sha256(f.read_bytes()).digest() != hashlib.sha256(direct.read_bytes()).digest():
            note += f"{f.name} differs from a direct save of its state; "
        direct.unlink()
    return note


def wipe(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Trial:
    """One kill of a two-level job and its restart."""

    flush_every: int
    lost: str
    cached: int | None
    flushed: int | None
    restored: int | None
    source: str
    note: str

    @property
    def recovered(self) -> bool:
        return self.note == ""


def trial(root: Path, rng: random.Random) -> Trial:
    """Kill a P = 4 job on two simulated nodes at a random moment, lose a random part of the caches, restart, check."""
    flush_every = rng.choice([0, 2, 4])
    run = run_and_kill(root, 4, flush_every=flush_every, after=rng.randint(1, 6), delay=rng.uniform(0.0, 0.6))
    note = shared_files_ok(root) + ("the job failed before the kill; " if run.crashed else "")
    flushed = [int(f.name[5:17]) for f in (root / "shared").glob("ckpt-*.scda")]
    lost = rng.choice(["none", "node 0", "node 1", "every node"])
    if lost == "every node":
        wipe(root / "cache")
    elif lost != "none":
        wipe(root / "cache" / lost.split()[1])
    Q = 3 if lost == "every node" else 4
    step, equal, source = restart(root, Q)
    if step is None and equal != "none":
        note += equal
    elif step is not None and equal != "equal":
        note += f"the restored step {step} differs from the state saved; "
    want = (max(flushed) if flushed else None) if lost == "every node" else run.last
    if want is not None and (step is None or step < want):
        note += f"restored {step}, but step {want} was committed ({lost} lost); "
    if lost == "every node" and step is not None and source != "directory":
        note += f"restored from {source} with every cache gone; "
    return Trial(flush_every, lost, run.last, max(flushed) if flushed else None, step, source, note)


def campaign(root: Path, trials: int, seed: int = 0) -> list[Trial]:
    """Run ``trials`` random kills of two-level jobs (P = 4, two simulated nodes)."""
    rng = random.Random(seed)
    out = []
    for k in range(trials):
        d = root / f"trial-{k}"
        d.mkdir(parents=True)
        out.append(trial(d, rng))
        wipe(d)
    return out
