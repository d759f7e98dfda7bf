"""Writing files atomically, never through a planted link: the one write-then-rename of the package.

Every file amrckpt writes under a name a reader may look at (a checkpoint,
its run and step records, a manager's history index, a converted file, a
VTKHDF export) is written under a temporary name beside it, synced if asked,
and renamed over the final name (POSIX ``rename`` is atomic: a reader sees
the old file or the new one, never half of one).  orbax's
``path/atomicity.py`` is the model.

The temporary name is ``.<name>.partial-<token>`` with a random token; it
is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so that a file or a
symbolic link planted under that name makes the write fail instead of
writing through the link, and the rename replaces a link planted under the
final name by the new file (``rename`` does not follow its destination).

:class:`FileSystem` is the small set of file operations that the
checkpoint directory objects use (:mod:`amrckpt.manager`);
:class:`LocalFileSystem` does them with the operating system's calls.
``amrckpt.testing.FaultyFileSystem`` wraps one to make seeded calls fail.

Every file a restart reads (a checkpoint on the POSIX path, its run and step
records, the history index, a node cache's ``step.json`` and pieces) is
opened here, by :func:`open_regular`: without following a link and without
blocking (``O_NOFOLLOW | O_NONBLOCK``), and refused unless it is a regular
file, so that a FIFO or a link to a device planted under its name is an
error naming what it is, never a hang or an endless read.  Its bytes are read
by :func:`pread_exact` and :func:`preadv_exact`, which continue short reads
(legal in POSIX: signals, NFS, FUSE, Lustre) until the request is done or
the file really ends (a read of 0 bytes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "LOCAL",
    "FileSystem",
    "LocalFileSystem",
    "advance",
    "fsync_directory",
    "kind_of",
    "new_token",
    "open_regular",
    "pread_exact",
    "preadv_exact",
    "pwrite_exact",
    "read_regular",
    "replacing",
    "temporary_path",
    "write_atomic",
]

PARTIAL = ".partial-"
"""What a temporary name holds between the final name and the token: ``.<name>.partial-<token>``."""

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEITHER_LINK_NOR_WAIT = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)

EINTR_RETRIES = 64
"""Reads interrupted (``EINTR``) this many times in a row, with no byte read between, raise ``EINTR``."""

_IOV_MAX = 512
"""Buffers per ``preadv`` call (POSIX guarantees at least 16; Linux takes 1024)."""

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


def new_token() -> str:
    """Return a random token for a temporary name (12 hex digits). Not collective: choose it on one rank."""
    return uuid.uuid4().hex[:12]


def temporary_path(final: str | os.PathLike[str], token: str) -> Path:
    """Return the temporary name of ``final``: ``.<name>.partial-<token>`` in the same directory."""
    p = Path(final)
    return p.with_name(f".{p.name}{PARTIAL}{token}")


@runtime_checkable
class FileSystem(Protocol):
    """The file operations of a checkpoint directory; each raises ``OSError`` as the system call does.

    Not collective: every method acts on this process alone (the manager
    calls them on rank 0 inside an agreed step).
    """

    def write_new(self, path: Path, data: bytes, *, sync: bool) -> None:
        """Create ``path`` (``O_EXCL | O_NOFOLLOW``: it must not exist, not even as a link), write ``data``, fsync if ``sync``."""
        ...

    def read_regular(self, path: Path, limit: int) -> bytes:
        """Return the bytes of the regular file ``path`` (a link or a special file is refused), at most ``limit`` bytes."""
        ...

    def replace(self, src: Path, dst: Path) -> None:
        """Rename ``src`` over ``dst`` (``rename(2)``: atomic; a link at ``dst`` is replaced, not followed)."""
        ...

    def link(self, src: Path, dst: Path) -> None:
        """Make ``dst`` a hard link of ``src`` (``link(2)``; ``dst`` must not exist)."""
        ...

    def unlink(self, path: Path) -> None:
        """Remove the name ``path`` (a link itself, never its target)."""
        ...

    def fsync_directory(self, path: Path) -> None:
        """Make the names in directory ``path`` durable (``fsync`` of the directory)."""
        ...

    def rewrite(self, fd: int, data: bytes) -> None:
        """Make the open file ``fd`` hold exactly ``data`` (written from byte 0, then cut to its length)."""
        ...


class LocalFileSystem:
    """:class:`FileSystem` through the operating system's calls (``open``, ``rename``, ``link``, ``fsync``)."""

    def write_new(self, path: Path, data: bytes, *, sync: bool) -> None:
        """Create ``path`` exclusively and without following a link; write ``data``; fsync if ``sync``."""
        fd = os.open(path, _NEW, 0o666)
        try:
            view = memoryview(data)
            while view.nbytes:
                n = os.write(fd, view)
                view = view[n:]
            if sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)

    def read_regular(self, path: Path, limit: int) -> bytes:
        """Read a regular file of at most ``limit`` bytes (``O_NOFOLLOW``; anything else raises OSError)."""
        return read_regular(path, limit)

    def replace(self, src: Path, dst: Path) -> None:
        """``os.replace``."""
        os.replace(src, dst)

    def link(self, src: Path, dst: Path) -> None:
        """``os.link`` (never following a link at ``src``)."""
        os.link(src, dst, follow_symlinks=False)

    def unlink(self, path: Path) -> None:
        """``os.unlink``."""
        os.unlink(path)

    def fsync_directory(self, path: Path) -> None:
        """Open the directory read-only and fsync it."""
        fsync_directory(path)

    def rewrite(self, fd: int, data: bytes) -> None:
        """``pwrite`` at byte 0 (continued after short writes), then ``ftruncate`` to the length of ``data``."""
        pwrite_exact(fd, data, 0)
        os.ftruncate(fd, len(data))

    def __repr__(self) -> str:
        return "LocalFileSystem()"


LOCAL = LocalFileSystem()
"""The default :class:`FileSystem`."""


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Fsync the directory ``path``, so that the names created or renamed in it survive a crash. Not collective."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def kind_of(mode: int) -> str:
    """Return what a file of ``st_mode`` ``mode`` is, in words (``"a FIFO (named pipe)"``, ``"a regular file"``...)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


class FileKindError(OSError):
    """What :func:`open_regular` and :func:`read_regular` found out about a file: a link, not regular, too big.

    Evidence in the file system (an ``lstat`` or ``fstat`` said so), unlike
    an ``OSError`` with the same errno from a failing system call.
    """


def is_evidence(exc: OSError, path: str | os.PathLike[str]) -> bool:
    """Return whether ``exc`` says what ``path`` is, as the file system confirms, rather than that a call failed. Not collective.

    True for a :class:`FileKindError`, and for ``ENOENT``/``ENOTDIR`` when
    ``path`` is indeed missing (``lstat`` finds nothing).  An injected or
    transient error with one of these numbers (``ELOOP`` from ``open`` on a
    regular file) is not evidence: a reader reports it as an I/O error.
    """
    if isinstance(exc, FileKindError):
        return True
    return exc.errno in (errno.ENOENT, errno.ENOTDIR) and not os.path.lexists(path)


def open_regular(path: str | os.PathLike[str], *, write: bool = False, create: bool = False, truncate: bool = False) -> int:
    """Open a regular file, never following a link and never blocking; return its descriptor. Not collective.

    ``open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`` (with
    ``write``: ``O_WRONLY``, and ``O_CREAT`` with ``create``, mode ``0o666``
    less the umask, ``O_TRUNC`` with ``truncate``), then ``fstat``: a
    symbolic link (to ``/dev/zero``, to a file elsewhere), a FIFO, a device,
    a directory or a socket under ``path`` is refused (``O_NONBLOCK``:
    opening a FIFO does not wait for the other end; a FIFO with no reader,
    which a write-only open refuses with ``ENXIO``, is named as one).  A
    descriptor for writing is made blocking again.  The caller closes it.

    Raises
    ------
    FileKindError
        On this rank: ``ELOOP`` for a symbolic link, ``EISDIR`` for a
        directory, ``EINVAL`` for another file that is not regular (the
        message says what it is, the ``filename`` is ``path``).
    OSError
        On this rank, the error of ``open``/``fstat``/``fcntl``.
    """  # noqa: DOC501 (_not_regular() returns the FileKindError)
    where = os.fspath(path)
    flags = _NEITHER_LINK_NOR_WAIT | (os.O_WRONLY if write else os.O_RDONLY)
    flags |= (os.O_CREAT if create else 0) | (os.O_TRUNC if truncate else 0)
    try:
        fd = os.open(where, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP and is_link(where):
            raise FileKindError(errno.ELOOP, "a symbolic link (links are not followed)", where) from exc
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader, a socket, a directory
            mode = _lstat_mode(where)
            if mode is not None and not stat.S_ISREG(mode):
                raise _not_regular(mode, where, write) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(mode, where, write)
        if write:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_regular(mode: int, path: str, write: bool) -> FileKindError:
    """Return the error for a file of ``st_mode`` ``mode`` that is not regular: ``EISDIR`` for a directory, else ``EINVAL``."""
    code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
    fix = " (amrckpt writes regular files only: remove it, or write under another name)" if write else ""
    return FileKindError(code, f"{kind_of(mode)}, not a regular file{fix}", path)


def _lstat_mode(path: str) -> int | None:
    """Return ``lstat(path).st_mode``, or None if ``lstat`` fails."""
    try:
        return os.lstat(path).st_mode
    except OSError:
        return None


def is_link(path: str | os.PathLike[str]) -> bool:
    """Return whether ``path`` is a symbolic link (False if ``lstat`` fails). Not collective."""
    mode = _lstat_mode(os.fspath(path))
    return mode is not None and stat.S_ISLNK(mode)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Return whether ``a`` and ``b`` name one file: the same name, a hard link, or a symbolic link to it. Not collective.

    ``os.path.samefile`` (``stat`` of both: device and inode); False when
    either is missing or cannot be looked at, so that the caller's own open
    reports that with its errno.
    """
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def pread_exact(fd: int, nbytes: int, offset: int) -> bytes:
    """Return ``nbytes`` bytes from byte ``offset`` of ``fd``, fewer only where the file ends. Not collective.

    ``pread`` until the request is done: a short read (a signal, NFS, FUSE,
    Lustre) is continued, an interrupted one (``EINTR``) tried again (up to
    :data:`EINTR_RETRIES` times in a row); only a read of 0 bytes (the end
    of the file) ends it early.

    Raises
    ------
    OSError
        The error of ``pread`` (``EINTR`` after :data:`EINTR_RETRIES` interruptions in a row).
    """
    if nbytes <= 0:
        return b""
    first = _pread(fd, nbytes, offset)
    if len(first) in (0, nbytes):
        return first
    buf = bytearray(nbytes)
    buf[: len(first)] = first
    done = len(first) + preadv_exact(fd, [memoryview(buf)[len(first) :]], offset + len(first))
    return bytes(buf) if done == nbytes else bytes(buf[:done])


def _pread(fd: int, nbytes: int, offset: int) -> bytes:
    for _ in range(EINTR_RETRIES):
        try:
            return os.pread(fd, nbytes, offset)
        except InterruptedError:
            continue
    return os.pread(fd, nbytes, offset)


def pwrite_exact(fd: int, data: Any, offset: int) -> None:
    """Write all of ``data`` at byte ``offset`` of ``fd``: a short ``pwrite`` is continued. Not collective.

    POSIX lets ``pwrite`` write fewer bytes than asked (a signal, a quota
    reached in the middle, FUSE); the rest is written by the next call.

    Raises
    ------
    OSError
        The error of ``pwrite``; ``EIO`` if it writes nothing (it never ends otherwise).
    """
    view = memoryview(data).cast("B")
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        if n <= 0:
            raise OSError(errno.EIO, f"pwrite wrote nothing of {view.nbytes} bytes at byte {offset}")
        view, offset = view[n:], offset + n


def preadv_exact(fd: int, bufs: Sequence[memoryview], offset: int) -> int:
    """Fill the buffers ``bufs`` (in order) from byte ``offset`` of ``fd``; return the bytes read. Not collective.

    ``preadv`` (:data:`_IOV_MAX` buffers a call) until every buffer is full:
    a short read is continued, an interrupted one (``EINTR``) tried again
    (up to :data:`EINTR_RETRIES` times in a row); the result is less than
    the buffers' total only where the file ends (a read of 0 bytes).

    Raises
    ------
    InterruptedError
        On this rank, after :data:`EINTR_RETRIES` interruptions (``EINTR``) in a row.
    OSError
        On this rank, any other error of ``preadv``.
    """
    left = [b for b in bufs if b.nbytes]
    done = 0
    interrupted = 0
    while left:
        try:
            n = os.preadv(fd, left[:_IOV_MAX], offset + done)
        except InterruptedError:
            interrupted += 1
            if interrupted > EINTR_RETRIES:
                raise
            continue
        interrupted = 0
        if n == 0:
            break
        done += n
        advance(left, n)
    return done


def advance(bufs: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes of the buffers ``bufs`` (those a vectored call moved), keeping the rest."""
    while n and bufs:
        if n >= bufs[0].nbytes:
            n -= bufs[0].nbytes
            bufs.pop(0)
        else:
            bufs[0] = bufs[0][n:]
            n = 0


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """Return the bytes of a regular file, refusing links, special files and files over ``limit`` bytes. Not collective.

    Opened by :func:`open_regular` (never following a link, never
    blocking); at most ``limit + 1`` bytes are read, so a file that grows
    while read is refused too.

    Raises
    ------
    FileKindError
        On this rank: ``ELOOP`` for a symbolic link, ``EISDIR``/``EINVAL`` for
        a file that is not regular, ``EFBIG`` for one over ``limit`` bytes.
    OSError
        On this rank, the error of ``open``/``read``.
    """
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FileKindError(errno.EFBIG, f"{size} bytes, more than the {limit} expected", os.fspath(path))
        data = pread_exact(fd, size + 1, 0)
        if len(data) > size:  # grown since: read on, as far as the limit allows
            data += pread_exact(fd, limit + 1 - len(data), len(data))
        if len(data) > limit:
            raise FileKindError(errno.EFBIG, f"more than the {limit} bytes expected", os.fspath(path))
        return data
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, sync: bool = False, fs: FileSystem = LOCAL) -> Path:
    """Write ``data`` as ``path``: under a temporary name, synced if ``sync``, renamed over ``path``. Not collective.

    A reader sees the old file or the new one, never a part; a link planted
    under ``path`` is replaced, not followed; the temporary file is removed
    if anything fails.  With ``sync`` the directory is synced after the
    rename.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    OSError
        What the file system raised; ``path`` is then as it was.
    """
    final = Path(path)
    tmp = temporary_path(final, new_token())
    fs.write_new(tmp, data, sync=sync)
    try:
        fs.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.unlink(tmp)
        raise
    if sync:
        fs.fsync_directory(final.parent)
    return final


@contextlib.contextmanager
def replacing(
    final: str | os.PathLike[str], call: Any = None, *, companions: Sequence[str] = (), sync: bool = False
) -> Iterator[Path]:
    """Yield a temporary path for ``final``; when the block ends without error, rename it (and its companions) over ``final``.

    For writers that write a whole file through a library of their own (a
    collective scda write, h5py).  With ``call`` (an
    :class:`amrckpt.comm.Call`), collective: rank 0 chooses the token and
    creates the empty temporary file (``O_EXCL | O_NOFOLLOW``), every rank
    writes through the yielded path, and rank 0 renames; the rename is
    agreed on.  Without ``call``, this process does all of it.  If the block
    raises, the temporary file and its companions are removed (rank 0) and
    ``final`` is untouched.

    Parameters
    ----------
    final : str or os.PathLike
        The file's name.
    call : Call, optional
        The collective call the write belongs to.
    companions : sequence of str, optional
        Suffixes of files written beside the temporary one (``".run.json"``):
        each that exists is renamed to ``final + suffix`` before ``final``.
    sync : bool, optional
        Fsync the directory after the rename.

    Yields
    ------
    pathlib.Path
        The temporary path to write.
    """
    out = Path(final)
    made: list[Path] = []  # the temporary file, where this process made it (rank 0 with a call)

    def begin() -> Path:
        tmp = temporary_path(out, new_token())
        LOCAL.write_new(tmp, b"", sync=False)
        made.append(tmp)
        return tmp

    def commit() -> None:
        for s in companions:
            side = Path(f"{tmp}{s}")
            if os.path.lexists(side):
                os.replace(side, f"{out}{s}")
        os.replace(tmp, out)
        if sync:
            fsync_directory(out.parent)

    try:
        # With a call, another rank's earlier error is agreed on here: the empty file rank 0 made goes below.
        tmp = begin() if call is None else call.on_root(begin, what="choose a temporary name")
        yield tmp
        if call is None:
            commit()
        else:
            call.run(commit, on=0)
            call.agree("rename into place")
    except BaseException:
        for p in [*made, *(Path(f"{t}{s}") for t in made for s in companions)]:
            with contextlib.suppress(OSError):
                os.unlink(p)
        raise
