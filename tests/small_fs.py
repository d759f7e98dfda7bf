"""A small tmpfs for disk-full tests (Linux, root), and filling a file system up to a few free bytes."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PAGE = 4096


def can_mount() -> str | None:
    """Return why a tmpfs cannot be mounted here, or None if it can."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("mount") is None:
        return "a tmpfs needs root on Linux"
    return None


@contextlib.contextmanager
def tmpfs(mnt: Path, size: str = "2m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``mnt`` (made if needed) for the block; unmount it afterwards."""
    mnt.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode:
        raise OSError(f"cannot mount a tmpfs on {mnt}: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def free_bytes(d: Path) -> int:
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize


def fill(d: Path, leave: int, name: str = "filler") -> Path:
    """Fill the file system of ``d`` up to ``leave`` free bytes (a multiple of the page size) with the file ``name``."""
    filler = d / name
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"\0" * max(0, free_bytes(d) - leave))
    except OSError as exc:  # a save in the background took some of the space meanwhile: the disk is full, as wanted
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler


def pages(nbytes: int) -> int:
    """The bytes of whole pages that ``nbytes`` take on a tmpfs."""
    return -(-nbytes // PAGE) * PAGE
