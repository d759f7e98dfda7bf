"""The libfiu campaign: real MPI jobs saving and restoring under faults of the real syscalls, then a restart elsewhere.

Shared by ``tests/slow/fiu_campaign.py`` (200 trials and more) and
``tests/test_fiu_campaign.py`` (a bounded one in CI).  A trial (drawn from
its seed: :meth:`Trial.draw`) is a process count P (1-4), a backend (MPI-IO
or POSIX), a save mode (direct, background, node cache), a few libfiu
failure points with one probability, and whether the restore also runs
under faults.  ``tests/fiu_job.py save`` runs it on P ranks under the POSIX
preload; ``tests/fiu_job.py verify`` then restarts on Q ranks (Q != P)
without faults (a cached trial with its node caches: another job shape).  :func:`judge` reads both and says what went wrong:

* a trial (save job or restart) that does not end within
  :data:`TRIAL_TIMEOUT` is a **hang** (the ranks' Python stacks are kept,
  then the job is killed and the next trials go on in a new job); a job that
  ends before it reports a trial is a **crash**;
* every call must end the same way on every rank: ``ok`` everywhere, or the
  same class of amrckpt's tree (and the same errno) everywhere, an errno
  for every ``ScdaIOError`` and every error caused by an ``OSError`` with
  one; anything else is **not agreed**, **foreign**, **no errno** (an
  ``ScdaIOError`` or a ``CollectiveError`` of an ``OSError`` without it) or
  **errno dropped** (a class without ``errno``, ``ManagerError``, raised
  for an ``OSError``);
* the restart must restore the newest step whose save returned on every
  rank, bit for bit; an older one is a **lost step**, a newer one (a save
  that raised but committed) a **failed save committed**;
* a checkpoint set aside (``.damaged-``/``.unreadable-``) whose bytes
  verify is a **good checkpoint set aside**; a checkpoint under a final
  name that does not verify is a **bad checkpoint kept**; a restore under
  faults that returns other data than saved is **wrong data**.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fiu_faults import POINTS, PRELOAD
from killing import _matching, _stacks, kill_tree, mpiexec

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JOB = HERE / "fiu_job.py"
TRIAL_TIMEOUT = 120.0  # seconds a trial may take in a job (P = 4 on two shared cores, and a 20 s watchdog or two)
COLLECTIVE_TIMEOUT = "20"  # AMRCKPT_COLLECTIVE_TIMEOUT in the jobs: a rank that never arrives becomes an error
PROBABILITIES = (0.002, 0.01, 0.03, 0.1, 0.3)
MODES = ("direct", "background", "cached")
BACKENDS = ("mpiio", "posix")


@dataclass(frozen=True)
class Trial:
    """One trial: where and how it saves, which faults, and the process count of the restart."""

    id: str
    seed: int
    P: int
    Q: int
    mode: str
    backend: str
    points: dict[str, float]
    steps: int
    restore_faults: bool

    @classmethod
    def draw(cls, seed: int, nprocs: tuple[int, ...] = (1, 2, 3, 4)) -> Trial:
        """The trial of ``seed``: every choice drawn from it (same seed, same trial)."""
        rng = random.Random(seed)
        P = rng.choice(nprocs)
        Q = rng.choice([q for q in nprocs if q != P] or [P])
        k = rng.choice([1, 1, 2, 3])
        names = rng.sample(POINTS, k)
        p = rng.choice(PROBABILITIES)
        points = {n: p for n in sorted(names)}
        return cls(
            f"t{seed}", seed, P, Q, rng.choice(MODES), rng.choice(BACKENDS), points, rng.choice([2, 3, 4]), rng.random() < 0.5
        )

    @property
    def restart(self) -> int:
        """The restart's process count: Q (a node cache's steps are flushed by the new job shape, then loaded)."""
        return self.Q

    def command(self) -> str:
        """How to run this trial alone (the campaign's command line)."""
        return f"python tests/slow/fiu_campaign.py --seeds {self.seed}"


@dataclass
class Verdict:
    """What one trial showed."""

    trial: Trial
    saves: int = 0  # saves tried under faults
    returned: int = 0  # of which returned on every rank
    expected: int | None = None  # the newest step whose save returned
    restored: int | None = None  # what the restart at Q restored
    errors: Counter[str] = field(default_factory=Counter)  # agreed errors: "Class errno"
    problems: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)  # hang, crash, not agreed, foreign, no errno, lost, set aside, ...
    seconds: float = 0.0
    stalls: int = 0  # jobs run again before this trial (see run_jobs)
    watchdog: bool = False  # the save job was ended by amrckpt's stall watchdog (a rank stuck inside MPI), not hung

    def problem(self, kind: str, text: str) -> None:
        self.kinds.add(kind)
        self.problems.append(f"{kind}: {text}")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kinds"] = sorted(self.kinds)
        d["errors"] = dict(self.errors)
        d["command"] = self.trial.command()
        return d


def _env() -> dict[str, str]:
    env = dict(os.environ, AMRCKPT_COLLECTIVE_TIMEOUT=COLLECTIVE_TIMEOUT)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_jobs(mode: str, P: int, trials: list[dict[str, Any]], out: Path, log: Any = None) -> dict[str, dict[str, Any]]:
    """Run ``fiu_job.py mode`` on P ranks over ``trials``: a new job after a hang or a crash; each trial's report.

    A trial whose ``.start`` marker is older than :data:`TRIAL_TIMEOUT` is a
    hang: its ranks' stacks are kept, the job killed, and the trials after
    it run in a new job.  The report of a trial that has none is
    ``{"failure": "hang"|"crash", ...}``.  A job that makes no progress
    outside a trial for as long (libfiu's preload can deadlock in MPI's
    start-up: its lock against the dynamic linker's, before any fault is
    on) is killed and run again; the first trial's report counts these
    stalls (``job_stalls``).
    """
    reports: dict[str, dict[str, Any]] = {}
    todo = list(trials)
    stalls = 0  # jobs that stopped outside any trial (libfiu's preload can deadlock at MPI start-up): killed and run again
    while todo:
        spec = out / f"job-{mode}-{todo[0]['id']}.json"
        spec.write_text(json.dumps(todo))
        prefix = ["env", f"LD_PRELOAD={PRELOAD}"] if mode == "save" else []
        cmd = [mpiexec(), "-n", str(P), *prefix, sys.executable, "-m", "mpi4py", str(JOB), mode, str(spec)]
        err = out / f"{spec.stem}.stderr"
        with err.open("w") as ferr:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=ferr, env=_env(), cwd=REPO)
            hung: str | None = None
            stalled = False
            seen: dict[str, float] = {}
            t0 = time.time()
            while proc.poll() is None:
                time.sleep(0.2)
                running = [t for t in todo if (out / f"{t['id']}.{mode}.start").exists()]
                running = [t for t in running if not (out / f"{t['id']}.{mode}.json").exists()]
                if not running:  # starting, or between trials: bounded too
                    done = [out / f"{t['id']}.{mode}.json" for t in todo]
                    last = max([t0] + [f.stat().st_mtime for f in done if f.exists()])
                    if time.time() - last > TRIAL_TIMEOUT:
                        stalled = True
                        kill_tree(proc.pid, str(spec))
                        proc.wait()
                        break
                if running:
                    # the job writes the mark by a rename; a mark read empty (a job of an older harness) counts from now
                    text = (out / f"{running[-1]['id']}.{mode}.start").read_text().strip()
                    started = float(text) if text else seen.setdefault(running[-1]["id"], time.time())
                    if time.time() - started > TRIAL_TIMEOUT:
                        hung = running[-1]["id"]
                        stacks = _stacks([p for p in _matching(str(spec)) if p != proc.pid])
                        kill_tree(proc.pid, str(spec))
                        proc.wait()
                        reports[hung] = {"failure": "hang", "stacks": stacks[-20000:]}
                        break
        rc = proc.returncode
        tail = err.read_text(errors="replace")[-(30000 if hung else 4000) :]
        rest = []
        for t in todo:
            got = out / f"{t['id']}.{mode}.json"
            if got.exists():
                reports[t["id"]] = json.loads(got.read_text())
            elif t["id"] in reports:  # the hang
                reports[t["id"]]["stderr"] = tail
            elif (out / f"{t['id']}.{mode}.start").exists():
                whole = err.read_text(errors="replace")
                if STALL_MARK in whole:  # amrckpt's stall watchdog ended the job, with its message: bounded, not a crash
                    mine = [ln for ln in whole.splitlines() if ln.startswith(f"[{t['id']} rank ")]
                    reports[t["id"]] = {"failure": "watchdog", "rc": rc, "stderr": tail, "lines": mine}
                else:
                    reports[t["id"]] = {"failure": "crash", "rc": rc, "stderr": tail}
            else:
                rest.append(t)
        if stalled:
            stalls += 1
            if log is not None:
                log(f"  {mode} job P={P}: stopped outside a trial for {TRIAL_TIMEOUT:.0f} s (killed, run again): {tail[-500:]}")
            if stalls <= 2 * len(trials):
                todo = rest
                continue
        if rest and rest == todo:  # nothing started: the job itself fails
            for t in rest:
                reports[t["id"]] = {"failure": "crash", "rc": rc, "stderr": tail}
            rest = []
        todo = rest
        if log is not None:
            log(f"  {mode} job P={P}: rc {rc}{', hang in ' + hung if hung else ''}; {len(todo)} trials left")
    for t in trials:
        reports[t["id"]]["job_stalls"] = stalls if t is trials[0] else 0
    return reports


def _agreed(v: Verdict, op: dict[str, Any], per_rank: list[dict[str, Any]]) -> bool:
    """Whether every rank ended ``op`` the same way (class and errno); counts its error; False on a problem."""
    results = {(r["result"], r.get("errno")) for r in per_rank}
    what = f"{op['op']} {op['step'] if op['step'] is not None else ''}".strip()
    if len(results) != 1:
        v.problem("not agreed", f"{what}: ranks ended {[(r['result'], r.get('errno')) for r in per_rank]}; {per_rank}")
        return False
    (res, errno) = results.pop()
    if res == "ok":
        return True
    if res.startswith("foreign"):
        v.problem("foreign", f"{what}: {per_rank[0]}")
        return False
    if res == "CollectiveTimeoutError":
        v.problem("timeout", f"{what}: {per_rank[0]['message'][:300]}")
    caused = [r for r in per_rank if r.get("cause_errno")]
    if errno is None and ((res.startswith("Scda") and "IO" in res) or (caused and res == "CollectiveError")):
        v.problem("no errno", f"{what}: an I/O error without its errno: {caused or per_rank[0]}")
    elif errno is None and caused:  # a class of amrckpt's tree without errno (ManagerError) raised for an OSError
        v.problem("errno dropped", f"{what}: {res} for an OSError, without its errno: {caused}")
    v.errors[f"{res} {errno}" if errno is not None else res] += 1
    return True


STALL_MARK = "has made no progress for"
"""What amrckpt's stall watchdog prints before it ends a job whose rank is stuck inside MPI (amrckpt.comm._watchdog)."""


def _returned_before_the_watchdog(t: Trial, lines: list[str]) -> int:
    """The newest step whose save every rank reported ``ok`` on stderr before the watchdog ended the job (0: none)."""
    ok: dict[int, set[int]] = {}
    for ln in lines:  # the ranks write to one stderr: two reports can share a line ("[t rank 1] save 4: ok  [t rank 0] ...")
        for m in _REPORT.finditer(ln):
            if m["result"] == "ok":
                ok.setdefault(int(m["step"]), set()).add(int(m["rank"]))
    return max((s for s, ranks in ok.items() if len(ranks) == t.P), default=0)


_REPORT = re.compile(r"\[\S+ rank (?P<rank>\d+)\] save (?P<step>\d+): (?P<result>\S+)")
"""One rank's report of a save on stderr (``fiu_job.py``): its rank, the step and ``ok`` or the error's class."""


def judge(t: Trial, save: dict[str, Any], verify: dict[str, Any] | None) -> Verdict:
    """The verdict of one trial from its save and verify reports."""
    v = Verdict(t, stalls=save.get("job_stalls", 0) + (verify or {}).get("job_stalls", 0))
    if save.get("failure") == "watchdog":  # bounded, with its message; the restart must still lose nothing
        v.watchdog = True
        v.expected = _returned_before_the_watchdog(t, save.get("lines", []))
        return _judge_restart(v, t, v.expected, verify)
    if "failure" in save:
        said = f"{save.get('stderr', '')[-30000:]} {save.get('stacks', '')[-20000:]}"
        v.problem(save["failure"], f"save job on {t.P} ranks: {said}")
        return v
    v.seconds = save["seconds"]
    ranks = save["ranks"]
    n = max(len(r["ops"]) for r in ranks)
    expected = 0
    for i in range(n):
        per = [r["ops"][i] for r in ranks if i < len(r["ops"])]
        op = per[0]
        if len(per) != len(ranks) or len({(o["op"], o["step"]) for o in per}) != 1:
            v.problem("not agreed", f"ranks made different calls at {i}: {per}")
            break
        ok = _agreed(v, op, per)
        if op["op"] == "save":
            v.saves += 1
            if ok and op["result"] == "ok":
                v.returned += 1
                expected = op["step"]
    v.expected = expected
    r0 = ranks[0]
    rs = r0["restored"]
    if rs and rs.get("step") is not None:
        if rs.get("equal") is False:
            v.problem("wrong data", f"the restore under faults returned other data than step {rs['step']} saved")
        if rs["step"] < expected:
            v.problem("lost", f"the restore under faults restored step {rs['step']}, not {expected}")
    elif any(o["op"] == "restore" and o["result"] == "ok" for o in r0["ops"]):
        v.problem("lost", f"the restore under faults restored nothing, not step {expected}")
    return _judge_restart(v, t, expected, verify)


def _judge_restart(v: Verdict, t: Trial, expected: int, verify: dict[str, Any] | None) -> Verdict:
    """Judge the restart without faults at another P: nothing set aside that verifies, the newest returned step."""
    if verify is None:
        return v
    if "failure" in verify:
        said = f"{verify.get('stderr', '')[-30000:]} {verify.get('stacks', '')[-20000:]}"
        v.problem(verify["failure"], f"restart on {t.restart} ranks: {said}")
        return v
    w = verify["ranks"][0]
    if w["error"] is not None:
        v.problem("restart failed", f"the restart on {t.restart} ranks without faults raised {w['error']}")
        return v
    good_aside = [n for n, ok in {**w["aside_before"], **w["aside_after"]}.items() if ok]
    if good_aside:
        when = "by the restart without faults" if set(w["aside_after"]) - set(w["aside_before"]) else "under faults"
        v.problem("set aside", f"checkpoints whose bytes verify were set aside ({when}): {sorted(set(good_aside))}")
    if w["final_bad"]:
        v.problem("bad kept", f"checkpoints under a final name do not verify: {w['final_bad']}")
    v.restored = w["step"]
    if w["step"] is None or w["step"] < expected:
        v.problem("lost", f"the restart on {t.restart} ranks restored step {w['step']}, but the save of step {expected} returned")
    elif w["step"] > expected:
        v.problem("failed save committed", f"the restart restored step {w['step']}, whose save raised")
    if w["step"] is not None and not w["equal"]:
        v.problem("wrong data", f"the restart's state of step {w['step']} differs from the one saved")
    return v


def campaign(root: Path, seeds: Iterable[int], *, batch: int = 4, log: Any = None) -> list[Verdict]:
    """Run the trials of ``seeds`` (save jobs grouped by P, ``batch`` trials per job, then restarts grouped by Q)."""
    trials = [Trial.draw(s) for s in seeds]
    out = root / "reports"
    out.mkdir(parents=True, exist_ok=True)

    def spec(t: Trial) -> dict[str, Any]:
        where = {"dir": str(root / t.id / "ckpt"), "cache": str(root / t.id / "cache"), "out": str(out)}
        return asdict(t) | where | {"dump_after": TRIAL_TIMEOUT - 15}

    saves: dict[str, dict[str, Any]] = {}
    for P in sorted({t.P for t in trials}):
        mine = [t for t in trials if t.P == P]
        for k in range(0, len(mine), batch):
            group = mine[k : k + batch]
            for t in group:
                (root / t.id / "ckpt").mkdir(parents=True, exist_ok=True)
            saves |= run_jobs("save", P, [spec(t) for t in group], out, log)
    verifies: dict[str, dict[str, Any]] = {}
    for Q in sorted({t.restart for t in trials}):
        mine = [t for t in trials if t.restart == Q and saves[t.id].get("failure", "watchdog") == "watchdog"]
        for k in range(0, len(mine), 2 * batch):
            verifies |= run_jobs("verify", Q, [spec(t) for t in mine[k : k + 2 * batch]], out, log)
    return [judge(t, saves[t.id], verifies.get(t.id)) for t in trials]


KINDS = ("hang", "crash", "timeout", "not agreed", "foreign", "no errno", "errno dropped", "set aside", "lost", "bad kept")
KINDS += ("wrong data",)
KINDS += ("failed save committed", "restart failed")


def table(verdicts: list[Verdict]) -> str:
    """The campaign's table: trials, saves, clean errors by class and errno, and each kind of problem."""
    errors: Counter[str] = Counter()
    for v in verdicts:
        errors.update(v.errors)
    kinds = Counter(k for v in verdicts for k in v.kinds)
    lines = [
        f"trials: {len(verdicts)}  (P: {dict(sorted(Counter(v.trial.P for v in verdicts).items()))}, "
        f"modes: {dict(Counter(v.trial.mode for v in verdicts))}, backends: {dict(Counter(v.trial.backend for v in verdicts))}, "
        f"with restore under faults: {sum(v.trial.restore_faults for v in verdicts)})",
        f"saves under faults: {sum(v.saves for v in verdicts)}; returned on every rank: {sum(v.returned for v in verdicts)}",
        f"agreed errors (calls): {sum(errors.values())}",
    ]
    lines += [f"    {n:5d}  {k}" for k, n in errors.most_common()]
    lines.append("trials with a problem, by kind:")
    lines += [f"    {kinds.get(k, 0):5d}  {k}" for k in KINDS]
    lines.append(f"trials without a problem: {sum(not v.kinds for v in verdicts)} of {len(verdicts)}")
    lines.append(
        f"save jobs ended by amrckpt's stall watchdog (a rank stuck inside MPI; message printed, job aborted, "
        f"the restart judged as above): {sum(v.watchdog for v in verdicts)}"
    )
    stalls = sum(v.stalls for v in verdicts)
    lines.append(f"jobs killed and run again after stopping outside any trial (libfiu at start-up): {stalls}")
    return "\n".join(lines)
