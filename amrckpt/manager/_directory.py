"""A checkpoint directory as one object: its names, lock, commits, records, index, retention and kept-aside files.

:class:`CheckpointDirectory` is what :class:`~amrckpt.CheckpointManager`
works on, through its collective calls (rank 0 runs these methods inside
agreed steps), and what ``amrckpt ls`` reads, on its own process, without
the lock.  Its methods are not collective.  A node-local level of the same
layout (a cache beside the shared directory) is another instance on
another path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import warnings
from pathlib import Path
from typing import Any

from .._files import LOCAL, PARTIAL, FileSystem, new_token, write_atomic
from .._logging import RankLogger, get_logger
from ..comm import SerialComm
from ..container import CheckpointInfo, read_info
from ..errors import (
    AmrckptError,
    CheckpointSkippedWarning,
    ManagerError,
    ManagerIOError,
    ScdaIOError,
    StepAlreadyExistsError,
    StepNotFoundError,
)
from ._commit import StepCommit, recover
from ._evidence import Check, io_error_of
from ._history import HISTORY, read_index, write_index
from ._lock import DirectoryLock
from ._names import RECORDS, STEP_RECORD, Listing, StepNames
from ._records import RECORD_LIMIT, CheckpointRecord, RecordError, StepMetadata, encode_record, fingerprint, parse_record
from ._restore import Skipped
from ._retention import KeepPolicy, kept_steps

__all__ = ["CheckpointDirectory", "read_history"]

_log = get_logger("amrckpt.manager")


class CheckpointDirectory:
    """A checkpoint directory: step names, lock, commits with their records, index, retention. Not collective.

    Parameters
    ----------
    path : str or os.PathLike
        The directory.
    prefix : str, optional
        Checkpoints are ``<prefix>-<step:012d>.scda`` (:class:`StepNames`).
    fs : FileSystem, optional
        The file operations (default: the operating system's).
    sync : bool, optional
        Fsync records and directory when they change.  The history index,
        derived from the records and never read for a decision, is replaced
        atomically but not synced (a crash may leave it older; the next
        commit rewrites it).
    log : RankLogger, optional
        Where messages go (default: the logger ``amrckpt.manager``).

    Raises
    ------
    ManagerError
        For an invalid prefix.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        prefix: str = "ckpt",
        fs: FileSystem | None = None,
        sync: bool = True,
        log: RankLogger | None = None,
    ) -> None:
        self.path = Path(path)
        self.names = StepNames(prefix)
        self.fs: FileSystem = fs if fs is not None else LOCAL
        self.sync = sync
        self.log = log if log is not None else RankLogger(_log, 0, 1)
        self._lock: DirectoryLock | None = None
        self._identity: tuple[int, int] | None = None
        self._records: dict[str, tuple[tuple[int, int, int], dict[str, Any] | None, str | None]] = {}

    def __repr__(self) -> str:
        return f"CheckpointDirectory({str(self.path)!r}, prefix={self.names.prefix!r})"

    # -- opening and closing --------------------------------------------------------------------------

    def open(self, *, lock: bool = True) -> None:
        """Make the directory if needed, take its lock, finish or undo cut-short commits, adopt a legacy history.

        Raises
        ------
        ManagerError
            If the path is not a directory, or the lock is held or refused.
        ManagerIOError
            On this rank, if the directory cannot be made, checked, locked or tidied (with the errno).
        """  # noqa: DOC501 (ManagerIOError.of() returns the ManagerIOError)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            st = self.path.stat()
        except OSError as exc:
            raise ManagerIOError.of(f"cannot use the checkpoint directory {str(self.path)!r}", exc) from exc
        if not stat.S_ISDIR(st.st_mode):
            raise ManagerError(f"cannot use the checkpoint directory {str(self.path)!r}: not a directory")
        self._identity = (st.st_dev, st.st_ino)
        if lock:
            self._lock = DirectoryLock.acquire(self.path, self.fs, self.log)
        try:
            listing = self.listing()
            if recover(self.path, listing, self.names, self.fs, self.log):
                listing = self.listing()
            for step, recs in listing.records.items():  # records of no checkpoint: a commit cut short, a delete cut short
                if step in listing.checkpoints:
                    continue
                for name in recs.values():
                    try:
                        if not stat.S_ISREG(os.lstat(self.path / name).st_mode):
                            self.log.warning("%s is not a regular file (a link?): left alone", name)
                            continue
                        self.fs.unlink(self.path / name)
                        self.log.info("removed %s, a record without its checkpoint", name)
                    except OSError:
                        pass
            for name in os.listdir(self.path):
                if name.startswith(f".{HISTORY}{PARTIAL}"):  # an index rewrite cut short (the index itself is whole)
                    with contextlib.suppress(OSError):
                        self.fs.unlink(self.path / name)
            self._adopt_index(listing)
        except OSError as exc:
            self.close()
            raise ManagerIOError.of(f"cannot use the checkpoint directory {str(self.path)!r}", exc) from exc
        except BaseException:
            self.close()
            raise

    def _adopt_index(self, listing: Listing) -> None:
        """Write step records from the history index for checkpoints that have none (a directory of an older version)."""
        missing = [s for s in listing.checkpoints if STEP_RECORD not in listing.records.get(s, {})]
        if not missing:
            return
        legacy = read_index(self.path, self.fs)
        for step in missing:
            entry = legacy.get(step)
            size = self._size(listing.checkpoints[step])
            if entry is None or entry.get("nbytes") != size:
                continue
            try:
                record = parse_record(encode_record(entry), step, "a line of the history")
                write_atomic(self.path / self.names.step_record_name(listing.checkpoints[step]), encode_record(record), fs=self.fs)
            except (RecordError, OSError) as exc:
                self.log.warning("cannot adopt the history's record of step %d: %s", step, exc)

    def close(self) -> None:
        """Release the lock, if held."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def check_identity(self) -> None:
        """Raise unless the directory is still the one opened (not removed, moved away or replaced).

        Raises
        ------
        ManagerError
            Naming what happened; nothing was written.
        ManagerIOError
            On this rank, if the directory cannot be checked (an I/O error, not evidence that it is gone).
        """  # noqa: DOC501 (ManagerIOError.of() returns the ManagerIOError)
        try:
            st = self.path.stat()
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):  # not evidence that it is gone: an I/O error
                raise ManagerIOError.of(f"cannot check the checkpoint directory {str(self.path)!r}", exc) from exc
            raise ManagerError(
                f"the checkpoint directory {str(self.path)!r} is gone ({exc.strerror or exc}): it was removed "
                "or moved away while this manager used it; nothing was saved",
            ) from exc
        if self._identity is not None and (st.st_dev, st.st_ino) != self._identity:
            raise ManagerError(
                f"the checkpoint directory {str(self.path)!r} was replaced (moved away, or removed and made again) "
                "while this manager used it; nothing was saved: open a new CheckpointManager to use the new directory"
            )

    # -- what is there --------------------------------------------------------------------------------

    def listing(self) -> Listing:
        """Return the directory's names, sorted (checkpoints, records, commits in progress, kept aside).

        Raises
        ------
        ManagerIOError
            On this rank, if the directory cannot be listed (with the errno).
        """  # noqa: DOC501 (ManagerIOError.of() returns the ManagerIOError)
        try:
            names = os.listdir(self.path)
        except OSError as exc:
            raise ManagerIOError.of(f"cannot list the checkpoint directory {str(self.path)!r}", exc) from exc
        return self.names.listing(names)

    def steps(self) -> dict[int, Path]:
        """Return the committed checkpoints by step."""
        return {s: self.path / n for s, n in self.listing().checkpoints.items()}

    def path_of(self, step: int) -> Path:
        """Return the file of the checkpoint of ``step``."""
        return self.path / self.names.build_name(step)

    def existing(self, step: int) -> Path:
        """Return the file of the checkpoint of ``step``.

        Raises
        ------
        StepNotFoundError
            If ``step`` has no checkpoint (the message lists the steps there).
        """
        path = self.path_of(step)
        if not path.is_file():
            have = sorted(self.listing().checkpoints)
            raise StepNotFoundError(f"no checkpoint of step {step} in {str(self.path)!r} (steps: {have if have else 'none'})")
        return path

    def _size(self, name: str) -> int | None:
        try:
            return os.stat(self.path / name).st_size
        except OSError:
            return None

    def check(self, step: int) -> Check:
        """Read and verify the metadata of the checkpoint of ``step`` (footer, index, manifest; CRC32s)."""
        try:
            return Check(read_info(self.path_of(step), comm=SerialComm()))
        except (AmrckptError, OSError) as exc:
            return Check(None, f"{type(exc).__name__}: {exc}", io_error_of(exc) is not None, exc)

    # -- records --------------------------------------------------------------------------------------

    def read_record(self, step: int, info: CheckpointInfo | None = None) -> tuple[dict[str, Any] | None, str | None]:
        """Return the step record of ``step`` and None if it can be used; else why not, and the record if it parses.

        A record can be used if it parses, is of ``step``, and describes the
        checkpoint there: its size, and (given ``info``) the fingerprint of
        its index.  One that parses but describes another file (the
        checkpoint was damaged or replaced) is returned with the problem:
        its facts are shown, never used to decide.
        """
        name = self.names.build_name(step)
        rec_name = self.names.step_record_name(name)
        try:
            st = os.lstat(self.path / rec_name)
            size = os.stat(self.path / name).st_size
        except FileNotFoundError:
            return None, "no step record"
        except OSError as exc:
            return None, f"cannot read the step record: {exc.strerror or exc}"
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._records.get(rec_name)
        if cached is not None and cached[0] == key:
            record, problem = cached[1], cached[2]
        else:
            try:
                record, problem = parse_record(self.fs.read_regular(self.path / rec_name, RECORD_LIMIT), step, rec_name), None
            except RecordError as exc:
                record, problem = None, str(exc)
            except OSError as exc:
                record, problem = None, f"cannot read {rec_name}: {exc.strerror or exc}"
            self._records[rec_name] = (key, record, problem)
        if record is None:
            return None, problem
        if record.get("nbytes") is not None and record["nbytes"] != size:
            return record, f"the step record describes a file of {record['nbytes']} bytes, not this one of {size}"
        if info is not None and record.get("fingerprint") not in (None, fingerprint(info.index)):
            return record, "the step record describes another file (its fingerprint differs)"
        return record, None

    def records(self, steps: list[int] | None = None) -> dict[int, dict[str, Any]]:
        """Return the step records that can be used, by step (a step whose facts are unknown is absent)."""
        out = {}
        for step in steps if steps is not None else sorted(self.listing().checkpoints):
            record, problem = self.read_record(step)
            if record is not None and problem is None:
                out[step] = record
        return out

    def write_index(self) -> None:
        """Rewrite the history index from the step records (logged, not raised, if it fails: it is derived)."""
        try:
            write_index(self.path, self.records(), fs=self.fs, sync=False)  # derived: not synced (class docstring)
        except OSError as exc:
            self.log.warning("cannot rewrite %s (it is rebuilt at the next commit): %s", HISTORY, exc)

    def history(self) -> list[CheckpointRecord]:
        """Every checkpoint, oldest first, with its validity (metadata CRC32s) and its step record's facts."""
        out = []
        for step, name in sorted(self.listing().checkpoints.items()):
            c = self.check(step)
            info = c.info
            record, problem = self.read_record(step, info)
            # A record of another file says nothing of this one (shown only beside a checkpoint that does not verify).
            e = record if record is not None and (info is None or problem is None) else {}
            t = info.manifest.values.get("time") if info is not None else None
            out.append(
                CheckpointRecord(
                    step,
                    str(self.path / name),
                    info is not None,
                    c.problem,
                    t if isinstance(t, (int, float)) and not isinstance(t, bool) else e.get("time"),
                    (info.saved_at if info is not None else None) or e.get("saved_at"),
                    e.get("save_seconds"),
                    self._size(name) or 0,
                    (info.writer_size if info is not None else None) or e.get("writer_size"),
                    e.get("reason"),
                    e.get("metrics"),
                    e.get("metadata"),
                    problem,
                    c.unreadable,
                    f"{info.manifest.schema_name} v{info.manifest.schema_version}" if info is not None else None,
                )
            )
        return out

    # -- changing -------------------------------------------------------------------------------------

    def begin(self, step: int) -> str:
        """Start the commit of ``step``: check that the directory is still the one opened; return the commit's token.

        Raises
        ------
        ManagerError
            If the directory is gone or replaced.
        """
        self.check_identity()
        return new_token()

    def new_commit(self, step: int, token: str) -> StepCommit:
        """Return the commit ``token`` of ``step`` (its temporary name; the file-system steps of rank 0)."""
        return StepCommit(self.path, self.names, step, token, self.fs, self.sync)

    def delete(self, step: int) -> None:
        """Remove the checkpoint of ``step``, then its records, and sync the directory.

        Raises
        ------
        OSError
            If the checkpoint cannot be removed.
        """
        path = self.path_of(step)
        self.fs.unlink(path)
        for name in self.names.record_names(path.name):
            with contextlib.suppress(FileNotFoundError):
                self.fs.unlink(self.path / name)
        if self.sync:
            self.fs.fsync_directory(self.path)

    def delete_step(self, step: int) -> None:
        """Delete the checkpoint of ``step`` and its records (:meth:`delete`), then rewrite the index.

        Raises
        ------
        StepNotFoundError
            If ``step`` has no checkpoint.
        ManagerIOError
            On this rank, if the file cannot be removed (with the errno).
        """  # noqa: DOC501 (ManagerIOError.of() returns the ManagerIOError)
        path = self.existing(step)
        try:
            self.delete(step)
        except OSError as exc:
            raise ManagerIOError.of(f"cannot delete {path.name}", exc) from exc
        self.write_index()
        self.log.info("deleted %s", path.name)

    def metadata(self, step: int) -> StepMetadata:
        """Return the checkpoint's own description (footer, index, manifest; CRC32s) and its step record.

        Raises
        ------
        StepNotFoundError
            If ``step`` has no checkpoint.
        CheckpointError
            If its metadata do not verify.
        """
        path = self.existing(step)
        info = read_info(path, comm=SerialComm())
        record, problem = self.read_record(step, info)
        e = record if record is not None and problem is None else {}
        return StepMetadata(step, str(path), info, e.get("metrics"), e.get("metadata"), e, problem)

    def keep_aside(self, step: int, reason: str) -> str:
        """Rename the checkpoint of ``step`` and its records aside (``<name>.<reason>-<token>``); return the new name.

        Never overwrites: the new name is taken by a hard link (or a rename
        to a name that does not exist, where hard links are not supported).

        Raises
        ------
        OSError
            If it cannot be renamed (it is then where it was).
        """
        name = self.names.build_name(step)
        aside = self.names.aside_name(name, reason, new_token())
        for suffix in ("", *RECORDS):
            src, dst = self.path / (name + suffix), self.path / (aside + suffix)
            if suffix and not os.path.lexists(src):
                continue
            try:
                self._move_new(src, dst)
            except OSError:
                if suffix:
                    continue
                raise
        if self.sync:
            with contextlib.suppress(OSError):
                self.fs.fsync_directory(self.path)
        return aside

    def _move_new(self, src: Path, dst: Path) -> None:
        """Rename ``src`` to ``dst``, which must not exist: a hard link and an unlink (a rename where links are not supported).

        Raises
        ------
        OSError
            If it cannot be moved (``src`` is then where it was).
        """
        try:
            self.fs.link(src, dst)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV) or os.path.lexists(dst):
                raise
            self.fs.replace(src, dst)
            return
        self.fs.unlink(src)

    def prepare_step(self, step: int, overwrite: bool, unusable: frozenset[int] = frozenset()) -> list[Skipped]:
        """Make room for a save of ``step``: keep a damaged checkpoint of it aside, or raise if the step is taken.

        ``unusable``: steps found damaged that could not be kept aside
        (they never count, and are never overwritten).

        Returns
        -------
        list of Skipped
            What was kept aside (a warning was issued for each).

        Raises
        ------
        StepAlreadyExistsError
            Unless ``overwrite``: ``step`` has a checkpoint whose metadata
            verify, or a newer one does.
        ManagerError
            If the directory is gone or replaced, or a damaged checkpoint
            of ``step`` cannot be renamed aside.
        ScdaIOError
            If the checkpoint of ``step`` cannot be read (an I/O error is no
            verdict on it): it is left where it is, and nothing is saved.
        """
        self.check_identity()  # first: the directory gone or replaced says so, not "cannot list"
        steps = sorted(self.listing().checkpoints)
        skipped = []
        if step in steps:
            c = self.check(step)
            if not c.ok and not c.unreadable and step not in unusable:
                c = self.check(step)  # damage is a verdict only when reading again finds it again
            if not c.ok and c.unreadable:
                raise self.io_failure(step, c.error, "nothing was saved")
            if not c.ok or step in unusable:  # a damaged checkpoint is never overwritten
                skipped.append(self.set_aside(step, c.problem or "a restore found its data damaged", c.unreadable, must=True))
                steps.remove(step)
            elif not overwrite:
                raise StepAlreadyExistsError(
                    f"step {step} has a checkpoint ({self.names.build_name(step)}): pass overwrite=True to replace it"
                )
        newer = [s for s in steps if s > step and s not in unusable]
        if not overwrite and newer and any(self.check(s).ok for s in newer):
            raise StepAlreadyExistsError(
                f"step {step} is lower than the newest checkpoint, step {newer[-1]}: pass overwrite=True to save it anyway "
                "(a restart still takes the newest), or delete the newer steps first"
            )
        return skipped

    def io_failure(self, step: int, exc: BaseException | None, outcome: str) -> ScdaIOError:
        """Return the error of a checkpoint that could not be read, and log that it is left where it is.

        ``exc`` itself if it is a :class:`~amrckpt.errors.ScdaIOError`;
        otherwise one with its errno (``EIO`` if it has none) and a message
        naming the file.  ``outcome`` says what the caller did not do.
        """
        path = self.path_of(step)
        got = io_error_of(exc) if exc is not None else None
        self.log.warning(
            "cannot read %s (%s): %s; it is left where it is (an I/O error is no verdict on a checkpoint), and a "
            "restart tries it again",
            path.name,
            got if got is not None else exc,
            outcome,
        )
        if isinstance(got, ScdaIOError):
            return got
        code = getattr(got, "errno", None) or errno.EIO
        return ScdaIOError(code, f"cannot read the checkpoint of step {step}, {str(path)!r}: {got or exc}")

    def readmit(self) -> list[int]:
        """Give back their names to the checkpoints kept aside as unreadable, so that a restart tries them again.

        A checkpoint that could not be read was kept aside as
        ``<name>.unreadable-<token>`` (with its records) by earlier releases;
        an I/O error is no verdict on it.  Each is renamed back to ``<name>``
        (and its records), unless a checkpoint of its step exists (a later
        save of the step: that one counts, this one stays aside).  A
        restart then loads it like any other: it is the newest, it is
        restored; it is damaged, it is kept aside as damaged; it still
        cannot be read, the restart fails with that error and it stays
        where it is.  Never overwrites (hard link, then unlink of the
        aside name, as :meth:`keep_aside`); a file that cannot be renamed
        back is logged and left aside.

        Returns
        -------
        list of int
            The steps renamed back.
        """
        listing = self.listing()
        back: list[int] = []
        for name, n in listing.aside:
            if n.reason != "unreadable" or n.step in listing.checkpoints or n.step in back:
                continue
            try:
                if not stat.S_ISREG(os.lstat(self.path / name).st_mode):
                    continue
                for suffix in ("", *RECORDS):
                    src, dst = self.path / (name + suffix), self.path / (n.base + suffix)
                    if suffix and (not os.path.lexists(src) or os.path.lexists(dst)):
                        continue
                    self._move_new(src, dst)
            except OSError as exc:
                self.log.warning("cannot rename %s back to %s (left aside): %s", name, n.base, exc.strerror or exc)
                continue
            self.log.warning("%s was kept aside as unreadable; renamed back to %s, to be read again", name, n.base)
            back.append(n.step)
        if back and self.sync:
            with contextlib.suppress(OSError):
                self.fs.fsync_directory(self.path)
        return back

    def set_aside(self, step: int, problem: str, unreadable: bool, must: bool = False) -> Skipped:
        """Keep a damaged or unreadable checkpoint aside (:meth:`keep_aside`) and warn (``warnings``: on stderr).

        Returns
        -------
        Skipped
            With ``kept_as`` None if it could not be renamed.

        Raises
        ------
        ManagerIOError
            On this rank, with ``must``, if it cannot be renamed (with the errno).
        """
        path = str(self.path_of(step))
        try:
            skipped = Skipped(
                step, path, problem, str(self.path / self.keep_aside(step, "unreadable" if unreadable else "damaged")), unreadable
            )
        except OSError as exc:
            if must:
                raise ManagerIOError(
                    exc.errno,
                    f"the checkpoint of step {step} is damaged ({problem}) and cannot be renamed aside "
                    f"({exc.strerror or exc}): it is not overwritten, and nothing was saved",
                ) from exc
            skipped = Skipped(step, path, problem, None, unreadable, f"{exc.strerror or exc}")
        self.log.info("%s", skipped.message())
        warnings.warn(skipped.message(), CheckpointSkippedWarning, stacklevel=3)
        return skipped

    def retain(self, policy: KeepPolicy, *, protect: int | None = None) -> list[int]:
        """Delete the checkpoints that ``policy`` does not keep; return their steps.

        Never deletes ``protect``, the newest checkpoint whose metadata
        verify, or (for a policy that judges by the step records) a step
        whose record is unknown.  A file that cannot be deleted is logged.
        """
        steps = sorted(self.listing().checkpoints)
        if not steps:
            return []
        keep = kept_steps(policy, steps, self.records(steps))
        if protect is not None:
            keep.add(protect)
        newest_valid = next((s for s in reversed(steps) if self.check(s).ok), None)
        if newest_valid is not None:
            keep.add(newest_valid)
        gone = []
        for s in steps:
            if s in keep:
                continue
            try:
                self.delete(s)
                self.log.info("retention: removed %s", self.names.build_name(s))
                gone.append(s)
            except OSError as exc:
                self.log.warning("retention: cannot remove %s: %s", self.names.build_name(s), exc)
        return gone


def read_history(directory: str | os.PathLike[str], prefix: str = "ckpt") -> dict[int, dict[str, Any]]:
    """Return the step records of a manager's directory, by step (the newest of each). Not collective.

    The records committed with each checkpoint (``<checkpoint>.step.json``);
    for a step without one, the line of the history index
    ``amrckpt-history.jsonl`` (a directory written before step records).
    Read-only, and never raises for what the files hold: a missing
    directory or index gives ``{}``, a record that does not parse is left out.

    Returns
    -------
    dict of int to dict
        Step to its record (step, path, time, save_seconds, nbytes,
        writer_size, reason, saved_at, metrics, metadata, ...).
    """
    d = CheckpointDirectory(directory, prefix=prefix)
    out: dict[int, dict[str, Any]] = dict(read_index(d.path))
    with contextlib.suppress(ManagerError):
        out.update(d.records())
    return out
