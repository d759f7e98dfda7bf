#!/usr/bin/env python3
"""The checkpoint directory's campaign: SIGKILL during background saves at P = 4, and disk-full at random points.

Usage::

    python tests/slow/directory_campaign.py [--kills 40] [--enospc 24] [--seed 1] [--json bench-results/directory-campaign.json]

Kills: each trial starts ``tests/kill_job.py`` on 4 ranks saving every step in the background
(a save is nearly always in flight), SIGKILLs the whole job at a random moment after its first commit
(often in the middle of a save: a temporary file is left), then checks that
every checkpoint under its final name verifies and has its records (run
record, step record describing it), and restarts on Q = 1..3 ranks: the
restored step is at least the last one reported committed, bit for bit, and
the restart left no temporary file.

Disk full (root, Linux: a 2 MiB tmpfs per trial): each trial runs
``tests/directory_job.py enospc-run`` on P = 1, 2 or 3 ranks (MPI-IO or POSIX,
blocking or background saves), saving every step with a metric while rank 0
fills the disk at a random step to a random number of free bytes, then frees
it.  Every failed save must raise ScdaIOError with errno ENOSPC on every
rank; nothing may be lost: the steps left are exactly those the retention
policy keeps among the saves that succeeded, each with its metric, all
verify, the newest restores bit for bit, no temporary file stays, and no job
hangs (a watchdog ends it).  Exits 1 unless every trial passed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/

from directory_job import LOSS
from killing import kill_once, mpiexec
from small_fs import can_mount, tmpfs

from amrckpt.manager import CheckpointDirectory

HERE = Path(__file__).resolve().parent


def records_of_every_checkpoint(d: Path) -> str:
    """Every checkpoint under its final name has its records, describing it ("" if so)."""
    cd = CheckpointDirectory(d)
    note = ""
    for step, name in cd.listing().checkpoints.items():
        _, problem = cd.read_record(step, cd.check(step).info)
        if problem is not None or not (d / (name + ".run.json")).is_file():
            note += f"{name}: {problem or 'no run record'}; "
    return note


def kills(root: Path, n: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for k in range(n):
        d = root / f"kill-{k}"
        d.mkdir()
        Q = rng.randint(1, 3)
        delay = rng.uniform(0.0, 1.2)
        in_save = rng.uniform(0.0, 0.01) if k % 2 else None  # every other kill aimed inside a save
        kw: dict[str, Any] = {"background": True, "every": 1, "step_seconds": 0.0, "after_first_commit": True, "in_save": in_save}
        t = kill_once(d, 4, Q, delay, inspect=records_of_every_checkpoint, **kw)
        left = sorted(p.name for p in d.iterdir() if ".partial-" in p.name or ".previous-" in p.name)
        note = t.note + (f"the restart left {left}; " if left else "") + records_of_every_checkpoint(d)
        rows.append(
            {"P": 4, "Q": Q, "delay": round(delay, 3), "in_save": in_save, "committed": t.committed, "restored": t.restored}
            | {"mid_save": t.mid_save, "ok": t.recovered and not note, "note": note}
        )
        print(
            f"kill {k}: Q={Q} delay {delay:.2f} s{' (then inside a save)' if in_save is not None else ''}, "
            f"committed {t.committed}, restored {t.restored}, "
            f"{'mid-save, ' if t.mid_save else ''}{'ok' if rows[-1]['ok'] else 'PROBLEM: ' + note}",
            flush=True,
        )
        shutil.rmtree(d, ignore_errors=True)
    return rows


def expected_steps(saved: list[int]) -> list[int]:
    """What KeepBest("loss", 2) | KeepLast(2) leaves after the saves ``saved`` (in order), never the newest."""
    have: list[int] = []
    for s in saved:
        have = sorted({*have, s})
        best = sorted(have, key=lambda t: (LOSS[t], -t))[:2]
        have = sorted(set(best) | set(have[-2:]) | {s})
    return have


def enospc_trial(root: Path, seed: int, P: int, backend: str, background: bool) -> dict[str, Any]:
    with tmpfs(root / f"small-{seed}") as d:
        cmd = [mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", str(HERE.parent / "directory_job.py"), "enospc-run"]
        cmd += [str(d), "--backend", backend, "--seed", str(seed)] + (["--background"] if background else [])
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return {"ok": False, "note": "the job hung (killed after 300 s)", "enospc": 0}
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or len(lines) != 1:
        return {"ok": False, "note": f"the job failed (exit {out.returncode}): {out.stderr[-1500:]}", "enospc": 0}
    r = json.loads(lines[0].removeprefix("RESULT "))
    events = r["events"]
    note = ""
    if any(e != events[0] for e in events):
        note += "the ranks saw different outcomes; "
    failed = [e for e in events[0] if e[1] != "ok"]
    if any((c, e) != ("ScdaIOError", 28) for _, c, e in failed):
        note += f"a failure other than ScdaIOError(ENOSPC): {failed}; "
    saved = [s for s, c, _ in events[0] if c == "ok"]
    want = expected_steps(saved)
    if r["steps"] != want:
        note += f"steps {r['steps']}, retention keeps {want}; "
    if r["metrics"] != {str(s): {"loss": LOSS[s]} for s in r["steps"]}:
        note += f"metrics lost or wrong: {r['metrics']}; "
    if r["restored"] != (saved[-1] if saved else None) or not all(r["equal"]):
        note += f"restored {r['restored']} (equal: {r['equal']}), newest saved {saved[-1] if saved else None}; "
    if not r["verified"]:
        note += "a checkpoint does not verify; "
    if r["left"]:
        note += f"temporary files left: {r['left']}; "
    return {"ok": not note, "note": note, "enospc": len(failed), "spec": r["spec"], "saved": saved, "steps": r["steps"]}


def enospc(root: Path, n: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for k in range(n):
        P, backend, background = (1, 2, 3)[k % 3], ("mpiio", "posix")[(k // 3) % 2], k % 2 == 1
        t0 = time.time()
        row = {"seed": seed * 1000 + k, "P": P, "backend": backend, "background": background}
        row |= enospc_trial(root, seed * 1000 + k, P, backend, background)
        rows.append(row)
        print(
            f"enospc {k}: P={P} {backend}{' background' if background else ''}: {row['enospc']} saves failed with ENOSPC, "
            f"{'ok' if row['ok'] else 'PROBLEM: ' + row['note']} ({time.time() - t0:.1f} s)",
            flush=True,
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--enospc", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="amrckpt-directory-") as tmp:
        killed = kills(Path(tmp), a.kills, random.Random(a.seed))
        t_kills = time.time() - t0
        why = can_mount()
        full = enospc(Path(tmp), a.enospc, a.seed) if why is None else []
    bad = [r for r in killed + full if not r["ok"]]
    hit = sum(r["enospc"] > 0 for r in full)
    print(
        f"kills at P = 4 during background saves: {len(killed)} tried, {sum(r['ok'] for r in killed)} recovered bit for bit, "
        f"{sum(r['mid_save'] for r in killed)} in the middle of a save ({t_kills:.0f} s)"
    )
    if why is None:
        print(
            f"disk full: {len(full)} trials, {hit} with saves that failed with ENOSPC "
            f"({sum(r['enospc'] for r in full)} failed saves), {sum(r['ok'] for r in full)} with nothing lost "
            f"({time.time() - t0 - t_kills:.0f} s)"
        )
    else:
        print(f"disk full: not run ({why})")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        doc = {"kills": killed, "enospc": full, "seconds": round(time.time() - t0)}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if not bad and (why is not None or hit >= min(20, a.enospc)) else 1


if __name__ == "__main__":
    sys.exit(main())
