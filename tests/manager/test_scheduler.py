"""Parsing scheduler output and the refresh schedule of BeforeWallTime (no mocks: real output, plain functions)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from amrckpt.comm import run_threads
from amrckpt.manager import BeforeWallTime, Moment, job_end_time, slurm_end_time
from amrckpt.manager._scheduler import (
    JobClock,
    Scheduler,
    detect_scheduler,
    env_end_time,
    launcher_rank,
    parse_duration,
    parse_flux_timeleft,
    parse_lsf_bjobs,
    parse_pbs_qstat,
    parse_scontrol_job,
    parse_squeue_end,
)

# `SLURM_TIME_FORMAT=%s scontrol show job $SLURM_JOB_ID` inside a job of Slurm 22.05.8 (Debian 12), --time=3.
SCONTROL_EPOCH = """\
JobId=5 JobName=cap.sh
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901755 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:01 TimeLimit=00:03:00 TimeMin=N/A
   SubmitTime=1795511262 EligibleTime=1795511262
   AccrueTime=1795511262
   StartTime=1795511262 EndTime=1795511442 Deadline=N/A
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=1795511262 Scheduler=Main
   Partition=debug AllocNode:Sid=localhost:2314
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=2,node=1,billing=2
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=/tmp/sl/cap.sh
   WorkDir=/tmp/sl
   StdErr=/tmp/sl/slurm-5.out
   StdIn=/dev/null
   StdOut=/tmp/sl/slurm-5.out
   Power=

"""
# The same job without SLURM_TIME_FORMAT: local time (the machine's zone was UTC).
SCONTROL_LOCAL = SCONTROL_EPOCH.replace(
    "StartTime=1795511262 EndTime=1795511442", "StartTime=2026-11-24T09:07:42 EndTime=2026-11-24T09:10:42"
)


def test_parse_duration() -> None:
    assert parse_duration("00:03:00") == 180.0
    assert parse_duration("1-12:00:00") == 129_600.0
    assert parse_duration("2-3") == 2 * 86_400 + 3 * 3600
    assert parse_duration("90") == 5400.0  # plain minutes, as --time=90
    assert parse_duration("5:30") == 330.0  # minutes:seconds
    for unlimited in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A", "", "soon"):
        assert parse_duration(unlimited) is None


def test_parse_scontrol(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_scontrol_job(SCONTROL_EPOCH) == 1795511442.0
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert parse_scontrol_job(SCONTROL_LOCAL) == 1795511442.0
    finally:
        monkeypatch.undo()
        time.tzset()
    # No EndTime: start + limit; unlimited and pending jobs have no end.
    assert parse_scontrol_job(SCONTROL_EPOCH.replace("EndTime=1795511442", "EndTime=Unknown")) == 1795511262.0 + 180
    assert parse_scontrol_job(SCONTROL_EPOCH.replace("TimeLimit=00:03:00", "TimeLimit=UNLIMITED")) is None
    assert parse_scontrol_job("slurm_load_jobs error: Invalid job id specified\n") is None


def test_parse_squeue_pbs_lsf_flux() -> None:
    assert parse_squeue_end("1795511442\n") == 1795511442.0
    assert parse_squeue_end("N/A\n") is None and parse_squeue_end("") is None
    qstat = (
        "Job Id: 4242.pbs01\n    Job_Name = run\n    resources_used.walltime = 00:10:05\n    Resource_List.walltime = 01:00:00\n"
    )
    assert parse_pbs_qstat(qstat, now=10_000.0) == 10_000.0 - 605 + 3600
    assert parse_pbs_qstat("Job Id: 1\n    Job_Name = run\n", now=0.0) is None
    assert parse_lsf_bjobs("00:10:05 01:00:00\n", now=10_000.0) == 10_000.0 - 605 + 3600
    assert parse_lsf_bjobs("605 second(s) 60.0/hostA\n", now=10_000.0) == 10_000.0 - 605 + 3600
    assert parse_lsf_bjobs("605 second(s) -\n", now=0.0) is None
    assert parse_flux_timeleft("125.5\n", now=1000.0) == 1125.5
    assert parse_flux_timeleft("inf\n", now=1000.0) is None


def test_environment() -> None:
    assert detect_scheduler({}) is None
    assert detect_scheduler({"SLURM_JOB_ID": "17"}) == Scheduler("slurm", "17")
    assert detect_scheduler({"PBS_JOBID": "4242.pbs01"}) == Scheduler("pbs", "4242.pbs01")
    assert detect_scheduler({"LSB_JOBID": "9"}) == Scheduler("lsf", "9")
    assert env_end_time({"SLURM_JOB_END_TIME": "1700000000"}) == 1.7e9
    assert env_end_time({"SLURM_JOB_START_TIME": "1000", "SLURM_JOB_TIME_LIMIT": "1:00:00"}) == 4600.0
    assert slurm_end_time({"SLURM_JOB_START_TIME": "1000", "SLURM_TIMELIMIT": "10"}) == 1600.0
    assert env_end_time({"SLURM_JOB_ID": "17"}) is None  # Slurm 22.05: nothing exported
    assert job_end_time({}) is None  # outside a batch job: no query
    assert job_end_time({"SLURM_JOB_END_TIME": "1700000000", "SLURM_JOB_ID": "1"}, query=False) == 1.7e9
    assert launcher_rank({"PMI_RANK": "3", "SLURM_PROCID": "0"}) == 3  # mpiexec inside a Slurm step: PMI's rank
    assert launcher_rank({}) is None


class Scontrol:
    """A scheduler whose answers a test sets (the end a real ``scontrol`` would print); counts the queries."""

    def __init__(self, end: float | None) -> None:
        self.end, self.calls = end, 0

    def __call__(self, scheduler: Scheduler) -> float | None:
        assert scheduler == Scheduler("slurm", "17")
        self.calls += 1
        return self.end


def test_clock_halving_schedule_and_budget() -> None:
    slurm = Scontrol(86_400.0)
    clock = JobClock({"SLURM_JOB_ID": "17"}, query=slurm)
    assert clock.end(0.0) == 86_400.0 and slurm.calls == 1
    for now in range(0, 86_400, 30):  # a 24-hour job that asks every 30 s
        clock.end(float(now))
    assert 5 <= slurm.calls <= 8  # a handful, never more than max_queries
    slurm = Scontrol(3600.0)
    clock = JobClock({"SLURM_JOB_ID": "17"}, query=slurm, max_queries=3)
    for now in range(0, 3600, 1):
        clock.end(float(now))
    assert slurm.calls == 3


def test_clock_sees_a_changed_limit() -> None:
    slurm = Scontrol(300.0)
    clock = JobClock({"SLURM_JOB_ID": "17"}, query=slurm, refresh=10.0)
    assert clock.end(0.0) == 300.0
    slurm.end = 60.0  # scontrol update JobId=17 TimeLimit=1
    assert clock.end(5.0) == 300.0  # not yet refreshed
    assert clock.end(10.0) == 60.0 and slurm.calls == 2


def test_clock_from_the_environment_then_refreshed() -> None:
    slurm = Scontrol(2000.0)
    clock = JobClock({"SLURM_JOB_ID": "17", "SLURM_JOB_END_TIME": "1000"}, query=slurm, refresh=100.0)
    assert clock.end(0.0) == 1000.0 and slurm.calls == 0 and clock.source == "environment"
    assert clock.end(100.0) == 2000.0 and slurm.calls == 1  # extended after the start: honoured


def moment(step: int, now: float) -> Moment:
    return Moment(step, now, None, 0.0, (), None)


def test_before_wall_time_rank0_learns_and_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bound to a communicator: rank 0 learns the end (here from the environment), every rank gets it, rank 0 decides."""
    end = time.time() + 1000.0
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(int(end)))
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol to refresh with: the environment's end stays

    def body(comm: Any) -> tuple[float | None, bool]:
        policy = BeforeWallTime(min_margin=60)
        policy.bind(comm)
        return policy.end_time, policy.decide(moment(1, float(int(end)) - 30.0)).save  # type: ignore[return-value]

    results = run_threads(3, body)
    assert [r[0] for r in results] == [float(int(end))] * 3
    assert [r[1] for r in results] == [True, False, False]


def test_before_wall_time_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SLURM_JOB_ID", "SLURM_JOB_END_TIME", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    policy = BeforeWallTime()
    assert not policy.decide(moment(1, time.time())).save and policy.end_time is None
