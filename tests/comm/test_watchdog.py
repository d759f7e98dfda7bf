"""The watchdog: no collective call of amrckpt waits forever (issue 33).

Real ``mpiexec`` jobs (threads do not behave like MPI: a rank blocked in an
MPI call holds the interpreter) of 2 to 4 processes, each bounded by a
timeout: a collective call made on one rank only, a rank whose process ends
while a manager is open, an exception on one rank under a plain
``mpiexec python script.py``, ``comm=`` forgotten in a script that never
imports mpi4py.  Each job must end within the collective timeout plus a few
seconds, naming the call.  Threads cover the same rules without MPI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import amrckpt as ac
from amrckpt import errors
from amrckpt.comm import collective, run_threads

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 3  # AMRCKPT_COLLECTIVE_TIMEOUT of the jobs

PRELUDE = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from mpi4py import MPI
    import amrckpt as ac
    from checkpoint_cases import Advection, global_state

    comm = MPI.COMM_WORLD
    rank = comm.rank
    g = global_state(seed=1, max_level=3)
    state = g.for_rank(comm)
    out = sys.argv[1]
    """
)


def _mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found (install the test extra: pip install -e '.[test]')")
    return exe


def run_job(tmp_path: Path, body: str, n: int, *, timeout: float = TIMEOUT, limit: float = 90, mpi4py_m: bool = False,
            prelude: str = PRELUDE) -> tuple[subprocess.CompletedProcess[str], float]:  # fmt: skip
    """Run ``prelude + body`` on ``n`` processes under plain ``mpiexec python``; return the result and its seconds."""
    script = tmp_path / "job.py"
    script.write_text(prelude + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]), AMRCKPT_COLLECTIVE_TIMEOUT=str(timeout))
    env.pop("AMRCKPT_LAUNCH_CHECK", None)
    cmd = [_mpiexec(), "-n", str(n), sys.executable, *(["-m", "mpi4py"] if mpi4py_m else []), str(script), str(tmp_path / "out")]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env, check=False)
    except subprocess.TimeoutExpired as exc:  # a hang: the failure this file exists for
        raise AssertionError(f"the job hung for {limit} s: {exc.stdout!r} {exc.stderr!r}") from exc
    return p, time.monotonic() - t0


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="MPI jobs are run on Linux")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_save_on_rank_0_only_ends_the_job_naming_the_call(tmp_path: Path, n: int) -> None:
    """Rank 0 alone calls ac.save(comm=comm) while the others compute: the job ends after the timeout, naming the call."""
    p, seconds = run_job(
        tmp_path,
        """
        if rank == 0:
            ac.save(out + ".scda", state, comm=comm)
        else:
            time.sleep(60)  # the others go on computing
        comm.Barrier()
        print("rank", rank, "passed", flush=True)
        """,
        n,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < TIMEOUT + 30, seconds
    assert "CollectiveTimeoutError" in p.stderr and "in save (call 1 on this communicator)" in p.stderr, p.stderr
    assert "MPI_Abort" in p.stderr, p.stderr


@pytest.mark.parametrize("what", ["save", "all_steps"])
def test_manager_call_on_rank_0_only_ends_the_job(tmp_path: Path, what: str) -> None:
    """manager.save(force=True) or manager.all_steps() on rank 0 only, the others computing: the job ends, naming it."""
    call = "m.save(1, state, force=True)" if what == "save" else "m.all_steps()"
    p, seconds = run_job(
        tmp_path,
        f"""
        with ac.CheckpointManager(out, Advection, comm=comm) as m:
            if rank == 0:
                {call}
            else:
                time.sleep(60)
        print("rank", rank, "passed", flush=True)
        """,
        3,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < TIMEOUT + 30, seconds
    name = "CheckpointManager.save" if what == "save" else "CheckpointManager.all_steps"
    assert "CollectiveTimeoutError" in p.stderr and f"in {name} (call" in p.stderr, p.stderr


def test_manager_call_on_rank_0_only_meets_the_others_close(tmp_path: Path) -> None:
    """The others leave the with block (close) while rank 0 saves: every rank learns of the mismatch at once."""
    p, seconds = run_job(
        tmp_path,
        """
        with ac.CheckpointManager(out, Advection, comm=comm) as m:
            if rank == 0:
                m.save(1, state, force=True)
        print("rank", rank, "passed", flush=True)
        """,
        2,
        timeout=120,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < 60, seconds
    assert "CollectiveMismatchError" in p.stderr and "CheckpointManager.save" in p.stderr, p.stderr


def test_a_rank_that_exits_while_a_manager_is_open_fails_the_others_at_once(tmp_path: Path) -> None:
    """Rank 1 ends its program with a manager open; rank 0's next call fails at once (not at the timeout), naming rank 1."""
    p, seconds = run_job(
        tmp_path,
        """
        m = ac.CheckpointManager(out, Advection, comm=comm)
        if rank == 1:
            sys.exit(0)  # its program ends: the manager is never closed
        time.sleep(1)
        m.save(1, state, force=True)
        print("rank", rank, "passed", flush=True)
        """,
        2,
        timeout=300,
        limit=120,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < 60, seconds  # far below the 300 s timeout
    assert "rank 1 ended" in p.stderr and "CheckpointManager.save" in p.stderr, p.stderr


def test_an_exception_on_one_rank_under_plain_mpiexec_ends_the_job(tmp_path: Path) -> None:
    """A bug on rank 1 inside the with block, plain ``mpiexec python``, default options: the job ends with its traceback."""
    p, seconds = run_job(
        tmp_path,
        """
        with ac.CheckpointManager(out, Advection, comm=comm):
            if rank == 1:
                raise RuntimeError("a bug on rank 1 only")
        comm.Barrier()
        print("rank", rank, "passed", flush=True)
        """,
        2,
        timeout=300,
    )
    assert p.returncode != 0 and "passed the barrier" not in p.stdout, p.stdout + p.stderr
    assert seconds < 60, seconds
    assert "RuntimeError: a bug on rank 1 only" in p.stderr, p.stderr


def test_an_uncaught_exception_outside_the_with_block_ends_the_job(tmp_path: Path) -> None:
    """After a manager was opened, an uncaught exception on one rank anywhere ends the job (the excepthook)."""
    p, seconds = run_job(
        tmp_path,
        """
        with ac.CheckpointManager(out, Advection, comm=comm):
            pass
        if rank == 1:
            raise ValueError("rank 1 fails after the manager")
        comm.Barrier()
        print("rank", rank, "passed", flush=True)
        """,
        2,
        timeout=300,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < 60, seconds
    assert "ValueError: rank 1 fails after the manager" in p.stderr and "MPI_Abort" in p.stderr, p.stderr


def test_an_exception_on_every_rank_propagates_unchanged(tmp_path: Path) -> None:
    """Every rank leaves the with block by the same exception: nothing is aborted, each rank catches its own."""
    p, _ = run_job(
        tmp_path,
        """
        try:
            with ac.CheckpointManager(out, Advection, comm=comm):
                raise KeyError("everywhere")
        except KeyError:
            print("rank", rank, "caught", flush=True)
        comm.Barrier()
        """,
        3,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("caught") == 3, p.stdout  # (the ranks' lines may interleave)


def test_forgotten_comm_is_caught_from_the_launchers_environment(tmp_path: Path) -> None:
    """A script that never imports mpi4py and forgets ``comm=``: CommRequiredError on every rank, nothing written."""
    prelude = textwrap.dedent(
        """
        import sys
        import amrckpt as ac
        from checkpoint_cases import Advection, global_state

        out = sys.argv[1]
        g = global_state(seed=1, max_level=3)
        try:
            ac.save(out + ".scda", g.local(0, g.N))
        except ac.errors.CommRequiredError as exc:
            print("refused:", exc, flush=True)
        """
    )
    p, _ = run_job(tmp_path, "", 2, prelude=prelude)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("save: comm=None in a process that a launcher started as one of 2 (PMI_SIZE=2") == 2, p.stdout
    assert not (tmp_path / "out.scda").exists()


# -- the same rules on threads ---------------------------------------------------------------------


@pytest.mark.parametrize("its_call", ["late", "other"])
def test_a_rank_that_comes_after_the_others_gave_up_does_not_go_on_alone(tmp_path: Path, its_call: str) -> None:
    """Before: the meeting of a rank that came after the others' timeout met their abandoned reductions (MPI cannot
    cancel them) and the rank went on alone into the call's blocking exchanges: the job hung (fiu trial t1000178: a
    thread that died before it ran held rank 1 for 30 s, ranks 0 and 2 gave up after 20 s and went on).  A late rank in
    another call ("other") must not try to name the calls either (an allgather the others are not in)."""
    p, seconds = run_job(
        tmp_path,
        f"""
        from amrckpt.comm import collective
        if rank == 1:
            time.sleep(6)  # late: the others wait the timeout (3 s), give up and go on
        try:
            with collective(comm, "late" if rank != 1 else "{its_call}") as call:
                call.allreduce(sums=[1], what="after the meeting")  # blocking: alone, it would wait forever
            print("rank", rank, "passed the call", flush=True)
        except ac.errors.CollectiveTimeoutError as exc:
            print("rank", rank, "timed out:", exc, flush=True)
        if rank != 1:
            time.sleep(6)  # the ranks that gave up are elsewhere
        print("rank", rank, "done", flush=True)
        """,
        2,
        limit=45,
    )
    assert p.returncode == 0 and p.stdout.count("done") == 2, p.stdout + p.stderr
    assert "passed the call" not in p.stdout and p.stdout.count("timed out:") == 2, p.stdout
    assert f"rank 1 timed out: rank 1 of 2 came to {its_call} (call 1" in p.stdout and "after another rank gave up" in p.stdout
    assert seconds < 30, seconds


@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_stuck_inside_mpi_in_a_call_ends_the_job(tmp_path: Path, n: int) -> None:
    """After the meeting, the last rank blocks in an MPI barrier the others never reach (as in ROMIO's ``MPI_File_open``
    deadlock of libfiu seed 1000021), the others in the call's next exchange: the stall watchdog ends the job after
    twice the timeout, naming the call. Before: it hung."""
    p, seconds = run_job(
        tmp_path,
        """
        from amrckpt.comm import collective
        other = comm.Dup()
        with collective(comm, "test: a step stuck inside MPI") as call:
            if rank == comm.size - 1:
                other.Barrier()  # never matched: stuck inside MPI (mpi4py releases the interpreter lock)
            call.agree()
        print("rank", rank, "passed", flush=True)
        """,
        n,
        limit=60,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert 2 * TIMEOUT <= seconds < 2 * TIMEOUT + 30, seconds
    assert "test: a step stuck inside MPI (call 1 on its communicator) has made no progress" in p.stderr, p.stderr
    assert "The MPI job is ended (MPI_Abort)" in p.stderr and 'job.py", line' in p.stderr, p.stderr  # and every stack


def test_an_error_of_one_rank_after_the_calls_last_exchange_ends_the_job_naming_it(tmp_path: Path) -> None:
    """Rank 0 raises outside any step after the call's last exchange; the others leave the call and go on to the next:
    they time out there, and rank 0's agreement on its own error, which no rank comes to, is ended by the stall
    watchdog, whose message names that error."""
    p, seconds = run_job(
        tmp_path,
        """
        from amrckpt.comm import collective
        for step in range(2):
            try:
                with collective(comm, f"test: step {step}") as call:
                    call.agree()
                    if rank == 0 and step == 0:
                        raise ValueError("rank 0's error after the last exchange")
            except Exception as exc:
                sys.stdout.write(f"rank {rank} step {step} {type(exc).__name__}" + chr(10))  # one write: lines do not mix
                sys.stdout.flush()
        print("rank", rank, "passed", flush=True)
        """,
        3,
        limit=60,
    )
    assert p.returncode != 0 and "rank 0 passed" not in p.stdout, p.stdout + p.stderr
    assert "rank 1 step 1 CollectiveTimeoutError" in p.stdout and "rank 2 step 1 CollectiveTimeoutError" in p.stdout, p.stdout
    assert seconds < 2 * TIMEOUT + 30, seconds
    assert "test: step 0 (call 1 on its communicator) has made no progress" in p.stderr, p.stderr
    assert "this rank raised an error outside the call's steps (ValueError: rank 0's error after" in p.stderr, p.stderr


def test_a_rank_stuck_holding_the_interpreter_lock_ends_the_job(tmp_path: Path) -> None:
    """Every rank stuck in a C call that holds the interpreter lock (the watchdog's thread cannot run): faulthandler's
    timer, set by the call, prints the stacks and ends the process, and the launcher ends the job."""
    p, seconds = run_job(
        tmp_path,
        """
        import ctypes
        from amrckpt.comm import collective
        with collective(comm, "test: a step holding the interpreter lock") as call:
            ctypes.PyDLL(None).sleep(600)  # PyDLL keeps the interpreter lock through the C call
        print("rank", rank, "passed", flush=True)
        """,
        2,
        limit=60,
    )
    assert p.returncode != 0 and "passed" not in p.stdout, p.stdout + p.stderr
    assert seconds < 2 * TIMEOUT + 30, seconds
    assert "Timeout" in p.stderr and "job.py" in p.stderr, p.stderr  # faulthandler's dump of the stuck stack


def test_a_long_call_that_makes_progress_is_not_ended(tmp_path: Path) -> None:
    """Exchanges keep a call alive: 10 s of steps 1 s apart (more than twice the 3 s timeout) pass."""
    p, _ = run_job(
        tmp_path,
        """
        from amrckpt.comm import collective
        with collective(comm, "test: a long call") as call:
            for _ in range(10):
                time.sleep(1.0)
                call.agree()
        time.sleep(2 * 3 + 5)  # after the call: nothing armed any more
        print("rank", rank, "passed", flush=True)
        """,
        2,
        limit=60,
    )
    assert p.returncode == 0 and p.stdout.count("passed") == 2, p.stdout + p.stderr


def test_a_call_on_one_thread_rank_only_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMRCKPT_COLLECTIVE_TIMEOUT", "0.5")

    def body(comm: ac.comm.Comm) -> str:
        if comm.rank == 0:
            with pytest.raises(errors.CollectiveTimeoutError, match=r"in lonely \(call 1") as got:
                with collective(comm, "lonely"):
                    pass
            assert got.value.op == "lonely" and got.value.seq == 1
            with pytest.raises(errors.CollectiveTimeoutError, match="cannot agree any more"):
                with collective(comm, "next"):
                    pass
        return "done"

    assert run_threads(2, body, timeout=5) == ["done", "done"]


def test_collective_timeout_must_be_positive(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AMRCKPT_COLLECTIVE_TIMEOUT", "soon")
    with pytest.raises(errors.ScdaArgumentError, match="AMRCKPT_COLLECTIVE_TIMEOUT='soon'"):
        run_threads(2, lambda c: collective(c, "x").__enter__())
    monkeypatch.delenv("AMRCKPT_COLLECTIVE_TIMEOUT")
    from checkpoint_cases import Advection

    with pytest.raises(errors.ScdaArgumentError, match="collective_timeout=-1"):
        ac.CheckpointManager(tmp_path, Advection, collective_timeout=-1)


def test_flight_recorder_names_the_last_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMRCKPT_COLLECTIVE_TIMEOUT", "0.5")

    def body(comm: ac.comm.Comm) -> str:
        with collective(comm, "first"):
            pass
        if comm.rank == 1:
            try:
                with collective(comm, "second"):
                    pass
            except errors.CollectiveTimeoutError as exc:
                return str(exc)
        return ""

    msg = run_threads(2, body, timeout=5)[1]
    assert "first (call 1): returned" in msg and "second (call 2): entered" not in msg and "last calls" in msg, msg
