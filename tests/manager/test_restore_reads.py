"""A restart keeps a checkpoint aside only on evidence in its bytes: short reads, I/O errors and planted files are no verdict.

Before: a short ``pread`` made ``restore_latest`` rename perfect checkpoints
``.damaged-`` one after the other and return None; any ``OSError`` renamed
a good one ``.unreadable-``, never tried again; a FIFO planted beside a
checkpoint blocked the restart forever, and a run record linked to
``/dev/zero`` grew to gigabytes and set the intact checkpoint aside.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from checkpoint_cases import Advection, assert_state_equal
from fault_trials import _global, state
from hypothesis import given, settings
from hypothesis import strategies as st

import amrckpt as ac
from _support import run_bounded, short_reads
from amrckpt.comm import run_threads
from amrckpt.errors import ScdaIOError
from amrckpt.manager import EveryNSteps, KeepLast

NEWEST = "ckpt-000000000002.scda"


def manager(d: Path, comm: Any = None, **kw: Any) -> ac.CheckpointManager[Advection]:
    return ac.CheckpointManager(d, Advection, comm=comm, save_policy=EveryNSteps(1), **kw)


def two_steps(d: Path) -> dict[str, bytes]:
    """Save steps 1 and 2 into ``d``; return every file's bytes."""
    with manager(d) as mgr:
        for s in (1, 2):
            mgr.save(s, state(s, None))
    return files(d)


def files(d: Path) -> dict[str, bytes]:
    """The bytes of every file of ``d`` but the lock (whose owner line names the time the manager opened)."""
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink() and p.name != ".amrckpt.lock"}


def assert_restores(d: Path, step: int, P: int = 1, *, clean: bool = True) -> None:
    """A restart on P thread ranks restores ``step`` bit for bit and (``clean``) nothing is kept aside."""

    def body(comm: Any) -> tuple[int, tuple[Any, ...]]:
        with manager(d, comm) as mgr:
            r = mgr.restore_latest()
            lo, hi = r.partition.local_range(comm.rank)
            assert_state_equal(r.state, _global(step).local(lo, hi))
            return r.step, r.skipped

    assert run_threads(P, body, timeout=120) == [(step, ())] * P
    assert not clean or not [p.name for p in d.iterdir() if ".damaged-" in p.name or ".unreadable-" in p.name]


# -- short reads -------------------------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(k=st.integers(1, 1 << 15), P=st.sampled_from([1, 3]))
def test_short_reads_restore_the_newest_step_bit_for_bit(k: int, P: int) -> None:
    """Every read moves at most ``k`` bytes: the newest step is restored, nothing is set aside."""
    with tempfile.TemporaryDirectory() as top:
        d = Path(top)
        before = two_steps(d)
        with short_reads(k) as calls:
            assert_restores(d, 2, P)
        assert calls[0] > 0
        assert {n: b for n, b in files(d).items() if n in before} == before


# -- I/O errors are no verdict -----------------------------------------------------------------------


@contextlib.contextmanager
def failing(where: str, code: int, times: int | None = None) -> Iterator[list[int]]:
    """Make ``os.open`` of the newest checkpoint (``where="open"``) or every ``pread``/``preadv`` fail with ``code``."""
    n = [0]
    real_open, real_pread, real_preadv = os.open, os.pread, os.preadv

    def hit() -> bool:
        n[0] += 1
        return times is None or n[0] <= times

    def open_(path: Any, flags: int, *a: Any, **kw: Any) -> int:
        if os.fspath(path).endswith(NEWEST) and not flags & (os.O_WRONLY | os.O_RDWR) and hit():
            raise OSError(code, os.strerror(code), os.fspath(path))
        return real_open(path, flags, *a, **kw)

    def pread(fd: int, k: int, off: int) -> bytes:
        if hit():
            raise OSError(code, os.strerror(code))
        return real_pread(fd, k, off)

    def preadv(fd: int, bufs: Any, off: int) -> int:
        if hit():
            raise OSError(code, os.strerror(code))
        return real_preadv(fd, bufs, off)

    patches = (
        [mock.patch.object(os, "open", open_)]
        if where == "open"
        else [
            mock.patch.object(os, "pread", pread),
            mock.patch.object(os, "preadv", preadv),
        ]
    )
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield n


@pytest.mark.parametrize("P", [1, 3])
@pytest.mark.parametrize(
    ("where", "code"),
    [("open", errno.ENXIO), ("open", errno.EIO), ("read", errno.EIO), ("read", errno.EINTR), ("read", errno.EBADFD)],
)
def test_an_io_error_fails_the_restore_and_leaves_the_checkpoint(tmp_path: Path, where: str, code: int, P: int) -> None:
    """Before: the checkpoint was renamed ``.unreadable-`` and the restart went on from step 1 (or from nothing)."""
    before = two_steps(tmp_path)

    def body(comm: Any) -> tuple[str, int | None, bool]:
        with manager(tmp_path, comm) as mgr:
            comm.barrier()
            try:
                with failing(where, code) if comm.rank == 0 else contextlib.nullcontext():
                    comm.barrier()
                    mgr.restore_latest()
            except ScdaIOError as exc:
                return type(exc).__name__, exc.errno, "ckpt-00000000000" in str(exc)
            finally:
                comm.barrier()
            return "restored", None, False

    got = run_threads(P, body, timeout=120)
    assert got == [("ScdaIOError", code, True)] * P
    assert files(tmp_path) == before  # nothing renamed, nothing written
    assert_restores(tmp_path, 2, P)  # the next restart without faults


def test_one_eintr_is_read_again(tmp_path: Path) -> None:
    """An interrupted read is tried again: the restart goes on as if nothing happened."""
    two_steps(tmp_path)
    with failing("read", errno.EINTR, times=1):
        assert_restores(tmp_path, 2)


def test_damage_that_a_second_read_does_not_find_is_no_verdict(tmp_path: Path) -> None:
    """A byte that the first read of the newest checkpoint's data gets wrong (and the second right): no set-aside."""
    two_steps(tmp_path)
    real = os.preadv
    seen = [0]

    def flip_once(fd: int, bufs: Any, off: int) -> int:
        n = real(fd, bufs, off)
        if n > 1000 and seen[0] == 0:
            seen[0] += 1
            mv = memoryview(bufs[0]).cast("B")
            mv[mv.nbytes // 2] ^= 0xFF
        return n

    with mock.patch.object(os, "preadv", flip_once):
        assert_restores(tmp_path, 2)
    assert seen[0] == 1


def test_damage_found_twice_is_kept_aside(tmp_path: Path) -> None:
    """Evidence that stays is still a verdict: the damaged newest step is kept aside and step 1 restored."""
    two_steps(tmp_path)
    p = tmp_path / NEWEST
    blob = bytearray(p.read_bytes())
    blob[ac.read_info(p).index.entry("rho").offset + 100] ^= 1
    p.write_bytes(bytes(blob))
    with manager(tmp_path) as mgr, pytest.warns(ac.errors.CheckpointSkippedWarning, match="is damaged"):
        r = mgr.restore_latest()
    assert r.step == 1 and [s.step for s in r.skipped] == [2]
    assert len(list(tmp_path.glob(NEWEST + ".damaged-*[0-9a-f]"))) == 1


# -- planted files: refused or ignored, never a hang --------------------------------------------------

RESTART = """
    import logging, os, sys
    logging.basicConfig(level=logging.WARNING)
    from pathlib import Path
    import amrckpt as ac
    from amrckpt.comm import run_threads
    from checkpoint_cases import Advection

    d = Path(sys.argv[1])

    def body(comm):
        cache = ac.manager.NodeCache(d / "cache") if sys.argv[2] == "cache" else None
        with ac.CheckpointManager(d / "shared", Advection, comm=comm, cache=cache) as mgr:
            try:
                r = mgr.restore_latest()
            except ac.errors.AmrckptError as exc:
                return type(exc).__name__, exc.errno if isinstance(exc, OSError) else None, str(exc)
            finally:
                if cache is not None:
                    mgr.close(flush=False)
            return "restored", None if r is None else r.step, [s.step for s in (r.skipped if r else ())]

    got = run_threads(int(sys.argv[3]), body, timeout=60)
    assert all(g == got[0] for g in got), got
    print(repr(got[0]))
"""


def plant(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("P", [1, 2])
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_planted_run_record_is_ignored_with_a_warning(tmp_path: Path, kind: str, P: int) -> None:
    """Before: a FIFO blocked the restart forever; a link to /dev/zero grew to a MemoryError and the intact checkpoint
    was set aside as damaged.  The run record is optional: the checkpoint is restored, the record ignored with a warning."""
    two_steps(tmp_path / "shared")
    rec = tmp_path / "shared" / (NEWEST + ".run.json")
    plant(rec, kind)
    out = run_bounded(RESTART, str(tmp_path), "direct", str(P), timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('restored', 2, [])"
    assert "ignoring the run record" in out.stderr and str(rec) in out.stderr
    assert not list((tmp_path / "shared").glob("*.damaged-*")) and not list((tmp_path / "shared").glob("*.unreadable-*"))


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_planted_checkpoint_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    """Before: a FIFO as ``ckpt-N.scda`` blocked the restart forever.  It is refused with an error that names it, and left."""
    two_steps(tmp_path / "shared")
    path = tmp_path / "shared" / NEWEST
    plant(path, kind)
    out = run_bounded(RESTART, str(tmp_path), "direct", "2", timeout=90)
    assert out.returncode == 0, out.stderr
    name, code, text = ast.literal_eval(out.stdout)
    what = {"fifo": "a FIFO", "zero": "a symbolic link"}[kind]
    assert (name, code) == ("ScdaIOError", errno.EINVAL if kind == "fifo" else errno.ELOOP)
    assert what in text and NEWEST in text
    assert os.path.lexists(path) and not list((tmp_path / "shared").glob("*.damaged-*"))


def cache_step_1(tmp_path: Path) -> Path:
    """Save step 1 into a node cache, unflushed; return the cached step's directory."""
    cache = ac.manager.NodeCache(tmp_path / "cache")
    with ac.CheckpointManager(tmp_path / "shared", Advection, save_policy=EveryNSteps(1), cache=cache) as mgr:
        mgr.save(1, state(1, None))
        mgr.close(flush=False)
    [step] = (tmp_path / "cache").glob("node-*/ckpt-*.cache")
    return step


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("name", ["step.json", "rank-000000.pieces"])
def test_a_planted_cache_file_is_refused_without_blocking(tmp_path: Path, name: str, kind: str) -> None:
    """Before: a FIFO as a cached step's ``step.json`` or pieces file blocked the restart forever."""
    step = cache_step_1(tmp_path)
    plant(step / name, kind)
    out = run_bounded(RESTART, str(tmp_path), "cache", "1", timeout=90)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('restored', None, [])"  # the one cached step cannot be used; nothing was flushed


def test_short_reads_of_a_cached_step(tmp_path: Path) -> None:
    """The cache's ``step.json`` and the load in place read whole under short reads."""
    cache_step_1(tmp_path)
    with (
        short_reads(5),
        ac.CheckpointManager(tmp_path / "shared", Advection, cache=ac.manager.NodeCache(tmp_path / "cache")) as mgr,
    ):
        r = mgr.restore_latest()
        assert (r.step, mgr.restored_from) == (1, "cache")
        assert_state_equal(r.state, state(1, None))
        mgr.close(flush=False)


# -- what an older release kept aside as unreadable; retention ---------------------------------------


def keep_aside_as_unreadable(d: Path, step: int, token: str = "0123456789ab") -> str:
    """Rename a checkpoint and its records as an older release did (``<name>.unreadable-<token>``)."""
    name = f"ckpt-{step:012d}.scda"
    aside = f"{name}.unreadable-{token}"
    for suffix in ("", ".run.json", ".step.json"):
        (d / (name + suffix)).rename(d / (aside + suffix))
    return aside


def test_a_checkpoint_kept_aside_as_unreadable_is_read_again(tmp_path: Path) -> None:
    """Before: no later restart tried it again; the run went on from step 1."""
    before = two_steps(tmp_path)
    keep_aside_as_unreadable(tmp_path, 2)
    assert_restores(tmp_path, 2)
    assert files(tmp_path) == before  # its name and records are back


def test_an_unreadable_copy_of_a_step_saved_again_stays_aside(tmp_path: Path) -> None:
    """A later save of the step counts; the copy kept aside is left where it is."""
    two_steps(tmp_path)
    aside = keep_aside_as_unreadable(tmp_path, 2)
    with manager(tmp_path) as mgr:
        mgr.save(2, state(2, None))
    assert_restores(tmp_path, 2, clean=False)
    assert (tmp_path / aside).is_file()


def test_retention_never_deletes_what_is_kept_aside(tmp_path: Path) -> None:
    """Files kept aside (damaged, or an unreadable copy of a step that has a checkpoint) outlive any retention."""
    d = tmp_path
    two_steps(d)
    copy = d / "ckpt-000000000001.scda.unreadable-0123456789ab"
    copy.write_bytes((d / "ckpt-000000000001.scda").read_bytes())
    p = d / NEWEST
    blob = bytearray(p.read_bytes())
    blob[ac.read_info(p).index.entry("rho").offset + 100] ^= 1
    p.write_bytes(bytes(blob))
    with manager(d, keep_policy=KeepLast(1)) as mgr:
        with pytest.warns(ac.errors.CheckpointSkippedWarning):
            assert mgr.restore_latest().step == 1
        for s in range(2, 8):
            mgr.save(s, state(s, None))
        assert mgr.all_steps() == [7]
    [damaged] = d.glob(NEWEST + ".damaged-*[0-9a-f]")
    assert damaged.read_bytes() == bytes(blob) and copy.is_file()
    assert sorted(x.name[len(damaged.name) :] for x in d.glob(damaged.name + "*")) == ["", ".run.json", ".step.json"]


@pytest.mark.parametrize("P", [1, 3])
def test_a_save_over_a_checkpoint_that_cannot_be_read_fails_and_leaves_it(tmp_path: Path, P: int) -> None:
    """Before: a save of step N renamed its checkpoint ``.unreadable-`` on an I/O error and wrote a new one."""
    before = two_steps(tmp_path)

    def body(comm: Any) -> tuple[str, int | None]:
        with manager(tmp_path, comm) as mgr:
            comm.barrier()
            try:
                with failing("open", errno.EIO) if comm.rank == 0 else contextlib.nullcontext():
                    comm.barrier()
                    mgr.save(2, state(2, comm), overwrite=True)
            except ScdaIOError as exc:
                return type(exc).__name__, exc.errno
            finally:
                comm.barrier()
            return "saved", None

    assert run_threads(P, body, timeout=120) == [("ScdaIOError", errno.EIO)] * P
    assert files(tmp_path) == before


@pytest.mark.parametrize("code", [errno.EIO, errno.EFAULT])
@pytest.mark.parametrize("region", ["footer", "section headers"])
def test_an_io_error_reading_the_footer_or_a_section_header_is_no_verdict(tmp_path: Path, code: int, region: str) -> None:
    """Every read of the newest checkpoint's footer (or of its first section headers) fails: ScdaIOError, nothing set aside.

    Before: the I/O error became IncompleteCheckpointError ("the last 96 bytes are not an amrckpt footer") or
    CheckpointError ("no section of field ..."), found by the metadata check and again by the load: damage found twice,
    and the good checkpoint was renamed ``.damaged-`` (libfiu trial t1000040, MPI-IO with pread faults).
    """
    before = two_steps(tmp_path)
    newest = tmp_path / NEWEST
    size = newest.stat().st_size
    real_pread = os.pread

    def pread(fd: int, m: int, off: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(NEWEST):
            hit = off + m > size - 96 if region == "footer" else 128 <= off < 1024
            if hit:
                raise OSError(code, os.strerror(code))
        return real_pread(fd, m, off)

    with manager(tmp_path, None) as mgr, mock.patch.object(os, "pread", pread):
        with pytest.raises(ScdaIOError) as got:
            mgr.restore_latest()
    assert got.value.errno == code
    assert files(tmp_path) == before  # nothing renamed, nothing written
    assert_restores(tmp_path, 2, 1)
