"""When to checkpoint: small composable policies (orbax's ``EveryNSteps``, SCR's ``SCR_Need_checkpoint``).

A save policy looks at a :class:`Moment` (the step, the wall clock, the last
save, how long saves take) and answers locally whether to save now and
whether the job should stop afterwards.  The manager combines the answers of
all ranks with one allreduce, so every rank takes the same decision even
when only one of them received a signal.  Policies combine with ``|``.

A policy's reason is free text (``"received SIGTERM"``); when a save
happens, the lowest saving rank's reasons travel to every rank in one more
exchange (:meth:`amrckpt.CheckpointManager.decide`).
"""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from .._logging import get_logger
from ..comm import Call, Comm, collective
from ..errors import AmrckptError
from ._scheduler import JobClock, detect_scheduler, env_end_time, launcher_rank

__all__ = [
    "AnyOf",
    "BeforeWallTime",
    "Decision",
    "EveryNSeconds",
    "EveryNSteps",
    "Moment",
    "Never",
    "OnFileTrigger",
    "OnSignal",
    "SavePolicy",
    "slurm_end_time",
]

log = get_logger("amrckpt.manager")


@dataclass(frozen=True)
class Moment:
    """What a policy may consider, on one rank.

    Attributes
    ----------
    step : int
        The simulation step about to be checkpointed (or not).
    now : float
        Wall-clock time, seconds since the epoch (``time.time()``).
    last_step : int or None
        Step of the last checkpoint this job wrote or restored from.
    last_time : float
        Wall-clock time of the last save (or of the manager's start).
    save_seconds : tuple of float
        Durations of the saves of this job so far, in seconds.
    last_save_time : float or None
        Wall-clock time at which this job's last save was decided (the
        same decision on every rank), or None before its first save.
    """

    step: int
    now: float
    last_step: int | None
    last_time: float
    save_seconds: tuple[float, ...] = ()
    last_save_time: float | None = None


@dataclass(frozen=True)
class Decision:
    """A policy's answer: save now, and stop the job after this save (SCR's halt)."""

    save: bool = False
    halt: bool = False
    reason: str = ""

    def __or__(self, other: Decision) -> Decision:
        return Decision(self.save or other.save, self.halt or other.halt, "; ".join(r for r in (self.reason, other.reason) if r))


@runtime_checkable
class SavePolicy(Protocol):
    """The interface of save policies: a local decision, combined over ranks by the manager."""

    def decide(self, moment: Moment) -> Decision:
        """Return this rank's decision at ``moment`` (not collective; must not block)."""
        ...


def leaves(policy: SavePolicy) -> list[SavePolicy]:
    """Return the policies an :class:`AnyOf` (``a | b | c``) asks, in order, nested ones flattened; else ``[policy]``.

    Not collective.  The manager asks each leaf itself (as ``AnyOf.decide``
    does), so that it knows which leaf gave which reason.
    """
    if type(policy) is not AnyOf:
        return [policy]
    return [leaf for p in policy.policies for leaf in leaves(p)]


class _Combinable:
    def __or__(self, other: SavePolicy) -> AnyOf:
        return AnyOf([self, other])  # type: ignore[list-item]

    def bind(self, comm: Comm) -> None:
        """Learn what needs the manager's communicator (collective; called when the manager is created)."""

    def start(self) -> None:
        """Prepare when the manager starts (install signal handlers)."""

    def stop(self) -> None:
        """Clean up when the manager closes (restore signal handlers)."""


@dataclass
class AnyOf(_Combinable):
    """Save when any of the policies says so (what ``a | b | c`` builds)."""

    policies: list[SavePolicy]

    def __or__(self, other: SavePolicy) -> AnyOf:
        return AnyOf([*self.policies, other])

    def decide(self, moment: Moment) -> Decision:
        """Combine every policy's decision (all are asked, so that triggers are consumed)."""
        out = Decision()
        for p in self.policies:
            out = out | p.decide(moment)
        return out

    def bind(self, comm: Comm) -> None:
        """Bind every policy (collective)."""
        for p in self.policies:
            getattr(p, "bind", lambda c: None)(comm)

    def start(self) -> None:
        """Start every policy."""
        for p in self.policies:
            getattr(p, "start", lambda: None)()

    def stop(self) -> None:
        """Stop every policy."""
        for p in self.policies:
            getattr(p, "stop", lambda: None)()


@dataclass
class Never(_Combinable):
    """Never save on its own (``manager.save(..., force=True)`` still does)."""

    def decide(self, moment: Moment) -> Decision:
        """Return no save."""
        return Decision()


@dataclass
class EveryNSteps(_Combinable):
    """Save every ``n`` steps: at steps that are multiples of ``n`` (orbax's ``EveryNSteps``).

    Parameters
    ----------
    n : int
        The interval in steps, ``>= 1``.
    """

    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise AmrckptError(f"EveryNSteps: n must be a positive int, not {self.n!r}")

    def decide(self, moment: Moment) -> Decision:
        """Save when the step is a multiple of ``n`` (and not the step last saved)."""
        ok = moment.step % self.n == 0 and moment.step != moment.last_step
        return Decision(ok, False, f"step {moment.step} is a multiple of {self.n}" if ok else "")


@dataclass
class EveryNSeconds(_Combinable):
    """Save when ``seconds`` of wall time have passed since the last save.

    Parameters
    ----------
    seconds : float
        The interval, seconds of wall-clock time.
    """

    seconds: float

    def decide(self, moment: Moment) -> Decision:
        """Save when the interval has passed since the last save (or the start)."""
        ok = moment.now - moment.last_time >= self.seconds
        return Decision(ok, False, f"{self.seconds:g} s since the last save" if ok else "")


def slurm_end_time(environ: dict[str, str] | None = None) -> float | None:
    """Return the job's end (Unix time) from Slurm's environment, or None outside a Slurm job or if it is not exported.

    ``SLURM_JOB_END_TIME`` (exported by newer Slurm releases, not by 22.05) gives it directly;
    otherwise it is ``SLURM_JOB_START_TIME`` plus the time limit
    (``SLURM_JOB_TIME_LIMIT``, ``SLURM_TIMELIMIT`` or ``SBATCH_TIMELIMIT``).
    Slurm 22.05 exports none of them: :func:`~amrckpt.manager.job_end_time`
    then asks Slurm (``scontrol show job``), as :class:`BeforeWallTime` does.
    Not collective; runs no command.
    """
    return env_end_time(os.environ if environ is None else environ)


@dataclass
class BeforeWallTime(_Combinable):
    """Save once, and stop, when the job's wall-time limit is near.

    The margin is learned: twice the longest save of this job so far plus a
    safety of ``min_margin`` seconds, so that the last checkpoint finishes
    before the scheduler kills the job (SCR's halt seconds).  "Once" is
    judged from the shared decisions (no save yet inside the margin).

    Where the end comes from (unless ``end_time`` is given): the job's
    environment if the scheduler exports it (``SLURM_JOB_END_TIME``),
    otherwise one query to the scheduler (``scontrol show job
    $SLURM_JOB_ID``; PBS ``qstat -f``, LSF ``bjobs``, Flux ``flux job
    timeleft``: :mod:`amrckpt.manager._scheduler`).  Inside a
    :class:`~amrckpt.CheckpointManager` the query runs on the manager's
    rank 0 only, when the manager is created, and its answer is broadcast
    (:attr:`end_time` is the same on every rank).  Later, rank 0 refreshes
    it now and then, so that a limit changed during the job (``scontrol
    update JobId=... TimeLimit=...``) is honoured: when half of the time
    left at the last query has passed (at least ``min_interval`` apart), or
    every ``refresh`` seconds, and never more than ``max_queries`` queries
    per job.  Rank 0 then alone decides by the wall time, and the manager's
    allreduce makes its decision every rank's.

    Parameters
    ----------
    end_time : float or datetime.datetime, optional
        When the job will be killed (Unix time).  Default: from the
        scheduler, as above; outside a batch job, or for a job without a
        time limit, the policy never triggers (logged at the start).
    min_margin : float, optional
        Seconds of margin at least (default 60).
    halt : bool, optional
        Ask the job to stop after that checkpoint (default True).
    refresh : float, optional
        Seconds between refreshes of the end (default: the halving schedule).
    max_queries : int, optional
        Scheduler queries per job at most (default 8).
    min_interval : float, optional
        Seconds between two queries at least (default 60).
    """

    end_time: float | datetime.datetime | None = None
    min_margin: float = 60.0
    halt: bool = True
    refresh: float | None = None
    max_queries: int = 8
    min_interval: float = 60.0
    _explicit: bool = field(default=False, init=False, repr=False)
    _root: bool | None = field(default=None, init=False, repr=False)
    _clock: JobClock | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.end_time, datetime.datetime):
            self.end_time = self.end_time.timestamp()
        self._explicit = self.end_time is not None
        if self.refresh is not None and not self.refresh > 0:
            raise AmrckptError(f"BeforeWallTime: refresh must be a positive number of seconds, not {self.refresh!r}")

    def _new_clock(self, may_query: bool) -> JobClock:
        return JobClock(
            refresh=self.refresh,
            max_queries=self.max_queries if may_query else 0,
            min_interval=self.min_interval,
        )

    def bind(self, comm: Comm) -> None:
        """Learn the job's end on rank 0 of ``comm`` (environment, else one query) and broadcast it. Collective.

        Called by :class:`~amrckpt.CheckpointManager` when it is created.
        Never raises for a scheduler that cannot be asked (logged instead).
        """
        self._root = comm.rank == 0
        if self._explicit:
            return
        self._clock = None  # rank 0's is set by learn()

        def learn() -> float | None:
            self._clock = self._new_clock(True)
            end = self._clock.end()
            sched = detect_scheduler()
            if end is not None:
                log.info(
                    "BeforeWallTime: the job ends at %s UTC (%s, %.0f s from now)",
                    time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end)),
                    self._clock.source,
                    end - time.time(),
                )
            elif sched is not None:
                log.warning(
                    "BeforeWallTime: %s job %s has no known end (no time limit, or the scheduler could not be asked); "
                    "it will not trigger unless a refresh learns one",
                    sched.name,
                    sched.job_id,
                )
            return end

        with collective(comm, "BeforeWallTime.bind") as call:
            self.end_time = call.on_root(learn, what="the job's end")

    def margin(self, moment: Moment) -> float:
        """Return the seconds before the end at which to save: learned from the save times."""
        longest = max(moment.save_seconds, default=0.0)
        return max(self.min_margin, 2.0 * longest + self.min_margin / 2)

    def _end(self, now: float) -> float | None:
        if self._explicit:
            return float(self.end_time)  # type: ignore[arg-type]
        if self._root is False:
            return None  # rank 0 decides; the manager shares its decision
        if self._clock is None:  # not bound to a manager: query only as the launcher's rank 0
            rank = launcher_rank()
            self._clock = self._new_clock(rank is None or rank == 0)
        end = self._clock.end(now)
        self.end_time = end
        return end

    def decide(self, moment: Moment) -> Decision:
        """Save when less than the margin is left and no save was taken inside the margin yet."""
        end = self._end(moment.now)
        if end is None:
            return Decision()
        margin = self.margin(moment)
        left = end - moment.now
        if left > margin or (moment.last_save_time is not None and moment.last_save_time >= end - margin):
            return Decision()
        return Decision(True, self.halt, f"{left:.0f} s of wall time left")


@dataclass
class OnSignal(_Combinable):
    """Save (and stop) when the process receives a signal: SIGTERM and SIGUSR1 by default.

    The handler only sets a flag; the decision is taken at the next step,
    and the manager shares it with every rank, so one rank receiving the
    signal is enough.  Handlers are installed when the manager starts (from
    the main thread) and the previous ones restored when it closes.

    Parameters
    ----------
    signals : iterable of int, optional
        Default ``(signal.SIGTERM, signal.SIGUSR1)``.
    halt : bool, optional
        Ask the job to stop after the checkpoint (default True).
    """

    signals: Iterable[int] = (signal.SIGTERM, signal.SIGUSR1)
    halt: bool = True
    _received: list[int] = field(default_factory=list, init=False, repr=False)
    _previous: dict[int, object] = field(default_factory=dict, init=False, repr=False)

    def _handler(self, signum: int, frame: object) -> None:
        self._received.append(signum)

    def start(self) -> None:
        """Install the handlers (main thread only; elsewhere the policy stays passive)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handler)

    def stop(self) -> None:
        """Restore the previous handlers."""
        for s, h in self._previous.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        self._previous.clear()

    def trigger(self, signum: int = signal.SIGTERM) -> None:
        """Act as if ``signum`` had been received (for tests and for cooperative shutdown)."""
        self._received.append(signum)

    def decide(self, moment: Moment) -> Decision:
        """Save (and halt) if a signal arrived since the last decision."""
        if not self._received:
            return Decision()
        names = ", ".join(signal.Signals(s).name for s in self._received)
        self._received.clear()
        return Decision(True, self.halt, f"received {names}")


@dataclass
class OnFileTrigger(_Combinable):
    """Save when a file appears (``touch checkpoint-now``); the file is removed.

    Parameters
    ----------
    path : str or os.PathLike
        The trigger file.  Only rank 0 needs to see it.
    halt : bool, optional
        Ask the job to stop after the checkpoint.
    """

    path: str | os.PathLike[str]
    halt: bool = False

    def decide(self, moment: Moment) -> Decision:
        """Save if the trigger file exists (and remove it)."""
        p = Path(self.path)
        if not p.exists():
            return Decision()
        try:
            p.unlink()
        except OSError:
            pass  # another rank removed it first: the decision stands
        return Decision(True, self.halt, f"trigger file {Path(self.path)}")


def shared_decision(call: Call, policy: SavePolicy, moment: Moment) -> Decision:
    """Ask ``policy`` on every rank; return the decision they share. Collective (an open :class:`~amrckpt.comm.Call`).

    One allreduce (the maxima of whether to save, whether to halt, and the
    lowest rank that wants to save) decides, and carries rank 0's reason
    text (its policies' reasons joined by ``"; "``): the reason recorded is
    the lowest saving rank's, which is rank 0 whenever rank 0 wants to save
    (a policy that every rank evaluates alike); only when it is another
    rank (e.g. the one that received a signal) does a second allreduce
    carry that rank's text.
    """

    def ask() -> Decision:
        mine = [p.decide(moment) for p in leaves(policy)]  # every policy is asked (triggers are consumed)
        return Decision(any(d.save for d in mine), any(d.halt for d in mine), "; ".join(d.reason for d in mine if d.reason))

    local = call.run(ask) or Decision(False, False, "")
    P = call.comm.size
    key = P - call.comm.rank if local.save else 0  # the largest key is the lowest saving rank
    red = call.reduction("decide").max("save", int(local.save)).max("halt", int(local.halt)).max("lowest saving rank", key)
    got = red.root(local.reason, 0).run()
    save, halt, top = got.max("save"), got.max("halt"), got.max("lowest saving rank")
    if not save:
        return Decision(False, bool(halt), "")
    if top == P:  # rank 0 saves: its reason came with the decision
        return Decision(True, bool(halt), str(got.value))
    reason = call.allreduce(root_value=local.reason, root=P - top, what="decide: reason").value
    return Decision(True, bool(halt), str(reason))
