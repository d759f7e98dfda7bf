"""Checkpoints kept aside: those a restart or a save found damaged or unreadable, renamed and never overwritten."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from ..comm import Call
from ..errors import CheckpointError, ScdaError
from ..restart import Loaded
from ..schema import CheckpointSchema
from ._directory import CheckpointDirectory, unreadable
from ._records import CheckpointRecord
from ._restore import Skipped

__all__ = ["SetAside"]

S = TypeVar("S", bound=CheckpointSchema)


class SetAside:
    """A manager's checkpoints that a restart or a save found damaged or unreadable: kept aside, never overwritten.

    Rank 0 renames such a checkpoint aside (:meth:`CheckpointDirectory.set_aside`,
    with a :class:`~amrckpt.errors.CheckpointSkippedWarning`); every rank
    notes the steps that could not be renamed (``unusable``), which a save
    of the same step then refuses to overwrite.
    """

    def __init__(self, directory: CheckpointDirectory) -> None:
        self.directory = directory
        self.unusable: set[int] = set()

    def skip(self, call: Call, step: int, problem: str, unreadable: bool) -> Skipped:
        """Keep a checkpoint aside (rank 0: rename, warning); return it on every rank. Collective."""
        got: Skipped = call.on_root(lambda: self.directory.set_aside(step, problem, unreadable), what="restore: keep aside")
        self.report([got])
        return got

    def report(self, skipped: list[Skipped]) -> None:
        """Note on every rank what rank 0 kept aside (the warning was issued there)."""
        for s in skipped:
            if s.kept_as is None:
                self.unusable.add(s.step)
            else:
                self.unusable.discard(s.step)

    def newest(
        self, call: Call, records: list[CheckpointRecord], load_one: Callable[[str | os.PathLike[str]], Loaded[S]]
    ) -> tuple[int | None, Loaded[S] | None, tuple[Skipped, ...]]:
        """Load the newest of ``records`` that loads (CRCs checked), keeping aside each one that does not. Collective.

        Returns the step and the state loaded (None, None if none loads) and
        the checkpoints skipped, newest first (SCR's fallback to the
        previous checkpoint).
        """
        skipped: list[Skipped] = []
        for r in reversed(records):
            if not r.valid:
                skipped.append(self.skip(call, r.step, r.problem or "", r.unreadable))
                continue
            try:
                loaded = load_one(r.path)
            except (CheckpointError, ScdaError) as exc:
                skipped.append(self.skip(call, r.step, f"{type(exc).__name__}: {exc}", unreadable(exc)))
                continue
            return r.step, loaded, tuple(skipped)
        return None, None, tuple(skipped)
