"""Rank-aware logging: one message per job for what every rank would say alike, a rank tag for what differs.

The package logger ``amrckpt`` has a :class:`logging.NullHandler` (set in
``amrckpt/__init__.py``): a library never prints on its own, and without it
Python's last-resort handler would print every warning once per rank (P
copies at scale).  An application sees amrckpt's messages by configuring
logging, e.g. ``logging.basicConfig(level=logging.INFO)`` on every rank;
amrckpt then logs through :class:`RankLogger`:

* ``info``/``warning``/``error``: a message that every rank of the
  communicator would emit alike (agreed decisions, rank 0's file-system
  work) is emitted on rank 0 only;
* ``rank_warning``/``rank_error``: a message that differs between ranks is
  emitted where it happens, tagged ``rank r of P: ``.

Every record carries ``rank`` and ``size`` attributes (``extra``) for
formatters, e.g. ``logging.Formatter("%(rank)s/%(size)s %(message)s")``.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["RankLogger"]


class RankLogger:
    """A logger bound to one communicator's rank and size (not collective: it never communicates).

    Parameters
    ----------
    logger : logging.Logger
        Where the records go (a child of ``logging.getLogger("amrckpt")``).
    rank, size : int
        This process's rank in the communicator and the communicator's size.
    """

    def __init__(self, logger: logging.Logger, rank: int, size: int) -> None:
        self.logger = logger
        self.rank = rank
        self.size = size

    def _log(self, level: int, everywhere: bool, msg: str, args: tuple[Any, ...]) -> None:
        if not everywhere and self.rank != 0:
            return
        if not self.logger.isEnabledFor(level):
            return
        if everywhere and self.size > 1:
            msg = f"rank {self.rank} of {self.size}: {msg}"
        self.logger.log(level, msg, *args, extra={"rank": self.rank, "size": self.size}, stacklevel=3)

    def debug(self, msg: str, *args: Any) -> None:
        """Log on rank 0 a message that every rank would log alike."""
        self._log(logging.DEBUG, False, msg, args)

    def info(self, msg: str, *args: Any) -> None:
        """Log on rank 0 a message that every rank would log alike."""
        self._log(logging.INFO, False, msg, args)

    def warning(self, msg: str, *args: Any) -> None:
        """Log on rank 0 a warning that every rank would log alike."""
        self._log(logging.WARNING, False, msg, args)

    def error(self, msg: str, *args: Any) -> None:
        """Log on rank 0 an error that every rank would log alike."""
        self._log(logging.ERROR, False, msg, args)

    def rank_warning(self, msg: str, *args: Any) -> None:
        """Log on this rank, tagged with it, a warning that differs between ranks."""
        self._log(logging.WARNING, True, msg, args)

    def rank_error(self, msg: str, *args: Any) -> None:
        """Log on this rank, tagged with it, an error that differs between ranks."""
        self._log(logging.ERROR, True, msg, args)
