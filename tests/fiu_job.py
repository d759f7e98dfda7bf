#!/usr/bin/env python3
"""The MPI job of the libfiu campaign (tests/fiu_trials.py): saves and restores under libfiu's faults, or a check.

Run under MPI, every rank under the POSIX preload::

    mpiexec -n P env LD_PRELOAD=/usr/lib/fiu/fiu_posix_preload.so python -m mpi4py tests/fiu_job.py save JOBS.json
    mpiexec -n Q python -m mpi4py tests/fiu_job.py verify JOBS.json

``JOBS.json`` is a list of trials (:class:`fiu_trials.Trial` as a dict, with
``dir``, ``cache`` and ``out``).  For each trial, rank 0 first writes
``OUT/<id>.<mode>.start``, and at the end ``OUT/<id>.<mode>.json``:

``save``
    A manager on the trial's directory (direct, background or cached saves,
    MPI-IO or POSIX) saves step 0 without faults, then steps 1..steps with
    the trial's failure points on (a background save is waited for inside
    the faults), then closes (under faults, except with a node cache: its
    close flushes the newest step, which the restart at another P needs).
    With ``restore_faults``, a second manager opens and restores under
    faults, compares the state it got with the one saved, and closes.
    Every outcome is recorded on every rank: ``ok`` or the exception's class
    and errno; the records are gathered without faults.
``verify``
    Without faults, on this job's process count: which files are set aside
    (``.damaged-``/``.unreadable-``) and whether each verifies; whether every
    checkpoint under a final name verifies; then ``restore_latest()`` on a
    plain manager (for a cached trial: the trial's manager with its node
    caches, on this other job shape) and a bit-for-bit comparison with the
    state of the step it restored.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint_cases import Advection, assert_state_equal
from fiu_faults import active
from kill_job import state_at

import amrckpt as ac

LEVEL = 6  # about 250 leaves
ASIDE = (".damaged-", ".unreadable-")


def _state(step: int, comm: Any) -> Advection:
    return state_at(step, comm, 1, LEVEL)


def outcome(exc: BaseException | None) -> dict[str, Any]:
    """``ok``, or the class (``foreign X`` outside amrckpt's tree), errno and message of an exception.

    ``where`` is the last frames of the innermost exception of its chain
    (the OS call that failed, on this rank), ``cause`` that exception.
    """
    if exc is None:
        return {"result": "ok"}
    name = type(exc).__name__ if isinstance(exc, ac.errors.AmrckptError) else f"foreign {type(exc).__name__}"
    root = exc
    for _ in range(20):  # the chain's innermost exception (bounded: a chain may loop)
        inner = root.__cause__ or root.__context__
        if inner is None:
            break
        root = inner
    where = traceback.extract_tb(root.__traceback__)[-8:] if root.__traceback__ else []
    return {
        "result": name,
        "errno": getattr(exc, "errno", None),
        "message": str(exc)[:400],
        "where": [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in where],
        "cause": f"{type(root).__name__}: {str(root)[:200]}" if root is not exc else None,
        "cause_errno": getattr(root, "errno", None),
    }


def manager(t: dict[str, Any], comm: Any) -> ac.CheckpointManager[Advection]:
    """The trial's manager: its save mode and backend, KeepLast(3)."""
    kw: dict[str, Any] = {"access": ac.scda.FileAccess(backend=t["backend"]), "keep_policy": ac.manager.KeepLast(3)}
    kw["save_policy"] = ac.EveryNSteps(10**9)
    if t["mode"] == "background":
        kw["background"] = True
    elif t["mode"] == "cached":
        node_size = 1 if comm.size <= 2 else 2
        kw["cache"] = ac.manager.NodeCache(str(Path(t["cache"]) / "{node}"), partners=1, keep=2, node_size=node_size)
        kw["flush_policy"] = ac.EveryNSteps(2)
    return ac.CheckpointManager(t["dir"], Advection, comm=comm, **kw)


def aside(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if any(a in p.name for a in ASIDE))


def save_trial(t: dict[str, Any], world: Any) -> dict[str, Any]:
    """Save under faults, restore under faults; the records of this rank."""
    comm = world.Dup()
    points, seed = t["points"], t["seed"] * 7919 + world.rank
    ops: list[dict[str, Any]] = []

    def attempt(op: str, step: int | None, fn: Any, faults: bool = True) -> Any:
        exc, got = None, None
        try:
            with active(points if faults else {}, seed + len(ops) * 104729):
                got = fn()
        except Exception as e:  # noqa: BLE001 - recorded: a foreign exception is a finding
            exc = e
        ops.append({"op": op, "step": step} | outcome(exc))
        o = ops[-1]  # on stderr as it happens: what each rank did before a hang
        print(
            f"[{t['id']} rank {world.rank}] {op} {step}: {o['result']} {o.get('errno') or ''} {o.get('message', '')[:300]}",
            file=sys.stderr,
            flush=True,
        )
        return got

    mgr = manager(t, comm)
    mgr.save(0, _state(0, comm), force=True)  # a good checkpoint before the faults
    mgr.wait()  # committed before the faults (a background save would commit under the next step's faults)
    stop = False
    for step in range(1, t["steps"] + 1):
        st = _state(step, comm)

        def save(step: int = step, st: Advection = st) -> None:
            mgr.save(step, st, force=True)
            if t["mode"] == "background":
                time.sleep(0.02)  # the simulation computes while the copy is written
                mgr.wait()

        attempt("save", step, save)
        if ops[-1]["result"] == "CollectiveTimeoutError":
            stop = True  # the communicator cannot agree any more
            break
    if not stop:
        attempt("close", None, mgr.close, faults=t["mode"] != "cached")
    after_save = aside(Path(t["dir"])) if world.rank == 0 else []
    restored: dict[str, Any] = {}
    if t["restore_faults"] and not stop:
        comm2 = world.Dup()
        m2 = attempt("open", None, lambda: manager(t, comm2))
        if m2 is not None:
            got = attempt("restore", None, m2.restore_latest)
            restored = {"step": m2.restored_step, "source": m2.restored_from}
            if got is not None and m2.restored_step is not None:
                try:
                    assert_state_equal(got.state, _state(m2.restored_step, comm2))
                    restored["equal"] = True
                except AssertionError:
                    restored["equal"] = False
            attempt("close", None, m2.close)
    after_restore = aside(Path(t["dir"])) if world.rank == 0 else []
    return {"ops": ops, "restored": restored, "aside_after_save": after_save, "aside_after_restore": after_restore}


def verify_trial(t: dict[str, Any], world: Any) -> dict[str, Any]:
    """Without faults: what is set aside and verifies, what restore_latest() restores, and whether it is bit-identical."""
    from mpi4py import MPI

    d = Path(t["dir"])
    out: dict[str, Any] = {}
    if world.rank == 0:
        before = aside(d)
        out["aside_before"] = {n: _verifies(d / n) for n in before}
        out["final_bad"] = [p.name for p in sorted(d.glob("ckpt-*.scda")) if not _verifies(p)]
    comm = world.Dup()
    try:
        cached = t["mode"] == "cached"  # the node caches on another job shape: their newest step flushed, then loaded
        with manager(t, comm) if cached else ac.CheckpointManager(d, Advection, comm=comm, keep_policy=ac.manager.KeepAll()) as mgr:
            got = mgr.restore_latest()
            out["step"] = mgr.restored_step
            equal = True
            if got is not None and mgr.restored_step is not None:
                try:
                    assert_state_equal(got.state, _state(mgr.restored_step, comm))
                except AssertionError:
                    equal = False
            out["equal"] = bool(comm.allreduce(equal, op=MPI.LAND))
        out["error"] = None
    except Exception as exc:  # noqa: BLE001 - a restart without faults that fails is a finding
        out["error"] = outcome(exc)
    if world.rank == 0:
        out["aside_after"] = {n: _verifies(d / n) for n in aside(d)}
    return out


def _verifies(path: Path) -> bool:
    from mpi4py import MPI

    try:
        return bool(ac.verify(path, comm=MPI.COMM_SELF).ok)
    except Exception:  # noqa: BLE001 - unreadable: does not verify
        return False


def main() -> int:
    from mpi4py import MPI

    import amrckpt._threads

    # A thread that dies before it runs (posix/mm/mmap) costs START_TIMEOUT; a healthy start takes well under a
    # millisecond: 10 s instead of 30 keeps a trial of a few such saves within the campaign's bound.
    amrckpt._threads.START_TIMEOUT = 10.0
    stream = os.environ.get("AMRCKPT_TEST_STREAM_NBYTES")  # e.g. 0: every save of a trial streams (a campaign's option)
    if stream:
        import amrckpt.container._writer

        amrckpt.container._writer.STREAM_NBYTES = int(stream)
    mode, jobs = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    world = MPI.COMM_WORLD
    for t in jobs:
        out = Path(t["out"])
        if world.rank == 0:
            # written whole, then renamed: the campaign polls for this mark and must never read it half written
            # (a mark read empty, as time 0, would make a trial that has just begun look 120 s old: a false "hang")
            mark = out / f"{t['id']}.{mode}.start"
            mark.with_suffix(".tmp").write_text(str(time.time()))
            os.replace(mark.with_suffix(".tmp"), mark)
        t0 = time.monotonic()
        faulthandler.dump_traceback_later(t["dump_after"], exit=False)  # a hang's stacks, before the campaign kills it
        rec = save_trial(t, world) if mode == "save" else verify_trial(t, world)
        faulthandler.cancel_dump_traceback_later()
        every = world.gather(rec, root=0)
        if world.rank == 0:
            assert every is not None
            result = {"id": t["id"], "seconds": round(time.monotonic() - t0, 2), "ranks": every}
            (out / f"{t['id']}.{mode}.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
