"""The commit of one step: temporary name, records, rename, directory sync (orbax's ``path/atomicity.py``).

A step is committed in this order, by one process (rank 0 of the manager,
after every rank has written and synced the checkpoint under its temporary
name ``.<name>.partial-<token>``):

1. what a commit of the same step replaces is kept: its records are
   renamed to ``.<record>.previous-<token>``, then the old checkpoint is
   linked as ``.<name>.previous-<token>`` (last: while that link exists,
   every old record has been moved);
2. the step's records (run record, step record) are written under
   temporary names, synced, and renamed to their final names;
3. the checkpoint is renamed to its final name: **the commit point**;
4. the directory is synced.

So a checkpoint under its final name always has its records.  While the
checkpoint's temporary file exists, the commit is not done: a job killed
before step 3 leaves it, and the next manager (:func:`recover`) puts back
what the commit had set aside and removes the rest.  After step 3, what was
set aside is removed (:meth:`StepCommit.finish`).  A commit that the ranks
do not agree on is undone (:meth:`StepCommit.roll_back`): the checkpoint
goes back to its temporary name first, so that a job killed while undoing
is undone by the next manager too.  Undoing goes through the file system
under any wrapper (``wrapped``): the fault wrappers of :mod:`amrckpt.testing`
make the steps of a commit fail, not their undoing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._files import LOCAL, FileSystem
from .._logging import RankLogger
from ..errors import ScdaIOError
from ._names import RECORDS, Listing, Name, StepNames

__all__ = ["StepCommit", "recover", "remove_tree"]


class StepCommit:
    """One step's commit into a checkpoint directory. Not collective: the file-system steps of one process.

    Parameters
    ----------
    directory : pathlib.Path
        The checkpoint directory.
    names : StepNames
        Its names.
    step : int
        The step.
    token : str
        The commit's token (the same in every temporary name of the commit).
    fs : FileSystem, optional
        The file operations.
    sync : bool, optional
        Fsync the records and the directory.
    tree : bool, optional
        The checkpoint is a directory (a node cache's step, its files
        written and synced in it): what it replaces is renamed aside, not
        linked, and removed with its files; a roll back that cannot
        rename it back removes it.

    Attributes
    ----------
    final : pathlib.Path
        The checkpoint's final name.
    tmp : pathlib.Path
        The name the checkpoint is written under.
    renamed : bool
        Whether the checkpoint has its final name (the commit point passed).
    """

    def __init__(
        self,
        directory: Path,
        names: StepNames,
        step: int,
        token: str,
        fs: FileSystem = LOCAL,
        sync: bool = True,
        tree: bool = False,
    ) -> None:
        self.directory = directory
        self.names = names
        self.step = step
        self.token = token
        self.fs = fs
        # Undone through the file system under wrappers (``wrapped``, as the communicator wrappers of amrckpt.testing set
        # it): a fault wrapper injects faults into the steps of a commit, not into their undoing.
        self._undo = fs
        while (inner := getattr(self._undo, "wrapped", None)) is not None:
            self._undo = inner
        self.sync = sync
        self.tree = tree
        self.name = names.build_name(step)
        self.final = directory / self.name
        self.tmp = directory / names.partial_name(self.name, token)
        self.renamed = False
        self._kept: list[tuple[Path, Path]] = []  # (final name, previous name) of what this commit replaces
        self._placed: list[Path] = []  # records this commit put under their final names

    def _previous(self, final: Path) -> Path:
        return self.directory / self.names.previous_name(final.name, self.token)

    def publish(self, records: Mapping[str, bytes]) -> None:
        """Do steps 1 to 4: keep what is replaced, put the records in place, rename the checkpoint, sync the directory.

        Parameters
        ----------
        records : mapping of str to bytes
            The record files by suffix (``".run.json"``, ``".step.json"``).

        Raises
        ------
        ScdaIOError
            With the file system's errno; the caller agrees, then undoes
            the commit with :meth:`roll_back` on failure.
        """
        fs = self.fs
        try:
            for suffix in RECORDS:
                old = self.directory / (self.name + suffix)
                if os.path.lexists(old):
                    fs.replace(old, self._previous(old))
                    self._kept.append((old, self._previous(old)))
            if os.path.lexists(self.final):
                (fs.replace if self.tree else fs.link)(self.final, self._previous(self.final))
                self._kept.append((self.final, self._previous(self.final)))
            for suffix, data in records.items():
                final = self.directory / (self.name + suffix)
                tmp = self.directory / self.names.partial_name(final.name, self.token)
                fs.write_new(tmp, data, sync=self.sync)
                fs.replace(tmp, final)
                self._placed.append(final)
            fs.replace(self.tmp, self.final)
            self.renamed = True
            if self.sync:
                fs.fsync_directory(self.directory)
        except OSError as exc:
            raise ScdaIOError(exc.errno or errno.EIO, f"cannot commit {self.name}: {exc.strerror or exc}") from exc

    def finish(self) -> None:
        """Remove what the commit replaced (after the ranks agreed on it). Never raises."""
        for _, previous in self._kept:
            self._remove(previous)

    def roll_back(self) -> None:
        """Undo the commit: the directory is as it was before (the temporary files removed). Never raises."""
        fs = self._undo
        if self.renamed:
            try:
                fs.replace(self.final, self.tmp)  # first: while the temporary name exists, the commit is not done
            except OSError:
                if self.tree:  # a step that no rank agreed on must not stay: removed with its files instead
                    self._remove(self.final)
        for final in self._placed:
            with contextlib.suppress(OSError):
                fs.unlink(final)
        for final, previous in reversed(self._kept):
            with contextlib.suppress(OSError):
                fs.replace(previous, final)
        self.discard()
        if self.renamed and self.sync:
            with contextlib.suppress(OSError):
                fs.fsync_directory(self.directory)

    def discard(self) -> None:
        """Remove the commit's temporary files (the checkpoint's and the records'). Never raises."""
        for name in (self.name, *self.names.record_names(self.name)):
            self._remove(self.directory / self.names.partial_name(name, self.token))

    def _remove(self, path: Path) -> None:
        """Remove a file, or a directory of the commit with its files (a link is unlinked, never followed). Never raises."""
        with contextlib.suppress(OSError):
            if self.tree and stat.S_ISDIR(os.lstat(path).st_mode):
                remove_tree(path)
            else:
                self._undo.unlink(path)


def remove_tree(path: Path) -> None:
    """Remove the directory ``path`` and its files; a file that others removed already is no error. Raises OSError."""

    def gone_already(fn: Any, where: str, exc: Any) -> None:
        if not isinstance(exc[1] if isinstance(exc, tuple) else exc, FileNotFoundError):
            raise exc[1] if isinstance(exc, tuple) else exc

    shutil.rmtree(path, onerror=gone_already)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def recover(directory: Path, listing: Listing, names: StepNames, fs: FileSystem = LOCAL, log: RankLogger | None = None) -> bool:
    """Finish or undo the commits that a killed job left (its ``.partial-`` and ``.previous-`` files). Not collective.

    A commit whose checkpoint still has its temporary name did not happen:
    what it set aside is put back and its temporary files are removed.  A
    commit whose checkpoint was renamed happened: what it set aside is
    removed.  A ``.previous-`` name that is not a regular file (a link
    planted there) is never put back: it is left alone, with a warning.

    Returns
    -------
    bool
        Whether anything was changed (the caller lists the directory again).
    """
    by_token: dict[str, list[tuple[str, Name]]] = {}
    for name, n in listing.pending:
        by_token.setdefault(n.token, []).append((name, n))
    changed = False
    for files in by_token.values():
        done = not any(n.kind == "partial" and n.suffix == "" for _, n in files)
        previous = {n.suffix: name for name, n in files if n.kind == "previous"}
        for name, n in files:
            if n.kind == "previous" and not _regular(directory / name):
                if log is not None:
                    log.warning("%s is not a regular file (a link?): not put back as %s, left alone", name, n.base)
                del previous[n.suffix]
        if not done and previous:
            checkpoint = names.build_name(files[0][1].step)
            if "" in previous:  # every old record was set aside before the checkpoint's link: the records there are new
                for record in names.record_names(checkpoint):
                    with contextlib.suppress(OSError):
                        if _regular(directory / record):
                            fs.unlink(directory / record)
            for suffix, name in previous.items():
                if log is not None:
                    log.info("putting back %s, set aside by a commit that did not finish", checkpoint + suffix)
                with contextlib.suppress(OSError):
                    fs.replace(directory / name, directory / (checkpoint + suffix))
                    changed = True
            previous = {}
        for name, n in files:
            if n.kind == "partial" or (n.suffix in previous and previous[n.suffix] == name):
                if n.kind == "partial" and n.suffix == "" and log is not None:
                    log.info("removing %s, left by a save that did not finish", name)
                with contextlib.suppress(OSError):
                    fs.unlink(directory / name)
                    changed = True
    return changed
