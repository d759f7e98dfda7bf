"""Kill a checkpointing MPI job with SIGKILL and check what a restart finds (shared by the tests and the campaign)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import amrckpt as ac

HERE = Path(__file__).resolve().parent


def mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    assert exe, "mpiexec comes with the test extra (the mpich wheel)"
    return exe


def job(P: int, directory: Path, *args: str) -> list[str]:
    return [mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", str(HERE / "kill_job.py"), str(directory), *args]


@dataclass
class Trial:
    """One kill: how many steps had committed, what a restart on Q ranks restored."""

    P: int
    Q: int
    delay: float
    committed: int | None
    restored: int | None
    files: int
    recovered: bool
    note: str = ""
    mid_save: bool = False  # the kill left a partial file: it struck in the middle of a save


def kill_once(
    directory: Path,
    P: int,
    Q: int,
    delay: float,
    *,
    background: bool = False,
    every: int = 2,
    after_first_commit: bool = False,
    inspect: Callable[[Path], str] | None = None,
    step_seconds: float | None = None,
    level: int = 7,
    in_save: float | None = None,
) -> Trial:
    """Start a job on P ranks, SIGKILL the whole job after ``delay`` s, restore on Q ranks (threads) and check.

    With ``after_first_commit`` the delay counts from the first committed
    checkpoint (at most 120 s after the start), so that a loaded machine,
    slow to start the job, still kills it in the middle of its work.
    ``inspect(directory)``, called between the kill and the restart,
    returns what it finds wrong ("" if nothing).  ``step_seconds``: the
    job's computation per step (default: kill_job.py's); ``level``: the
    forests' deepest level (the checkpoints' size).  With ``in_save``,
    after the delay the kill waits (at most 10 s) until a save's temporary
    file is there, then ``in_save`` seconds more: a kill inside a save.
    """
    args = ["--steps", "100000", "--every", str(every)] + (["--background"] if background else [])
    args += ["--step-seconds", str(step_seconds)] if step_seconds is not None else []
    args += ["--level", str(level)]
    proc = subprocess.Popen(job(P, directory, *args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if after_first_commit:
        deadline = time.monotonic() + 120
        while not any(directory.glob("ckpt-*.scda")) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
    time.sleep(delay)
    if in_save is not None:
        ranks = [p for p in _matching(str(directory)) if p != proc.pid]  # found before: the kill itself must be quick
        deadline = time.monotonic() + 10
        while not any(".partial-" in n for n in os.listdir(directory)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.0002)
        time.sleep(in_save)
        for p in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    kill_tree(proc.pid, str(directory))
    out, _ = proc.communicate()
    committed = [int(line.split()[1]) for line in out.decode().splitlines() if line.startswith("COMMITTED")]
    last = max(committed) if committed else None
    files = sorted(directory.glob("ckpt-*.scda"))
    mid_save = any(directory.glob(".ckpt-*.partial-*"))
    note = ""
    for f in files:  # a file under a final name is complete and intact, always
        report = ac.verify(f)
        if not report.ok:
            note += f"{f.name} does not verify: {report.problems}; "
    if inspect is not None:
        note += inspect(directory)

    # The restart: a new MPI job on Q ranks restores and compares bit for bit.
    restart = subprocess.Popen(
        job(Q, directory, "--check-restore", "--every", str(every), "--level", str(level)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = restart.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        # A hang is a finding, not a crash of the campaign: say where every rank waits, keep the directory, go on.
        kept = Path(tempfile.mkdtemp(prefix="amrckpt-hang-"))
        shutil.copytree(directory, kept / directory.name, symlinks=True)
        stacks = _stacks(_matching(str(directory)))
        kill_tree(restart.pid, str(directory))
        stdout, stderr = restart.communicate()
        stderr += f"\nTIMEOUT after 300 s; the directory is kept as {kept}; where the ranks wait:\n{stacks}"
    said = [line.split() for line in stdout.splitlines() if line.startswith("RESTORED")]
    restored: int | None = None
    if restart.returncode != 0 or len(said) != 1:
        note += f"the restart on {Q} ranks failed: {stderr[-3000:]}; "
    elif said[0][1] != "none":
        restored = int(said[0][1])
        if said[0][2] != "equal":
            note += f"the restored step {restored} differs from the state saved; "
    if last is not None and (restored is None or restored < last):
        note += f"restored {restored}, but step {last} had committed; "
    if restored is not None and restored % every:
        note += f"restored step {restored} is not a checkpoint step; "
    return Trial(P, Q, delay, last, restored, len(files), not note, note, mid_save)


def _stacks(pids: list[int]) -> str:
    """Python stacks of the processes ``pids`` (py-spy dump, where installed), for a report of a hang."""
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if spy is None:
        return "(py-spy is not installed: no stacks)"
    out = []
    for pid in pids:
        got = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60, check=False)
        out.append(got.stdout[-2500:] or got.stderr[-300:])
    return "\n".join(out)


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _matching(text: str) -> list[int]:
    out = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmd.read_bytes():
                out.append(int(cmd.parent.name))
        except OSError:
            continue
    return out


def remove_orphaned_mpich_shm(shm: Path = Path("/dev/shm")) -> list[str]:
    """Unlink the shared-memory segments of killed MPICH jobs: ours, and open or mapped by no process; return their names.

    MPICH unlinks a node's segment once its ranks have attached; a job
    killed before that leaves it behind (4 MB each, a hundred per CI run),
    and a machine whose /dev/shm fills up measures every benchmark under
    memory pressure.  A segment that any process holds open or mapped (a
    job starting) is kept.
    """
    try:
        mine = [p for p in shm.glob("mpich_shm_*") if p.lstat().st_uid == os.getuid()]
    except OSError:
        return []
    if not mine:
        return []
    used: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for line in (proc / "maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6:
                    used.add(fields[5])
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    used.add(os.readlink(fd))
    removed = []
    for p in mine:
        if str(p) not in used:
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p.name)
    return removed


def kill_tree(pid: int, marker: str | None = None, timeout: float = 30.0) -> None:
    """SIGKILL a job: a process, all its descendants, and every process whose command line has ``marker``.

    hydra puts each rank in a session of its own, and a rank forked while the
    job is being killed is missed by a snapshot of the tree; the job's
    directory on every rank's command line finds them all.  Repeats until
    none is alive; then removes the MPICH segments the job left
    (:func:`remove_orphaned_mpich_shm`).
    """
    deadline = time.time() + timeout
    while True:
        children = _children()
        tree, todo = [], [pid]
        while todo:
            p = todo.pop()
            tree.append(p)
            todo.extend(children.get(p, []))
        if marker is not None:
            tree += _matching(marker)
        alive = [p for p in tree if _alive(p)]
        if not alive:
            remove_orphaned_mpich_shm()  # a rank killed before MPICH unlinked its segment leaves it in /dev/shm
            return
        if time.time() > deadline:
            raise AssertionError(f"processes {alive} survive SIGKILL")
        for p in alive:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def campaign(root: Path, trials: int, seed: int = 0, *, max_delay: float = 5.0) -> list[Trial]:
    """Run ``trials`` random kills (P != Q in 1..4, blocking or background saves, random moments)."""
    rng = random.Random(seed)
    out = []
    for k in range(trials):
        d = root / f"trial-{k}"
        d.mkdir(parents=True)
        P = rng.randint(1, 4)
        Q = rng.choice([q for q in range(1, 5) if q != P])  # the restart always has another job size
        t = kill_once(d, P, Q, rng.uniform(0.8, max_delay), background=rng.random() < 0.3)
        out.append(t)
        shutil.rmtree(d, ignore_errors=True)
    return out
