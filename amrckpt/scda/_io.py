"""Buffers and POSIX reads shared by the byte backends and the read plans: pieces, contiguous runs, errno-bearing errors."""

from __future__ import annotations

import errno as errno_mod
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._files import advance, is_link, open_regular, pread_exact, preadv_exact
from ..errors import AmrckptError, ScdaArgumentError, ScdaCountError, ScdaFileNotFoundError, ScdaIOError, ScdaPermissionError

__all__ = [
    "Piece",
    "byte_view",
    "coalesce",
    "open_read",
    "open_write",
    "os_error",
    "pread",
    "preadv",
    "pwritev",
    "refuse_link",
    "rounds",
]

Piece = tuple[int, memoryview]
"""``(file offset, buffer)``: a run of bytes that one rank writes or reads."""


def os_error(exc: OSError, path: str, what: str) -> ScdaIOError:
    """Translate an OSError into the scda exception with the same errno."""
    cls: type[ScdaIOError] = ScdaIOError
    if exc.errno == errno_mod.ENOENT:
        cls = ScdaFileNotFoundError
    elif exc.errno in (errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS):
        cls = ScdaPermissionError
    return cls(exc.errno or errno_mod.EIO, f"{what} {path!r}: {exc.strerror or exc}")


def coalesce(pieces: Sequence[Piece]) -> list[tuple[int, list[memoryview]]]:
    """Group pieces into runs of contiguous offsets (sorted)."""
    runs: list[tuple[int, list[memoryview]]] = []
    end = -1
    for off, buf in sorted((p for p in pieces if p[1].nbytes), key=lambda p: p[0]):
        if runs and off == end:
            runs[-1][1].append(buf)
        else:
            runs.append((off, [buf]))
        end = off + buf.nbytes
    return runs


def preadv(fd: int, path: str, pieces: Sequence[Piece]) -> None:
    """Fill every ``(offset, buffer)`` piece from the open file ``fd``: ``preadv`` per contiguous run. Not collective.

    Each run is read until it is full (:func:`amrckpt._files.preadv_exact`:
    short reads continued, ``EINTR`` tried again); only the end of the file
    ends it early.

    Raises
    ------
    ScdaCountError
        Where the file ends before a piece.
    ScdaIOError
        Where ``preadv`` fails (with its errno).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    for off, bufs in coalesce(pieces):
        want = sum(b.nbytes for b in bufs)
        try:
            got = preadv_exact(fd, bufs, off)
        except OSError as exc:
            raise os_error(exc, path, f"cannot read {want} bytes at byte {off} of") from exc
        if got < want:
            raise ScdaCountError(f"file {path!r} ends at byte {off + got}: {want} bytes from byte {off} were requested")


def pread(fd: int, path: str, offset: int, nbytes: int, short: type[AmrckptError] = ScdaCountError) -> bytes:
    """Return exactly ``nbytes`` bytes from byte ``offset`` of the open file ``fd``. Not collective.

    Read by :func:`amrckpt._files.pread_exact` (short reads continued,
    ``EINTR`` tried again) until done or the file ends.

    Raises
    ------
    AmrckptError
        ``short`` (default :class:`ScdaCountError`) where the file ends first.
    ScdaIOError
        Where ``pread`` fails (with its errno).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    try:
        b = pread_exact(fd, nbytes, offset)
    except OSError as exc:
        raise os_error(exc, path, f"cannot read {nbytes} bytes at byte {offset} of") from exc
    if len(b) != nbytes:
        raise short(f"file {path!r} ends at byte {offset + len(b)}: {nbytes} bytes at byte {offset} were requested")
    return b


def open_read(path: str) -> int:
    """Open a file for reading: a regular file only, never following a link, never blocking. Not collective.

    :func:`amrckpt._files.open_regular`; the caller closes the descriptor.

    Raises
    ------
    ScdaIOError
        With the errno of ``open`` (:class:`~amrckpt.errors.ScdaFileNotFoundError`,
        :class:`~amrckpt.errors.ScdaPermissionError`), ``ELOOP`` for a
        symbolic link, ``EISDIR`` or ``EINVAL`` for a FIFO, a device, a
        directory (the message says which).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    try:
        return open_regular(path)
    except OSError as exc:
        raise os_error(exc, path, "cannot open for reading") from exc


def refuse_link(path: str) -> None:
    """Refuse to write ``path`` if it is a symbolic link: a file is written under its own name, never through a link.

    Not collective: :class:`~amrckpt.scda.ScdaWriter` asks it on rank 0 and
    agrees on the answer with its first agreement, before the file is
    opened; the POSIX backend also opens with ``O_NOFOLLOW``.  A link
    planted under a checkpoint's name would send the checkpoint's bytes
    over its target (POSIX ``open`` and ``MPI_File_open`` follow it).

    Raises
    ------
    ScdaIOError
        ``ELOOP``, if ``path`` is a symbolic link (dangling or not): the
        message names its target and the fix.
    """
    if not is_link(path):
        return
    try:
        target = repr(os.readlink(path))
    except OSError:
        target = "a target that cannot be read"
    raise ScdaIOError(
        errno_mod.ELOOP,
        f"cannot write {path!r}: it is a symbolic link to {target}, and amrckpt never writes through a link (one "
        "planted under a checkpoint's name would send its bytes elsewhere); write to the target's own name, or remove "
        "the link",
    )


def open_write(path: str, what: str, *, create: bool = False, truncate: bool = False) -> int:
    """Open the regular file ``path`` for writing (``O_NOFOLLOW``, never waiting on a FIFO); return the descriptor. Not collective.

    ``create``: ``O_CREAT`` (mode ``0o666`` less the umask); ``truncate``:
    ``O_TRUNC`` (else an existing file keeps its bytes).  Through
    :func:`amrckpt._files.open_regular`.

    Raises
    ------
    ScdaIOError
        The OSError's errno (:class:`~amrckpt.errors.ScdaFileNotFoundError`,
        :class:`~amrckpt.errors.ScdaPermissionError`); ``ELOOP``, naming the
        target, for a link planted under the name (:func:`refuse_link`);
        ``EINVAL`` or ``EISDIR`` for a FIFO, a device, a socket or a
        directory (the message says which).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    try:
        return open_regular(path, write=True, create=create, truncate=truncate)
    except OSError as exc:
        if exc.errno == errno_mod.ELOOP:
            refuse_link(path)  # a link planted after the writer's own look: say so
        raise os_error(exc, path, what) from exc


def pwritev(fd: int, path: str, off: int, bufs: list[memoryview]) -> None:
    """Write the contiguous run ``bufs`` at byte ``off`` of the open file ``fd``: ``pwritev`` until all is written. Not collective.

    512 buffers a call, until every byte is written.

    Raises
    ------
    ScdaIOError
        Where ``pwritev`` fails (with its errno); ScdaCountError where it writes nothing.
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    bufs = [b for b in bufs if b.nbytes]
    while bufs:
        try:
            n = os.pwritev(fd, bufs[:512], off)
        except OSError as exc:
            raise os_error(exc, path, f"cannot write to byte {off} of") from exc
        if n == 0:
            raise ScdaCountError(f"wrote 0 bytes at byte {off} of {path!r}")
        off += n
        advance(bufs, n)


def rounds(bulk: Piece | None, max_bulk_nbytes: int, chunk: int) -> Iterator[Piece | None]:
    """Split a bulk run into the rounds of ``chunk`` bytes that every rank makes (``ceil(max_bulk / chunk)``).

    Yields this rank's piece of each round, or None where it has nothing left
    (the rank still joins the round: the calls are collective).
    """
    for k in range(-(-max_bulk_nbytes // chunk)):
        sub = bulk[1][k * chunk : (k + 1) * chunk] if bulk is not None else None
        yield (bulk[0] + k * chunk, sub) if bulk is not None and sub is not None and sub.nbytes else None


def byte_view(data: Any, what: str) -> memoryview:
    """Return a flat, contiguous, byte-format memoryview of any buffer (no copy when contiguous).

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``data`` is not a buffer.
    """
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        return memoryview(data.reshape(-1).view(np.uint8))
    try:
        mv = memoryview(data)
    except TypeError as exc:
        raise ScdaArgumentError(f"{what} must be a buffer (bytes, numpy array), not {type(data).__name__}") from exc
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return mv.cast("B") if (mv.format != "B" or mv.ndim != 1) else mv
