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
    except ac.AmrckptError as exc:
        return [type(exc).__name__, getattr(exc, "errno", None), str(exc)[:300]]
    return ["ok", None, ""]


def manager(d: Any, comm: Any, backend: str, **kw: Any) -> ac.CheckpointManager[Advection]:
    kw.setdefault("save_policy", EveryNSteps(1))
    return ac.CheckpointManager(d, Advection, comm=comm, save_kwargs={"backend": backend}, **kw)


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["enospc", "full-open", "records-full", "eacces", "prefix"])
    ap.add_argument("directory")
    ap.add_argument("--backend", default="mpiio")
    a = ap.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    fn = globals()["case_" + a.case.replace("-", "_")]
    result = fn(Path(a.directory), comm, a.backend)
    if comm.rank == 0:
        print("RESULT " + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
