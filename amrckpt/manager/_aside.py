"""Checkpoints kept aside: those a restart or a save found damaged, renamed and never overwritten.

Only evidence in a checkpoint's bytes, found twice, is a verdict; an I/O
error fails the restart and leaves the checkpoint where it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from ..comm import Call
from ..errors import CheckpointError, ScdaError
from ..restart import Loaded
from ..schema import CheckpointSchema
from ._directory import CheckpointDirectory
from ._evidence import io_error_of
from ._records import CheckpointRecord
from ._restore import Skipped

__all__ = ["SetAside"]

S = TypeVar("S", bound=CheckpointSchema)


class SetAside:
    """A manager's checkpoints that a restart or a save found damaged: kept aside, never overwritten.

    Rank 0 renames such a checkpoint aside (:meth:`CheckpointDirectory.set_aside`,
    with a :class:`~amrckpt.errors.CheckpointSkippedWarning`); every rank
    notes the steps that could not be renamed (``unusable``), which a save
    of the same step then refuses to overwrite.
    """

    def __init__(self, directory: CheckpointDirectory) -> None:
        self.directory = directory
        self.unusable: set[int] = set()

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
        """Load the newest of ``records`` that loads (CRCs checked), keeping aside each one that is damaged. Collective.

        A checkpoint is kept aside (as damaged) only on evidence in its
        bytes, found twice: by the metadata check of ``records`` and a load,
        or by two loads.  An I/O error (:func:`~amrckpt.manager._evidence.io_error_of`)
        is no verdict: it is raised (agreed, the same on every rank), and the
        checkpoint is left where it is for the next restart.

        Returns the step and the state loaded (None, None if none loads) and
        the checkpoints skipped, newest first (SCR's fallback to the
        previous checkpoint).

        Raises
        ------
        ScdaIOError
            On every rank, if a checkpoint tried cannot be read (with the errno).
        CollectiveError
            On every rank, as the load raised it (not a verdict on the file either).
        SchemaError
            On every rank, as the load raised it (not a verdict on the file either).
        """  # noqa: DOC501 (the bare raise re-raises only an ScdaIOError: io_failure() returned it as it is)
        skipped: list[Skipped] = []
        for r in reversed(records):
            problem = r.problem or ""
            reads = 1 if not r.valid and not r.unreadable else 2  # the check found damage: one load confirms it
            for _ in range(reads):
                try:
                    loaded = load_one(r.path)
                except (CheckpointError, ScdaError) as exc:
                    if io_error_of(exc) is not None:  # agreed: the same on every rank, and no file is touched
                        failure = self.directory.io_failure(r.step, exc, "the restore failed")
                        if failure is exc:
                            raise
                        raise failure from exc
                    problem = f"{type(exc).__name__}: {exc}"
                    continue
                return r.step, loaded, tuple(skipped)
            # Rank 0 renames it aside (a warning there); every rank notes what it did.
            skipped.append(call.on_root(partial(self.directory.set_aside, r.step, problem, False), what="restore: keep aside"))
            self.report(skipped[-1:])
        return None, None, tuple(skipped)
