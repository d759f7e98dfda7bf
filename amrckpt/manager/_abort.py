"""Ending a whole MPI job from one rank (``abort_on_error``): report, ``MPI_Abort``, exit."""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any

from .._logging import RankLogger
from ..comm import mpi_of

__all__ = ["abort_job"]


def abort_job(comm: Any, log: RankLogger, exc: BaseException) -> None:
    """Report ``exc`` (this rank only) and abort the whole MPI job: the other ranks may wait in a collective. Never returns."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.rank_error("aborting the MPI job (abort_on_error=True), an exception left the manager's with block:\n%s", text)
    # The process ends within the next call: the traceback goes to stderr even where logging is not configured.
    sys.stderr.write(f"amrckpt: rank {comm.rank} of {comm.size}: aborting the MPI job: {text}")
    sys.stderr.flush()
    time.sleep(0.5)  # the process manager forwards what this rank printed before it kills the job
    m = mpi_of(comm)
    if m is not None:
        m.abort(1)
    # MPICH's MPI_Abort can return before the process manager kills the job (seen with the mpich 5 wheel):
    # this rank must not go on into the collectives after the with block.
    os._exit(1)
