"""``python -m amrckpt``: the ``amrckpt`` command (:func:`amrckpt.cli.main`).

Under ``mpiexec -n P python -m mpi4py -m amrckpt ...`` the exit status is
the same on every rank (the commands agree on their outcome).  A non-zero
status raised as ``SystemExit`` would make ``python -m mpi4py`` call
``MPI_Abort``, whose message says the application failed; and processes
that leave ``MPI_Finalize`` with a non-zero status race with the process
manager's clean-up (MPICH's hydra kills those still exiting, with a banner).
So each rank flushes its output, the ranks meet, and the job ends by
``MPI_Abort`` with the agreed status and the abort's own message silenced:
the command's output, then the status, and nothing else.
"""

from __future__ import annotations

import os
import sys

from .cli import main


def _exit(status: int) -> None:
    MPI = sys.modules.get("mpi4py.MPI")
    if status and MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Barrier()  # every rank's output is out
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # MPI_Abort's message: the status says it all
        MPI.COMM_WORLD.Abort(status)
    sys.exit(status)


if __name__ == "__main__":
    _exit(main())
