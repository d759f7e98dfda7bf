"""When does this batch job end?  The job's environment, or one query to its scheduler (Slurm, PBS, LSF, Flux).

:class:`~amrckpt.manager.BeforeWallTime` needs the time at which the
scheduler will kill the job.  Some schedulers export it (newer Slurm releases:
``SLURM_JOB_END_TIME``); Slurm 22.05, still common, exports neither the end
nor the start nor the limit, so the end must be asked for
(``scontrol show job $SLURM_JOB_ID``).  This module reads the environment,
runs that one query when needed, and parses its output; the parsers are
plain functions of text, tested on real output.

========  ==============================  =================================================================
scheduler  environment                     query (with a timeout of 10 s)
========  ==============================  =================================================================
Slurm      ``SLURM_JOB_END_TIME``; else    ``scontrol show job $SLURM_JOB_ID`` (``EndTime``; with
           ``SLURM_JOB_START_TIME`` plus   ``SLURM_TIME_FORMAT=%s`` so that no time zone enters), else
           ``SLURM_JOB_TIME_LIMIT`` /      ``squeue -h -j $SLURM_JOB_ID -o %e``
           ``SLURM_TIMELIMIT`` (minutes)
PBS        --                              ``qstat -f $PBS_JOBID``: now - ``resources_used.walltime`` +
                                           ``Resource_List.walltime``
LSF        --                              ``bjobs -noheader -hms -o "run_time runtimelimit" $LSB_JOBID``:
                                           now - run time + run limit
Flux       --                              ``flux job timeleft``: now + the seconds left
========  ==============================  =================================================================

A query asks the scheduler's controller, so it is made rarely, and on one
rank only (the manager's rank 0; see :class:`JobClock`).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .._logging import get_logger

__all__ = [
    "JobClock",
    "Scheduler",
    "detect_scheduler",
    "env_end_time",
    "job_end_time",
    "launcher_rank",
    "parse_duration",
    "parse_flux_timeleft",
    "parse_lsf_bjobs",
    "parse_pbs_qstat",
    "parse_scontrol_job",
    "parse_squeue_end",
    "query_end_time",
]

log = get_logger("amrckpt.manager")

QUERY_TIMEOUT = 10.0
"""Seconds a scheduler query may take before it is given up (the controller may be busy)."""

_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "NOT_SET", "N/A", "UNKNOWN", ""}


@dataclass(frozen=True)
class Scheduler:
    """The batch system this process runs under, as its environment tells.

    Attributes
    ----------
    name : str
        ``"slurm"``, ``"pbs"``, ``"lsf"`` or ``"flux"``.
    job_id : str
        The job's id (``SLURM_JOB_ID``, ``PBS_JOBID``, ``LSB_JOBID``, ``FLUX_JOB_ID``).
    """

    name: str
    job_id: str


def detect_scheduler(environ: Mapping[str, str] | None = None) -> Scheduler | None:
    """Return the batch system of this process from its environment, or None outside a batch job. Not collective."""
    env = os.environ if environ is None else environ
    for name, var in (("slurm", "SLURM_JOB_ID"), ("pbs", "PBS_JOBID"), ("lsf", "LSB_JOBID"), ("flux", "FLUX_JOB_ID")):
        value = env.get(var, "").strip()
        if value:
            return Scheduler(name, value)
    return None


def launcher_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """Return this process's rank as its launcher set it (PMI, PMIx, Open MPI, Slurm), or None. Not collective."""
    env = os.environ if environ is None else environ
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        value = env.get(var, "").strip()
        if value.isdigit():
            return int(value)
    return None


# -- parsers: plain functions of text -----------------------------------------------


def parse_duration(text: str) -> float | None:
    """Return a duration in seconds from a scheduler's notation, or None for an unlimited or unknown one.

    Accepts Slurm's ``[days-]hours:minutes:seconds``, ``minutes:seconds``,
    ``days-hours[:minutes]`` and plain ``minutes`` (as ``--time`` and
    ``TimeLimit=`` give them), and PBS's ``hours:minutes:seconds``.

    Parameters
    ----------
    text : str
        E.g. ``"1-12:00:00"``, ``"00:01:00"``, ``"90"``, ``"UNLIMITED"``.

    Returns
    -------
    float or None
        Seconds; None for ``UNLIMITED``, ``INFINITE``, ``NOT_SET``, ``N/A``
        or text that is none of the forms above.
    """
    s = text.strip()
    if s.upper() in _UNLIMITED:
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        return None
    days, a, b, c = m.groups()
    d = int(days or 0)
    if days is not None:  # days-hours[:minutes[:seconds]]
        h, mi, sec = int(a), int(b or 0), int(c or 0)
    elif c is not None:  # hours:minutes:seconds
        h, mi, sec = int(a), int(b), int(c)
    elif b is not None:  # minutes:seconds
        h, mi, sec = 0, int(a), int(b)
    else:  # minutes
        h, mi, sec = 0, int(a), 0
    return float(((d * 24 + h) * 60 + mi) * 60 + sec)


def _slurm_time(value: str) -> float | None:
    """Parse a Slurm time stamp: Unix seconds (``SLURM_TIME_FORMAT=%s``) or ``YYYY-MM-DDTHH:MM:SS`` in local time."""
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        return time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_scontrol_job(text: str) -> float | None:
    """Return the job's end (Unix time) from the output of ``scontrol show job <id>``, or None if it has none.

    ``EndTime=`` is the end the controller enforces (start plus the current
    time limit, including any ``scontrol update TimeLimit=``); when it is
    missing, ``StartTime=`` plus ``TimeLimit=``.  Time stamps are Unix
    seconds when the command ran with ``SLURM_TIME_FORMAT=%s`` (as
    :func:`query_end_time` runs it), otherwise local time.

    Parameters
    ----------
    text : str
        The command's standard output (one job; the first ``JobId=`` record is used).

    Returns
    -------
    float or None
        None for an unlimited job, a job without a start yet, or text that is not scontrol's.
    """
    records = re.split(r"(?m)^(?=JobId=)", text)
    rec = next((r for r in records if r.startswith("JobId=")), text)
    fields = dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", rec))
    limit = parse_duration(fields.get("TimeLimit", ""))
    if fields.get("TimeLimit", "").upper() in ("UNLIMITED", "INFINITE"):
        return None
    end = _slurm_time(fields.get("EndTime", ""))
    if end is not None and end > 0:
        return end
    start = _slurm_time(fields.get("StartTime", ""))
    if start is not None and start > 0 and limit is not None:
        return start + limit
    return None


def parse_squeue_end(text: str) -> float | None:
    """Return the job's end (Unix time) from ``squeue -h -j <id> -o %e``, or None (``N/A``, ``NONE``, no line).

    Parameters
    ----------
    text : str
        The command's standard output: one line, Unix seconds with
        ``SLURM_TIME_FORMAT=%s``, else ``YYYY-MM-DDTHH:MM:SS`` in local time.
    """
    first = text.strip().splitlines()[0] if text.strip() else ""
    value = first.split("|")[0].strip()
    return _slurm_time(value) if value.upper() not in _UNLIMITED else None


def parse_pbs_qstat(text: str, now: float) -> float | None:
    """Return the job's end (Unix time) from ``qstat -f <id>`` (PBS Pro, OpenPBS, Torque), or None.

    ``now - resources_used.walltime + Resource_List.walltime``: both are
    durations, so no time zone enters.  A job that has not used any wall
    time yet (just started) counts from ``now``.

    Parameters
    ----------
    text : str
        The command's standard output.
    now : float
        The time of the query (Unix seconds).
    """
    fields = {k.strip(): v.strip() for k, v in re.findall(r"(?m)^\s*([\w.]+)\s*=\s*(.*)$", text)}
    limit = parse_duration(fields.get("Resource_List.walltime", ""))
    if limit is None:
        return None
    used = parse_duration(fields.get("resources_used.walltime", "0:0:0")) or 0.0
    return now - used + limit


def parse_lsf_bjobs(text: str, now: float) -> float | None:
    """Return the job's end (Unix time) from ``bjobs -noheader -hms -o "run_time runtimelimit" <id>`` (LSF), or None.

    ``now - run_time + runtimelimit``.  Accepts the ``-hms`` form
    (``00:10:05 01:00:00``) and the default one (``605 second(s) 60.0/hostA``,
    the limit in minutes); ``-`` means no limit.

    Parameters
    ----------
    text : str
        The command's standard output (one line).
    now : float
        The time of the query (Unix seconds).
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    m = re.fullmatch(r"\s*(\d+:\d+:\d+|\d+)(?:\s*second\(s\))?\s+(\S+)\s*", line)
    if not m:
        return None
    run, lim = m.groups()
    used = parse_duration(run) if ":" in run else float(run)
    lim = lim.split("/")[0]
    if ":" in lim:
        limit = parse_duration(lim)
    else:
        try:
            limit = 60.0 * float(lim)
        except ValueError:
            return None
    if used is None or limit is None:
        return None
    return now - used + limit


def parse_flux_timeleft(text: str, now: float) -> float | None:
    """Return the job's end (Unix time) from ``flux job timeleft`` (seconds left, or ``inf``), or None.

    Parameters
    ----------
    text : str
        The command's standard output.
    now : float
        The time of the query (Unix seconds).
    """
    try:
        left = float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None
    return None if math.isinf(left) or math.isnan(left) else now + left


# -- environment and queries ---------------------------------------------------------------


def env_end_time(environ: Mapping[str, str] | None = None) -> float | None:
    """Return the job's end (Unix time) if the environment gives it, else None. Not collective; no query.

    Slurm: ``SLURM_JOB_END_TIME`` (exported by newer releases, not by 22.05), else
    ``SLURM_JOB_START_TIME`` plus the limit (``SLURM_JOB_TIME_LIMIT``,
    ``SLURM_TIMELIMIT`` or ``SBATCH_TIMELIMIT``, any ``--time`` notation).
    Slurm 22.05 exports none of them: then use :func:`job_end_time`, which asks.
    """
    env = os.environ if environ is None else environ
    end = env.get("SLURM_JOB_END_TIME", "").strip()
    if end.isdigit() and int(end) > 0:
        return float(end)
    start = env.get("SLURM_JOB_START_TIME", "").strip()
    limit_text = env.get("SLURM_JOB_TIME_LIMIT") or env.get("SLURM_TIMELIMIT") or env.get("SBATCH_TIMELIMIT") or ""
    limit = parse_duration(limit_text)
    if start.isdigit() and limit is not None:
        return float(start) + limit
    return None


def _run(cmd: list[str], env: Mapping[str, str] | None = None, timeout: float = QUERY_TIMEOUT) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, env=None if env is None else dict(env)
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s failed: %s", " ".join(cmd), exc)
        return None
    if out.returncode != 0:
        log.warning("%s exited with %d: %s", " ".join(cmd), out.returncode, out.stderr.strip()[:200])
        return None
    return out.stdout


def query_end_time(scheduler: Scheduler, *, timeout: float = QUERY_TIMEOUT) -> float | None:
    """Ask the scheduler when ``scheduler.job_id`` ends (Unix time); None if it has no limit or cannot tell.

    Runs one command (two for Slurm if ``scontrol`` is missing or fails),
    each bounded by ``timeout`` seconds.  Not collective: call it on one rank.

    Parameters
    ----------
    scheduler : Scheduler
        From :func:`detect_scheduler`.
    timeout : float, optional
        Seconds per command.

    Returns
    -------
    float or None
        Never raises: a missing command, a timeout or unexpected output is
        logged (warning) and gives None.
    """
    now = time.time()
    jid = scheduler.job_id
    if scheduler.name == "slurm":
        env = dict(os.environ, SLURM_TIME_FORMAT="%s")
        out = _run(["scontrol", "show", "job", jid], env, timeout)
        if out is not None:
            return parse_scontrol_job(out)
        out = _run(["squeue", "-h", "-j", jid, "-o", "%e"], env, timeout)
        return parse_squeue_end(out) if out is not None else None
    if scheduler.name == "pbs":
        out = _run(["qstat", "-f", jid], None, timeout)
        return parse_pbs_qstat(out, now) if out is not None else None
    if scheduler.name == "lsf":
        out = _run(["bjobs", "-noheader", "-hms", "-o", "run_time runtimelimit", jid], None, timeout)
        return parse_lsf_bjobs(out, now) if out is not None else None
    if scheduler.name == "flux":
        out = _run(["flux", "job", "timeleft"], None, timeout)
        return parse_flux_timeleft(out, now) if out is not None else None
    return None


def job_end_time(environ: Mapping[str, str] | None = None, *, query: bool = True) -> float | None:
    """Return when this batch job will be killed (Unix time): from the environment, else by asking its scheduler.

    Not collective: every caller that gets past the environment runs a
    query, so under MPI call it on one rank and broadcast the answer (as
    :class:`~amrckpt.manager.BeforeWallTime` does).

    Parameters
    ----------
    environ : mapping, optional
        Default ``os.environ``.
    query : bool, optional
        Ask the scheduler when the environment does not tell (default True).

    Returns
    -------
    float or None
        None outside a batch job, for a job without a time limit, or when
        the scheduler cannot be asked.
    """
    end = env_end_time(environ)
    if end is not None or not query:
        return end
    sched = detect_scheduler(environ)
    return query_end_time(sched) if sched is not None else None


class JobClock:
    """The job's end, learned once and refreshed now and then, within a budget of queries.

    The first answer comes from the environment when it gives the end
    (no query), else from one query.  Later refreshes (queries only) follow
    a schedule that halves the remaining time: the next query is due when
    half of what was left at the last one has passed (but not sooner than
    ``min_interval``), or every ``refresh`` seconds if given; a job runs at
    most ``max_queries`` queries in all.  A 24-hour job thus asks about 8
    times, a one-hour job about 6, and a limit changed with ``scontrol update
    JobId=... TimeLimit=...`` is seen at the next refresh.

    Not collective, and it never raises; use it on one rank.

    Parameters
    ----------
    environ : mapping, optional
        Default ``os.environ`` (read at the first :meth:`end`).
    refresh : float, optional
        Seconds between refreshes (default: the halving schedule).
    max_queries : int, optional
        Queries per job at most (default 8).
    min_interval : float, optional
        Seconds between two queries at least (default 60).
    query : callable, optional
        ``query(scheduler) -> float or None``; default :func:`query_end_time`.

    Attributes
    ----------
    queries : int
        Queries made so far.
    source : str
        Where the current end comes from (``"SLURM_JOB_END_TIME"``, ``"scontrol"``...), for logs.
    """

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        refresh: float | None = None,
        max_queries: int = 8,
        min_interval: float = 60.0,
        query: Callable[[Scheduler], float | None] | None = None,
    ) -> None:
        self._environ = environ
        self.refresh = refresh
        self.max_queries = max_queries
        self.min_interval = min_interval if refresh is None else min(min_interval, refresh)
        self._query = query if query is not None else query_end_time
        self.queries = 0
        self.source = ""
        self._end: float | None = None
        self._started = False
        self._next: float = math.inf
        self._scheduler: Scheduler | None = None

    def _schedule(self, now: float) -> None:
        if self._scheduler is None or self.queries >= self.max_queries:
            self._next = math.inf
        elif self.refresh is not None:
            self._next = now + self.refresh
        elif self._end is None:
            self._next = now + max(self.min_interval, 1800.0)
        else:
            self._next = now + max(self.min_interval, (self._end - now) / 2)

    def _ask(self, now: float) -> None:
        assert self._scheduler is not None
        self.queries += 1
        end = self._query(self._scheduler)
        names = {"slurm": "scontrol", "pbs": "qstat", "lsf": "bjobs", "flux": "flux job timeleft"}
        if end is not None:
            if self._end is not None and abs(end - self._end) >= 1:
                log.info("the job's end moved by %+.0f s (%s)", end - self._end, names[self._scheduler.name])
            self._end, self.source = end, names[self._scheduler.name]
        elif self._end is None:
            log.info(
                "%s job %s: no end time known (no time limit, or the query failed)", self._scheduler.name, self._scheduler.job_id
            )
        self._schedule(now)

    def end(self, now: float | None = None) -> float | None:
        """Return the job's end (Unix time), refreshing it first if a refresh is due; None if unknown."""
        now = time.time() if now is None else now
        if not self._started:
            self._started = True
            env = os.environ if self._environ is None else self._environ
            self._scheduler = detect_scheduler(env)
            self._end = env_end_time(env)
            if self._end is not None:
                self.source = "environment"
                self._schedule(now)
            elif self._scheduler is not None:
                self._ask(now)
            return self._end
        if now >= self._next:
            self._ask(now)
        return self._end
