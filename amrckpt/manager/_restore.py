"""What a restart returns: the state loaded, its step, and the checkpoints skipped on the way (kept aside)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from ..restart import Loaded
from ..schema import CheckpointSchema

__all__ = ["Restored", "Skipped"]

S = TypeVar("S", bound=CheckpointSchema)


@dataclass(frozen=True)
class Skipped:
    """A checkpoint that a restart (or a save of its step) skipped because it is damaged (found twice).

    Attributes
    ----------
    step : int
        Its step.
    path : str
        Where it was.
    problem : str
        Why it was skipped (the error, naming the section and bytes where known).
    kept_as : str or None
        The file it is kept under (``<name>.damaged-<token>`` or
        ``<name>.unreadable-<token>``, with its records); None if it could
        not be renamed (``kept_problem`` says why; it is then never
        overwritten by this manager either: a save of its step fails).
    unreadable : bool
        Whether it was kept aside as unreadable.  A restart never does this
        any more (an I/O error fails the restart and leaves the checkpoint
        where it is); kept for the records of older releases.
    kept_problem : str or None
        Why it could not be renamed, or None.
    """

    step: int
    path: str
    problem: str
    kept_as: str | None
    unreadable: bool = False
    kept_problem: str | None = None

    def message(self) -> str:
        """Return the sentence the warning carries."""
        what = "could not be read" if self.unreadable else "is damaged"
        if self.kept_as is not None:
            where = f"kept aside as {self.kept_as} (never overwritten; rename it back to use it again)"
        else:
            where = f"left where it is: it could not be renamed aside ({self.kept_problem})"
        return f"the checkpoint of step {self.step} ({self.path}) {what}: {self.problem}; skipped and {where}"


@dataclass(frozen=True)
class Restored(Loaded[S]):
    """What :meth:`~amrckpt.CheckpointManager.restore_latest` and ``restore`` return: a :class:`~amrckpt.Loaded`, and more.

    Attributes
    ----------
    step : int
        The step restored (also the manager's ``restored_step``).
    skipped : tuple of Skipped
        The newer checkpoints skipped on the way (damaged or unreadable),
        newest first; each is kept aside and was reported by a
        :class:`~amrckpt.errors.CheckpointSkippedWarning`.
    """

    step: int = -1
    skipped: tuple[Skipped, ...] = ()

    @classmethod
    def of(cls, loaded: Loaded[S], step: int, skipped: tuple[Skipped, ...] = ()) -> Restored[S]:
        """Return ``loaded`` with its step and the checkpoints skipped."""
        values: dict[str, Any] = {f.name: getattr(loaded, f.name) for f in dataclasses.fields(Loaded)}
        return cls(**values, step=step, skipped=skipped)
