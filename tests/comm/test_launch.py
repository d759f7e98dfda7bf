"""A launch whose tasks do not form one MPI world is refused, with the cause and the fix (faked environments)."""

from __future__ import annotations

import pytest

from amrckpt.comm._launch import check_one_world, launcher_size
from amrckpt.errors import AmrckptError, LaunchError


def test_srun_without_pmi_is_refused() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4", "SLURM_PROCID": "2"}
    with pytest.raises(LaunchError) as info:
        check_one_world(1, env)
    msg = str(info.value)
    assert "SLURM_STEP_NUM_TASKS=4" in msg and "MPI.COMM_WORLD has 1 process" in msg
    assert "srun --mpi=pmi2" in msg and "mpiexec -n 4" in msg and "Nothing was written" in msg
    assert isinstance(info.value, AmrckptError) and isinstance(info.value, RuntimeError)


def test_legitimate_launches_pass() -> None:
    check_one_world(1, {})  # no launcher: python script.py
    check_one_world(4, {"SLURM_STEP_NUM_TASKS": "4", "PMI_SIZE": "4"})  # srun --mpi=pmi2 -n 4
    # mpiexec inside an allocation: Hydra's proxy is a 1-task srun step; PMI_SIZE counts the ranks.
    check_one_world(4, {"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1", "PMI_SIZE": "4"})
    # A serial or singleton run in the batch script of a 4-task job: SLURM_NTASKS is the allocation, not a launch.
    check_one_world(1, {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})
    check_one_world(1, {"SLURM_STEP_NUM_TASKS": "1"})  # srun -n 1
    check_one_world(1, {"SLURM_STEP_NUM_TASKS": "4", "AMRCKPT_LAUNCH_CHECK": "0"})  # the escape hatch


def test_other_launchers() -> None:
    assert launcher_size({"OMPI_COMM_WORLD_SIZE": "3", "SLURM_STEP_NUM_TASKS": "1"}) == ("OMPI_COMM_WORLD_SIZE", 3)
    with pytest.raises(LaunchError, match=r"PMI_SIZE=4.*mpiexec of the MPI library that mpi4py uses"):
        check_one_world(1, {"PMI_SIZE": "4"})  # mpich's mpiexec, mpi4py built for another MPI
