"""Byte backends of the scda file layer: the protocol, the capabilities a backend declares, and POSIX (MPI-IO: _mpiio).

A backend moves bytes between memory and one shared file.  Each call of
:meth:`Backend.write` or :meth:`Backend.read` is collective: every rank
passes its own *pieces* (small runs such as section headers and padding,
written or read independently) and at most one *bulk* run (its share of an
array), moved by a collective MPI-IO call.  Every rank enters the same
collective calls even when one of its own pieces failed, so an error on one
rank never leaves the others waiting; the error is raised locally afterwards
and agreed on by the caller.

The POSIX backend imports nothing of MPI and serves serial runs (and, for
tests, ranks that are threads of one process).

Tests inject faults by wrapping a backend (:class:`amrckpt.testing.FaultyBackend`),
selected through :class:`~amrckpt.scda.FileAccess`; these classes carry no test hooks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..comm import Call, Comm, collective, current_call
from ..errors import (
    ScdaUsageError,
)
from ._io import Piece, coalesce, open_read, open_write, os_error, preadv, pwritev

__all__ = [
    "Backend",
    "ByteSink",
    "ByteSource",
    "Capabilities",
    "PosixBackend",
    "capabilities_of",
    "missing_members",
]

MAX_CALL_NBYTES = 1 << 30
"""Bytes per rank and per MPI-IO call: larger runs are moved in rounds.

MPI counts are C ints; 1 GiB rounds keep every call far from 2**31 on every
MPI implementation.  (Tests lower it to exercise the rounds.)
"""
_COALESCE_NBYTES = 1 << 20

CONTIGUOUS_NBYTES = 1 << 22
"""Pieces of at least this many bytes move by contiguous collective calls of their own, not through a file view.

Measured with MPICH's ROMIO on a tmpfs (2.1 M-leaf state, the pieces of a
save or load): through one file view the same bytes took 1.25 x (write,
P = 1) to 1.5 x (read, P = 2) the time of one ``Write_at_all`` /
``Read_at_all`` per piece; headers and other small pieces still share one
call through a view.
"""


def contiguous_calls(pieces: Sequence[tuple[int, Any]]) -> int:
    """Return the collective calls that this rank's pieces of at least :data:`CONTIGUOUS_NBYTES` bytes take on their own.

    Not collective.  A piece larger than ``MAX_CALL_NBYTES`` takes one call
    per ``MAX_CALL_NBYTES``.  The largest count of any rank is what the
    ``ncontiguous`` of :meth:`Backend.write_gathered` and
    :meth:`Backend.read_gathered` must be.
    """
    return sum(-(-b.nbytes // MAX_CALL_NBYTES) for _, b in pieces if b.nbytes >= CONTIGUOUS_NBYTES)


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a byte backend declares it does beyond the :class:`Backend` protocol (as zarr's stores declare ``supports_*``).

    A backend declares them in its ``capabilities`` attribute; one that
    declares nothing has the defaults (:func:`capabilities_of`).  Immutable.

    Attributes
    ----------
    collective_io : bool
        Its gathered reads make collective file calls (MPI-IO, POSIX): a
        large read plan reads in groups of pieces whose calls the ranks
        agree on.  False (a node cache's pieces, in memory): each phase in
        one call.
    reports_filled : bool
        ``read_gathered(pieces, nrounds, filled=fn)`` calls ``fn(piece)``
        as soon as each piece is filled, so that the read plan CRCs it then.
    takes_piece_crcs : bool
        It computes the CRC32 of the bytes it writes (a node cache's pieces
        file) and defines ``take_piece_crcs(known)``: a deferred writer with
        checksums hands it, before :meth:`Backend.write_gathered`, the
        ``(offset, nbytes, crc32)`` of the ranges of this rank whose CRC32 it
        computed already, combined (``crc32_combine``) rather than read again.
    """

    collective_io: bool = True
    reports_filled: bool = False
    takes_piece_crcs: bool = False


_DEFAULT_CAPABILITIES = Capabilities()


def capabilities_of(backend: object) -> Capabilities:
    """Return the :class:`Capabilities` that ``backend`` declares (the defaults if it declares none). Not collective.

    Raises
    ------
    ScdaUsageError
        On this rank, if its ``capabilities`` attribute is not a :class:`Capabilities`.
    """
    caps = getattr(backend, "capabilities", _DEFAULT_CAPABILITIES)
    if not isinstance(caps, Capabilities):
        raise ScdaUsageError(f"{type(backend).__name__}.capabilities must be an amrckpt.scda.Capabilities, not {caps!r}")
    return caps


@runtime_checkable
class ByteSink(Protocol):
    """Where the whole-file write of a deferred writer goes: a shared file opened to write, or a node cache's pieces.

    What :func:`~amrckpt.scda.open_sink` opens.  What it does beyond these
    calls it declares in a ``capabilities`` attribute (:class:`Capabilities`;
    read through :func:`capabilities_of`).
    """

    comm: Comm
    path: str

    def write_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Write all of this rank's pieces of a whole file in ``ncontiguous + nrounds`` collective calls. Collective.

        ``nrounds`` (the same on every rank) is at least ``ceil(max over
        ranks of this rank's bytes / MAX_CALL_NBYTES)``; ``ncontiguous``
        (the same on every rank) is 0 or the largest :func:`contiguous_calls`
        of any rank.  MPI-IO: the pieces of at least
        :data:`CONTIGUOUS_NBYTES` bytes first, one ``MPI_File_write_at_all``
        each (with ``ncontiguous`` > 0), then the others through one file
        view and one ``MPI_File_write_all`` per round; POSIX: one
        ``pwritev`` per contiguous run.  Raises the first local error after
        taking part in every collective call.
        """
        ...

    def sync(self, size: int | None = None) -> None:
        """Flush written bytes to stable storage (fsync, ``MPI_File_sync``); with ``size``, first set the size. Collective.

        A rank's error is kept by the open :class:`~amrckpt.comm.Call` for
        its next agreement (the caller then closes the file all the same).
        """
        ...

    def close(self, size: int | None = None) -> None:
        """Close the file on every rank, whatever failed before; with ``size``, first cut (or extend) it. Collective.

        A rank's error is kept by the open :class:`~amrckpt.comm.Call` for
        its next agreement.
        """
        ...


@runtime_checkable
class ByteSource(Protocol):
    """What read plans and the scda reader read from: a shared file opened to read, or a cached step's pieces.

    What :func:`~amrckpt.scda.open_source` opens; capabilities as :class:`ByteSink`.
    """

    comm: Comm
    path: str

    def read(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Fill this rank's piece and bulk buffers from the file. Collective.

        Raises ScdaCountError locally for a short read (file too short).
        """
        ...

    def read_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Fill all of this rank's pieces in ``ncontiguous + nrounds`` collective calls (see :meth:`write_gathered`). Collective.

        MPI-IO: one file view and one ``MPI_File_read_all`` per round;
        POSIX: one ``preadv`` per contiguous run.  Raises the first local
        error (ScdaCountError for a short read) after taking part in every
        collective call.
        """
        ...

    def file_size(self) -> int:
        """Return the file's size in bytes. Collective, agreeing (``MPI_File_get_size``; POSIX: ``fstat``)."""
        ...

    def close(self) -> None:
        """Close the file on every rank, whatever failed before. Collective; a rank's error is kept by the open call."""
        ...


@runtime_checkable
class Backend(ByteSink, ByteSource, Protocol):
    """A shared file opened by all ranks of a communicator: a sink and a source, and writes section by section.

    What :func:`~amrckpt.scda.open_backend` opens (POSIX, MPI-IO, or a
    :class:`~amrckpt.scda.BackendOpener`'s): the immediate writer writes
    through :meth:`write`, one call per section.
    """

    def write(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Write this rank's pieces and bulk run. Collective.

        ``max_bulk_nbytes`` is the largest bulk run of any rank (collective
        knowledge: it follows from the partition), so that every rank makes
        the same number of collective calls.  Raises the first local error
        after taking part in every collective call.
        """
        ...

    def close(self, size: int | None = None) -> None:
        """Close the file on every rank, whatever failed before; with ``size``, first cut (or extend) it. Collective.

        A rank's error is kept by the open :class:`~amrckpt.comm.Call` for
        its next agreement.
        """
        ...


def missing_members(obj: object, protocol: type) -> list[str]:
    """Return the members of ``protocol`` (:class:`ByteSink`, :class:`ByteSource` or :class:`Backend`) that ``obj`` lacks.

    Not collective.  What :func:`~amrckpt.scda.open_backend` and its kin
    name when an opener's object does not serve the file as asked.
    """
    return [n for n in _MEMBERS[protocol] if not hasattr(obj, n)]


_MEMBERS: dict[type, tuple[str, ...]] = {
    ByteSink: ("comm", "path", "write_gathered", "sync", "close"),
    ByteSource: ("comm", "path", "read", "read_gathered", "file_size", "close"),
    Backend: ("comm", "path", "write", "write_gathered", "read", "read_gathered", "file_size", "sync", "close"),
}


class _Step:
    """The call a backend's collective step belongs to: the one open on its communicator, or one of its own."""

    __slots__ = ("_ctx", "call")

    def __init__(self, comm: Comm, op: str) -> None:
        call = current_call(comm)
        self._ctx: collective | None = None
        if call is None:
            self._ctx = collective(comm, op)
            call = self._ctx.__enter__()
        self.call: Call = call

    def __enter__(self) -> Call:
        return self.call

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


class PosixBackend:
    """Shared file through POSIX ``pwritev``/``preadv``; no MPI.

    Every rank opens the file itself; correct on a local file system for
    serial runs and for thread ranks (:class:`~amrckpt.comm.ThreadComm`).
    """

    def __init__(self, path: str, mode: str, comm: Comm, truncate: bool = False) -> None:
        self.comm = comm
        self.path = path
        self.mode = mode
        self._fd = -1
        with _Step(comm, "scda.open") as call:
            try:
                if mode == "w":
                    # Rank 0 creates (truncates) the file before the others open it.
                    call.run(self._open, "cannot create", create=True, truncate=truncate, on=0)
                    call.agree("fopen_write")
                    if comm.rank != 0:
                        call.run(self._open, "cannot open for writing")
                else:
                    call.run(self._open_read)
                call.agree("fopen")
            except BaseException:
                with contextlib.suppress(OSError):
                    self._close_fd()
                raise

    def _open(self, what: str, create: bool = False, truncate: bool = False) -> None:
        self._fd = open_write(self.path, what, create=create, truncate=truncate)  # O_NOFOLLOW: never through a planted link

    def _open_read(self) -> None:
        self._fd = open_read(self.path)  # a regular file only: never a link followed, never a FIFO waited on

    def _close_fd(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            finally:
                self._fd = -1

    def write(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Write pieces and bulk run with one ``pwritev`` per contiguous run."""
        allp = list(pieces) + ([bulk] if bulk is not None else [])
        for off, bufs in coalesce(allp):
            pwritev(self._fd, self.path, off, bufs)

    def write_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Write the pieces with one ``pwritev`` per contiguous run (``nrounds`` and ``ncontiguous`` are not needed without MPI)."""
        self.write(pieces, None, 0)

    def read(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Fill pieces and bulk run with one ``preadv`` per contiguous run."""
        preadv(self._fd, self.path, list(pieces) + ([bulk] if bulk is not None else []))

    def read_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Fill the pieces with one ``preadv`` per contiguous run (``nrounds`` and ``ncontiguous`` are not needed without MPI)."""
        self.read(pieces, None, 0)

    def file_size(self) -> int:
        """``fstat`` size of the file; agreed."""

        def fstat() -> int:
            try:
                return os.fstat(self._fd).st_size
            except OSError as exc:
                raise os_error(exc, self.path, "cannot get the size of") from exc

        with _Step(self.comm, "scda.file_size") as call:
            size = call.run(fstat)
            call.agree("file size")
        return int(size or 0)

    def sync(self, size: int | None = None) -> None:
        """``fsync`` on every rank (rank 0 first cuts the file to ``size``, so the size is synced too); errors kept by the call."""

        def fsync() -> None:
            try:
                if size is not None and self.comm.rank == 0:
                    os.ftruncate(self._fd, size)
                os.fsync(self._fd)
            except OSError as exc:
                raise os_error(exc, self.path, "cannot fsync") from exc

        with _Step(self.comm, "scda.sync") as call:
            call.run(fsync, always=True)

    def close(self, size: int | None = None) -> None:
        """Close every rank's descriptor (rank 0 first cuts the file to ``size``); errors kept by the call."""

        def cut() -> None:
            try:
                os.ftruncate(self._fd, size)  # type: ignore[arg-type]
            except OSError as exc:
                raise os_error(exc, self.path, "cannot set the size of") from exc

        def close_fd() -> None:
            try:
                self._close_fd()
            except OSError as exc:
                raise os_error(exc, self.path, "cannot close") from exc

        with _Step(self.comm, "scda.close") as call:
            if size is not None:
                call.run(cut, on=0, always=True)
            try:
                if self.mode == "w":
                    self.comm.barrier()  # every rank's descriptor stays open until the size is set
            finally:
                call.run(close_fd, always=True)
