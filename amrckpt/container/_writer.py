"""Writing a checkpoint file: header, manifest, field sections, index, footer, CRC32s (collective)."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import scda
from .._files import write_atomic
from .._version import __version__
from ..comm import Comm, as_comm, mpi_of
from ..errors import ScdaUsageError
from ._convention import (
    FOOTER_USER_STRING,
    INDEX_USER_STRING,
    MANIFEST_USER_STRING,
    FieldSpec,
    Index,
    IndexEntry,
    Manifest,
    RunRecord,
    footer_bytes,
)
from ._handlers import Payload, handler_for

__all__ = [
    "RUN_RECORD_LIMIT",
    "RUN_RECORD_SUFFIX",
    "CheckpointWriter",
    "WriteResult",
    "run_record",
    "run_record_json",
    "run_record_path",
    "write_run_record",
]

RUN_RECORD_SUFFIX = ".run.json"

STREAM_NBYTES = 16 << 20
"""Bytes per rank of a file from which a deferred write streams: the data written while the helper thread CRCs it.

Below it, the second gathered write and the second reduction of a
streaming write (:meth:`amrckpt.scda.ScdaWriter.flush`) cost more than
the CRC32s they overlap (many ranks with small parts).
"""

RUN_RECORD_LIMIT = (64 << 10) + 32 * (1 << 21)
"""The largest run record read, in bytes: 64 KiB of fixed fields and 32 bytes per writing rank, for up to 2**21 ranks.

A run record (:func:`run_record_json`) holds a few strings and numbers and
``global_first_quadrant``, one line of at most 24 bytes (an int64 of 20
digits, its indentation, comma and line break) per writing rank and one more.
"""


@dataclass(frozen=True)
class WriteResult:
    """What :meth:`CheckpointWriter.close` wrote.

    Attributes
    ----------
    path : str
        The file.
    nbytes : int
        Its size in bytes.
    manifest : Manifest
        The manifest written into it.
    index : Index
        Its index (offsets and CRC32 of every section).
    """

    path: str
    nbytes: int
    manifest: Manifest
    index: Index


class CheckpointWriter:
    """One checkpoint file being written; a context manager.

    Collective: every rank of ``comm`` opens it, writes the manifest, then
    each field in the manifest's order with :meth:`write_field`, and closes
    it; :meth:`close` writes the index and the footer.  The bytes do not
    depend on the number of ranks (format 2: nothing about the run is in the
    file).  A writer that is left by an exception is closed without an
    index or footer: what it wrote is not a checkpoint, and readers say so.

    Parameters
    ----------
    path : str or os.PathLike
        The file (created, or overwritten: ``FileAccess.truncate``).
    manifest : Manifest
        What the file will hold; written at once (the same on every rank).
    comm : None, mpi4py.MPI.Comm or Comm, optional
        The communicator (None: serial).
    access : amrckpt.scda.FileAccess, optional
        Line breaks, MPI-IO hints, backend, truncation and whether to
        ``fsync`` (``MPI_File_sync``) before closing.
    defer : bool, optional
        One agreement and one collective write for the whole file
        (:func:`amrckpt.scda.fopen_write` ``defer=True``): the field calls
        queue their bytes, :meth:`close` agrees once on every error (raised
        on every rank before a byte is written), combines the CRC32s, adds
        the index and footer and writes everything.  Block payloads are
        then needed on every rank (as :func:`amrckpt.save` has them).
        A payload whose data is an :class:`amrckpt.scda.Checksummed` is not
        CRC'd again.

    Raises
    ------
    ScdaIOError
        On every rank, if the file cannot be created or written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        manifest: Manifest,
        *,
        comm: Any = None,
        access: scda.FileAccess | None = None,
        defer: bool = False,
    ) -> None:
        self.comm: Comm = as_comm(comm)
        self.defer = bool(defer)
        self.path = os.fspath(path)
        self.manifest = manifest
        self.is_root = self.comm.rank == 0
        self.access = scda.FileAccess() if access is None else access
        self._fields = iter(manifest.fields)
        header = f"amrckpt {manifest.schema_name} v{manifest.schema_version}".encode()[:58]
        self.scda: scda.ScdaWriter = scda.fopen_write(
            path,
            header,
            comm=self.comm,
            vendor=b"amrckpt",
            checksum=True,
            defer=self.defer,
            access=self.access,
        )
        self._roles = ["file header"]
        try:
            self.scda.fwrite_block(
                manifest.model_dump_json(indent=1).encode() + b"\n" if self.is_root or self.defer else None, MANIFEST_USER_STRING
            )
        except BaseException:
            self.scda.fclose()
            raise
        self._roles.append("manifest")
        self.result: WriteResult | None = None

    def write_field(
        self, fs: FieldSpec, payload: Payload, counts: scda.Share | None = None, nbytes: scda.Share | None = None
    ) -> None:
        """Write the next field of the manifest by its kind's handler. Collective.

        ``counts`` is this rank's share of the field's elements (leaves,
        array elements), ``nbytes`` of its values' bytes (hp), as the ranks
        agreed (:func:`amrckpt.save` agrees on them); fields of neither take none.

        Raises
        ------
        ScdaUsageError
            If ``fs`` is not the manifest's next field.
        """
        self._next(fs)
        none = scda.Share(0, 0, 0, 0, 0)
        handler_for(fs.kind).write(self.scda, fs, payload, counts or none, nbytes or none)
        self._roles.extend(["field"] * (len(self.scda.records) - len(self._roles)))  # a layout may take two sections

    def copy_field(self, fs: FieldSpec, data: scda.SectionData | list[scda.SectionData], *, level: int = 9) -> None:
        """Write the next field of the manifest from a section's data read elsewhere (a rewrite). Collective.

        The data is written as read (``scda.read_section_data``), compressed
        if ``fs.compressed``; for :func:`amrckpt.container.convert`.  A
        field of a ``layout`` gives the data of each of its sections, in order.
        """
        self._next(fs)
        for d in data if isinstance(data, list) else [data]:  # a layout of several sections: each copied as it is
            encode = fs.compressed and fs.layout is None
            scda.write_section_data(self.scda, d, user_string=fs.name.encode(), encode=encode, level=level)
            self._roles.append("field")

    def _next(self, fs: FieldSpec) -> None:
        want = next(self._fields, None)
        if want is None or want.name != fs.name:
            raise ScdaUsageError(f"write_field: {fs.name!r} is not the manifest's next field ({want.name if want else None!r})")

    def close(self) -> WriteResult:
        """Write the index and the footer, sync if asked, close. Collective.

        Returns
        -------
        WriteResult

        Raises
        ------
        ScdaUsageError
            On every rank alike, if a field of the manifest was not written (the file is closed first).
        """
        if self.result is not None:
            return self.result
        f = self.scda
        missing = next(self._fields, None)
        if missing is not None:
            f.fclose()
            raise ScdaUsageError(f"close: field {missing.name!r} of the manifest was not written")
        try:
            if self.defer:  # one agreement (raised on every rank before any byte is written), then the write
                crcs = f.settle(stream=self._streams())
                index = self._index(crcs if crcs is not None else f.flush())  # streaming: the CRC32s after the write
                f.fwrite_block(index.model_dump_json(indent=1).encode() + b"\n", INDEX_USER_STRING)
                index_crc = f.local_crcs()[-1]  # rank 0 holds every byte of the index section
            else:
                index = self._index(f.section_crcs())
                f.fwrite_block(index.model_dump_json(indent=1).encode() + b"\n" if self.is_root else None, INDEX_USER_STRING)
                index_crc = f.section_crcs()[-1]
            f.fwrite_inline(footer_bytes(f.records[-1].offset, index_crc) if self.is_root else None, FOOTER_USER_STRING)
            if self.access.sync:
                f.sync()
            nbytes = f.offset
        finally:
            f.fclose()
        self.result = WriteResult(self.path, nbytes, self.manifest, index)
        return self.result

    def _streams(self) -> bool:
        """Whether the deferred write streams (:meth:`amrckpt.scda.ScdaWriter.flush`): the same on every rank.

        A file of at least :data:`STREAM_NBYTES` bytes per rank, through
        the POSIX or the MPI-IO backend.  Not through a backend opener: it
        may take one write only (a node cache's pieces file).  Through
        MPI-IO the two writes are collective calls only while no rank has
        seen an MPI-IO error (then every data call is independent:
        ``amrckpt.scda._mpiio._errors_seen``).  The offset is the same on
        every rank once the fields' arguments agree; where they do not,
        ``settle`` raises on every rank before the choice matters.
        """
        backend = self.access.backend
        return (backend is None or isinstance(backend, str)) and self.scda.offset >= STREAM_NBYTES * self.comm.size

    def _index(self, crcs: list[int]) -> Index:
        """Return the index of the sections written so far: offsets, ends and the CRC32s ``crcs``. Not collective."""
        f = self.scda
        return Index(
            sections=[
                IndexEntry(
                    name="file header" if r.type == "F" else r.user_string.decode("utf-8", "replace"),
                    role=role,  # type: ignore[arg-type]
                    type=r.type,  # type: ignore[arg-type]
                    compressed=r.encoded,
                    offset=r.offset,
                    end=r.end,
                    crc32=crc,
                )
                for r, role, crc in zip(f.records, self._roles, crcs, strict=True)
            ]
        )

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.scda.fclose()


def run_record(comm: Any, global_first_quadrant: list[int] | None, saved_at: float, save_seconds: float | None = None) -> RunRecord:
    """Describe the run that wrote a checkpoint (what format 2 keeps out of the file). Not collective.

    Parameters
    ----------
    comm : Comm
        The writing communicator (its size; MPI library version if MPI).
    global_first_quadrant : (P + 1,) list of int or None
        p4est's offsets of the first mesh's leaves when written.
    saved_at : float
        Unix time the save started (seconds).
    save_seconds : float, optional
        Wall-clock seconds of the save.
    """
    c = as_comm(comm)
    m = mpi_of(c)
    mpi = m.library_version() if m is not None else None
    return RunRecord(
        writer_size=c.size,
        global_first_quadrant=global_first_quadrant,
        saved_at=datetime.datetime.fromtimestamp(saved_at, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        save_seconds=save_seconds,
        amrckpt_version=__version__,
        python_version=platform.python_version(),
        numpy_version=np.__version__,
        mpi_library=mpi,
        hostname=socket.gethostname(),
        byteorder=sys.byteorder,
    )


def run_record_path(path: str | os.PathLike[str]) -> Path:
    """Return the run record beside checkpoint ``path``: ``<path>.run.json``."""
    p = Path(path)
    return p.with_name(p.name + RUN_RECORD_SUFFIX)


def run_record_json(record: RunRecord) -> bytes:
    """Return the bytes of a run record file (indented JSON and a line break). Not collective."""
    return (record.model_dump_json(indent=1) + "\n").encode()


def write_run_record(path: str | os.PathLike[str], record: RunRecord, *, sync: bool = False) -> Path:
    """Write ``record`` as the run record of checkpoint ``path`` (not collective: call it on one rank).

    Written under a temporary name and renamed (never through a link
    planted under either name), so a reader never sees half a record.

    Raises
    ------
    OSError
        If it cannot be written.
    """
    return write_atomic(run_record_path(path), run_record_json(record), sync=sync)
