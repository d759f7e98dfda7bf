"""The checkpoint directory as one object: every finding of the fault campaign, each with a test that failed before.

Ranks are threads here (P = 1 and 3); tests/test_directory_jobs.py runs the
disk-full and MPI-IO cases under real mpiexec.  Disk-full tests use a 2 MiB
tmpfs (root on Linux, else skipped) and, on any system, injected faults
(:class:`amrckpt.testing.FaultyFileSystem`).  Each test's docstring says what
happened before the directory became one object.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection, GlobalState, Params, assert_state_equal, global_state
from fault_trials import _global, state
from small_fs import can_mount, fill, pages, tmpfs

import amrckpt as ac
from amrckpt.cli import main as cli
from amrckpt.comm import run_threads
from amrckpt.manager import HISTORY, LOCK, EveryNSteps, KeepBest, KeepLast
from amrckpt.testing import FaultyFileSystem, inject_faults

REPO = Path(__file__).resolve().parents[2]


def manager(d: Path, comm: Any = None, **kw: Any) -> ac.CheckpointManager[Advection]:
    kw.setdefault("save_policy", EveryNSteps(1))
    kw.setdefault("keep_policy", KeepLast(5))
    return ac.CheckpointManager(d, Advection, comm=comm, **kw)


def outcome(fn: Any) -> tuple[str, int | None]:
    """``("ok", None)`` or the class and errno of the error."""
    try:
        fn()
    except ac.errors.AmrckptError as exc:
        return type(exc).__name__, getattr(exc, "errno", None)
    return "ok", None


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (skipped where it cannot be mounted: not root, not Linux)."""
    why = can_mount()
    if why is not None:
        pytest.skip(why)
    with tmpfs(tmp_path / "small") as d:
        yield d


# -- finding 1: every file-system step of rank 0 is agreed ------------------------------------------


@pytest.mark.parametrize("P", [1, 3])
def test_a_manager_opens_on_a_full_disk(small: Path, P: int) -> None:
    """Before: the lock's owner line (``os.write`` on rank 0) raised a raw OSError: every rank got CollectiveError
    and rank 0 kept the flock, so that no manager of the process could open the directory again."""
    d = small / "ckpt"
    with manager(d) as mgr:
        mgr.save(1, state(1, None))
    (d / LOCK).unlink()
    filler = fill(small, 0)

    def body(comm: Any) -> list[Any]:
        out: list[Any] = []
        with manager(d, comm) as mgr:
            out.append(mgr.restore_latest().step)
            out.append(outcome(lambda: mgr.save(2, state(2, comm))))
        comm.barrier()
        if comm.rank == 0:
            filler.unlink()
        comm.barrier()
        with manager(d, comm) as mgr:  # the lock was released
            mgr.save(3, state(3, comm))
            out.append(mgr.all_steps())
        return out

    assert run_threads(P, body, timeout=60) == [[1, ("ScdaIOError", errno.ENOSPC), [1, 3]]] * P


@pytest.mark.parametrize("P", [1, 3])
def test_an_owner_line_that_cannot_be_written_is_a_warning(tmp_path: Path, P: int, caplog: pytest.LogCaptureFixture) -> None:
    """The same path on any system (ENOSPC injected into the owner line's write on rank 0): the lock is held."""

    def body(comm: Any) -> list[Any]:
        with inject_faults(1, ranks=[0], kinds={"write"}, errno=errno.ENOSPC):
            mgr = manager(tmp_path, comm, fs=FaultyFileSystem())
        with mgr:
            mgr.save(1, state(1, comm))
            refused = outcome(lambda: manager(tmp_path, comm))
            return [refused, mgr.all_steps()]

    with caplog.at_level(logging.WARNING, logger="amrckpt.manager"):
        assert run_threads(P, body, timeout=60) == [[("ManagerError", None), [1]]] * P
    assert "its owner line could not be written" in caplog.text and "No space left on device" in caplog.text


@pytest.mark.parametrize("P", [1, 3])
def test_every_rank_raises_when_the_lock_file_is_a_fifo(tmp_path: Path, P: int) -> None:
    """Before: ``os.ftruncate`` of a FIFO failed on rank 0 only (EINVAL): a CollectiveError of a raw OSError."""
    os.mkfifo(tmp_path / LOCK)
    got = run_threads(P, lambda comm: outcome(lambda: manager(tmp_path, comm)), timeout=60)
    assert got == [("ManagerError", None)] * P
    with pytest.raises(ac.errors.ManagerError, match="is not a regular file: it is not a lock file of amrckpt"):
        manager(tmp_path)


@pytest.mark.parametrize("P", [1, 3])
def test_a_failing_close_of_the_lock_file_releases_the_lock_and_raises_nowhere(
    tmp_path: Path, P: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: ``close(2)`` of the lock file failing (libfiu's posix/io/oc/close, EIO) raised a raw OSError out of
    ``CheckpointManager.close`` on rank 0 alone, after the last agreement, and, the descriptor left open (as libfiu
    leaves it), kept the directory locked: the next manager of the process got "in use by another manager"."""
    held: list[int] = []
    real = os.close

    def close(fd: int) -> None:
        if fd in held:
            raise OSError(errno.EIO, os.strerror(errno.EIO))  # the descriptor stays open, as a wrapper that fails it
        real(fd)

    def body(comm: Any) -> tuple[str, int | None]:
        mgr = manager(tmp_path, comm)
        if comm.rank == 0:
            held.append(mgr._dir._lock._fd)  # type: ignore[union-attr]
        mgr.save(1, state(1, comm))
        return outcome(mgr.close)

    monkeypatch.setattr(os, "close", close)
    with caplog.at_level(logging.WARNING, logger="amrckpt.manager"):
        assert run_threads(P, body, timeout=60) == [("ok", None)] * P
    assert "closing the lock file" in caplog.text and "Input/output error" in caplog.text
    monkeypatch.setattr(os, "close", real)
    real(held[0])
    with manager(tmp_path) as mgr:  # the lock was released although its descriptor stayed open
        assert mgr.all_steps() == [1]


@pytest.mark.parametrize("P", [1, 3])
def test_a_failing_read_of_the_lock_file_is_a_manager_error_on_every_rank(
    tmp_path: Path, P: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a failing read of the owner line (libfiu's posix/io/rw/pread, EIO) was a raw OSError out of rank 0's
    ``DirectoryLock.acquire``: a CollectiveError without a word of the lock on every rank (fiu trial t1000117)."""
    from amrckpt.manager import _lock

    manager(tmp_path).close()  # the lock file is there: the next manager reads its owner line

    def pread_exact(fd: int, n: int, offset: int) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(_lock, "pread_exact", pread_exact)
    got = run_threads(P, lambda comm: outcome(lambda: manager(tmp_path, comm)), timeout=60)
    assert got == [("ManagerIOError", errno.EIO)] * P
    with pytest.raises(ac.errors.ManagerIOError, match=r"cannot use the checkpoint directory .*: Input/output error"):
        manager(tmp_path)
    monkeypatch.undo()
    with manager(tmp_path) as mgr:  # the failed attempts left the lock free
        assert mgr.all_steps() == []


# -- finding 2: nothing is written through a planted link ----------------------------------------------


@pytest.mark.parametrize("P", [1, 3])
def test_a_lock_file_that_is_a_link_is_refused(tmp_path: Path, P: int) -> None:
    """Before: the manager opened the link's target, truncated it and wrote its owner line into it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / LOCK).symlink_to(victim)
    got = run_threads(P, lambda comm: outcome(lambda: manager(d, comm)), timeout=60)
    assert got == [("ManagerError", None)] * P
    with pytest.raises(ac.errors.ManagerError, match="is a symbolic link"):
        manager(d)
    assert victim.read_text() == "precious\n" and (d / LOCK).is_symlink()


def test_an_eloop_from_opening_a_regular_lock_file_is_an_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libfiu seed 3000121: ``open`` of the lock file failed with an injected ``ELOOP`` and the manager called the
    regular lock file "a symbolic link" (a ManagerError without errno).  Only a link that ``lstat`` confirms is one."""
    with manager(tmp_path):
        pass  # the lock file exists, regular
    real = os.open

    def failing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path).name == LOCK:
            raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing)
    with pytest.raises(ac.errors.ManagerError) as got:
        manager(tmp_path)
    assert isinstance(got.value, OSError) and got.value.errno == errno.ELOOP, got.value
    assert "symbolic link" not in str(got.value).split(":")[0], got.value


def test_a_lock_file_the_library_did_not_create_is_refused(tmp_path: Path) -> None:
    """Before: any file named ``.amrckpt.lock`` was truncated and overwritten."""
    (tmp_path / LOCK).write_text("my notes\n")
    with pytest.raises(ac.errors.ManagerError, match="holds something else than the owner line"):
        manager(tmp_path)
    assert (tmp_path / LOCK).read_text() == "my notes\n"
    (tmp_path / LOCK).write_text("pid 12 on node3 since 2024-01-01T00:00:00Z\n")  # a lock of an earlier version: taken
    with manager(tmp_path):
        assert (tmp_path / LOCK).read_text().startswith(f"amrckpt lock: pid {os.getpid()} on ")


def test_a_history_link_is_replaced_not_followed(tmp_path: Path) -> None:
    """Before: each save appended its history line to the link's target."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / HISTORY).symlink_to(victim)
    with manager(d) as mgr:
        mgr.save(1, state(1, None))
        mgr.save(2, state(2, None))
    assert victim.read_text() == "precious\n"
    assert not (d / HISTORY).is_symlink() and [json.loads(x)["step"] for x in (d / HISTORY).read_text().splitlines()] == [1, 2]


def test_a_previous_link_is_not_adopted_as_a_step(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a ``.ckpt-N.scda.previous-*`` link was renamed to ``ckpt-N.scda``: a foreign file became step N."""
    foreign = tmp_path / "foreign.scda"
    g = global_state(seed=4, max_level=3)
    ac.save(g.local(0, g.N), foreign)
    d = tmp_path / "ckpt"
    d.mkdir()
    planted = d / ".ckpt-000000000007.scda.previous-abc123"
    planted.symlink_to(foreign)
    with caplog.at_level(logging.WARNING, logger="amrckpt.manager"), manager(d) as mgr:
        assert mgr.all_steps() == []
    assert planted.is_symlink() and not (d / "ckpt-000000000007.scda").exists()
    assert "is not a regular file (a link?): not put back" in caplog.text


def test_records_and_temporary_files_are_never_written_through_links(tmp_path: Path) -> None:
    """A link planted under a record's name is replaced by the record; a temporary name is created exclusively."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    d = tmp_path / "ckpt"
    d.mkdir()
    for suffix in (".run.json", ".step.json"):
        (d / f"ckpt-000000000001.scda{suffix}").symlink_to(victim)
    with manager(d) as mgr:
        mgr.save(1, state(1, None))
        assert mgr.metadata(1).record_problem is None
    assert victim.read_text() == "precious\n"
    assert not any(p.is_symlink() for p in d.iterdir())
    link = d / "link"
    link.symlink_to(victim)
    with pytest.raises(FileExistsError):
        ac.manager.LocalFileSystem().write_new(link, b"x", sync=False)
    assert victim.read_text() == "precious\n"


# -- finding 3: a bad history line blocks nothing ------------------------------------------------------

BAD = {
    "invalid-utf8": b"\xff\xfe not UTF-8\n",
    "infinite-step": b'{"step": 1e999}\n',
    "deep-nesting": b"[" * 200_000 + b"\n",
    "huge-int": b'{"step": ' + b"9" * 5000 + b"}\n",
}


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_history_line_blocks_nothing(tmp_path: Path, P: int, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``restore_latest``, ``history()`` and ``latest_step`` raised on every rank (UnicodeDecodeError,
    OverflowError, RecursionError), ``amrckpt ls`` printed a traceback, and retention stopped silently."""
    with manager(tmp_path, keep_policy=KeepLast(2)) as mgr:
        for s in (1, 2):
            mgr.save(s, state(s, None), metrics={"loss": 1.0 / s})
    with open(tmp_path / HISTORY, "ab") as fh:
        fh.write(BAD[bad])

    def body(comm: Any) -> list[Any]:
        with manager(tmp_path, comm, keep_policy=KeepLast(2)) as mgr:
            out = [mgr.restore_latest().step, [r.step for r in mgr.history()], mgr.latest_step(), mgr.metadata(2).metrics]
            mgr.save(3, state(3, comm), metrics={"loss": 0.2})
            out.append(mgr.all_steps())  # retention went on
            return out

    assert run_threads(P, body, timeout=60) == [[2, [1, 2], 2, {"loss": 0.5}, [2, 3]]] * P
    assert [json.loads(x)["step"] for x in (tmp_path / HISTORY).read_text().splitlines()] == [2, 3]  # the index, rebuilt
    with open(tmp_path / HISTORY, "ab") as fh:
        fh.write(BAD[bad])
    code = cli(["ls", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in out + err and "* ckpt-000000000003.scda" in out


@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_step_record_leaves_the_steps_facts_unknown(tmp_path: Path, bad: str) -> None:
    """A step record that does not parse: the step is listed and restores; its facts are unknown, and kept."""
    with manager(tmp_path, keep_policy=KeepBest("loss", 1)) as mgr:
        mgr.save(1, state(1, None), metrics={"loss": 0.5})
        (tmp_path / "ckpt-000000000001.scda.step.json").write_bytes(BAD[bad])
        mgr.save(2, state(2, None), metrics={"loss": 0.1})  # the best: step 1 goes unless its facts are unknown
        h = mgr.history()
        assert [(r.step, r.valid, r.metrics) for r in h] == [(1, True, None), (2, True, {"loss": 0.1})]
        assert h[0].record_problem is not None and h[1].record_problem is None
        assert mgr.metadata(1).record == {} and mgr.metadata(1).record_problem == h[0].record_problem
        assert mgr.restore(1).step == 1


# -- finding 4: metrics are never lost while their checkpoint exists --------------------------------------


@pytest.mark.parametrize("P", [1, 3])
def test_records_that_do_not_fit_fail_the_commit(small: Path, P: int) -> None:
    """Before: the checkpoint was committed and its run record failed: history and retention were skipped, so the
    step had no metrics, and ``KeepBest("loss", 2) | KeepLast(1)`` later deleted it although it was the best."""
    d = small / "ckpt"
    g = _global(4)
    size = ac.save(g.local(0, g.N), small / "probe.scda").nbytes  # the same bytes as the checkpoint on any P
    (small / "probe.scda").unlink()
    losses = {1: 0.5, 2: 0.4, 3: 0.3, 4: 0.1, 5: 0.2}

    def body(comm: Any) -> list[Any]:
        with manager(d, comm, keep_policy=KeepBest("loss", 2) | KeepLast(1)) as mgr:
            for s in (1, 2, 3):
                mgr.save(s, state(s, comm), metrics={"loss": losses[s]})
            if comm.rank == 0:
                fill(small, pages(size))  # room for the checkpoint of step 4, not for its records
            comm.barrier()
            full = outcome(lambda: mgr.save(4, state(4, comm), metrics={"loss": losses[4]}))
            comm.barrier()
            if comm.rank == 0:
                (small / "filler").unlink()
            comm.barrier()
            steps = mgr.all_steps()
            for s in (4, 5):
                mgr.save(s, state(s, comm), metrics={"loss": losses[s]})
            return [full, steps, {s: mgr.metadata(s).metrics for s in mgr.all_steps()}]

    got = run_threads(P, body, timeout=60)
    assert got == [[("ScdaIOError", errno.ENOSPC), [2, 3], {4: {"loss": 0.1}, 5: {"loss": 0.2}}]] * P
    assert not [p.name for p in d.iterdir() if p.name.startswith(".ckpt")]


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize("kind", ["write", "sync", "rename", "fsync"])
def test_a_commit_whose_records_fail_leaves_nothing(tmp_path: Path, P: int, kind: str) -> None:
    """The same on any system: each file-system step of rank 0's commit fails (injected); nothing is half there."""

    def body(comm: Any) -> list[Any]:
        with manager(tmp_path, comm, keep_policy=KeepBest("loss", 1) | KeepLast(1), fs=FaultyFileSystem()) as mgr:
            mgr.save(1, state(1, comm), metrics={"loss": 0.1})
            with inject_faults(1, ranks=[0], kinds={kind}, errno=errno.ENOSPC, limit=1):
                failed = outcome(lambda: mgr.save(2, state(2, comm), metrics={"loss": 0.5}))
            mgr.save(3, state(3, comm), metrics={"loss": 0.7})
            return [failed, mgr.all_steps(), [r.metrics for r in mgr.history()]]

    got = run_threads(P, body, timeout=60)
    assert got == [[("ScdaIOError", errno.ENOSPC), [1, 3], [{"loss": 0.1}, {"loss": 0.7}]]] * P
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".ckpt", "ckpt-000000000002")))
    assert left == []


def test_retention_never_deletes_a_step_whose_facts_it_does_not_know(tmp_path: Path) -> None:
    """Before: a step whose history line was lost (a torn append swallows the next line) had no metrics, and
    ``KeepBest | KeepLast`` deleted it, the best one."""
    policy = KeepBest("loss", 1) | KeepLast(1)
    with manager(tmp_path, keep_policy=policy) as mgr:
        mgr.save(1, state(1, None), metrics={"loss": 0.1})
        mgr.save(2, state(2, None), metrics={"loss": 0.5})
    for p in (tmp_path / HISTORY, tmp_path / "ckpt-000000000001.scda.step.json"):  # what is known of step 1, lost
        if p.exists():
            lines = [x for x in p.read_text().splitlines() if json.loads(x)["step"] != 1] if p.name == HISTORY else []
            p.write_text("".join(x + "\n" for x in lines)) if lines else p.unlink()
    with manager(tmp_path, keep_policy=policy) as mgr:
        mgr.save(3, state(3, None), metrics={"loss": 0.3})
        assert mgr.all_steps() == [1, 3]  # 1: unknown, kept; 2: known and not the best, deleted
        assert mgr.history()[0].record_problem == "no step record"


def test_retention_and_delete_leave_no_record_behind(tmp_path: Path) -> None:
    """Before: retention removed the files but left their history lines, which only ``delete()`` removed."""
    with manager(tmp_path, keep_policy=KeepLast(2)) as mgr:
        for s in (1, 2, 3, 4):
            mgr.save(s, state(s, None))
        mgr.delete(3)
    steps = [json.loads(x)["step"] for x in (tmp_path / HISTORY).read_text().splitlines()]
    assert steps == [4] and sorted(p.name for p in tmp_path.glob("ckpt-*")) == [
        "ckpt-000000000004.scda",
        "ckpt-000000000004.scda.run.json",
        "ckpt-000000000004.scda.step.json",
    ]


def test_a_directory_of_an_earlier_version_keeps_its_facts(tmp_path: Path) -> None:
    """A directory with only ``amrckpt-history.jsonl``: its lines become the steps' records when a manager opens it."""
    with manager(tmp_path, keep_policy=KeepBest("loss", 1)) as mgr:
        mgr.save(1, state(1, None), metrics={"loss": 0.1})
        mgr.save(2, state(2, None), metrics={"loss": 0.5})
    for p in tmp_path.glob("*.step.json"):
        p.unlink()
    with manager(tmp_path, keep_policy=KeepBest("loss", 1)) as mgr:
        got = [(r.step, r.metrics, r.record_problem) for r in mgr.history()]
        assert got == [(1, {"loss": 0.1}, None), (2, {"loss": 0.5}, None)]
        assert sorted(p.name for p in tmp_path.glob("*.step.json")) == [f"ckpt-00000000000{s}.scda.step.json" for s in (1, 2)]


# -- finding 8: damaged and unreadable checkpoints are kept aside and reported on stderr -------------------


def _damage(path: Path) -> bytes:
    blob = bytearray(path.read_bytes())
    blob[ac.read_info(path).index.entry("rho").offset + 100] ^= 1
    path.write_bytes(blob)
    return bytes(blob)


@pytest.mark.parametrize("P", [1, 3])
def test_a_damaged_checkpoint_is_kept_aside_never_overwritten(tmp_path: Path, P: int) -> None:
    """Before: a checkpoint skipped as damaged was overwritten by the next save of its step, with a log message only."""
    with manager(tmp_path) as mgr:
        for s in (1, 2):
            mgr.save(s, state(s, None))
    damaged = _damage(tmp_path / "ckpt-000000000002.scda")

    def body(comm: Any) -> list[Any]:
        with manager(tmp_path, comm) as mgr:
            r = mgr.restore_latest()
            mgr.save(2, state(2, comm))
            return [r.step, [(s.step, Path(s.kept_as).name[:31], s.unreadable) for s in r.skipped], mgr.all_steps()]

    with pytest.warns(ac.errors.CheckpointSkippedWarning, match="step 2 .* is damaged") as seen:
        got = run_threads(P, body, timeout=60)
    assert len(seen) == 1
    assert got == [[1, [(2, "ckpt-000000000002.scda.damaged-", False)], [1, 2]]] * P
    [aside] = tmp_path.glob("ckpt-000000000002.scda.damaged-*[0-9a-f]")
    assert aside.read_bytes() == damaged and ac.verify(tmp_path / "ckpt-000000000002.scda").ok
    assert sorted(p.name[len(aside.name) :] for p in tmp_path.glob(aside.name + "*")) == ["", ".run.json", ".step.json"]


UNREADABLE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, "tests")
    import amrckpt as ac
    from amrckpt.comm import run_threads
    from checkpoint_cases import Advection

    def body(comm):
        with ac.CheckpointManager(sys.argv[1], Advection, comm=comm, save_policy=ac.EveryNSteps(1)) as mgr:
            try:
                mgr.restore_latest()
            except ac.errors.ScdaIOError as exc:
                return type(exc).__name__, exc.errno, "ckpt-000000000002.scda" in str(exc), mgr.all_steps()
            return "restored"

    got = run_threads(int(sys.argv[2]), body, timeout=60)
    assert all(g == got[0] for g in got), got
    print(got[0])
    """
)


@pytest.mark.parametrize("P", [1, 3])
def test_an_unreadable_checkpoint_fails_the_restore_and_stays_in_place(request: pytest.FixtureRequest, P: int) -> None:
    """Before: a newest checkpoint that could not be read (EACCES) was renamed aside as ``.unreadable-`` and the
    restart went on from an older step; no later restart tried it again.  An I/O error is no verdict: the restore
    fails on every rank with the errno and the file's name, the file stays, and once it can be read it is restored.
    Run as an unprivileged user (root reads anything)."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the job as another user")
    top = Path(tempfile.mkdtemp(prefix="amrckpt-unreadable-"))  # pytest's tmp_path is root's alone
    request.addfinalizer(lambda: shutil.rmtree(top, ignore_errors=True))
    d = top / "ckpt"
    with manager(d) as mgr:
        for s in (1, 2):
            mgr.save(s, state(s, None))
    newest = d / "ckpt-000000000002.scda"
    before = newest.read_bytes()
    newest.chmod(0)
    top.chmod(0o755)
    for p in (d, *d.iterdir()):
        if p != newest:
            os.chown(p, 65534, 65534)
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", UNREADABLE, str(d), str(P)]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('ScdaPermissionError', 13, True, [1, 2])"
    assert "CheckpointSkippedWarning" not in out.stderr
    assert newest.read_bytes() == before and not list(d.glob("*.unreadable-*")) and not list(d.glob("*.damaged-*"))
    newest.chmod(0o644)
    with manager(d) as mgr:
        r = mgr.restore_latest()
        assert r.step == 2 and r.skipped == ()
        assert_state_equal(r.state, state(2, None))


# -- finding 7: text from a file is escaped in verify and inspect ----------------------------------------


class Evil(ac.CheckpointSchema, name="evil\x1b]0;pwned\x07", version=2):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s\x1b[2J")
    params: Params = ac.Block()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", units="kg\x1b[31m")
    vel: ac.CellData = ac.Cells("<f8", shape=(2,), compress=True)
    modes: ac.HpData = ac.HpCells("<f8")


def test_text_from_a_file_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``verify`` and ``inspect`` printed the manifest's schema name and units raw (escape sequences ran)."""
    g: GlobalState = global_state(seed=2, max_level=3)
    path = tmp_path / "evil.scda"
    ac.save(g.local(0, g.N, Evil), path)  # type: ignore[arg-type]
    for argv in (["verify", str(path)], ["inspect", str(path)]):
        assert cli(argv) == 0
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "\x07" not in out + err
    assert cli(["inspect", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert "evil\\x1b]0;pwned\\x07 v2" in out and "kg\\x1b[31m" in out
    assert cli(["verify", str(path)]) == 0
    assert "checkpoint evil\\x1b]0;pwned\\x07 v2" in capsys.readouterr()[0]


# -- finding 9: minor -----------------------------------------------------------------------------------


def test_every_policy_is_in_the_manager_and_the_top_level_holds_the_readmes() -> None:
    """Every policy is in ``amrckpt.manager``; the top level holds the two that the README uses, the same objects."""
    assert {"Never", "KeepAll", "AnyOf", "KeepAny"} <= set(ac.manager.__all__)
    policies = [n for n in ac.manager.__all__ if n.startswith(("Keep", "Every", "On", "Never", "Before")) and n != "KeepPolicy"]
    assert sorted(n for n in policies if n in ac.__all__) == ["EveryNSteps", "OnSignal"]
    assert all(getattr(ac, n) is getattr(ac.manager, n) for n in ("EveryNSteps", "OnSignal"))


def test_other_failing_ranks_are_named_in_english() -> None:
    """Before: an injected MPI fault on ranks 0 and 1 said "(ranks 1 failed as well; see rank_errors)"."""
    from amrckpt.testing import FaultyComm

    def body(comm: Any) -> str:
        with inject_faults(1, seed=3, ranks=[0, 1], kinds={"mpi"}, limit=1):
            try:
                FaultyComm(comm).barrier()
            except ac.errors.CommError as exc:
                return str(exc)
        return "no error"

    got = run_threads(3, body, timeout=60)
    assert len(set(got)) == 1 and "(rank 1 failed as well; rank_errors has every rank's error)" in got[0]
