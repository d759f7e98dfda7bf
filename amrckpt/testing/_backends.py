"""Byte backends that wrap another: one injects seeded I/O faults (zarr's ``WrapperStore`` and ``LatencyStore``).

The library's own backends (:class:`amrckpt.scda.PosixBackend`,
:class:`amrckpt.scda.MPIIOBackend`) carry no test hooks.  A test selects a
wrapper through the file access value, as any other backend::

    ac.save(state, path, comm=comm, access=ac.FileAccess(backend=FaultyBackend))          # wraps the default backend
    ac.save(state, path, comm=comm, access=ac.FileAccess(backend=FaultyBackend.over("mpiio")))
    CheckpointManager(d, S, comm=comm, access=FileAccess(backend=FaultyBackend))

and :func:`amrckpt.testing.inject_faults` (or ``AMRCKPT_FAULTS``) says which
calls fail.  Outside an injection the wrapper changes nothing.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..comm import Call, Comm, collective
from ..scda import Backend, BackendOpener, FileAccess, LocalFile, open_backend, os_error
from . import _faults

__all__ = ["CountingBackend", "CountingLocalFile", "FaultyBackend", "WrapperBackend"]

Piece = tuple[int, memoryview]


class WrapperBackend:
    """A :class:`~amrckpt.scda.Backend` that passes every call to ``wrapped``; subclasses change what they need.

    Parameters
    ----------
    wrapped : Backend
        The open backend to wrap.
    """

    def __init__(self, wrapped: Backend) -> None:
        self.wrapped = wrapped
        self.comm: Comm = wrapped.comm
        self.path: str = wrapped.path

    def write(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """As :meth:`amrckpt.scda.Backend.write`. Collective."""
        self.wrapped.write(pieces, bulk, max_bulk_nbytes)

    def write_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """As :meth:`amrckpt.scda.Backend.write_gathered`. Collective."""
        self.wrapped.write_gathered(pieces, nrounds, ncontiguous)

    def read(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """As :meth:`amrckpt.scda.Backend.read`. Collective."""
        self.wrapped.read(pieces, bulk, max_bulk_nbytes)

    def read_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """As :meth:`amrckpt.scda.Backend.read_gathered`. Collective."""
        self.wrapped.read_gathered(pieces, nrounds, ncontiguous)

    def file_size(self) -> int:
        """As :meth:`amrckpt.scda.Backend.file_size`. Collective, agreeing."""
        return self.wrapped.file_size()

    def sync(self, size: int | None = None) -> None:
        """As :meth:`amrckpt.scda.Backend.sync`. Collective."""
        self.wrapped.sync(size)

    def close(self, size: int | None = None) -> None:
        """As :meth:`amrckpt.scda.Backend.close`. Collective."""
        self.wrapped.close(size)


class CountingBackend(WrapperBackend):
    """Counts this rank's file operations (open, write, write_gathered, read, read_gathered, file_size, sync, close).

    ``contiguous`` counts the contiguous calls of large pieces that the
    gathered writes and reads are asked for (see
    :meth:`amrckpt.scda.MPIIOBackend.write_gathered`).

    Every call is passed on unchanged.  ``CountingBackend.over(counts)``
    is the :class:`~amrckpt.scda.BackendOpener` that opens through the
    default backend (or ``backend``) and adds each call of this rank to
    ``counts`` (a :class:`collections.Counter`; one per rank)::

        counts = collections.Counter()
        ac.save(state, path, comm=comm, access=ac.FileAccess(backend=CountingBackend.over(counts)))
        assert counts == {"open": 1, "write_gathered": 1, "close": 1}
    """

    counts: collections.Counter[str]

    @classmethod
    def over(cls, counts: collections.Counter[str], backend: str | BackendOpener | None = None) -> BackendOpener:
        """Return the opener of ``backend`` (None: the default) whose files count their calls into ``counts``. Not collective."""

        def opener(path: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> CountingBackend:
            counts["open"] += 1
            out: CountingBackend = object.__new__(cls)
            WrapperBackend.__init__(out, open_backend(path, mode, comm, access=access.replace(backend=backend), defer=defer))
            out.counts = counts
            return out

        return opener

    def write(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Count, then write. Collective."""
        self.counts["write"] += 1
        super().write(pieces, bulk, max_bulk_nbytes)

    def write_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Count (and the contiguous calls it is asked for, as ``contiguous``), then write. Collective."""
        self.counts["write_gathered"] += 1
        if ncontiguous:
            self.counts["contiguous"] += ncontiguous
        super().write_gathered(pieces, nrounds, ncontiguous)

    def read(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Count, then read. Collective."""
        self.counts["read"] += 1
        super().read(pieces, bulk, max_bulk_nbytes)

    def read_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Count (and the contiguous calls it is asked for, as ``contiguous``), then read. Collective."""
        self.counts["read_gathered"] += 1
        if ncontiguous:
            self.counts["contiguous"] += ncontiguous
        super().read_gathered(pieces, nrounds, ncontiguous)

    def file_size(self) -> int:
        """Count, then get the size. Collective, agreeing."""
        self.counts["file_size"] += 1
        return super().file_size()

    def sync(self, size: int | None = None) -> None:
        """Count, then sync. Collective."""
        self.counts["sync"] += 1
        super().sync(size)

    def close(self, size: int | None = None) -> None:
        """Count, then close. Collective."""
        self.counts["close"] += 1
        super().close(size)


class FaultyBackend(WrapperBackend):
    """Makes I/O calls fail as :func:`amrckpt.testing.inject_faults` draws them (kinds ``open`` ... ``close``).

    The failure model is libsc's ``fuzzy_everyn`` at the calls that fail in
    production: a fault is local to the rank it hits.  A rank whose call
    fails still joins every collective MPI-IO call of it (with nothing to
    move), so that no rank waits, and then raises the
    :class:`~amrckpt.errors.ScdaIOError` of the drawn errno, which amrckpt's
    agreement raises on every rank.  ``sync`` and ``close`` keep their error
    in the open collective call, as the backends they wrap do; ``open`` and
    ``file_size`` agree.

    Pass the class itself as a backend opener (``backend=FaultyBackend``:
    it wraps the default backend of the communicator), or
    ``FaultyBackend.over("posix")``.
    """

    def __new__(cls, path: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> Any:
        """Open ``path`` through the default backend wrapped in a FaultyBackend (a :class:`~amrckpt.scda.BackendOpener`)."""
        return cls.over(None)(path, mode, comm, access, defer)

    def __init__(self, *args: Any) -> None:  # the instance is made by _open
        pass

    @classmethod
    def over(cls, backend: str | BackendOpener | None) -> BackendOpener:
        """Return the opener of ``backend`` (a name, an opener, or None for the default) wrapped in this class."""
        return functools.partial(_open, cls, backend)

    def _fault(self, kind: str) -> None:
        """Raise this rank's injected fault of ``kind``, if one is due (not collective)."""
        raise_fault(kind, self.comm, self.path)

    def _due(self, kind: str) -> BaseException | None:
        try:
            self._fault(kind)
        except Exception as exc:  # noqa: BLE001 - returned for the caller to raise after the collective call
            return exc
        return None

    def write(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Fail instead of writing (joining the collective calls with nothing), or write."""
        self._move("write", lambda f: self.wrapped.write([] if f else pieces, None if f else bulk, max_bulk_nbytes))

    def write_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Fail instead of writing (joining the collective calls with nothing), or write."""
        self._move("write", lambda f: self.wrapped.write_gathered([] if f else pieces, nrounds, ncontiguous))

    def read(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Fail instead of reading (joining the collective calls with nothing), or read."""
        self._move("read", lambda f: self.wrapped.read([] if f else pieces, None if f else bulk, max_bulk_nbytes))

    def read_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Fail instead of reading (joining the collective calls with nothing), or read."""
        self._move("read", lambda f: self.wrapped.read_gathered([] if f else pieces, nrounds, ncontiguous))

    def _move(self, kind: str, move: Callable[[bool], None]) -> None:
        fault = self._due(kind)
        move(fault is not None)
        if fault is not None:
            raise fault

    def file_size(self) -> int:
        """Keep an injected fault for the agreement of the wrapped ``file_size``."""
        with collective(self.comm, "scda.file_size") as call:
            call.run(self._fault, "size")
            return self.wrapped.file_size()

    def sync(self, size: int | None = None) -> None:
        """Sync, then keep an injected fault in the open call."""
        with collective(self.comm, "scda.sync") as call:
            self.wrapped.sync(size)
            _keep(call, self._fault, "sync")

    def close(self, size: int | None = None) -> None:
        """Close, then keep an injected fault in the open call."""
        with collective(self.comm, "scda.close") as call:
            self.wrapped.close(size)
            _keep(call, self._fault, "close")


def _keep(call: Call, fn: Callable[[str], None], kind: str) -> None:
    """Run ``fn(kind)`` on every rank, keeping its error in ``call`` (the caller agrees)."""
    call.run(fn, kind, always=True)


def _open(
    cls: type[FaultyBackend], backend: str | BackendOpener | None, path: str, mode: str, comm: Comm, access: FileAccess, defer: bool
) -> FaultyBackend:
    """Open ``path`` through ``backend``, wrapped in ``cls``; an injected ``open`` fault is agreed by the wrapped open."""
    with collective(comm, "scda.open") as call:
        call.run(raise_fault, "open", comm, path)  # the rank that fails skips (POSIX) or joins (MPI-IO) the open
        inner = open_backend(path, mode, comm, access=access.replace(backend=backend), defer=defer)
    out: FaultyBackend = object.__new__(cls)
    WrapperBackend.__init__(out, inner)
    return out


def raise_fault(kind: str, comm: Comm, path: str) -> None:
    """Raise the :class:`~amrckpt.errors.ScdaIOError` of this rank's injected fault of ``kind``, if one is due. Not collective.

    Whether it is due is drawn by the active plan of :func:`inject_faults`
    (or ``AMRCKPT_FAULTS``); nothing is raised outside one.

    Raises
    ------
    ScdaIOError
        On this rank, if a fault of ``kind`` is due (with the fault's errno).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    if _faults.ACTIVE is None:
        return
    exc = _faults.io_error(kind, comm, path)
    if exc is not None:
        verb = {"open": "cannot open", "write": "cannot write to", "read": "cannot read from", "size": "cannot get the size of"}
        raise os_error(exc, path, verb.get(kind, f"cannot {kind}"))


class CountingLocalFile(LocalFile):
    """A :class:`~amrckpt.scda.LocalFile` that counts the bytes and calls of this process's reads (metadata, leaf ranges).

    ``CountingLocalFile.over(counts)`` is the ``local_file`` opener of a
    :class:`~amrckpt.scda.FileAccess` whose files add to ``counts`` (a
    :class:`collections.Counter`): ``open``, ``read`` (calls of
    :meth:`read`), ``readv`` (calls of :meth:`readv`) and ``bytes``::

        counts = collections.Counter()
        access = FileAccess(local_file=CountingLocalFile.over(counts))
        with CheckpointReader(path, access=access) as r:
            r.read_cells("rho", 0, 10)
        assert counts["bytes"] < 10_000
    """

    counts: collections.Counter[str]

    @classmethod
    def over(cls, counts: collections.Counter[str]) -> Callable[..., CountingLocalFile]:
        """Return the opener whose files count into ``counts``. Not collective."""

        def opener(path: Any, short: Any = None) -> CountingLocalFile:
            out = cls(path) if short is None else cls(path, short)
            out.counts = counts
            counts["open"] += 1
            return out

        return opener

    def read(self, offset: int, nbytes: int) -> bytes:
        """Count, then read."""
        self.counts["read"] += 1
        self.counts["bytes"] += nbytes
        return super().read(offset, nbytes)

    def readv(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Count, then read."""
        self.counts["readv"] += 1
        self.counts["bytes"] += sum(b.nbytes for _, b in pieces)
        super().readv(pieces)
