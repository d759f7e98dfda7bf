"""A rank whose exchange returns another call's result (a collective made on some ranks only) stops at once, and says so.

A rank that made one collective more or fewer than the others can meet, in
MPI, the others' next exchange with another of its own: with mpi4py's
pickle-based reductions (a reduction to rank 0, then a broadcast), it may
even receive the broadcast of another allreduce, whose tags agree with each
other but not with its own.  Seen once in the libfiu campaign (seed 2000097):
one rank went on to the next save while another waited in the previous
save's commit.  Each exchange checks that its result carries its own tag; a
rank that finds another raises CollectiveMismatchError naming its call, and
the communicator is marked broken.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amrckpt import errors
from amrckpt.comm import Columns, Comm, collective, run_threads


class Stale:
    """Rank 1's ``n``-th reduction of the given kind returns the one before it (an earlier call's result)."""

    def __init__(self, inner: Comm, kind: str, n: int) -> None:
        self.inner, self.kind, self.n = inner, kind, n
        self.rank, self.size = inner.rank, inner.size
        self.seen: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _stale(self, kind: str, got: Any) -> Any:
        if kind != self.kind:
            return got
        self.seen.append(got)
        if self.rank == 1 and len(self.seen) == self.n:
            return self.seen[-2]
        return got

    def allreduce_columns(self, columns: Columns) -> Columns:
        return self._stale("allreduce", self.inner.allreduce_columns(columns))

    def exscan_columns(self, columns: Columns) -> Columns | None:
        return self._stale("exscan", self.inner.exscan_columns(columns))


def _body(comm: Comm, kind: str) -> str:
    stale = Stale(comm, kind, 2)
    try:
        with collective(stale, "Desync.test") as call:
            call.agree("first")
            if kind == "exscan":
                call.exscan(sums=[1])
            call.exscan(sums=[1]) if kind == "exscan" else call.agree("second")
    except errors.CollectiveMismatchError as exc:
        try:
            with collective(stale, "Desync.after"):
                pass
        except errors.CollectiveTimeoutError as later:
            return f"mismatch: {exc} | then: {later}"
        return f"mismatch: {exc} | then: nothing"
    return "returned"


@pytest.mark.parametrize("kind", ["allreduce", "exscan"])
def test_a_rank_given_another_call_s_result_raises_and_breaks_the_communicator(kind: str) -> None:
    got = run_threads(2, _body, kind, timeout=30)
    assert got[0] == "returned"  # rank 0's results were its own
    assert got[1].startswith("mismatch: rank 1 of 2: the ")
    assert f"the {kind} of Desync.test" in got[1]
    assert "a rank made a collective call that the others did not make" in got[1]
    assert "cannot agree any more" in got[1]
    assert "| then: Desync.after: this communicator cannot agree any more" in got[1]


def test_under_mpiexec_the_job_ends_at_once_with_the_desynced_rank_s_message(tmp_path: Path) -> None:
    """Under real MPI (2 processes, plain ``mpiexec python``): rank 1 is handed the previous allreduce's result; the job
    ends in seconds (the uncaught error's MPI_Abort), far below the collective timeout, with rank 1's message."""
    from test_watchdog import run_job

    p, seconds = run_job(
        tmp_path,
        f"""
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from amrckpt.comm import as_comm, collective
        from test_desync import Stale

        stale = Stale(as_comm(comm), "allreduce", 2)
        with collective(stale, "Desync.mpi") as call:
            call.agree("first")
            call.agree("second")
        time.sleep(0.5)
        with collective(stale, "Desync.next") as call:
            call.agree("third")
        print("rank", rank, "passed", flush=True)
        """,
        2,
        timeout=60,
        limit=60,
    )
    assert p.returncode != 0 and "rank 1 passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < 30, seconds
    assert "rank 1 of 2: the allreduce of Desync.mpi" in p.stderr, p.stderr
