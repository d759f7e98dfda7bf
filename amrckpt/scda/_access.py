"""How a file is opened: one frozen value for the options of every file amrckpt opens, and the opening itself.

:class:`FileAccess` holds the MPI-IO hints (``info``), the byte backend,
whether an existing file is truncated, whether it is synced before closing
and the line-break style of the scda padding.  ``amrckpt.save``,
``amrckpt.load``, ``read_info``, ``verify``, the checkpoint writer and
reader and the ``fopen_*`` take it as one value (``access=``); the
``fopen_*``, which mirror libsc's ``sc_scda_fopen_*``, keep their keyword
arguments too, which :meth:`FileAccess.of` folds into it.  :func:`open_backend` opens a file
through the backend it names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Protocol

from ..comm import Comm, mpi_of
from ..errors import ScdaArgumentError, ScdaUsageError
from ._backend import Backend, ByteSink, ByteSource, PosixBackend, missing_members
from ._format import Style
from ._mpiio import MPIIOBackend

__all__ = ["BackendOpener", "FileAccess", "LocalFileOpener", "open_backend", "open_sink", "open_source"]


class BackendOpener(Protocol):
    """What opens a file on every rank: a class or a factory of a :class:`~amrckpt.scda.Backend`, or of a sink or source only.

    ``opener(path, mode, comm, access, defer)`` is collective over ``comm``
    and agrees on its errors, as :func:`open_backend` does.  Pass one as
    ``FileAccess(backend=...)`` to read and write through a backend of one's
    own (a wrapper that injects faults or latency, as zarr's ``WrapperStore``).
    An opener may serve only whole-file writes (``mode="w"``, ``defer``: a
    :class:`~amrckpt.scda.ByteSink`, as a node cache's pieces) or only reads
    (a :class:`~amrckpt.scda.ByteSource`, as a cached step): what it returns
    is checked against what the caller needs.
    """

    def __call__(self, path: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> ByteSink | ByteSource: ...


class LocalFileOpener(Protocol):
    """What opens a file for reading on this rank alone, as :class:`~amrckpt.scda.LocalFile` does. Not collective.

    ``opener(path, short)`` returns an object with ``size``,
    ``read(offset, nbytes)``, ``readv(pieces)`` and ``close()``; ``short``
    is the error class for bytes past the end.
    """

    def __call__(self, path: str, short: Any) -> Any: ...


@dataclass(frozen=True)
class FileAccess:
    r"""How a file is opened and closed: MPI-IO hints, byte backend, truncation, sync, line breaks. Immutable.

    Attributes
    ----------
    info : dict of str to str, or mpi4py.MPI.Info, optional
        MPI-IO hints for ``MPI_File_open`` (e.g. ``{"striping_factor": "16"}``),
        on top of those of ``AMRCKPT_MPIIO_HINTS`` (:func:`~amrckpt.scda.hints`); ignored by
        the POSIX backend.
    backend : {None, "posix", "mpiio"} or BackendOpener
        The byte backend.  None: MPI-IO for an MPI communicator, POSIX
        otherwise.  A :class:`BackendOpener` opens files its own way.
    truncate : bool
        Writing: False (the default): overwrite an existing file in place
        and cut it to its final size when closing (the same bytes as
        libsc's; the file's pages are reused, which saves freeing and
        allocating them again: a save over an existing checkpoint on a
        tmpfs takes about half the time; until the close, a crash leaves
        old bytes behind the new ones, which the CRC32s and the scda
        structure reveal).  True: empty an existing file when opening (as
        libsc and C's ``fopen(.., "w")``).
    sync : bool
        Writing: ``fsync`` (``MPI_File_sync``) before closing.
    style : {"unix", "mime"}
        Writing: the line breaks of the scda padding, ``"\\n"`` or ``"\\r\\n"``
        (scda paper 2.1).
    local_file : LocalFileOpener, optional
        Reading: how one rank opens the file by itself (the root's
        metadata, a tool's leaf ranges); None: :class:`~amrckpt.scda.LocalFile`
        (POSIX ``pread``).  Given with a ``backend`` that does not read a
        file of the file system (a node cache's pieces).
    """

    info: Any = None
    backend: str | BackendOpener | None = None
    truncate: bool = False
    sync: bool = False
    style: Style = "unix"
    local_file: LocalFileOpener | None = None

    @classmethod
    def of(cls, access: FileAccess | None = None, **options: Any) -> FileAccess:
        """Return ``access`` (default: the defaults) with the options given as keyword arguments set. Not collective.

        The keyword arguments of the public entry points (``info``,
        ``backend``, ``truncate``, ``sync``, ``style``) pass through here;
        an option left at its default keeps ``access``'s.

        Raises
        ------
        ScdaArgumentError
            For an unknown option, or ``access`` that is not a FileAccess
            (a bad ``style`` is the writer's error, agreed on by every rank).
        """
        base = cls() if access is None else access
        if not isinstance(base, FileAccess):
            raise ScdaArgumentError(f"access must be an amrckpt.scda.FileAccess, not {type(base).__name__}")
        unknown = set(options) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ScdaArgumentError(f"unknown file access options {sorted(unknown)}")
        default = cls()
        changed = {k: v for k, v in options.items() if v != getattr(default, k)}
        return dataclasses.replace(base, **changed) if changed else base

    def replace(self, **options: Any) -> FileAccess:
        """Return a copy with ``options`` changed (``dataclasses.replace``). Not collective."""
        return dataclasses.replace(self, **options)


def open_backend(
    path: str | os.PathLike[str],
    mode: str,
    comm: Comm,
    *,
    access: FileAccess | None = None,
    info: Any = None,
    backend: str | BackendOpener | None = None,
    truncate: bool = False,
    defer: bool = False,
) -> Backend:
    """Open ``path`` on every rank of ``comm``. Collective.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    mode : {"w", "r"}
        ``"w"`` creates or overwrites; ``"r"`` opens an existing file.
    comm : Comm
        From :func:`~amrckpt.comm.as_comm`.
    access : FileAccess, optional
        Hints, backend and truncation; ``info``, ``backend`` and
        ``truncate`` override it (:meth:`FileAccess.of`).
    defer : bool, optional
        MPI-IO: the caller does no independent I/O (it may then hint
        ``romio_no_indep_rw``, :class:`MPIIOBackend`); ``"w"``: keep an error
        of truncating for the writer's single agreement instead of agreeing
        on it at once.

    Raises
    ------
    ScdaIOError
        On every rank, if any rank cannot open the file.
    ScdaArgumentError
        For an unknown backend, or MPI-IO without an MPI communicator.
    ScdaUsageError
        On every rank alike, if the access's opener gives a sink or a
        source only (:func:`open_sink`, :func:`open_source` take those).
    """
    got = _open(path, mode, comm, FileAccess.of(access, info=info, backend=backend, truncate=truncate), defer)
    full: Backend = _served(got, Backend, path, "sections one by one")
    return full


def open_sink(path: str | os.PathLike[str], comm: Comm, *, access: FileAccess | None = None) -> ByteSink:
    """Open ``path`` on every rank of ``comm`` for one whole-file write (``write_gathered``), as a deferred writer does. Collective.

    ``open_backend(path, "w", comm, access=access, defer=True)``, and an
    opener may give a sink that only takes whole files (a node cache's
    pieces).

    Raises
    ------
    ScdaIOError
        On every rank, if any rank cannot open the file.
    ScdaArgumentError
        For an unknown backend, or MPI-IO without an MPI communicator.
    ScdaUsageError
        On every rank alike, if the access's opener gives no :class:`~amrckpt.scda.ByteSink`.
    """
    sink: ByteSink = _served(_open(path, "w", comm, FileAccess.of(access), True), ByteSink, path, "whole-file writes")
    return sink


def open_source(path: str | os.PathLike[str], comm: Comm, *, access: FileAccess | None = None) -> ByteSource:
    """Open ``path`` on every rank of ``comm`` for reading, as read plans do. Collective.

    ``open_backend(path, "r", comm, access=access, defer=True)``, and an
    opener may give a source that is read only (a cached step's pieces).

    Raises
    ------
    ScdaIOError
        On every rank, if any rank cannot open the file.
    ScdaArgumentError
        For an unknown backend, or MPI-IO without an MPI communicator.
    ScdaUsageError
        On every rank alike, if the access's opener gives no :class:`~amrckpt.scda.ByteSource`.
    """
    source: ByteSource = _served(_open(path, "r", comm, FileAccess.of(access), True), ByteSource, path, "reads")
    return source


def _served(got: object, protocol: Any, path: str | os.PathLike[str], what: str) -> Any:
    """Return ``got`` if it is a ``protocol``; else close it and raise (the same on every rank: one opener, one class).

    Raises
    ------
    ScdaUsageError
        Naming the members ``got`` lacks.
    """
    if isinstance(got, protocol):
        return got
    lacks = missing_members(got, protocol)
    with contextlib.suppress(Exception):  # what it opened, closed on every rank alike
        got.close()  # type: ignore[attr-defined]
    if isinstance(got, ByteSink):
        hint = "it is a sink of whole files only, which a deferred writer opens (amrckpt.scda.open_sink)"
    elif isinstance(got, ByteSource):
        hint = "it is a source only, which read plans open (amrckpt.scda.open_source)"
    else:
        hint = "give FileAccess(backend=) an opener of an amrckpt.scda.Backend, ByteSink or ByteSource"
    raise ScdaUsageError(
        f"{os.fspath(path)!r}: the backend {type(got).__name__} does not serve {what} (it has no {', '.join(lacks)}): {hint}"
    )


def _open(path: str | os.PathLike[str], mode: str, comm: Comm, a: FileAccess, defer: bool) -> object:
    """Open ``path`` as ``a`` says (its opener, POSIX or MPI-IO). Collective, agreeing on its errors.

    Raises
    ------
    ScdaIOError
        On every rank, if any rank cannot open the file.
    ScdaArgumentError
        For an unknown backend, or MPI-IO without an MPI communicator.
    """
    where = os.fspath(path)
    if callable(a.backend):
        return a.backend(where, mode, comm, a, defer)
    mpi = mpi_of(comm) is not None  # an MPIComm, or a wrapper of one (amrckpt.testing)
    name = a.backend if a.backend is not None else "mpiio" if mpi else "posix"
    if name == "posix":
        return PosixBackend(where, mode, comm, a.truncate)
    if name == "mpiio":
        if not mpi:
            raise ScdaArgumentError("the MPI-IO backend needs an mpi4py communicator")
        return MPIIOBackend(where, mode, comm, a.info, a.truncate, defer)
    raise ScdaArgumentError(f"backend must be 'posix', 'mpiio' or a backend opener, not {a.backend!r}")
