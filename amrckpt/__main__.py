"""``python -m amrckpt``: the ``amrckpt`` command (:func:`amrckpt.cli.main`).

Under ``mpiexec -n P python -m mpi4py -m amrckpt ...`` the exit status is
the same on every rank (the commands agree on their outcome), so a non-zero
status ends each process after ``MPI_Finalize`` instead of raising
``SystemExit``, which ``python -m mpi4py`` turns into an ``MPI_Abort`` of
the job (and its messages) although nothing went wrong with MPI.
"""

from __future__ import annotations

import os
import sys

from .cli import main


def _exit(status: int) -> None:
    MPI = sys.modules.get("mpi4py.MPI")
    if status and MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.Finalize()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    _exit(main())
