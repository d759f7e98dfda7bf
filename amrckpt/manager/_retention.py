"""Which checkpoints to keep: composable retention policies (orbax's ``LatestN``, ``EveryNSteps``, ``BestN``, ``EveryNSeconds``)."""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from ..errors import AmrckptError

__all__ = ["KeepAll", "KeepAny", "KeepBest", "KeepEvery", "KeepEveryNSeconds", "KeepLast", "KeepPolicy", "kept_steps"]

History = Mapping[int, Mapping[str, Any]]
"""The step records by step (``metrics``, ``saved_at_unix``...): only the steps whose record is known."""


def kept_steps(policy: KeepPolicy, steps: Sequence[int], history: History) -> set[int]:
    """Return what ``policy`` keeps among ``steps``, giving it the step records if it reads them.

    A policy that judges by the records (metrics, save times) has a method
    ``keep_with_history(steps, history)``; any other policy is asked
    ``keep(steps)``.  A step absent from ``history`` (its record is missing
    or cannot be read: its facts are unknown) is always kept by a policy
    that reads records: it never deletes what it cannot judge.  Not
    collective (the manager calls it on rank 0).
    """
    with_history = getattr(policy, "keep_with_history", None)
    if with_history is not None:
        return set(with_history(steps, history)) | {s for s in steps if s not in history}
    return set(policy.keep(steps))


@runtime_checkable
class KeepPolicy(Protocol):
    """Decides which of the checkpoints (by step, oldest first) to keep.

    The manager never deletes the newest valid checkpoint, whatever the
    policy says, and deletes only after a new checkpoint was committed.  A
    policy that judges by the step records (the ``metrics`` of each
    save, its time) also has ``keep_with_history(steps, history)``, which
    the manager calls instead (:func:`kept_steps`); see :class:`KeepBest`.
    Such a policy never deletes a step whose record is missing or cannot
    be read (its facts are unknown).  Called on rank 0 only: the outcome
    needs no agreement.
    """

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return the steps to keep among ``steps`` (sorted, oldest first)."""
        ...


class _Combinable:
    def __or__(self, other: KeepPolicy) -> KeepAny:
        return KeepAny([self, other])  # type: ignore[list-item]


@dataclass
class KeepAny(_Combinable):
    """Keep what any of the policies keeps (what ``a | b`` builds)."""

    policies: list[KeepPolicy]

    def __or__(self, other: KeepPolicy) -> KeepAny:
        return KeepAny([*self.policies, other])

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return the union of the policies' choices (without step records)."""
        return self.keep_with_history(steps, {})

    def keep_with_history(self, steps: Sequence[int], history: History) -> set[int]:
        """Return the union of the policies' choices, each given the step records if it reads them."""
        out: set[int] = set()
        for p in self.policies:
            out |= kept_steps(p, steps, history)
        return out


@dataclass
class KeepAll(_Combinable):
    """Keep every checkpoint."""

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return every step."""
        return set(steps)


@dataclass
class KeepLast(_Combinable):
    """Keep the ``k`` newest checkpoints.

    Parameters
    ----------
    k : int
        How many, ``>= 1``.
    """

    k: int

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise AmrckptError(f"KeepLast: k must be a positive int, not {self.k!r}")

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return the ``k`` largest steps."""
        return set(sorted(steps)[-self.k :])


@dataclass
class KeepEvery(_Combinable):
    """Keep checkpoints at steps that are multiples of ``m`` (a sparse long-term history).

    Parameters
    ----------
    m : int
        The step interval, ``>= 1``.
    """

    m: int

    def __post_init__(self) -> None:
        if isinstance(self.m, bool) or not isinstance(self.m, int) or self.m < 1:
            raise AmrckptError(f"KeepEvery: m must be a positive int, not {self.m!r}")

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return the steps divisible by ``m``."""
        return {s for s in steps if s % self.m == 0}


@dataclass
class KeepBest(_Combinable):
    """Keep the ``n`` checkpoints with the best value of a metric (orbax's ``best_fn``/``BestN``).

    The metric is the one passed to ``CheckpointManager.save(..., metrics=
    {metric: value})`` and recorded in the step record.  A checkpoint without a
    finite number for it (not recorded, NaN, not a number) is never among the
    best; combine with another policy (``KeepBest("loss", 3) | KeepLast(1)``)
    to keep such checkpoints.  A checkpoint whose step record is missing or
    cannot be read is kept: its metric is unknown, not bad.  Ties go to the newer step.  The manager never
    deletes the newest valid checkpoint whatever the policy says.

    Parameters
    ----------
    metric : str
        The key in the ``metrics`` dict of each save.
    n : int
        How many to keep, ``>= 1``.
    mode : {"min", "max"}, optional
        Whether smaller (default) or larger values are better.

    Raises
    ------
    AmrckptError
        If ``n`` is not a positive int or ``mode`` is neither ``"min"`` nor ``"max"``.
    """

    metric: str
    n: int
    mode: Literal["min", "max"] = "min"

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise AmrckptError(f"KeepBest: n must be a positive int, not {self.n!r}")
        if self.mode not in ("min", "max"):
            raise AmrckptError(f"KeepBest: mode must be 'min' or 'max', not {self.mode!r}")

    def value(self, record: Mapping[str, Any] | None) -> float | None:
        """Return the metric of one step record, or None if it has no finite number for it."""
        metrics = (record or {}).get("metrics")
        v = metrics.get(self.metric) if isinstance(metrics, Mapping) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        return float(v)

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return nothing: without step records no step has a metric."""
        return set()

    def keep_with_history(self, steps: Sequence[int], history: History) -> set[int]:
        """Return the ``n`` steps with the best metric."""
        scored = [(v, s) for s in steps if (v := self.value(history.get(s))) is not None]
        sign = 1.0 if self.mode == "min" else -1.0
        scored.sort(key=lambda vs: (sign * vs[0], -vs[1]))
        return {s for _, s in scored[: self.n]}


@dataclass
class KeepEveryNSeconds(_Combinable):
    """Keep checkpoints at least ``seconds`` of wall-clock time apart (orbax's ``keep_time_interval``).

    Going from the oldest, a checkpoint is kept when it was saved at least
    ``seconds`` after the last one kept: a sparse history of a long run,
    whatever the step rate.  The save times are those of the history
    records (``saved_at_unix``, or ``saved_at`` to the second); a checkpoint
    without one is not kept by this policy.

    Parameters
    ----------
    seconds : float
        The interval, ``> 0``.

    Raises
    ------
    AmrckptError
        If ``seconds`` is not a positive number.
    """

    seconds: float

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) or not self.seconds > 0:
            raise AmrckptError(f"KeepEveryNSeconds: seconds must be a positive number, not {self.seconds!r}")

    @staticmethod
    def saved_at(record: Mapping[str, Any] | None) -> float | None:
        """Return the Unix time a checkpoint was saved at, from its step record (None if unknown)."""
        record = record or {}
        t = record.get("saved_at_unix")
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            return float(t)
        text = record.get("saved_at")
        if isinstance(text, str):
            try:
                return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
            except ValueError:
                return None
        return None

    def keep(self, steps: Sequence[int]) -> set[int]:
        """Return nothing: without step records no step has a save time."""
        return set()

    def keep_with_history(self, steps: Sequence[int], history: History) -> set[int]:
        """Return the steps saved at least ``seconds`` after the previous one kept, oldest first."""
        out: set[int] = set()
        last: float | None = None
        for s in sorted(steps):
            t = self.saved_at(history.get(s))
            if t is None:
                continue
            if last is None or t - last >= self.seconds:
                out.add(s)
                last = t
        return out
