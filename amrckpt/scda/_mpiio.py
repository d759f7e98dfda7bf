"""The MPI-IO byte backend of the scda file layer, and the MPI-IO hints taken from the environment.

The one module of the file layer that imports mpi4py (when an
:class:`MPIIOBackend` is opened, never at ``import amrckpt``).  Every call is
collective, as :class:`~amrckpt.scda.Backend` says: every rank enters the
same ``MPI_File_*_all`` calls even when one of its own pieces failed.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import logging
import os
from collections.abc import Sequence
from typing import Any

from ..comm import Call, Comm
from ..errors import (
    ScdaArgumentError,
    ScdaCountError,
    ScdaError,
    ScdaFileNotFoundError,
    ScdaIOError,
    ScdaPermissionError,
)
from . import _backend
from ._backend import _Step
from ._io import Piece, coalesce, open_read, open_write, os_error

__all__ = ["HINTS_ENV", "MPIIOBackend", "hints"]


_MPI_ERRNO = {
    "ERR_NO_SUCH_FILE": errno_mod.ENOENT,
    "ERR_ACCESS": errno_mod.EACCES,
    "ERR_READ_ONLY": errno_mod.EROFS,
    "ERR_NO_SPACE": errno_mod.ENOSPC,
    "ERR_QUOTA": errno_mod.EDQUOT,
    "ERR_FILE_EXISTS": errno_mod.EEXIST,
    "ERR_FILE_IN_USE": errno_mod.EBUSY,
    "ERR_BAD_FILE": errno_mod.EINVAL,
    "ERR_AMODE": errno_mod.EINVAL,
}


_ERRNO_OF_TEXT = (
    errno_mod.ENOSPC,
    errno_mod.EDQUOT,
    errno_mod.EFBIG,
    errno_mod.EROFS,
    errno_mod.EACCES,
    errno_mod.EPERM,
    errno_mod.ENOENT,
    errno_mod.ENAMETOOLONG,
    errno_mod.EISDIR,
)
"""The errnos whose system text (``os.strerror``) in a ROMIO message of class ``MPI_ERR_IO`` gives the errno."""


_log = logging.getLogger("amrckpt.scda")
_warned = False  # whether rank 0 logged that the files move their data by independent calls

_errors_seen = False
"""Whether MPI-IO reported an error in this process (set by :meth:`MPIIOBackend._error`, or agreed at an open); never reset.

After a collective data call fails on some rank, ROMIO's exchange between
the ranks can deliver another call's data to a later collective write
(libfiu trial 7000029: a committed file held an earlier save's pieces,
though every rank's buffers were right; docs/reliability.md).  So once any
rank has seen an MPI-IO error, files opened afterwards move their data by
independent calls only (agreed at the open, :attr:`MPIIOBackend.independent_only`).
"""


class MPIIOBackend:
    """Shared file through MPI-IO (``MPI_File_write_at_all`` and friends).

    Parameters
    ----------
    path : str
        The file.
    mode : {"w", "r"}
        Create or overwrite for writing (``truncate``: empty an existing
        file first), or open for reading.
    comm : MPIComm
        The communicator; opening is collective over it.
    info : dict of str to str, or mpi4py.MPI.Info, optional
        MPI-IO hints passed to ``MPI_File_open`` (e.g. ``striping_factor``),
        on top of those of the environment variable ``AMRCKPT_MPIIO_HINTS``
        (:func:`hints`); ROMIO also reads a file of hints named by ``ROMIO_HINTS``.
    defer : bool, optional
        The caller does no independent I/O (``"w"``: one collective write,
        and an error of truncating is kept for its agreement; ``"r"``: only
        :meth:`read_gathered`).  It then may hint ``romio_no_indep_rw=true``
        (ROMIO opens the file on its collective-buffering aggregators only,
        fewer opens at a parallel file system's metadata server) but does not
        by default: that hint makes ROMIO route every byte through the
        aggregators (one per node by default): a save's collective write
        took 1.9 x as long at P = 1 and a load's read 3.7 x at P = 2, on one
        node (``docs/scaling.md`` says when to set it).
    """

    independent_only = False
    """Whether every data call is independent (``MPI_File_write_at``, ``MPI_File_read_at``): the same on every rank.

    True when MPI-IO had reported an error on any rank before this file was
    opened (:data:`_errors_seen`, agreed at the open), unless the hint
    ``romio_no_indep_rw=true`` forbids independent calls.
    """

    def __init__(self, path: str, mode: str, comm: Comm, info: Any = None, truncate: bool = False, defer: bool = False) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm: Comm = comm
        self._mpi_comm = comm.mpi_comm  # type: ignore[attr-defined]
        self.path = path
        self.mode = mode
        self._fh: Any = None
        self._viewed = False  # whether a gathered call set a file view (the same on every rank)
        self._cut = True  # whether close(size=) and sync(size=) set the size: not for a file new at the open (agreed)
        self._independent_ok = True  # independent I/O allowed (not with the hint romio_no_indep_rw=true)
        mpi_info = MPI.INFO_NULL
        free_info = False
        extra = hints()
        if isinstance(info, dict) or (info is None and extra):
            mpi_info = MPI.Info.Create()
            free_info = True
            for k, v in {**extra, **(info or {})}.items():
                mpi_info.Set(str(k), str(v))
        elif info is not None:
            mpi_info = info
            if extra:
                mpi_info = info.Dup()
                free_info = True
                for k, v in extra.items():
                    if mpi_info.Get(k) is None:
                        mpi_info.Set(k, v)
        # Rank 0 creates a new file itself (create below) and MPI_File_open never creates, unless a hint only
        # ROMIO's create applies (Lustre's striping) asks for MPI_MODE_CREATE: ROMIO's create (ADIOI_GEN_OpenColl)
        # opens and closes the file on rank 0 alone, and a failed close there leaves rank 0 outside a broadcast
        # that the other ranks wait in, a hang inside MPI_File_open (libfiu; docs/reliability.md).
        romio_creates = mode == "w" and _creation_hints(MPI, mpi_info)
        amode = MPI.MODE_WRONLY | (MPI.MODE_CREATE if romio_creates else 0) if mode == "w" else MPI.MODE_RDONLY

        found = [0]  # the size of the file as opened for writing: 0 for a new file, which needs no truncation

        def open_file() -> None:
            try:
                # Absolute: ROMIO reads a leading "ufs:", "nfs:"... of a relative name as a file-system prefix
                self._fh = MPI.File.Open(self._mpi_comm, os.path.abspath(path), amode, mpi_info)
                used = self._fh.Get_info()  # the hints in effect, from every source (ROMIO_HINTS too)
                try:
                    self._independent_ok = (used.Get("romio_no_indep_rw") or "false").lower() != "true"
                finally:
                    used.Free()
                if mode == "w":
                    found[0] = int(self._fh.Get_size())  # local (MPI_File_get_size); agreed below
            except MPI.Exception as exc:
                raise self._error(exc, "cannot open") from exc

        def create() -> None:
            fd = open_write(path, "cannot create", create=True)  # never through a planted link
            try:
                os.close(fd)
            except OSError as exc:
                raise os_error(exc, path, "cannot close the new file") from exc

        def look() -> None:  # ROMIO creates the file: refuse what is there and is no regular file (ROMIO waits on a FIFO)
            with contextlib.suppress(ScdaFileNotFoundError):
                os.close(open_write(path, "cannot open for writing"))

        def set_size_0() -> None:
            try:
                self._fh.Set_size(0)
            except MPI.Exception as exc:
                raise self._error(exc, "cannot truncate") from exc

        with _Step(comm, "scda.open") as call:
            try:
                if mode == "r":  # ROMIO follows links and waits on a FIFO: rank 0 looks first, and every rank hears
                    call.run(lambda: os.close(open_read(path)), on=0)
                    call.agree("fopen: a regular file")
                else:  # agreed before the open, which a FIFO would hold and which fails everywhere without the file
                    call.run(look if romio_creates else create, on=0)
                    call.agree("fopen_write: a regular file")
                call.run(open_file, always=True)  # MPI_File_open is collective: every rank joins
            finally:
                if free_info:
                    mpi_info.Free()
            try:
                # One allreduce agrees on the open and on the largest size any rank saw: a file that existed is
                # emptied now (truncate) or cut to its new size when closing (MPI_File_set_size, collective); a new
                # one is neither (one collective call fewer per save).
                got = call.reduction("fopen").max("size seen", found[0]).max("mpi-io errors seen", int(_errors_seen)).run()
                existed = got.max("size seen") > 0
                self._cut = existed  # only a file that held bytes before needs its size set when closing
                if got.max("mpi-io errors seen"):
                    # Only where independent calls are allowed (the same hints on every rank).
                    self.independent_only = self._independent_ok
                    if not _warned and comm.rank == 0:
                        _log.warning(
                            "MPI-IO reported an error earlier in this job, and after a failed collective call ROMIO has "
                            "delivered stale data to a later one (docs/reliability.md): %s",
                            "from now on amrckpt moves file data by independent calls only"
                            if self.independent_only
                            else "the hint romio_no_indep_rw=true forbids the independent calls that avoid it; drop the hint",
                        )
                    _seen(warned=True)
                if mode == "w" and truncate and existed:
                    call.run(set_size_0, always=True)
                    if not defer:  # deferred: agreed with the writer's other errors when it closes
                        call.agree("fopen_write")
            except BaseException:
                self._close_after_failed_open(call)
                raise

    def _close_after_failed_open(self, call: Call) -> None:
        """Close the handles if every rank holds one (``MPI_File_close`` is collective). Collective."""
        red = call.reduction("close after a failed open").max("without a handle", int(self._fh is None))
        everyone = red.run().max("without a handle") == 0
        if everyone:
            with contextlib.suppress(self._MPI.Exception):
                self._fh.Close()
        self._fh = None

    def _error(self, exc: Any, what: str) -> ScdaIOError:
        """Return the ScdaIOError of an MPI-IO error, with the errno of its MPI error class or of the system's text in it.

        Marks the process (:data:`_errors_seen`): files opened from then on move their data by independent calls.

        ROMIO reports a failed ``write``/``open`` of the file system as the
        generic class ``MPI_ERR_IO`` whose message ends in the system's text
        (``"... Other I/O error No space left on device"``): the errno is
        read from that text.  A rank whose collective open failed only
        because another rank's did (``"open failed on a remote node"``, or
        the bare class ``MPI_ERR_OTHER``) is marked ``remote``, so that the
        agreed error is the other rank's.
        """
        MPI = self._MPI
        _seen()
        cls = exc.Get_error_class()
        text = exc.Get_error_string()
        name = next((n for n in _MPI_ERRNO if getattr(MPI, n, None) == cls), None)
        code = _MPI_ERRNO.get(name or "", errno_mod.EIO)
        if name is None:
            code = next((c for c in _ERRNO_OF_TEXT if os.strerror(c) in text), code)
        out: type[ScdaIOError] = ScdaIOError
        if code == errno_mod.ENOENT:
            out = ScdaFileNotFoundError
        elif code in (errno_mod.EACCES, errno_mod.EROFS, errno_mod.EPERM):
            out = ScdaPermissionError
        err = out(code, f"{what} {self.path!r}: {text}")
        if name is None and ("failed on a remote node" in text or cls == MPI.ERR_OTHER):
            err.remote = True  # type: ignore[attr-defined]
        return err

    def _independent(self, runs: list[tuple[int, list[memoryview]]], write: bool) -> None:
        MPI = self._MPI
        for off, bufs in runs:
            if write and len(bufs) > 1 and sum(b.nbytes for b in bufs) <= _backend._COALESCE_NBYTES:
                bufs = [memoryview(b"".join(bufs))]
            for b in bufs:
                done = 0
                while done < b.nbytes:
                    part = b[done : done + _backend.MAX_CALL_NBYTES]
                    st = MPI.Status()
                    try:
                        (self._fh.Write_at if write else self._fh.Read_at)(off + done, [part, MPI.BYTE], st)
                    except MPI.Exception as exc:
                        raise self._error(
                            exc, f"cannot {'write' if write else 'read'} {part.nbytes} bytes at byte {off + done} of"
                        ) from exc
                    got = st.Get_count(MPI.BYTE)
                    if write or not 0 < got < part.nbytes:  # a short read that read something goes on from there
                        self._check_count(st, part.nbytes, off + done, write)
                        got = part.nbytes
                    done += got
                off += b.nbytes

    def _finish_read(self, st: Any, part: memoryview, pos: int) -> None:
        """After a collective read of ``part`` at byte ``pos``: read on independently what a short read left, if allowed.

        Raises ScdaCountError where the file ends first (or a short read
        cannot be continued: the file was opened with ``romio_no_indep_rw``).
        """
        got = st.Get_count(self._MPI.BYTE)
        if 0 < got < part.nbytes and self._independent_ok:
            self._independent([(pos + got, [part[got:]])], False)
        else:
            self._check_count(st, part.nbytes, pos, False)

    def _check_count(self, st: Any, want: int, off: int, write: bool) -> None:
        got = st.Get_count(self._MPI.BYTE)
        if got != want:
            if write:
                raise ScdaCountError(f"wrote {got} of {want} bytes at byte {off} of {self.path!r}")
            raise ScdaCountError(f"file {self.path!r} ends early: read {got} of {want} bytes at byte {off}")

    def _at_all(self, off: int, buf: memoryview, write: bool, err: BaseException | None) -> BaseException | None:
        """One ``MPI_File_write_at_all`` or ``MPI_File_read_at_all`` of ``buf`` at byte ``off``. Collective.

        Returns ``err`` (an earlier error of this rank, after which the bytes
        moved are not checked), else the error of this call, else None.  A
        short read is read on (:meth:`_finish_read`).
        """
        MPI = self._MPI
        st = MPI.Status()
        try:
            (self._fh.Write_at_all if write else self._fh.Read_at_all)(off, [buf, MPI.BYTE], st)
            if err is None and buf.nbytes and write:
                self._check_count(st, buf.nbytes, off, write)
            elif err is None and buf.nbytes:
                self._finish_read(st, buf, off)
        except MPI.Exception as exc:
            return err or self._error(exc, f"cannot {'write' if write else 'read'} {buf.nbytes} bytes at byte {off} of")
        except ScdaError as exc:
            return err or exc
        return err

    def _move(self, pieces: Sequence[Piece], bulk: Piece | None, rounds_nbytes: int, write: bool) -> None:
        err: BaseException | None = None
        if self.independent_only:  # after an MPI-IO error: the bulk too (see _errors_seen)
            pieces, bulk = [*pieces, *([bulk] if bulk is not None else [])], None
            rounds_nbytes = 0
        try:
            self._independent(coalesce(pieces), write)
        except ScdaError as exc:
            err = exc
        # The bulk in rounds, every rank in every round (with nothing after an error of the pieces).
        off, buf = bulk if (bulk is not None and err is None) else (0, memoryview(bytearray()))
        rounds_err: BaseException | None = None  # the rounds' own first error (after it, no bytes are checked)
        for k in range(-(-rounds_nbytes // _backend.MAX_CALL_NBYTES)):
            part = buf[k * _backend.MAX_CALL_NBYTES : (k + 1) * _backend.MAX_CALL_NBYTES]
            rounds_err = self._at_all(off + k * _backend.MAX_CALL_NBYTES if part.nbytes else 0, part, write, rounds_err)
        err = err or rounds_err
        if err is not None:
            raise err

    def write(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Independent ``Write_at`` of the pieces, then ``Write_at_all`` of the bulk runs in rounds.

        A small bulk run travels together with small adjacent pieces (a
        section header, its padding) in the collective call.
        """
        if max_bulk_nbytes and bulk is not None and 0 < bulk[1].nbytes <= _backend._COALESCE_NBYTES:
            boff, bbuf = bulk
            before = [i for i, (o, b) in enumerate(pieces) if 0 < b.nbytes <= _backend._COALESCE_NBYTES and o + b.nbytes == boff]
            after = [i for i, (o, b) in enumerate(pieces) if 0 < b.nbytes <= _backend._COALESCE_NBYTES and o == boff + bbuf.nbytes]
            if before or after:
                bufs = [pieces[i][1] for i in before[:1]] + [bbuf] + [pieces[i][1] for i in after[:1]]
                merged = sum(b.nbytes for b in bufs)
                # Only if the rounds of the collective call still cover it.
                if merged <= -(-max_bulk_nbytes // _backend.MAX_CALL_NBYTES) * _backend.MAX_CALL_NBYTES:
                    start = pieces[before[0]][0] if before else boff
                    drop = set(before[:1] + after[:1])
                    bulk = (start, memoryview(b"".join(bufs)))
                    pieces = [p for i, p in enumerate(pieces) if i not in drop]
        self._move(pieces, bulk, max_bulk_nbytes, True)

    def write_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Write every piece of this rank with one ``MPI_File_write_all`` per round through a file view.

        With ``ncontiguous`` > 0, the pieces of at least
        :data:`_backend.CONTIGUOUS_NBYTES` bytes go first, each by its own
        ``MPI_File_write_at_all`` (contiguous in memory and in the file: no
        datatype, no view), in ``ncontiguous`` calls on every rank; the
        other pieces (section headers, paddings, small shares) then lie far
        apart and go by independent ``MPI_File_write_at`` calls: through a
        view, ROMIO's two-phase write reads and writes back every hole
        between them (measured at P = 2 on a tmpfs: 34 to 45 ms for a few
        KiB of pieces spread over 175 MiB, against under 1 ms).  Unless the
        file was opened with ``romio_no_indep_rw=true``, which forbids
        independent I/O: then they share one view as below.

        The pieces (sorted, contiguous ones merged) are cut into ``nrounds``
        runs of at most ``_backend.MAX_CALL_NBYTES`` bytes each; for each round one
        ``MPI_File_set_view`` with an hindexed file type and one
        ``MPI_File_write_all`` from an hindexed memory type at absolute
        addresses (no copy).  Headers, padding and data of every section go
        in the same call: with ``nrounds == 1``, one collective write per
        rank for the whole file.
        """
        self._gathered(pieces, nrounds, True, ncontiguous)

    def read_gathered(self, pieces: Sequence[Piece], nrounds: int, ncontiguous: int = 0) -> None:
        """Fill every piece of this rank by one ``MPI_File_read_all`` per round through a file view (see :meth:`write_gathered`).

        ROMIO's status of a read through a file view counts the bytes asked
        for, not those read: a piece past the end of the file is not
        detected here (it reads zeros).  A :class:`~amrckpt.scda.ReadPlan`
        that knows the file's size checks its pieces against it first.
        """
        self._gathered(pieces, nrounds, False, ncontiguous)

    def _gathered(self, pieces: Sequence[Piece], nrounds: int, write: bool, ncontiguous: int = 0) -> None:
        if self.independent_only:  # after an MPI-IO error: no collective data call, and so never a view (_errors_seen)
            self._independent(coalesce(pieces), write)
            return
        MPI = self._MPI
        verb = "write" if write else "read"
        err: BaseException | None = None
        if ncontiguous:
            big: list[Piece] = []
            rest: list[Piece] = []
            for off, b in pieces:
                if b.nbytes >= _backend.CONTIGUOUS_NBYTES and len(big) < ncontiguous:
                    big += [(off + k, b[k : k + _backend.MAX_CALL_NBYTES]) for k in range(0, b.nbytes, _backend.MAX_CALL_NBYTES)]
                else:
                    rest.append((off, b))
            rest += big[ncontiguous:]  # beyond the agreed count (not expected): through the view
            pieces = rest
            if self._viewed:  # offsets count in the view: back to the plain bytes (every rank viewed alike: collective)
                self._fh.Set_view(0, MPI.BYTE, MPI.BYTE)
                self._viewed = False
            for k in range(ncontiguous):
                off, buf = big[k] if k < len(big) and err is None else (0, memoryview(bytearray()))
                err = self._at_all(off, buf, write, err)
            if self._independent_ok:  # the rest is sparse: no view over its holes (the decision is the same on every rank)
                try:
                    if err is None:
                        self._independent(coalesce(pieces), write)
                except ScdaError as exc:
                    err = exc
                if err is not None:
                    raise err
                return
        runs = _split_rounds(coalesce(pieces), nrounds)
        for blocks in runs:
            ftype = mtype = None
            try:
                if blocks and err is None:
                    lens = [b.nbytes for _, b in blocks]
                    ftype = MPI.BYTE.Create_hindexed(lens, [o for o, _ in blocks]).Commit()
                    mtype = MPI.BYTE.Create_hindexed(lens, [MPI.Get_address(b) for _, b in blocks]).Commit()
                want = sum(b.nbytes for _, b in blocks) if mtype is not None else 0
                st = MPI.Status()
                self._fh.Set_view(0, MPI.BYTE, ftype if ftype is not None else MPI.BYTE)
                self._viewed = True
                call = self._fh.Write_all if write else self._fh.Read_all
                call([MPI.BOTTOM, 1, mtype] if mtype is not None else [bytearray(), 0, MPI.BYTE], st)
                if err is None and want:
                    self._check_count(st, want, blocks[0][0], write)
            except MPI.Exception as exc:
                if err is None:
                    start = blocks[0][0] if blocks else 0
                    err = self._error(exc, f"cannot {verb} {sum(b.nbytes for _, b in blocks)} bytes from byte {start} of")
            except ScdaError as exc:
                err = err or exc
            finally:
                for t in (ftype, mtype):
                    if t is not None:
                        t.Free()
        if err is not None:
            raise err

    def read(self, pieces: Sequence[Piece], bulk: Piece | None, max_bulk_nbytes: int) -> None:
        """Independent ``Read_at`` of the pieces, then ``Read_at_all`` of the bulk runs in rounds."""
        self._move(pieces, bulk, max_bulk_nbytes, False)

    def _mpi_step(self, fn: Any, what: str) -> None:
        """Run an MPI-IO call, raising its error as :class:`~amrckpt.errors.ScdaIOError` (with its errno)."""
        try:
            fn()
        except self._MPI.Exception as exc:
            raise self._error(exc, what) from exc

    def file_size(self) -> int:
        """``MPI_File_get_size``; agreed."""
        got: list[int] = []

        def size() -> None:
            got.append(int(self._fh.Get_size()))

        with _Step(self.comm, "scda.file_size") as call:
            call.run(self._mpi_step, size, "cannot get the size of")
            call.agree("file size")
        return got[0]

    def sync(self, size: int | None = None) -> None:
        """``MPI_File_set_size`` to ``size`` if given, then ``MPI_File_sync`` (collective calls); errors kept by the call.

        A file that was new (or empty) at the open is not cut: it holds what was written.
        """

        def sync() -> None:
            if size is not None and self._cut:
                self._fh.Set_size(size)
            self._fh.Sync()

        with _Step(self.comm, "scda.sync") as call:
            call.run(self._mpi_step, sync, "cannot sync", always=True)

    def close(self, size: int | None = None) -> None:
        """``MPI_File_set_size`` to ``size`` if given, then ``MPI_File_close``; errors kept by the call.

        A file that was new (or empty) at the open is not cut: it holds what was written (one collective call fewer).
        """

        def set_size() -> None:
            self._fh.Set_size(size)

        def close() -> None:
            self._fh.Close()

        with _Step(self.comm, "scda.close") as call:
            if size is not None and self._cut:
                call.run(self._mpi_step, set_size, "cannot set the size of", always=True)
            call.run(self._mpi_step, close, "cannot close", always=True)


def _seen(warned: bool = False) -> None:
    """Mark that MPI-IO reported an error in this job (:data:`_errors_seen`), and whether the log said what follows."""
    global _errors_seen, _warned
    _errors_seen = True
    _warned = _warned or warned


HINTS_ENV = "AMRCKPT_MPIIO_HINTS"
"""Environment variable of default MPI-IO hints: ``key=value`` pairs separated by commas or semicolons."""


def hints(text: str | None = None) -> dict[str, str]:
    """Return the MPI-IO hints of ``text`` (default: the environment variable ``AMRCKPT_MPIIO_HINTS``). Not collective.

    ``"striping_factor=16,striping_unit=4194304"`` gives
    ``{"striping_factor": "16", "striping_unit": "4194304"}``.  Every MPI-IO
    file amrckpt opens gets them, under the ``info`` passed explicitly.

    Raises
    ------
    ScdaArgumentError
        For an item without ``=``.
    """
    if text is None:
        text = os.environ.get(HINTS_ENV, "")
    out: dict[str, str] = {}
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ScdaArgumentError(f"MPI-IO hint {item!r}: expected key=value ({HINTS_ENV}, --hint)")
        out[key.strip()] = value.strip()
    return out


_CREATION_HINTS = ("striping_factor", "striping_unit", "start_iodevice", "romio_lustre_")
"""Prefixes of the MPI-IO hints that ROMIO applies only in the open that creates a file (Lustre's layout)."""


def _creation_hints(MPI: Any, info: Any) -> bool:
    """Whether ``info`` (or the file named by ``ROMIO_HINTS``, not read) may hold a hint applied only when ROMIO creates."""
    if os.environ.get("ROMIO_HINTS"):
        return True
    if info == MPI.INFO_NULL:
        return False
    keys = [info.Get_nthkey(i) for i in range(info.Get_nkeys())]
    return any(k.startswith(_CREATION_HINTS) for k in keys)


def _split_rounds(runs: list[tuple[int, list[memoryview]]], nrounds: int) -> list[list[Piece]]:
    """Cut contiguous runs into ``nrounds`` lists of pieces of at most ``_backend.MAX_CALL_NBYTES`` bytes each (file order)."""
    out: list[list[Piece]] = [[] for _ in range(max(nrounds, 1))]
    k, used = 0, 0
    for off, bufs in runs:
        for b in bufs:
            done = 0
            while done < b.nbytes:
                if used >= _backend.MAX_CALL_NBYTES and k + 1 < len(out):
                    k, used = k + 1, 0
                take = b.nbytes - done if k + 1 == len(out) else min(b.nbytes - done, _backend.MAX_CALL_NBYTES - used)
                out[k].append((off + done, b[done : done + take]))
                done += take
                used += take
            off += b.nbytes
    return out
