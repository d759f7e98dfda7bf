#!/usr/bin/env python3
"""MPI jobs of the checkpoint directory's file-system tests (tests/test_directory_jobs.py starts them under mpiexec).

Usage::

    mpiexec -n P python -m mpi4py tests/directory_job.py CASE DIR [--backend mpiio|posix]

Each case prints, on rank 0, one line ``RESULT <json>`` with what every
rank saw (gathered), so that the test compares them.  DIR is on a small
tmpfs mounted by the test (root) for the disk-full cases.

Cases
-----
``enospc``
    A save on a full disk: every rank must raise ScdaIOError with errno ENOSPC.
``full-open``
    A manager opened on a disk with no free byte (the lock's owner line
    cannot be written): it opens, restores, a save fails with ENOSPC on
    every rank, and after space is freed a new manager opens and saves.
``records-full``
    A disk with room for the checkpoint but not for its records:
    ``KeepBest("loss", 2) | KeepLast(1)`` must never lose the best step's
    metrics nor delete it.
``eacces``
    The last rank cannot open a checkpoint (it drops root's rights): every
    rank must raise ScdaPermissionError with errno EACCES, and ``verify``
    report it as unreadable on every rank.
``prefix``
    A relative directory named like a ROMIO prefix (``ufs:y``): the
    checkpoint must be where Python renames it, nothing elsewhere.
``enospc-run``
    One trial of the disk-full campaign (tests/slow/directory_campaign.py):
    a run saving every step while the disk fills at a random step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint_cases import Advection
from fault_trials import _global, state
from small_fs import fill, pages

import amrckpt as ac
from amrckpt.manager import EveryNSteps, KeepBest, KeepLast


def outcome(fn: Any) -> list[Any]:
    try:
        fn()
    except ac.errors.AmrckptError as exc:
        return [type(exc).__name__, getattr(exc, "errno", None), str(exc)[:300]]
    return ["ok", None, ""]


def manager(d: Any, comm: Any, backend: str, **kw: Any) -> ac.CheckpointManager[Advection]:
    kw.setdefault("save_policy", EveryNSteps(1))
    return ac.CheckpointManager(d, Advection, comm=comm, access=ac.scda.FileAccess(backend=backend), **kw)


def case_enospc(d: Path, comm: Any, backend: str) -> dict[str, Any]:
    with manager(d / "ckpt", comm, backend, keep_policy=KeepLast(5)) as mgr:
        mgr.save(1, state(1, comm))
        if comm.rank == 0:
            fill(d, 16 << 10)
        comm.Barrier()
        got = outcome(lambda: mgr.save(2, state(2, comm)))
        comm.Barrier()
        if comm.rank == 0:
            (d / "filler").unlink()
        comm.Barrier()
        again = outcome(lambda: mgr.save(3, state(3, comm)))
        steps = mgr.all_steps()
    return {"save": comm.allgather(got), "again": comm.allgather(again), "steps": steps}


def case_full_open(d: Path, comm: Any, backend: str) -> dict[str, Any]:
    with manager(d / "ckpt", comm, backend) as mgr:
        mgr.save(1, state(1, comm))
    if comm.rank == 0:
        (d / "ckpt" / ".amrckpt.lock").unlink()  # the next manager makes it anew, on a full disk
        fill(d, 0)
    comm.Barrier()
    restored: list[Any] = []

    def use() -> None:
        with manager(d / "ckpt", comm, backend) as mgr:
            restored.append(mgr.restore_latest().step)
            restored.append(outcome(lambda: mgr.save(2, state(2, comm))))

    opened = outcome(use)
    comm.Barrier()
    if comm.rank == 0:
        (d / "filler").unlink()
    comm.Barrier()

    def after() -> None:
        with manager(d / "ckpt", comm, backend) as mgr:
            mgr.save(3, state(3, comm))
            restored.append(mgr.all_steps())

    later = outcome(after)
    return {"open": comm.allgather(opened), "restored": comm.allgather(restored), "later": comm.allgather(later)}


def case_records_full(d: Path, comm: Any, backend: str) -> dict[str, Any]:
    losses = {1: 0.5, 2: 0.4, 3: 0.3, 4: 0.1, 5: 0.2}
    keep = KeepBest("loss", 2) | KeepLast(1)
    size = 0
    if comm.rank == 0:
        g = _global(4)
        probe = d.parent / f"probe-{os.getpid()}.scda"  # the same bytes as the checkpoint on any P
        size = ac.save(g.local(0, g.N), probe, comm=ac.comm.SerialComm()).nbytes
        probe.unlink()
    size = comm.bcast(size)
    with manager(d / "ckpt", comm, backend, keep_policy=keep) as mgr:
        for s in (1, 2, 3):
            mgr.save(s, state(s, comm), metrics={"loss": losses[s]})
        if comm.rank == 0:
            fill(d, pages(size))  # room for the checkpoint of step 4, not for its records
        comm.Barrier()
        full = outcome(lambda: mgr.save(4, state(4, comm), metrics={"loss": losses[4]}))
        comm.Barrier()
        if comm.rank == 0:
            (d / "filler").unlink()
        comm.Barrier()
        steps_full = mgr.all_steps()
        for s in (4, 5):  # step 4 again (its save failed), then the next
            mgr.save(s, state(s, comm), metrics={"loss": losses[s]})
        steps = mgr.all_steps()
        metrics = {s: mgr.metadata(s).metrics for s in steps}
    return {"full": comm.allgather(full), "steps_full": steps_full, "steps": steps, "metrics": metrics}


def case_eacces(d: Path, comm: Any, backend: str) -> dict[str, Any]:
    with manager(d / "ckpt", comm, backend) as mgr:
        mgr.save(1, state(1, comm))
        path = mgr.path_of(1)
    if comm.rank == 0:
        path.chmod(0o600)  # root's alone
    comm.Barrier()
    if comm.rank == comm.size - 1:  # this rank alone loses root's rights: it cannot open the file
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    got = outcome(lambda: ac.scda.fopen_read(path, comm=comm, backend=backend).fclose())
    report = ac.verify(path, comm=comm)
    return {"open": comm.allgather(got), "verify": comm.allgather([report.ok, [p.kind for p in report.problems]])}


def case_prefix(d: Path, comm: Any, backend: str) -> dict[str, Any]:
    os.chdir(d)
    got = []
    with manager("ufs:y", comm, backend) as mgr:
        got.append(outcome(lambda: mgr.save(1, state(1, comm))))
        got.append(mgr.all_steps())
    comm.Barrier()
    files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and not p.name.startswith(".amrckpt"))
    ok = ac.verify(d / "ufs:y" / "ckpt-000000000001.scda", comm=comm).ok if got[0][0] == "ok" else False
    return {"save": comm.allgather(got), "files": files, "verified": ok}


LOSS = {s: round(0.1 + ((s * 7919) % 13) / 13, 6) for s in range(64)}
"""The metric of each step of the disk-full campaign (deterministic, not monotonic: KeepBest keeps old steps)."""


def case_enospc_run(d: Path, comm: Any, backend: str, seed: int = 0, background: bool = False) -> dict[str, Any]:
    """A run that saves every step while rank 0 fills the disk at a random step, to a random number of free bytes."""
    import random

    rng = random.Random(seed)
    fill_at, full_for = rng.randint(2, 7), rng.randint(1, 4)
    leave = rng.choice([0, 4096, 12288, rng.randrange(0, 64 << 10, 512)])
    keep = KeepBest("loss", 2) | KeepLast(2)
    events: list[Any] = []
    pending: Any = None

    def settle(handle: Any) -> None:  # a background save's outcome: known when it is waited for
        err = handle.exception()
        events.append([handle.step, "ok", None] if err is None else [handle.step, type(err).__name__, getattr(err, "errno", None)])

    with manager(d / "ckpt", comm, backend, keep_policy=keep, background=background) as mgr:
        for step in range(1, 13):
            if comm.rank == 0 and step == fill_at:
                fill(d, leave)
            if comm.rank == 0 and step == fill_at + full_for:
                (d / "filler").unlink()
            comm.Barrier()
            if pending is not None:
                settle(pending)
                pending = None
            try:
                h = mgr.save(step, state(step, comm), metrics={"loss": LOSS[step]})
                if background:
                    pending = h
                else:
                    events.append([step, "ok", None])
            except ac.errors.AmrckptError as exc:
                events.append([step, type(exc).__name__, getattr(exc, "errno", None)])
        if pending is not None:
            settle(pending)
    comm.Barrier()
    if comm.rank == 0 and (d / "filler").exists():
        (d / "filler").unlink()
    comm.Barrier()
    with manager(d / "ckpt", comm, backend, keep_policy=keep) as mgr:
        steps = mgr.all_steps()
        metrics = {s: mgr.metadata(s).metrics for s in steps}
        restored = mgr.restore_latest()
        from checkpoint_cases import assert_state_equal

        equal = True
        if restored is not None:
            try:
                assert_state_equal(restored.state, state(restored.step, comm))
            except AssertionError:
                equal = False
        verified = all(ac.verify(mgr.path_of(s), comm=comm).ok for s in steps)
    left = sorted(p.name for p in (d / "ckpt").iterdir() if p.name.startswith(".ckpt") or ".partial-" in p.name)
    spec = {"fill_at": fill_at, "full_for": full_for, "leave": leave}
    return {
        "events": comm.allgather(events),
        "steps": steps,
        "metrics": metrics,
        "restored": None if restored is None else restored.step,
        "equal": comm.allgather(equal),
        "verified": verified,
        "left": left,
        "spec": spec,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["enospc", "full-open", "records-full", "eacces", "prefix", "enospc-run"])
    ap.add_argument("directory")
    ap.add_argument("--backend", default="mpiio")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--background", action="store_true")
    a = ap.parse_args()
    import faulthandler

    from mpi4py import MPI

    faulthandler.dump_traceback_later(240, exit=True)  # a hang ends the job (the campaign counts it)
    # amrckpt's collective calls replace that timer while they run (the stall watchdog): a hang inside one ends the
    # job after twice this timeout plus a grace
    os.environ.setdefault("AMRCKPT_COLLECTIVE_TIMEOUT", "60")
    comm = MPI.COMM_WORLD
    fn = globals()["case_" + a.case.replace("-", "_")]
    extra = {"seed": a.seed, "background": a.background} if a.case == "enospc-run" else {}
    result = fn(Path(a.directory), comm, a.backend, **extra)
    if comm.rank == 0:
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
