"""Writing the pieces files: the save's byte backend, into a new file or a recycled one (mapped on a tmpfs)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._crc import crc32, crc32_of_pieces, pool
from ..._files import pwrite_exact
from ...comm import Comm, current_call
from ...scda import Capabilities, os_error
from ._pieces import _HEAD, _crc_of, pieces_head, pieces_table

__all__ = ["Mappings", "PiecesBackend", "on_tmpfs"]


_IOV = 512  # buffers per writev (below every system's IOV_MAX)
_TMPFS_MAGIC = 0x01021994  # linux/magic.h


def _write_all(fd: int, bufs: Sequence[memoryview | bytes], path: Path) -> None:
    """Write ``bufs`` one after the other at the descriptor's position (``writev``, resumed after short writes).

    Raises
    ------
    ScdaIOError
        On this rank, if a ``writev`` fails (with its errno).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    views = [memoryview(b).cast("B") for b in bufs if len(b)]
    i = 0
    try:
        while i < len(views):
            batch = views[i : i + _IOV]
            n = os.writev(fd, batch)
            for v in batch:
                if n >= v.nbytes:
                    n -= v.nbytes
                    i += 1
                else:
                    views[i] = v[n:]
                    break
    except OSError as exc:
        raise os_error(exc, str(path), "cannot write") from exc


def _allocate(fd: int, nbytes: int) -> bool:
    """Allocate every page of a file's first ``nbytes`` (before it is mapped: a full tmpfs fails here, not by SIGBUS).

    False where the file system cannot (then the file is written with pwritev).

    Raises
    ------
    OSError
        ENOSPC and the like.
    """
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return False
        raise
    return True


def _map(fd: int, nbytes: int) -> mmap.mmap | None:
    """Map a pieces file shared and writable, its pages populated; None if it cannot be (then it is written with pwritev)."""
    try:
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fd, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None


def _copy_mapped(mapping: mmap.mmap, bufs: Sequence[memoryview]) -> None:
    """Copy ``bufs`` one after the other from byte ``_HEAD.size`` on, through a shared mapping of a pieces file.

    All the file's pages are allocated (a full tmpfs cannot fail the copy with SIGBUS).

    The header is zeroed first (a recycled pieces file never has a valid
    header over new data); the caller writes it last.
    """
    dst = np.frombuffer(mapping, dtype=np.uint8)
    try:
        dst[: _HEAD.size] = 0
        pos = _HEAD.size
        for v in bufs:
            dst[pos : pos + v.nbytes] = np.frombuffer(v, dtype=np.uint8)
            pos += v.nbytes
    finally:
        del dst


class Mappings:
    """A rank's shared writable mappings of its own pieces files, by inode. Not collective; not thread-safe (one save at a time).

    A pieces file written through a mapping keeps it: when the file is
    recycled (renamed into a later step) it is written again without
    mapping its pages anew, and no ``munmap`` of 100 MB (milliseconds, and
    it holds the process's memory map, so that a rank's MPI progress waits)
    happens inside a save.  Each mapping keeps a descriptor of its file (so
    that its inode cannot be reused by another file while it is kept).  A
    mapping holds its pages even once its file is unlinked: :meth:`sweep`
    (the cache's retention) closes those whose file has no link left,
    :meth:`close` all of them.
    """

    def __init__(self) -> None:
        self._by_inode: dict[tuple[int, int], tuple[mmap.mmap, int]] = {}

    def take(self, st: os.stat_result, nbytes: int) -> mmap.mmap | None:
        """Return the mapping kept of the file ``st`` (device, inode) if it is ``nbytes`` long, else None (stale: closed)."""
        got = self._by_inode.pop((st.st_dev, st.st_ino), None)
        if got is None:
            return None
        mapping, fd = got
        os.close(fd)
        if len(mapping) == nbytes:
            return mapping
        _close_mapping(mapping)
        return None

    def keep(self, fd: int, st: os.stat_result, mapping: mmap.mmap) -> None:
        """Keep ``mapping`` of the file ``st``, open as ``fd`` (duplicated: the caller closes its own)."""
        try:
            mine = os.dup(fd)
        except OSError:
            _close_mapping(mapping)
            return
        old = self._by_inode.pop((st.st_dev, st.st_ino), None)
        if old is not None:
            self._drop(old)
        self._by_inode[(st.st_dev, st.st_ino)] = (mapping, mine)

    def sweep(self) -> None:
        """Close the mappings of files that have no link left (unlinked by the retention, or removed with a step)."""
        for key, (_, fd) in list(self._by_inode.items()):
            try:
                if os.fstat(fd).st_nlink > 0:
                    continue
            except OSError:
                pass
            self._drop(self._by_inode.pop(key))

    def close(self) -> None:
        """Close every mapping."""
        maps, self._by_inode = self._by_inode, {}
        for got in maps.values():
            self._drop(got)

    @staticmethod
    def _drop(got: tuple[mmap.mmap, int]) -> None:
        _close_mapping(got[0])
        with contextlib.suppress(OSError):
            os.close(got[1])

    def __len__(self) -> int:
        return len(self._by_inode)


def _close_mapping(mapping: mmap.mmap) -> None:
    with contextlib.suppress(BufferError, ValueError):
        mapping.close()


def on_tmpfs(path: Path) -> bool:
    """Whether ``path`` is on a tmpfs (``statfs(2)``'s ``f_type``, Linux); False where that cannot be told. Not collective."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct statfs (120 bytes on 64-bit Linux), f_type first
        if libc.statfs(os.fsencode(path), buf) != 0:
            return False
        return ctypes.c_long.from_buffer(buf).value == _TMPFS_MAGIC
    except (OSError, AttributeError, ValueError):
        return False


class PiecesBackend:
    """A :class:`~amrckpt.scda.ByteSink` that writes this rank's pieces of the file into its own pieces file.

    Opened by the deferred writer of a save (:func:`~amrckpt.scda.open_sink`)
    through :meth:`CacheLevel.opener`: the save's one collective write
    (``write_gathered``) becomes one ``writev`` of a file on the node, or,
    with ``recycle``, a copy into a retired step's pieces file of this rank
    (its pages allocated already).  A sink only: the pieces are read back by
    a restart (:class:`~amrckpt.manager.cache._read.CachedBackend`) or the
    flush; nothing collective happens in it.
    """

    capabilities = Capabilities(takes_piece_crcs=True)  # it CRCs what it writes: the ranges the save CRC'd are combined

    def __init__(self, path: Path, comm: Comm, recycle: Path | None = None, maps: Mappings | None = None) -> None:
        self.comm = comm
        self.path = str(path)
        self._file = path
        self._fd = -1
        self._known: list[tuple[int, int, int]] | None = None
        self._recycle = recycle
        self._maps = maps  # None: never through a mapping (not a tmpfs)
        self._mapping: mmap.mmap | None = None
        self._stat: os.stat_result | None = None
        self.recycled = False

    def take_piece_crcs(self, known: list[tuple[int, int, int]]) -> None:
        """Take the ``(offset, nbytes, crc32)`` of file ranges that the save CRC'd already (:class:`~amrckpt.scda.Capabilities`)."""
        self._known = known

    def write_gathered(self, pieces: Sequence[tuple[int, memoryview]], nrounds: int, ncontiguous: int = 0) -> None:
        """Write this rank's pieces, with their offsets, into its pieces file (never through a link).

        The file is new (``O_CREAT | O_EXCL``), or the recycled one (renamed
        here, then opened with ``O_NOFOLLOW`` and used only if it is a
        regular file of this user with one link).  ``nrounds`` and
        ``ncontiguous`` (the shared file's collective calls) do not apply to
        a file of one rank.

        Raises
        ------
        ScdaIOError
            On this rank, if the pieces file cannot be created, opened, sized or written (with the errno).
        """  # noqa: DOC501 (os_error() returns the ScdaIOError)
        # The CRC32 in a helper thread while the table and data are written (zlib-ng and writev release the GIL);
        # the header, which holds it, last.
        table = pieces_table(pieces)
        bufs = [memoryview(table), *(memoryview(b).cast("B") for _, b in pieces if len(b))]
        total = _HEAD.size + sum(v.nbytes for v in bufs)
        self._open(total)
        mapping, self._mapping = self._mapping, None
        known, self._known = self._known, None
        if known is not None:  # the save's CRC32s of its data, combined: no second pass over the bytes
            crc = pool().submit(crc32_of_pieces, pieces, known, crc32(table))
        else:
            crc = pool().submit(_crc_of, table, pieces)
        try:
            try:
                if mapping is not None:
                    _copy_mapped(mapping, bufs)
                else:
                    os.lseek(self._fd, _HEAD.size, os.SEEK_SET)
                    _write_all(self._fd, bufs, self._file)
            finally:
                value = crc.result()
            try:
                pwrite_exact(self._fd, pieces_head(self.comm.rank, nrounds, table, value), 0)
            except OSError as exc:
                raise os_error(exc, self.path, "cannot write") from exc
        except BaseException:
            if mapping is not None:
                _close_mapping(mapping)
            raise
        if mapping is not None and self._maps is not None and self._stat is not None:
            self._maps.keep(self._fd, self._stat, mapping)  # for the next time this file is recycled

    def _open(self, total: int) -> None:
        """Open the pieces file, recycled if possible (and then mapped on a tmpfs), sized ``total``.

        Raises
        ------
        ScdaIOError
            On this rank, if the new file cannot be created, or the recycled one checked or sized (with the errno).
        """  # noqa: DOC501 (os_error() returns the ScdaIOError; its FileNotFoundError is caught inside)
        src, self._recycle = self._recycle, None
        if src is not None:
            try:
                if not stat.S_ISREG(os.lstat(src).st_mode):  # a link or a directory planted there: left where it is
                    raise FileNotFoundError(src)
                os.rename(src, self._file)
            except OSError:
                src = None  # removed meanwhile, or not a file: a new file
        if src is not None and self._reopen(total):
            self.recycled = True
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(self._file, flags, 0o600)
        except OSError as exc:
            raise os_error(exc, self.path, "cannot create") from exc

    def _reopen(self, total: int) -> bool:
        """Open the recycled file, size it ``total``, and map it on a tmpfs (its mapping kept from its last write, if any).

        False (and it is unlinked) if it is a link, not a regular file of ours, or linked twice.

        Raises
        ------
        ScdaIOError
            On this rank, if the opened file cannot be checked, sized or written (with the errno).
        """  # noqa: DOC501 (os_error() returns the ScdaIOError)
        flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self._file, flags)
        except OSError:
            fd = -1
        try:
            st = os.fstat(fd) if fd >= 0 else None
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise os_error(exc, str(self._file), "cannot check") from exc
        if st is None or not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()):
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(self._file)
            except OSError:  # a directory swapped in since the check: moved aside, removed with the step
                with contextlib.suppress(OSError):
                    os.rename(self._file, self._file.with_name(f".refused-{self._file.name}"))
            return False
        self._fd = fd
        kept = self._maps.take(st, total) if self._maps is not None else None
        try:
            allocated = st.st_size >= total and st.st_blocks * 512 >= st.st_size
            if st.st_size != total:
                os.ftruncate(fd, total)
            if self._maps is not None and (allocated or _allocate(fd, total)):
                self._mapping, kept = kept or _map(fd, total), None
                self._stat = st
            if self._mapping is None:  # written with pwritev: the old header made invalid first, as the mapping's copy does
                pwrite_exact(fd, bytes(_HEAD.size), 0)
        except OSError as exc:
            raise os_error(exc, self.path, "cannot write") from exc
        finally:
            if kept is not None:
                _close_mapping(kept)
        return True

    def sync(self, size: int | None = None) -> None:
        """``fsync`` the pieces file; an error is kept by the open call."""

        def fsync() -> None:
            if self._fd >= 0:
                try:
                    os.fsync(self._fd)
                except OSError as exc:
                    raise os_error(exc, self.path, "cannot fsync") from exc

        self._run(fsync)

    def close(self, size: int | None = None) -> None:
        """Close the pieces file; an error is kept by the open call."""

        def close() -> None:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError as exc:
                    raise os_error(exc, self.path, "cannot close") from exc

        self._run(close)

    def _run(self, fn: Any) -> None:
        call = current_call(self.comm)
        if call is None:
            fn()
        else:
            call.run(fn, always=True)
