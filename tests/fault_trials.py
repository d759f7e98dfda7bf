"""Fault-injection trials of the checkpoint manager, shared by the serial, thread and MPI tests and the campaign.

A trial saves a new checkpoint while :func:`amrckpt.testing.inject_faults`
makes a seeded fraction of the I/O and MPI calls fail (the manager's
communicator wrapped in :class:`~amrckpt.testing.FaultyComm`, its saves
written through :class:`~amrckpt.testing.FaultyBackend`), then checks, with
the faults off:

* every rank ended the same way: the same exception class of amrckpt's tree,
  or the save succeeded everywhere (no foreign exception, no hang);
* after a failed save the new checkpoint is not there (neither under its
  name nor as a temporary file), the previous checkpoint is still the newest
  valid one (``latest()``), its file is bit for bit the same, and
  ``restore_latest()`` returns its state bit for bit;
* after a successful save the new checkpoint is the newest and restores.

Each trial's parameters (every_n, kinds, ranks, limit) are drawn from its
seed, the same on every rank.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from checkpoint_cases import Advection, GlobalState, assert_state_equal, global_state

import amrckpt as ac
from amrckpt.comm import as_comm
from amrckpt.manager import EveryNSteps, KeepLast
from amrckpt.testing import KINDS, FaultyBackend, FaultyComm, FaultyFileSystem, inject_faults

IO_KINDS = sorted(KINDS - {"mpi"})


@dataclass(frozen=True)
class TrialSpec:
    """The faults of one trial."""

    seed: int
    every_n: int
    kinds: tuple[str, ...]
    ranks: tuple[int, ...] | None
    limit: int | None

    @classmethod
    def draw(cls, seed: int, size: int) -> TrialSpec:
        """Draw a trial's faults from its seed (the same on every rank)."""
        rng = random.Random(seed)
        every_n = rng.choice([1, 2, 3, 5, 10, 30, 100])
        mode = rng.random()
        if mode < 0.4:
            kinds = tuple(IO_KINDS)
        elif mode < 0.6:
            kinds = ("mpi",)
        elif mode < 0.8:
            kinds = tuple(sorted(KINDS))
        else:
            kinds = tuple(sorted(rng.sample(sorted(KINDS), rng.randint(1, 3))))
        ranks = None if rng.random() < 0.4 else tuple(sorted(rng.sample(range(size), rng.randint(1, size))))
        limit = rng.choice([None, None, 1, 2])
        return cls(seed, every_n, kinds, ranks, limit)


@cache
def _global(step: int) -> GlobalState:
    g = global_state(seed=step % 3, max_level=4)
    g.step, g.time = step, 0.5 * step
    return g


def state(step: int, comm: Any) -> Advection:
    """This rank's state of ``step`` (uniform partition)."""
    return _global(step).for_rank(as_comm(comm))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class Outcome:
    """One trial on one rank."""

    spec: TrialSpec
    step: int
    result: str  # "saved" or the exception's class name ("foreign X" if not of amrckpt's tree)
    injected: int  # faults injected on this rank
    problems: list[str]


class Trials:
    """A manager directory holding a valid checkpoint, and fault trials on it. Collective over ``comm``."""

    def __init__(self, directory: Path, comm: Any, backend: Any = None) -> None:
        self.comm = FaultyComm(comm)  # collectives fail where the plan says (kind "mpi")
        self.c = self.comm
        access = ac.scda.FileAccess(backend=FaultyBackend.over(backend))  # I/O calls fail where the plan says
        policies = {"save_policy": EveryNSteps(10**9), "keep_policy": KeepLast(2)}
        fs = FaultyFileSystem()  # the directory's file operations fail where the plan says (kinds "rename", "fsync"...)
        self.mgr = ac.CheckpointManager(directory, Advection, comm=self.comm, access=access, fs=fs, **policies)
        self.mgr.save(0, state(0, self.comm), force=True)
        self.prev = 0
        self.prev_sha = _sha(self.mgr.path_of(0)) if self.c.rank == 0 else ""

    def close(self) -> None:
        self.mgr.close()

    def run(self, spec: TrialSpec) -> Outcome:
        """Save step prev+1 under faults; check what the directory holds afterwards."""
        step = self.prev + 1
        st = state(step, self.comm)
        result = "saved"
        with inject_faults(spec.every_n, seed=spec.seed, ranks=spec.ranks, kinds=spec.kinds, limit=spec.limit) as plan:
            try:
                self.mgr.save(step, st, force=True)
            except ac.errors.AmrckptError as exc:
                result = type(exc).__name__
            except Exception as exc:  # noqa: BLE001 - a foreign exception is a finding
                result = f"foreign {type(exc).__name__}: {exc}"
        problems = self._check(step, result)
        return Outcome(spec, step, result, len(plan.injected), problems)

    def _check(self, step: int, result: str) -> list[str]:
        c, mgr = self.c, self.mgr
        problems: list[str] = []
        results = c.allgather(result)
        if len(set(results)) != 1:
            problems.append(f"ranks ended differently: {results}")
        if result.startswith("foreign"):
            problems.append(f"not an exception of amrckpt's tree: {result}")
        saved = all(r == "saved" for r in results)
        want = step if saved else self.prev
        if c.rank == 0:
            names = sorted(p.name for p in mgr.directory.iterdir())
            leftovers = [n for n in names if ".partial-" in n or ".previous-" in n]
            if leftovers:
                problems.append(f"temporary files left: {leftovers}")
            if not saved:
                if mgr.path_of(step).exists():
                    problems.append(f"the failed save left {mgr.path_of(step).name} behind")
                if not mgr.path_of(self.prev).exists() or _sha(mgr.path_of(self.prev)) != self.prev_sha:
                    problems.append(f"the previous checkpoint {mgr.path_of(self.prev).name} changed or vanished")
        rec = mgr.latest()
        if rec is None or rec.step != want or not rec.valid:
            problems.append(f"latest() is {rec}, not step {want}")
        loaded = mgr.restore_latest()
        if loaded is None or mgr.restored_step != want:
            problems.append(f"restore_latest() restored step {mgr.restored_step}, not {want}")
        else:
            lo, hi = loaded.partition.local_range(c.rank)
            try:
                assert_state_equal(loaded.state, _global(want).local(lo, hi))
            except AssertionError:
                problems.append(f"the state restored from step {want} differs from the one saved")
        everyone = sorted({p for ps in c.allgather(problems) for p in ps})
        if saved and not everyone:
            self.prev = step
            self.prev_sha = _sha(mgr.path_of(step)) if c.rank == 0 else ""
        return everyone
