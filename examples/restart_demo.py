#!/usr/bin/env python3
"""The amrckpt demo: an AMR simulation is killed, restarts on another process count, and ends bit-identical.

Runs ``examples/advection_amr.py`` three times under ``mpiexec``:

A. on 4 processes with a checkpoint every 50 steps, killed with SIGKILL
   (every process of the job) in the middle of the run;
B. ``--restart latest`` on 3 processes in the same directory: it continues
   from the newest valid checkpoint (weighted repartition) and finishes;
C. the same simulation uninterrupted on 2 processes, in another directory.

Then it reads the two final checkpoints (serially), compares the sha256 of
every field (mesh, scalar, velocity, hp coefficients), prints a report and
draws the final mesh (leaves coloured by the scalar and by owning rank) to
``final_mesh.png``.  Exit status 0 only when the final states are
bit-identical.

Usage::

    python examples/restart_demo.py                 # the demo (1000 steps, levels 4..7; see the README for its time)
    python examples/restart_demo.py --steps 2000 --max-level 8 --checkpoint-every 100  # the longer run of earlier versions
    python examples/restart_demo.py --quick         # a small version (CI)
    python examples/restart_demo.py --ranks 3,2,1   # A on 3, B on 2, C on 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SIM = HERE / "advection_amr.py"
sys.path.insert(0, str(HERE))

import advection_amr as adv

import amrckpt as ac

MARKER = ".amrckpt-demo"  # written into the work directory: what the demo made, and so may empty again
OWN = ("resumed", "uninterrupted", "final_mesh.png")  # what the demo writes there


def prepare_workdir(work: Path) -> None:
    """Make ``work`` ready for a run, removing only what an earlier run of the demo made there.

    A missing or empty directory is used (and marked as the demo's); one that
    the demo marked before loses the demo's own entries (``OWN``) and keeps
    anything else; any other non-empty directory, or a file, is refused.

    Raises
    ------
    SystemExit
        If ``work`` is a file, or a non-empty directory the demo did not make.
    """
    if work.exists() and not work.is_dir():
        sys.exit(f"--workdir {work}: exists and is not a directory; choose another --workdir")
    work.mkdir(parents=True, exist_ok=True)
    if not (work / MARKER).is_file():
        if any(work.iterdir()):
            sys.exit(
                f"--workdir {work}: a non-empty directory the demo did not make (no {MARKER} in it); "
                "the demo removes only what it wrote itself: choose an empty or new --workdir"
            )
        (work / MARKER).write_text("made by examples/restart_demo.py; it removes resumed/, uninterrupted/, final_mesh.png\n")
    for name in OWN:
        entry = work / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        elif entry.exists() or entry.is_symlink():
            entry.unlink()


def mpiexec() -> str:
    """Return the mpiexec next to this Python (the ``mpich`` wheel's) or on PATH."""
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        sys.exit("mpiexec not found: pip install -e '.[local-mpi,examples]' installs the mpich wheel")
    return exe


@dataclass
class Run:
    """One job of the demo and what it reported."""

    name: str
    ranks: int
    args: list[str]
    kill_at: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    killed_after_step: int | None = None
    returncode: int | None = None

    def last(self, event: str) -> dict[str, Any] | None:
        """Return the newest event of this kind."""
        found = [e for e in self.events if e.get("event") == event]
        return found[-1] if found else None


def kill_job(proc: subprocess.Popen[str]) -> None:
    """SIGKILL mpiexec and every process it started (the ranks run in sessions of their own under hydra)."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        victims = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for p in victims:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=30)
    proc.wait()


def run_job(run: Run, total_steps: int, progress: bool) -> None:
    """Start ``run`` under mpiexec, follow its JSON progress with a bar, SIGKILL it at ``kill_at``."""
    from tqdm import tqdm

    cmd = [mpiexec(), "-n", str(run.ranks), sys.executable, "-m", "mpi4py", str(SIM), "--json", *run.args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout is not None
    bar = tqdm(
        total=total_steps, desc=f"{run.name} ({run.ranks} ranks)", unit="step", disable=None if progress else True, leave=True
    )  # None: a bar only on a terminal
    checkpoints = 0
    for line in proc.stdout:
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            print(line, end="", file=sys.stderr)
            continue
        run.events.append(e)
        if e["event"] == "start":
            bar.n = e["step"]
            bar.refresh()
        elif e["event"] == "step":
            bar.update(e["step"] - bar.n)
            bar.set_postfix(leaves=e["leaves"], checkpoints=checkpoints)
        elif e["event"] == "checkpoint":
            checkpoints += 1
        if run.kill_at is not None and e["event"] == "step" and e["step"] >= run.kill_at and checkpoints:
            run.killed_after_step = e["step"]
            kill_job(proc)
            bar.set_postfix_str(f"killed with SIGKILL after step {e['step']}")
            break
    bar.close()
    run.returncode = proc.wait()
    run.seconds = time.perf_counter() - t0
    if run.killed_after_step is None and run.returncode != 0:
        sys.exit(f"{run.name} failed with exit status {run.returncode}: {' '.join(cmd)}")


def plot(path: Path, out: Path, title: str) -> None:
    """Draw a checkpoint's mesh twice: leaves coloured by q, and by the rank that wrote them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    loaded = ac.load(path, adv.AdvectionState)
    st, writer = loaded.state, loaded.info.writer_partition
    m, p = st.mesh, st.params
    h = adv.leaf_size(m.level.astype(np.int64)) / adv.ROOT
    x0 = (m.tree % p.nx + m.x / adv.ROOT).astype(np.float64)
    y0 = (m.tree // p.nx + m.y / adv.ROOT).astype(np.float64)
    verts = np.stack(
        [np.stack([x0, y0], 1), np.stack([x0 + h, y0], 1), np.stack([x0 + h, y0 + h], 1), np.stack([x0, y0 + h], 1)], 1
    )
    owner = writer.owner(np.arange(len(m)))
    fig, axes = plt.subplots(2, 1, figsize=(10, 10.5), constrained_layout=True)
    for ax, values, cmap, label in (
        (axes[0], st.q, "viridis", "scalar q"),
        (axes[1], owner, plt.get_cmap("tab10", writer.size), f"owning rank (of {writer.size})"),
    ):
        pc = PolyCollection(verts, array=values, cmap=cmap, edgecolors="k", linewidths=0.08)
        if values is owner:
            pc.set_clim(-0.5, writer.size - 0.5)
        ax.add_collection(pc)
        ax.set_xlim(0, p.nx)
        ax.set_ylim(0, p.ny)
        ax.set_aspect("equal")
        ax.set_xlabel("x [m]")
        ax.set_ylabel("y [m]")
        fig.colorbar(pc, ax=ax, label=label, shrink=0.8, ticks=range(writer.size) if values is owner else None)
    axes[0].set_title(title)
    fig.savefig(out, dpi=130)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return 0 when the restarted and the uninterrupted runs end bit-identical."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--workdir",
        default="amrckpt-demo",
        help="where checkpoints and the picture go: a new or empty directory, or one of an earlier run "
        "(only what the demo wrote is removed; any other non-empty directory is refused)",
    )
    ap.add_argument("--ranks", default="4,3,2", help="process counts of the killed run, the restart and the reference")
    ap.add_argument("--steps", type=int, default=1000, help="steps of the simulation (1000: a quarter rotation)")
    ap.add_argument("--checkpoint-every", type=int, default=50)
    ap.add_argument(
        "--kill-at",
        type=int,
        default=None,
        help="SIGKILL the first run after this step (default: halfway between two checkpoints after 55%% of the steps)",
    )
    ap.add_argument("--min-level", type=int, default=4)
    ap.add_argument("--max-level", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a small version: levels 3..6, 120 steps, checkpoints every 20")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.checkpoint_every, args.min_level, args.max_level = 120, 20, 3, 6
    ce = args.checkpoint_every  # by default, kill halfway between two checkpoints after 55% of the run: work is lost and redone
    kill_at = args.kill_at if args.kill_at is not None else int(0.55 * args.steps) // ce * ce + ce // 2
    ranks = [int(r) for r in args.ranks.split(",")]
    if len(ranks) != 3:
        ap.error("--ranks takes three process counts")
    work = Path(args.workdir)
    prepare_workdir(work)
    common = ["--steps", str(args.steps), "--checkpoint-every", str(args.checkpoint_every)]
    common += ["--min-level", str(args.min_level), "--max-level", str(args.max_level), "--report-every", "5", "--keep", "100"]
    resumed, straight = work / "resumed", work / "uninterrupted"
    runs = [
        Run("A: killed", ranks[0], [*common, "--dir", str(resumed)], kill_at=kill_at),
        Run("B: --restart latest", ranks[1], [*common, "--dir", str(resumed), "--restart", "latest"]),
        Run("C: uninterrupted", ranks[2], [*common, "--dir", str(straight)]),
    ]
    print(f"amrckpt demo: advection on a 2x1 brick of quadtrees, levels {args.min_level}..{args.max_level}, {args.steps} steps")
    for run in runs:
        run_job(run, args.steps, not args.no_progress)

    a, b, c = runs
    start_b = b.last("start")
    final_b, final_c = (Path(r.last("checkpoint")["path"]) for r in (b, c))
    hb, hc = adv.field_hashes(str(final_b)), adv.field_hashes(str(final_c))
    identical = hb == hc
    with ac.CheckpointManager(resumed, adv.AdvectionState) as manager:
        history = manager.history()

    print()
    print(f"{'run':24} {'ranks':>5} {'steps':>11} {'leaves':>7} {'wall [s]':>9}  leaves/s per rank")
    for run in runs:
        s, d = run.last("start") or {}, run.last("done") or {}
        last_step = d.get("step", run.killed_after_step)
        leaves = d.get("leaves", (run.last("step") or {}).get("leaves", ""))
        rate = ", ".join(f"{r / 1e6:.2f}M" for r in d.get("leaves_per_second_per_rank", [])) or "(killed)"
        print(f"{run.name:24} {run.ranks:>5} {s.get('step', 0):>4} → {last_step!s:<4} {leaves!s:>7} {run.seconds:>9.1f}  {rate}")
    print(f"\nA was killed with SIGKILL after step {a.killed_after_step}; B restored step {start_b['step'] if start_b else '?'}")
    print("checkpoints in", resumed)
    for r in history:
        mark = "valid" if r.valid else f"INVALID ({r.problem})"
        save = f"{r.save_seconds:.3f} s" if r.save_seconds is not None else "?"
        print(f"  step {r.step:>5}  {r.nbytes / 1024:>8.1f} KiB  written by {r.writer_size} ranks in {save}  {mark}")
    print(f"\nfinal states, sha256 (B on {b.ranks} ranks after the kill  vs  C on {c.ranks} ranks uninterrupted):")
    for name in hb:
        same = "==" if hb[name] == hc[name] else "!="
        print(f"  {name:9} {hb[name][:16]}  {same}  {hc[name][:16]}")
    print("BIT-IDENTICAL" if identical else "DIFFERENT")
    png = work / "final_mesh.png"
    plot(
        final_b,
        png,
        f"step {hb['step']}, t = {float(hb['time']):.4f} s: restarted run (A on {a.ranks} ranks, killed; B on {b.ranks})",
    )
    print(f"picture of the final mesh: {png}")
    return 0 if identical else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
