"""File-system faults under the checkpoint manager: a full disk, no permission, the directory removed, two managers.

Each must end in a clear error of amrckpt's tree on every rank and leave the
checkpoints already committed intact (the newest one restores bit for bit).

* Disk full: a real 1 MiB tmpfs when it can be mounted (root, Linux), else
  skipped; ENOSPC is also injected (amrckpt.testing.FaultyBackend) on any system.
* Permission denied: ``chmod`` of the directory, skipped as root (root
  ignores file modes); EACCES is also injected on any system.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection, assert_state_equal
from fault_trials import _global, state

import amrckpt as ac
from amrckpt.comm import run_threads
from amrckpt.manager import EveryNSteps, KeepLast
from amrckpt.testing import FaultyBackend, inject_faults

REPO = Path(__file__).resolve().parents[2]


def manager(d: Path, comm: Any = None) -> ac.CheckpointManager[Advection]:
    """A manager whose saves write through the faulty backend (it injects nothing outside inject_faults)."""
    policies = {"save_policy": EveryNSteps(1), "keep_policy": KeepLast(5)}
    return ac.CheckpointManager(d, Advection, comm=comm, access=ac.scda.FileAccess(backend=FaultyBackend), **policies)


def assert_restores(d: Path, step: int, comm: Any = None) -> None:
    """A new manager on ``d`` finds ``step`` as the newest valid checkpoint and restores it bit for bit."""
    with manager(d, comm) as mgr:
        assert mgr.latest().step == step  # type: ignore[union-attr]
        loaded = mgr.restore_latest()
        lo, hi = loaded.partition.local_range(mgr.comm.rank)
        assert_state_equal(loaded.state, _global(step).local(lo, hi))
    assert not list(d.glob(".ckpt-*"))


# -- disk full ----------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (skipped where it cannot be mounted: not root, not Linux, no mount permission)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a tmpfs needs root on Linux")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(d: Path, leave: int) -> Path:
    """Fill the file system of ``d`` up to ``leave`` free bytes."""
    st = os.statvfs(d)
    free = st.f_bavail * st.f_frsize
    filler = d / "filler"
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.parametrize("P", [1, 3])
def test_disk_full_on_a_real_tmpfs(small_fs: Path, P: int) -> None:
    d = small_fs / "ckpt"

    def body(comm: Any) -> tuple[str, int | None]:
        with manager(d, comm) as mgr:
            mgr.save(1, state(1, comm))
            if comm.rank == 0:
                _fill(small_fs, 16 << 10)  # room for a sixth of a checkpoint
            comm.barrier()
            try:
                mgr.save(2, state(2, comm))
                got: tuple[str, int | None] = ("saved", None)
            except ac.errors.AmrckptError as exc:
                got = (type(exc).__name__, getattr(exc, "errno", None))
            comm.barrier()
            if comm.rank == 0:
                (small_fs / "filler").unlink()
            comm.barrier()
            mgr.save(3, state(3, comm))  # space again: the manager goes on
            return got

    got = run_threads(P, body, timeout=30)
    assert got == [("ScdaIOError", errno.ENOSPC)] * P
    assert sorted(p.name for p in d.glob("ckpt-*.scda")) == ["ckpt-000000000001.scda", "ckpt-000000000003.scda"]
    assert_restores(d, 3)


def test_disk_full_injected(tmp_path: Path) -> None:
    def body(comm: Any) -> str:
        with manager(tmp_path, comm) as mgr:
            mgr.save(1, state(1, comm))
            with inject_faults(1, ranks=[comm.size - 1], kinds={"write"}, errno=errno.ENOSPC):
                try:
                    mgr.save(2, state(2, comm))
                except ac.errors.ScdaIOError as exc:
                    return f"{type(exc).__name__} {exc.errno}"
        return "saved"

    assert run_threads(3, body, timeout=30) == [f"ScdaIOError {errno.ENOSPC}"] * 3
    assert_restores(tmp_path, 1)


# -- permission denied ----------------------------------------------------------


def test_permission_denied_by_chmod(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores file modes (test_permission_denied_injected covers EACCES)")
    with manager(tmp_path) as mgr:
        mgr.save(1, state(1, None))
        tmp_path.chmod(0o500)
        try:
            with pytest.raises(ac.errors.ScdaPermissionError, match="Permission denied"):
                mgr.save(2, state(2, None))
        finally:
            tmp_path.chmod(0o700)
    assert_restores(tmp_path, 1)


def test_permission_denied_injected(tmp_path: Path) -> None:
    def body(comm: Any) -> str:
        with manager(tmp_path, comm) as mgr:
            mgr.save(1, state(1, comm))
            with inject_faults(1, ranks=[0], kinds={"open"}, errno=errno.EACCES):
                try:
                    mgr.save(2, state(2, comm))
                except ac.errors.AmrckptError as exc:
                    return type(exc).__name__
        return "saved"

    assert run_threads(2, body, timeout=30) == ["ScdaPermissionError"] * 2
    assert_restores(tmp_path, 1)


# -- the directory removed or moved -----------------------------------------------


@pytest.mark.parametrize("how", ["removed", "moved", "replaced"])
def test_directory_gone_under_a_running_manager(tmp_path: Path, how: str) -> None:
    d, moved = tmp_path / "ckpt", tmp_path / "moved"

    def body(comm: Any) -> list[str]:
        out = []
        with manager(d, comm) as mgr:
            mgr.save(1, state(1, comm))
            comm.barrier()
            if comm.rank == 0:
                if how == "removed":
                    shutil.rmtree(d)
                else:
                    d.rename(moved)
                    if how == "replaced":
                        d.mkdir()
            comm.barrier()
            for call in (lambda: mgr.save(2, state(2, comm)), mgr.latest):
                try:
                    call()
                    out.append("no error")
                except ac.errors.AmrckptError as exc:
                    out.append(f"{type(exc).__name__}: {exc}")
        return out

    got = run_threads(2, body, timeout=30)
    assert got[0] == got[1]
    save_error, latest_error = got[0]
    assert save_error.startswith("ManagerError: the checkpoint directory") and "nothing was saved" in save_error
    if how == "replaced":
        assert latest_error == "no error" and not list(d.iterdir())  # nothing written into the new directory
    else:
        assert latest_error.startswith("ManagerIOError: [Errno 2] cannot list the checkpoint directory")
        assert not d.exists()  # not made again behind the user's back
    if how != "removed":
        assert_restores(moved, 1)  # the checkpoints moved with the directory, intact


# -- two managers -------------------------------------------------------------------

HOLDER = """
import sys, time
sys.path.insert(0, "tests")
import amrckpt as ac
from checkpoint_cases import Advection
mgr = ac.CheckpointManager(sys.argv[1], Advection)
print("ready", flush=True)
time.sleep(600)
"""


def test_second_manager_on_the_same_directory(tmp_path: Path) -> None:
    with manager(tmp_path) as first:
        first.save(1, state(1, None))
        with pytest.raises(ac.errors.ManagerError, match=rf"in use by another manager \(pid {os.getpid()} on .+ since "):
            manager(tmp_path)
        first.save(2, state(2, None))  # the first one goes on
    with manager(tmp_path) as again:  # released on close
        assert again.latest().step == 2  # type: ignore[union-attr]


def test_a_killed_job_leaves_no_lock_behind(tmp_path: Path) -> None:
    with manager(tmp_path) as mgr:
        mgr.save(1, state(1, None))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(ac.errors.ManagerError, match=rf"pid {holder.pid} on "):
            manager(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        if holder.stdout is not None:
            holder.stdout.close()
    # The lock file stays, naming the dead job; the kernel dropped its flock, so a restart goes ahead.
    assert f"pid {holder.pid}" in (tmp_path / ".amrckpt.lock").read_text()
    assert_restores(tmp_path, 1)
    with contextlib.suppress(FileNotFoundError):
        assert f"pid {os.getpid()}" in (tmp_path / ".amrckpt.lock").read_text()
