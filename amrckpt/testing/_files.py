"""A file system that makes seeded calls fail: the fault wrapper of a checkpoint directory's file operations.

:class:`FaultyFileSystem` wraps a :class:`~amrckpt.manager.FileSystem`
(zarr's ``WrapperStore`` pattern): each call first asks the injection in
force (:func:`amrckpt.testing.inject_faults`) whether it fails, and raises
the drawn ``OSError`` instead of acting, as the system call would.  The
library's own file system carries no test hooks.
"""

from __future__ import annotations

from pathlib import Path

from .._files import LOCAL, FileSystem
from . import _faults

__all__ = ["FaultyFileSystem"]


class FaultyFileSystem:
    """A :class:`~amrckpt.manager.FileSystem` whose calls fail where :func:`~amrckpt.testing.inject_faults` says.

    The kinds of faults: ``"rename"`` (``replace``, ``link``, ``unlink``),
    ``"fsync"`` (``fsync_directory``), ``"write"`` (``write_new``,
    ``rewrite``), ``"sync"`` (the fsync of ``write_new``), ``"read"``
    (``read_regular``).  Outside an ``inject_faults`` block it changes
    nothing.

    Parameters
    ----------
    wrapped : FileSystem, optional
        The file system that does the work (default: the operating system's).
    rank : int, optional
        The world rank the faults are drawn for (default: this thread's
        rank: a thread rank of :func:`~amrckpt.comm.run_threads`, else the
        MPI world rank, else 0).
    """

    def __init__(self, wrapped: FileSystem | None = None, rank: int | None = None) -> None:
        self.wrapped: FileSystem = wrapped if wrapped is not None else LOCAL
        self.rank = _faults.home_rank() if rank is None else int(rank)

    def _fault(self, kind: str, path: Path) -> None:
        if _faults.ACTIVE is not None:
            exc = _faults.io_error_at(kind, self.rank, str(path))
            if exc is not None:
                exc.filename = str(path)
                raise exc

    def write_new(self, path: Path, data: bytes, *, sync: bool) -> None:
        """Fail as ``"write"`` (before the file is made) or ``"sync"`` (after it is written: it is then removed), or write.

        Raises
        ------
        OSError
            On this rank, the injected fault of ``"write"`` or ``"sync"`` (the file is then removed), or the error of
            the wrapped file system.
        """
        self._fault("write", path)
        self.wrapped.write_new(path, data, sync=sync)
        if sync:
            try:
                self._fault("sync", path)
            except OSError:
                self.wrapped.unlink(path)
                raise

    def read_regular(self, path: Path, limit: int) -> bytes:
        """Fail as ``"read"``, or read."""
        self._fault("read", path)
        return self.wrapped.read_regular(path, limit)

    def replace(self, src: Path, dst: Path) -> None:
        """Fail as ``"rename"``, or rename."""
        self._fault("rename", dst)
        self.wrapped.replace(src, dst)

    def link(self, src: Path, dst: Path) -> None:
        """Fail as ``"rename"``, or link."""
        self._fault("rename", dst)
        self.wrapped.link(src, dst)

    def unlink(self, path: Path) -> None:
        """Fail as ``"rename"``, or unlink."""
        self._fault("rename", path)
        self.wrapped.unlink(path)

    def fsync_directory(self, path: Path) -> None:
        """Fail as ``"fsync"``, or sync the directory."""
        self._fault("fsync", path)
        self.wrapped.fsync_directory(path)

    def rewrite(self, fd: int, data: bytes) -> None:
        """Fail as ``"write"``, or rewrite the open file."""
        self._fault("write", Path(f"/proc/self/fd/{fd}"))
        self.wrapped.rewrite(fd, data)

    def __repr__(self) -> str:
        return f"FaultyFileSystem({self.wrapped!r}, rank={self.rank})"
