"""The lock of a checkpoint directory: one manager at a time (``flock`` on ``.amrckpt.lock``).

The lock is a kernel ``flock`` on the file ``.amrckpt.lock``, taken by one
process (rank 0 of a manager) and dropped when it closes the file or dies,
so a killed job never blocks its restart.  The file holds one line naming
the holder (``amrckpt lock: pid 1234 on node7 since 2025-01-01T12:00:00Z``),
for the error message of a second manager.

The file is opened with ``O_NOFOLLOW`` and must be a regular file: a
symbolic link or a special file planted under the name is refused, and a
file that holds anything but an owner line (a file the library did not
create) is refused and never truncated.  The owner line is information: if
it cannot be written (a full disk), the lock is still held and a warning
says why.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from pathlib import Path

from .._files import LOCAL, FileSystem, is_link, pread_exact
from .._logging import RankLogger
from ..errors import ManagerError, ManagerIOError

__all__ = ["LOCK", "DirectoryLock"]

LOCK = ".amrckpt.lock"
"""The name of the lock file in a checkpoint directory."""

_OWNER = re.compile(rb"(amrckpt lock: )?pid \d+ on [^\n]* since [^\n]*\n?")
_MAX = 4096
_OPEN = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def _refuse(path: Path, why: str) -> ManagerError:
    return ManagerError(
        f"{str(path)!r} {why}: it is not a lock file of amrckpt, and it is left as it is. "
        f"Remove or rename it if it is not needed, or use another directory"
    )


def _close_quietly(fd: int) -> None:
    """Close ``fd`` on an error path: a failing close(2) must not replace the error being raised."""
    try:
        os.close(fd)
    except OSError:
        pass


class DirectoryLock:
    """The lock on a checkpoint directory, held by this process. Not collective (rank 0 takes it).

    Use :meth:`acquire`; :meth:`release` drops it.
    """

    def __init__(self, path: Path, fd: int, log: RankLogger | None = None) -> None:
        self.path = path
        self._fd = fd
        self._log = log

    @classmethod
    def acquire(cls, directory: Path, fs: FileSystem = LOCAL, log: RankLogger | None = None) -> DirectoryLock:
        """Take the lock of ``directory``, or raise. Not collective.

        Raises
        ------
        ManagerError
            If another process holds it (the message names it), or if the lock
            file is a link, not a regular file or not amrckpt's.
        ManagerIOError
            On this rank, if the lock file cannot be created, opened or read (with the errno; the message says why).
        """  # noqa: DOC501 (_refuse() returns the ManagerError, ManagerIOError.of() the ManagerIOError)
        path = directory / LOCK
        created = False
        try:
            try:
                fd = os.open(path, _OPEN | os.O_EXCL, 0o644)
                created = True
            except FileExistsError:
                fd = os.open(path, _OPEN, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP and is_link(path):  # confirmed: an ELOOP of a failing open is an I/O error
                raise _refuse(path, "is a symbolic link") from exc
            raise ManagerIOError.of(f"cannot use the checkpoint directory {str(directory)!r}", exc) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(path, "is not a regular file")
            if not created:
                held = pread_exact(fd, _MAX + 1, 0)
                if len(held) > _MAX or (held and not _OWNER.fullmatch(held)):
                    raise _refuse(path, "holds something else than the owner line of a manager")
            try:
                import fcntl
            except ImportError:  # not a POSIX system: no lock
                return cls(path, fd, log)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    owner = pread_exact(fd, _MAX, 0).decode("utf-8", "replace").strip().removeprefix("amrckpt lock: ")
                    raise ManagerError(
                        f"the checkpoint directory {str(directory)!r} is in use by another manager ({owner or 'another process'})"
                    ) from exc
                if log is not None:
                    log.warning(
                        "cannot lock %s (%s): the file system has no flock; two managers would not be kept apart", directory, exc
                    )
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            line = f"amrckpt lock: pid {os.getpid()} on {os.uname().nodename} since {since}\n".encode()
            try:
                fs.rewrite(fd, line)
            except OSError as exc:
                if log is not None:
                    log.warning("the lock of %s is held, but its owner line could not be written: %s", directory, exc)
        except OSError as exc:  # fstat or the read of the owner line: an error of amrckpt's tree, never a raw OSError
            _close_quietly(fd)
            raise ManagerIOError.of(f"cannot use the checkpoint directory {str(directory)!r}", exc) from exc
        except BaseException:
            _close_quietly(fd)
            raise
        return cls(path, fd, log)

    def release(self) -> None:
        """Drop the lock (close the file; the file stays, naming the last holder). Not collective; never raises.

        The ``flock`` is dropped first (``LOCK_UN``), so that it is released
        whatever ``close(2)`` returns; a failing close (``EIO``, ``EINTR``)
        is logged as a warning: the file holds only the owner line.  It runs
        after a manager's last collective step, on rank 0 alone, where an
        exception would reach one rank only.
        """
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            try:
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_UN)
            except (ImportError, OSError):
                pass  # not a POSIX system, or no flock (acquire warned): close releases what there is
            try:
                os.close(fd)
            except OSError as exc:
                if self._log is not None:
                    self._log.warning("closing the lock file %s failed (%s); the lock is released", self.path, exc)
