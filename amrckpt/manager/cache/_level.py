"""One node's cache directory: its cached steps, lock, commits and retention."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..._files import LOCAL, FileSystem, is_evidence, read_regular
from ..._logging import RankLogger
from ...comm import Comm
from ...container import RUN_RECORD_LIMIT
from ...errors import ManagerError, ManagerIOError, ScdaIOError, ScdaUsageError
from ...scda import ByteSink, FileAccess, os_error
from .._commit import StepCommit, remove_tree
from .._lock import DirectoryLock
from .._names import StepNames
from .._records import RECORD_LIMIT
from ._pieces import pieces_name
from ._pieces_io import Mappings, PiecesBackend, on_tmpfs

__all__ = ["CacheLevel", "EXTENSION", "STEP_JSON"]


EXTENSION = ".cache"
STEP_JSON = "step.json"

STEP_JSON_LIMIT = RECORD_LIMIT + 2 * RUN_RECORD_LIMIT
"""The largest ``step.json`` read, in bytes: a step record (at most 1 MiB) and a run record, escaped as a JSON string."""


class CacheLevel:
    """One node's cache directory: its cached steps, lock, commits and retention. Not collective.

    Parameters
    ----------
    path : pathlib.Path
        The node's cache directory.
    prefix : str
        The checkpoints' prefix (the steps are ``<prefix>-<step:012d>.cache``).
    sync : bool, optional
        Fsync the pieces files and the directory.
    recycle : bool, optional
        Write a save's pieces into a retired step's pieces file (:class:`NodeCache`'s ``recycle``).
    """

    def __init__(
        self,
        path: Path,
        prefix: str,
        sync: bool = True,
        log: RankLogger | None = None,
        recycle: bool = False,
    ) -> None:
        self.path = path
        self.names = StepNames(prefix, extension=EXTENSION)
        self.fs: FileSystem = LOCAL  # the file operations of commits (rename, directory fsync)
        self.sync = sync
        self.log = log
        self.recycle = recycle
        self.tmpfs = False  # found by open(): a recycled file is then copied into through a mapping
        self.mappings = Mappings()
        self._lock: DirectoryLock | None = None

    def __repr__(self) -> str:
        return f"CacheLevel({str(self.path)!r})"

    def open(self, lock: bool) -> None:
        """Make the directory, take its lock (``lock``: the node's first rank), remove saves cut short.

        Raises
        ------
        ManagerError
            If it is not a directory, or another manager holds it (or its lock file is refused).
        ManagerIOError
            On this rank, if it cannot be made, checked or locked (with the errno).
        """  # noqa: DOC501 (ManagerIOError.of() returns the ManagerIOError)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(self.path).st_mode):
                raise ManagerError(f"the node cache {str(self.path)!r} is not a directory")
        except OSError as exc:
            raise ManagerIOError.of(f"cannot use the node cache {str(self.path)!r}", exc) from exc
        self.tmpfs = on_tmpfs(self.path)
        if lock:
            self._lock = DirectoryLock.acquire(self.path, self.fs, self.log)
            for name, _ in self.names.listing(os.listdir(self.path)).pending:  # a cached save or commit cut short by a kill
                self.remove(name)

    def close(self) -> None:
        """Close this rank's mappings of its pieces files; release the lock, if held."""
        self.mappings.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def steps(self) -> dict[int, Path]:
        """Return the committed cached steps of this node, by step (empty if the directory is gone)."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return {}
        return {s: self.path / n for s, n in self.names.listing(names).checkpoints.items()}

    def step_path(self, step: int) -> Path:
        """Return the directory of the cached ``step``."""
        return self.path / self.names.build_name(step)

    def make_partial(self, step: int, token: str) -> Path:
        """Make the temporary directory of a cached save (every rank of the node may call it; a link there is refused).

        Raises
        ------
        ScdaIOError
            On this rank, if it cannot be made or checked (with the errno), or it is not a directory (a link: ``EEXIST``).
        """  # noqa: DOC501 (os_error() returns the ScdaIOError)
        tmp = self.path / self.names.partial_name(self.names.build_name(step), token)
        try:
            tmp.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            raise os_error(exc, str(tmp), "cannot make") from exc
        try:
            st = os.lstat(tmp)
        except OSError as exc:
            raise os_error(exc, str(tmp), "cannot check") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise ScdaIOError(17, f"{tmp}: not a directory (a link?)")
        return tmp

    def opener(self, tmp: Path, recycle: Path | None = None) -> Any:
        """Return a :class:`~amrckpt.scda.BackendOpener` writing each rank's pieces into ``tmp/rank-<r>.pieces``.

        ``recycle``: the pieces file to write into instead of a new one
        (:meth:`recyclable`), renamed when the save writes (after its checks
        and its agreement): a save that fails before leaves it where it was.
        """

        def open_pieces(path: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> ByteSink:
            if mode != "w" or not defer:
                raise ScdaUsageError("a node cache takes the pieces of a deferred writer only")
            return PiecesBackend(tmp / pieces_name(comm.rank), comm, recycle, self.mappings if self.tmpfs else None)

        return open_pieces

    def recyclable(self, step: int, keep: int, protect: set[int], rank: int) -> Path | None:
        """Return ``rank``'s pieces file in a cached step that the retention after committing ``step`` removes, or None.

        The newest such step not in ``protect`` (a step being flushed), and
        never the newest cached step: one complete step stays while the save
        runs.  None without ``recycle``.  Not collective (this node's listing).
        """
        if not self.recycle:
            return None
        steps = sorted(s for s in self.steps() if s != step)
        gone = [s for s in steps[: max(0, len(steps) + 1 - keep)] if s not in protect and s != steps[-1]]
        return self.step_path(gone[-1]) / pieces_name(rank) if gone else None

    def new_commit(self, step: int, token: str) -> StepCommit:
        """Return the commit ``token`` of the cached ``step``: a :class:`~amrckpt.manager._commit.StepCommit` of a directory."""
        return StepCommit(self.path, self.names, step, token, self.fs, self.sync, tree=True)

    def publish(self, commit: StepCommit, info: dict[str, Any]) -> None:
        """Write ``step.json`` into the step, sync it, and commit the step (:meth:`StepCommit.publish`: the node's commit point).

        A cached step of the same number is replaced (a cache holds one copy
        of a step): renamed aside until the commit is agreed on.

        Raises
        ------
        ScdaIOError
            With the file system's errno.
        """
        try:
            self.fs.write_new(commit.tmp / STEP_JSON, json.dumps(info, indent=1).encode() + b"\n", sync=self.sync)
            if self.sync:
                self.fs.fsync_directory(commit.tmp)
        except OSError as exc:
            raise ScdaIOError(exc.errno or 5, f"cannot commit the cached step {commit.step}: {exc.strerror or exc}") from exc
        commit.publish({})

    def info(self, step: int) -> dict[str, Any] | None:
        """Return the ``step.json`` of the cached ``step``; None if missing, unusable or unreadable. Not collective."""
        return self.read_info(step)[0]

    def read_info(self, step: int) -> tuple[dict[str, Any] | None, ManagerIOError | None]:
        """Return the ``step.json`` of the cached ``step`` (None: missing, not regular, not parsing), and the I/O error met.

        Read by :func:`amrckpt._files.read_regular` (never following a link,
        never waiting on a FIFO), at most :data:`STEP_JSON_LIMIT` bytes.  An
        error of the file system that is not evidence of what the file is
        (``EIO``, ``ENOMEM``, a failed ``close``...) is returned, not taken
        for a missing record: the flush or the restart fails with it. Not collective.
        """
        try:
            raw = read_regular(self.step_path(step) / STEP_JSON, STEP_JSON_LIMIT)
        except OSError as exc:
            if is_evidence(exc, self.step_path(step) / STEP_JSON):  # missing, a link, not regular, too big
                return None, None
            return None, ManagerIOError.of(f"cannot read {STEP_JSON} of the cached step {step}", exc)
        try:
            out = json.loads(raw)
        except (ValueError, RecursionError):
            return None, None
        return (out if isinstance(out, dict) and out.get("step") == step else None), None

    def remove(self, name: str) -> None:
        """Remove a step directory (or a file) of this level; a link is unlinked, never followed. Never raises.

        The node's other ranks may be unlinking their own files in it at
        the same time (:meth:`retire_own`): a file gone already is no error.
        """
        p = self.path / name
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(p).st_mode):
                remove_tree(p)
            else:
                os.unlink(p)

    def retired(self, keep: int, protect: set[int]) -> list[int]:
        """Return the cached steps that retention removes: all but the ``keep`` newest, never those in ``protect``."""
        steps = sorted(self.steps())
        return [s for s in steps[: max(0, len(steps) - keep)] if s not in protect]

    def retire_own(self, steps: Sequence[int], names: Sequence[str]) -> None:
        """Unlink this rank's files ``names`` in the retired ``steps`` (each rank its own, at once). Never raises.

        The node's first rank then removes the rest (:meth:`retain`): the
        cost of freeing the pieces is shared as their writing was.
        """
        for s in steps:
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(self.step_path(s) / name)
        self.mappings.sweep()

    def retain(self, keep: int, protect: set[int]) -> list[int]:
        """Remove all but the ``keep`` newest cached steps (never those in ``protect``); return the steps removed."""
        gone = self.retired(keep, protect)
        for s in gone:
            self.remove(self.names.build_name(s))
        return gone
