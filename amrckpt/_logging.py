"""Rank-aware logging: one message per job for what every rank would say alike, a rank tag for what differs.

The package logger ``amrckpt`` has a :class:`logging.NullHandler` (set in
``amrckpt/__init__.py``): a library never prints on its own, and without it
Python's last-resort handler would print every warning once per rank (P
copies at scale).  An application sees amrckpt's messages by configuring
logging, e.g. ``logging.basicConfig(level=logging.INFO)`` on every rank;
amrckpt then logs through :class:`RankLogger`:

* ``info``/``warning``: a message that every rank of the
  communicator would emit alike (agreed decisions, rank 0's file-system
  work) is emitted on rank 0 only;
* ``rank_warning``/``rank_error``: a message that differs between ranks is
  emitted where it happens, tagged ``rank r of P: ``.

Every record of every amrckpt logger carries ``rank`` and ``size``
attributes for formatters, e.g. ``logging.Formatter("%(rank)s/%(size)s
%(message)s")``: :class:`RankLogger` gives its communicator's; the loggers
of :func:`get_logger` (every other amrckpt module's) fill them, where a
record lacks them, with the process's rank and size in ``MPI_COMM_WORLD``
(:func:`world_rank_size`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

__all__ = ["RankFilter", "RankLogger", "get_logger", "world_rank_size"]

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")


def world_rank_size() -> tuple[int, int]:
    """Return this process's rank and size in ``MPI_COMM_WORLD``. Not collective.

    From mpi4py where it is imported (and MPI initialized), else from the
    launcher's environment (``PMI_RANK``/``PMI_SIZE``, Open MPI's, MVAPICH's,
    Slurm's), else ``(0, 1)``.  Never imports mpi4py.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        try:
            if mpi.Is_initialized() and not mpi.Is_finalized():
                return int(mpi.COMM_WORLD.Get_rank()), int(mpi.COMM_WORLD.Get_size())
        except Exception:  # noqa: BLE001 - a log record must never fail for want of a rank
            pass
    for rv, sv in zip(_RANK_VARS, _SIZE_VARS, strict=True):
        r, n = os.environ.get(rv), os.environ.get(sv)
        if r is not None and n is not None and r.isdigit() and n.isdigit():
            return int(r), int(n)
    return 0, 1


class RankFilter(logging.Filter):
    """Give a record without them the ``rank`` and ``size`` attributes (:func:`world_rank_size`); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill ``record.rank`` and ``record.size`` where missing; return True."""
        if not hasattr(record, "rank") or not hasattr(record, "size"):
            rank, size = world_rank_size()
            record.rank = getattr(record, "rank", rank)
            record.size = getattr(record, "size", size)
        return True


_FILTER = RankFilter()


def get_logger(name: str) -> logging.Logger:
    """Return ``logging.getLogger(name)`` with a :class:`RankFilter`: each of its records carries ``rank`` and ``size``.

    A logger's filters see the records it creates (not those of its
    children): every amrckpt module gets its logger here.
    """
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log


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

    def info(self, msg: str, *args: Any) -> None:
        """Log on rank 0 a message that every rank would log alike."""
        self._log(logging.INFO, False, msg, args)

    def warning(self, msg: str, *args: Any) -> None:
        """Log on rank 0 a warning that every rank would log alike."""
        self._log(logging.WARNING, False, msg, args)

    def rank_warning(self, msg: str, *args: Any) -> None:
        """Log on this rank, tagged with it, a warning that differs between ranks."""
        self._log(logging.WARNING, True, msg, args)

    def rank_error(self, msg: str, *args: Any) -> None:
        """Log on this rank, tagged with it, an error that differs between ranks."""
        self._log(logging.ERROR, True, msg, args)
