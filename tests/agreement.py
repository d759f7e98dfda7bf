"""The agreement test of every public collective entry point: one body for thread ranks and for real MPI ranks.

For each entry point, each non-empty proper subset of failing ranks (rank 0
included) and each of the first steps of the call, the chosen step fails on
the chosen ranks (:func:`amrckpt.testing.failing_steps`).  Every rank must
then raise the same error, of amrckpt's tree, whose ``rank_errors`` names
exactly the ranks that failed, within a bounded time (no hang: thread ranks
time out, an MPI job is killed by its watchdog), and nothing may be left
half written.  An entry point that reports problems instead of raising them
(``verify``) must return the same report on every rank.
"""

from __future__ import annotations

import hashlib
import itertools
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from checkpoint_cases import Advection, global_state

import amrckpt as ac
from amrckpt.comm import Comm, SerialComm
from amrckpt.testing import failing_steps

STEPS = (1, 2, 3)
"""Which step of each call fails (1: the first that runs on a failing rank)."""


def subsets(P: int) -> list[tuple[int, ...]]:
    """Every non-empty proper subset of the ranks 0..P-1 (for P = 1: the one rank)."""
    if P == 1:
        return [(0,)]
    return [s for n in range(1, P) for s in itertools.combinations(range(P), n)]


def _state(comm: Comm, step: int = 1) -> Advection:
    g = global_state(seed=step % 3, max_level=3)
    g.step, g.time = step, 0.5 * step
    return g.for_rank(comm)


@dataclass
class Case:
    """One entry point: ``setup(comm, d)`` prepares (outside the faults), ``act(comm, d, ctx)`` calls it."""

    name: str
    act: Callable[[Comm, Path, Any], Any]
    setup: Callable[[Comm, Path], Any] = lambda comm, d: None
    written: Callable[[Path], list[str]] = lambda d: []
    """After a failure: what must not be there (names of files half written)."""
    teardown: Callable[[Any], None] = lambda ctx: None
    reports: bool = False
    """The entry point reports what it cannot read instead of raising (verify; a history's invalid records)."""


def _plain(comm: Comm, d: Path) -> Path:
    _scda_roundtrip(comm, d)
    return d / "plain.scda"


def _saved(comm: Comm, d: Path) -> Path:
    path = d / "base.scda"
    ac.save(_state(comm), path, comm=comm, run_record=True)
    return path


def _manager(comm: Comm, d: Path, **kw: Any) -> ac.CheckpointManager[Any]:
    mgr: ac.CheckpointManager[Any] = ac.CheckpointManager(d / "mgr", Advection, comm=comm, save_policy=ac.EveryNSteps(1), **kw)
    if not mgr.all_steps():
        mgr.save(1, _state(comm, 1))
    return mgr


def _close(mgr: ac.CheckpointManager[Any]) -> None:
    mgr.close()


def _cache(d: Path) -> ac.manager.NodeCache:
    return ac.manager.NodeCache(str(d / "cache" / "{node}"), partners=1, node_size=1)


def _close_unflushed(mgr: ac.CheckpointManager[Any]) -> None:
    mgr.close(flush=False)


def _new_files(d: Path, pattern: str) -> list[str]:
    return sorted(p.name for p in d.glob(pattern))


def _scda_roundtrip(comm: Comm, d: Path) -> Any:
    n = [3 + comm.rank]
    counts = comm.allgather(n[0])
    with ac.scda.fopen_write(d / "plain.scda", b"plain", comm=comm) as f:
        f.fwrite_inline(b"x" * 32, b"inline")
        f.fwrite_array(np.arange(n[0], dtype="<f8"), counts, 8, b"array", encode=True)
    with ac.scda.fopen_read(d / "plain.scda", comm=comm) as f:
        f.fread_section_header()
        f.fread_inline_data()
        f.fread_section_header(decode=True)
        return f.fread_array_data(counts).tobytes()


CASES: list[Case] = [
    Case(
        "save",
        lambda comm, d, ctx: ac.save(_state(comm), d / "new.scda", comm=comm),
        written=lambda d: _new_files(d, "new.scda*"),
    ),
    Case(
        "save(run_record=True)",
        lambda comm, d, ctx: ac.save(_state(comm), d / "new.scda", comm=comm, run_record=True),
        written=lambda d: _new_files(d, "new.scda*"),
    ),
    Case("load", lambda comm, d, ctx: ac.load(ctx, Advection, comm=comm), setup=_saved),
    Case("load(weighted)", lambda comm, d, ctx: ac.load(ctx, Advection, comm=comm, partition="weighted"), setup=_saved),
    Case("load(writer)", lambda comm, d, ctx: ac.load(ctx, Advection, comm=comm, partition="writer"), setup=_saved),
    Case("read_info", lambda comm, d, ctx: ac.read_info(ctx, comm=comm), setup=_saved),
    Case("verify", lambda comm, d, ctx: ac.verify(ctx, comm=comm), setup=_saved, reports=True),
    Case("verify_file", lambda comm, d, ctx: ac.container.verify_file(ctx, comm=comm), setup=_saved, reports=True),
    Case(
        "convert_file",
        lambda comm, d, ctx: ac.container.convert_file(ctx, d / "conv.scda", comm=comm, compress="encode"),
        setup=_saved,
        written=lambda d: _new_files(d, "*conv.scda*"),
    ),
    Case("scda.verify", lambda comm, d, ctx: ac.scda.verify(ctx, comm=comm), setup=_plain, reports=True),
    Case(
        "scda.rewrite",
        lambda comm, d, ctx: ac.scda.rewrite(ctx, d / "re.scda", comm=comm, compress="decode"),
        setup=_plain,
    ),
    Case("Partition.weighted", lambda comm, d, ctx: ac.Partition.weighted(np.arange(comm.rank + 3), comm)),
    Case("Partition.from_local_count", lambda comm, d, ctx: ac.Partition.from_local_count(comm.rank + 1, comm)),
    # The scda layer writes section by section, as libsc does: a failed write leaves a file cut short (which every
    # reader refuses), not nothing; what it must do is fail on every rank alike.
    Case("scda write and read", lambda comm, d, ctx: _scda_roundtrip(comm, d)),
    Case(
        "CheckpointManager",
        lambda comm, d, ctx: ac.CheckpointManager(d / "fresh", Advection, comm=comm).close(),
        written=lambda d: _new_files(d / "fresh", "ckpt-*"),
    ),
    Case(
        "CheckpointManager.save",
        lambda comm, d, ctx: ctx.save(2, _state(comm, 2), force=True),
        setup=_manager,
        written=lambda d: _new_files(d / "mgr", "*ckpt-000000000002*"),
        teardown=_close,
    ),
    Case(
        "CheckpointManager.save(background)",
        lambda comm, d, ctx: ctx.save(2, _state(comm, 2), force=True).result(),
        setup=lambda comm, d: _manager(comm, d, background=True),
        written=lambda d: _new_files(d / "mgr", "*ckpt-000000000002*"),
        teardown=_close,
    ),
    Case("CheckpointManager.restore", lambda comm, d, ctx: ctx.restore(1), setup=_manager, teardown=_close),
    Case(
        "CheckpointManager.restore_latest",
        lambda comm, d, ctx: ctx.restore_latest(),
        setup=_manager,
        teardown=_close,
        reports=True,  # a checkpoint that cannot be read is skipped (the next older one is tried)
    ),
    Case("CheckpointManager.latest_step", lambda comm, d, ctx: ctx.latest_step(), setup=_manager, teardown=_close),
    Case("CheckpointManager.history", lambda comm, d, ctx: ctx.history(), setup=_manager, teardown=_close, reports=True),
    Case("CheckpointManager.metadata", lambda comm, d, ctx: ctx.metadata(1), setup=_manager, teardown=_close),
    Case("CheckpointManager.delete", lambda comm, d, ctx: ctx.delete(1), setup=_manager, teardown=_close),
    Case(
        "CheckpointManager(cache)",
        lambda comm, d, ctx: ac.CheckpointManager(d / "fresh", Advection, comm=comm, cache=_cache(d)).close(),
        written=lambda d: _new_files(d / "fresh", "ckpt-*"),
    ),
    Case(
        "CheckpointManager.save(cache)",
        lambda comm, d, ctx: ctx.save(2, _state(comm, 2), force=True),
        setup=lambda comm, d: _manager(comm, d, cache=_cache(d)),
        written=lambda d: _new_files(d / "cache", "*/*ckpt-000000000002*"),
        teardown=_close_unflushed,
    ),
    Case(
        "CheckpointManager.flush",
        lambda comm, d, ctx: ctx.flush(),
        setup=lambda comm, d: _manager(comm, d, cache=_cache(d)),
        written=lambda d: _new_files(d / "mgr", "*ckpt-000000000001*"),
        teardown=_close_unflushed,
    ),
    Case(
        "CheckpointManager.restore_latest(cache)",
        lambda comm, d, ctx: ctx.restore_latest(),
        setup=lambda comm, d: _manager(comm, d, cache=_cache(d)),
        teardown=_close_unflushed,
        reports=True,  # a cached step that cannot be flushed is skipped (the directory's newest is tried)
    ),
]


def _digest(value: Any) -> str:
    """What a call returned, comparable across ranks (rank-local parts such as a rank's leaves excluded)."""
    if isinstance(value, (ac.restart.VerifyReport, ac.scda.FileReport)):
        value = (value.ok, tuple(value.problems))
    elif isinstance(value, ac.restart.Loaded):
        value = tuple(value.partition.global_first_quadrant.tolist()) if value.partition is not None else None
    elif isinstance(value, ac.restart.CheckpointInfo):
        value = value.manifest.model_dump_json()
    elif (
        isinstance(value, (ac.schema.SaveResult, ac.manager.SaveHandle, ac.container.ConvertResult, ac.scda.RewriteResult))
        or value is None
    ):
        value = type(value).__name__
    elif isinstance(value, ac.Partition):
        value = tuple(value.global_first_quadrant.tolist())
    elif isinstance(value, ac.manager.StepMetadata):
        value = (value.step, Path(value.path).name, value.info.manifest.model_dump_json())
    elif isinstance(value, list) and value and isinstance(value[0], ac.manager.CheckpointRecord):
        value = [(r.step, r.valid) for r in value]
    elif isinstance(value, bytes):
        value = "bytes"  # this rank's own data
    try:
        return hashlib.sha256(pickle.dumps(value)).hexdigest()[:16]
    except Exception:  # noqa: BLE001 - an unpicklable result is described by its type
        return type(value).__name__


@dataclass(frozen=True)
class Outcome:
    """What one rank saw: ``("raised", class, failing ranks named)`` or ``("returned", digest)``; the seconds it took."""

    what: tuple[Any, ...]
    seconds: float


def attempt(case: Case, comm: Comm, d: Path, ranks: tuple[int, ...], at: int) -> tuple[Outcome, set[int]]:
    """Run ``case`` with step ``at`` failing on ``ranks``; return this rank's outcome and the ranks it failed on."""
    ctx = case.setup(comm, d)
    try:
        t0 = time.monotonic()
        with failing_steps(ranks, at) as faults:
            try:
                what: tuple[Any, ...] = ("returned", _digest(case.act(comm, d, ctx)))
            except ac.errors.AmrckptError as exc:
                what = ("raised", type(exc).__name__, tuple(sorted(exc.rank_errors)))
            except Exception as exc:  # noqa: BLE001 - a foreign exception is a finding
                what = ("foreign", f"{type(exc).__name__}: {exc}")
        return Outcome(what, time.monotonic() - t0), set(faults.failed)
    finally:
        case.teardown(ctx)


def problems(case: Case, comm: Comm, d: Path, ranks: tuple[int, ...], at: int) -> list[str]:
    """Run one attempt on every rank; return what is wrong (the same list on every rank). Collective."""
    out, failed = attempt(case, comm, d, ranks, at)
    everyone = comm.allgather((out, sorted(failed)))
    failed_all = sorted({r for _, f in everyone for r in f})
    whats = [o.what for o, _ in everyone]
    bad: list[str] = []
    tag = f"{case.name} (step {at} fails on ranks {list(ranks)}, P = {comm.size})"
    if len(set(whats)) != 1:
        bad.append(f"{tag}: the ranks ended differently: {whats}")
    what = whats[0]
    if what[0] == "foreign":
        bad.append(f"{tag}: not an exception of amrckpt's tree: {what}")
    # The error names ranks whose steps failed, and no other (a rank whose step failed while it cleaned up after the
    # agreed error, e.g. closing its file, is not named: its failure came after the agreement).
    if failed_all and what[0] == "raised" and (not what[2] or not set(what[2]) <= set(failed_all)):
        bad.append(f"{tag}: the error names ranks {list(what[2])}, the steps failed on {failed_all}")
    if failed_all and what[0] == "returned" and not case.reports:
        bad.append(f"{tag}: steps failed on {failed_all}, but the call returned")
    slowest = max(o.seconds for o, _ in everyone)
    if slowest > 30:
        bad.append(f"{tag}: took {slowest:.1f} s")
    if what[0] == "raised" and comm.rank == 0:
        left = case.written(d)
        if left:
            bad.append(f"{tag}: a failed call left {left}")
    bad = sorted({b for bs in comm.allgather(bad) for b in bs})
    _clean(comm, d)
    return bad


def _clean(comm: Comm, d: Path) -> None:
    """Remove what an attempt wrote (rank 0), so that the next starts from nothing."""
    comm.barrier()
    if comm.rank == 0:
        import shutil

        for p in d.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    comm.barrier()


def run_all(comm: Comm, d: Path, cases: list[Case] | None = None) -> tuple[list[str], int]:
    """Every case, subset and step on ``comm``; return the problems and the number of attempts in which a step failed."""
    bad: list[str] = []
    hits = 0
    for case in cases if cases is not None else CASES:
        for ranks in subsets(comm.size):
            for at in STEPS:
                found = problems(case, comm, d, ranks, at)
                bad += found
                hits += 1
    return bad, hits


def serial_comm() -> Comm:
    """The communicator of a process alone (P = 1)."""
    return SerialComm()
