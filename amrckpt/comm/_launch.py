"""Refuse a launch whose processes do not form one MPI world (``srun -n 4`` without a working PMI).

A launcher tells each process how many tasks it started: PMI (MPICH's
Hydra, ``srun --mpi=pmi2``) sets ``PMI_SIZE``, Open MPI's launcher
``OMPI_COMM_WORLD_SIZE``, and Slurm's ``srun`` ``SLURM_STEP_NUM_TASKS`` in
every task of a step.  When that count exceeds ``MPI.COMM_WORLD``'s size, the
tasks started as separate MPI worlds (singletons): each would compute the
whole problem and write the same checkpoint files over the others'.  The
check compares the two once per process, when an MPI communicator is first
wrapped (:class:`~amrckpt.comm.MPIComm`), before any file is opened.

Only the launcher's count of the innermost launch is used: inside
``mpiexec`` (Hydra runs its proxies as a one-task Slurm step)
``PMI_SIZE`` wins over ``SLURM_STEP_NUM_TASKS``; a batch script's
``SLURM_NTASKS`` (the allocation, not a launch) is never used, so a serial
or singleton run inside a batch script is not refused.  Sub-communicators
are compared through ``MPI.COMM_WORLD``, so they are fine.  Set
``AMRCKPT_LAUNCH_CHECK=0`` to skip the check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import LaunchError

__all__ = ["check_one_world", "launched_task", "launcher_size"]

_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")
_checked = False


def launcher_size(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """Return ``(variable, count)``: how many tasks the innermost launcher started, or None without a launcher. Not collective."""
    env = os.environ if environ is None else environ
    for var in _SIZE_VARS:
        value = env.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return var, int(value)
    return None


_LAUNCHERS = frozenset({"hydra_pmi_proxy", "mpiexec", "mpirun", "mpiexec.hydra", "prted", "orted", "slurmstepd", "srun"})
"""The names (``/proc/<pid>/comm``, at most 15 characters) of the processes that start the tasks of an MPI job."""


def launched_task(environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """Return ``(variable, count)`` if a launcher started this very process as one of several tasks, else None. Not collective.

    The launcher's variables (:func:`launcher_size`) are inherited by every
    process a task starts (a script's ``subprocess.run(["amrckpt", ...])``),
    so the count alone would refuse a serial tool there; the task itself is
    the one whose parent is the launcher's process (Hydra's proxy, Open MPI's
    ``prted``, Slurm's ``slurmstepd``), read from ``/proc`` (Linux; elsewhere None).
    """
    env = os.environ if environ is None else environ
    if env.get("AMRCKPT_LAUNCH_CHECK", "1").strip() in ("0", "no", "off", "false"):
        return None
    found = launcher_size(env)
    if found is None or found[1] < 2:
        return None
    try:
        with open(f"/proc/{os.getppid()}/comm", encoding="utf-8", errors="replace") as f:
            parent = f.read().strip()
    except OSError:
        return None
    return found if parent in _LAUNCHERS else None


def check_one_world(world_size: int, environ: Mapping[str, str] | None = None) -> None:
    """Raise :class:`~amrckpt.errors.LaunchError` if the launcher started more tasks than ``MPI.COMM_WORLD`` holds.

    Not collective: every process of a broken launch decides alone (it has
    no one to agree with), from its own environment, so all of them raise.

    Parameters
    ----------
    world_size : int
        ``MPI.COMM_WORLD.Get_size()``.
    environ : mapping, optional
        Default ``os.environ``.

    Raises
    ------
    LaunchError
        If ``world_size`` is smaller than the launcher's task count.
    """
    env = os.environ if environ is None else environ
    if env.get("AMRCKPT_LAUNCH_CHECK", "1").strip() in ("0", "no", "off", "false"):
        return
    found = launcher_size(env)
    if found is None or world_size >= found[1]:
        return
    var, n = found
    if var == "SLURM_STEP_NUM_TASKS":
        cause = (
            f"srun started {n} tasks (SLURM_STEP_NUM_TASKS={n}), but MPI.COMM_WORLD has {world_size} process"
            f"{'es' if world_size != 1 else ''}: srun gave the tasks no process-management interface that this MPI library "
            f"speaks (--mpi={env.get('SLURM_MPI_TYPE') or 'none'}), so each task is an MPI job of its own"
        )
        fix = (
            f"Launch with `srun --mpi=pmi2 -n {n} ...` (MPICH, Intel MPI and the mpich wheel; Open MPI: --mpi=pmix; "
            f"`srun --mpi=list` shows what this Slurm offers), or with `mpiexec -n {n} ...` inside the allocation"
        )
    else:
        cause = (
            f"the launcher started {n} processes ({var}={n}), but MPI.COMM_WORLD has {world_size}: the processes did not "
            "join one MPI job (an MPI library other than the launcher's, or a process started outside it)"
        )
        fix = "Launch with the mpiexec of the MPI library that mpi4py uses (python -c 'import mpi4py; print(mpi4py.get_config())')"
    raise LaunchError(
        f"amrckpt refuses to run: {cause}; each would write the same checkpoint files. {fix}. Nothing was written. "
        "(AMRCKPT_LAUNCH_CHECK=0 skips this check.)"
    )


def check_mpi_world(MPI: Any) -> None:
    """Run :func:`check_one_world` against ``MPI.COMM_WORLD``, once per process (then cached)."""
    global _checked
    if _checked:
        return
    if MPI.Is_initialized() and not MPI.Is_finalized():
        check_one_world(MPI.COMM_WORLD.Get_size())
        _checked = True
