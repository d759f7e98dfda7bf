"""Which checkpoints to keep: composable retention policies (orbax's ``LatestN``, ``EveryNSteps``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import AmrckptError

__all__ = ["KeepAll", "KeepAny", "KeepEvery", "KeepLast", "KeepPolicy"]


@runtime_checkable
class KeepPolicy(Protocol):
    """Decides which of the valid checkpoints (by step, oldest first) to keep.

    The manager never deletes the newest valid checkpoint, whatever the
    policy says, and deletes only after a new checkpoint was committed.
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
        """Return the union of the policies' choices."""
        out: set[int] = set()
        for p in self.policies:
            out |= p.keep(steps)
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
