"""The checkpoint manager: a façade over the directory objects, the policies and the collective calls.

:class:`CheckpointManager` opens every public call as one collective call
(:func:`amrckpt.comm.collective`) and runs rank 0's file-system steps on a
:class:`~amrckpt.manager.CheckpointDirectory` inside it, agreed: an error of
any rank is raised on every rank.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Generic, TypeVar

from .._files import FileSystem
from .._logging import RankLogger, get_logger
from ..comm import Comm, collective, collective_method, current_call, install_excepthook, mpi_of, unwatch, watch
from ..errors import (
    AmrckptError,
    ManagerError,
)
from ..restart import Loaded, load
from ..scda import FileAccess
from ..schema import CheckpointSchema
from ._abort import abort_job
from ._aside import SetAside
from ._decorator import as_schema
from ._directory import CheckpointDirectory
from ._handle import SaveHandle
from ._levels import Level, open_level
from ._policies import AnyOf, Decision, EveryNSteps, Moment, SavePolicy, shared_decision
from ._records import CheckpointRecord, StepMetadata, agreed_facts
from ._restore import Restored, Skipped
from ._retention import KeepLast, KeepPolicy
from .cache import NodeCache

__all__ = ["CheckpointManager"]

log = get_logger("amrckpt.manager")

EXIT_WAIT = 5.0
"""Seconds the ranks whose exception leaves a manager's ``with`` block wait for each other before the job is aborted."""

S = TypeVar("S", bound=CheckpointSchema)


class CheckpointManager(Generic[S]):
    """Checkpoints a simulation into a directory: when to save, atomically, what to keep, where to restart.

    Collective: create and use it on every rank of ``comm``.  Each call of
    :meth:`save` asks the save policy on every rank and takes one shared
    decision (an allreduce), so a signal received by one rank is enough.  A
    checkpoint is written under a temporary name, synced (``fsync``,
    ``MPI_File_sync``) and closed; rank 0 writes its records beside it (run
    record, step record: reason, metrics, metadata), renames it, and syncs
    the directory (:class:`~amrckpt.manager.CheckpointDirectory`): a file
    with the final name ``<prefix>-<step>.scda`` is always complete and has
    its records, and a job killed at any moment leaves at most temporary
    files, which the next manager removes.  Retention deletes old
    checkpoints only after a new one is committed, never the newest valid
    one, and never, for a policy that judges by the records, a step whose
    record is unknown.  A checkpoint that a restart finds damaged (twice)
    is kept aside under another name (never overwritten) and reported
    (:class:`~amrckpt.errors.CheckpointSkippedWarning`); one that cannot be
    read (an I/O error) is left where it is, and the restart fails.  A lock on
    the directory (``flock``, held by rank 0) keeps a second manager out.

    Parameters
    ----------
    directory : str or os.PathLike
        Where the checkpoints go (created if needed).
    schema : type of CheckpointSchema
        What is saved, and what :meth:`restore_latest` loads into.
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        The communicator (None: serial).
    save_policy : SavePolicy, optional
        When to save, e.g. ``EveryNSteps(100) | OnSignal() | BeforeWallTime()``
        (default ``EveryNSteps(100)``).
    keep_policy : KeepPolicy, optional
        What to keep, e.g. ``KeepLast(3) | KeepEvery(1000)`` (default
        ``KeepLast(3)``).  Retention belongs to the manager that saves: a
        manager applies its own policy to the whole directory after each of
        its commits, whatever policy the checkpoints were written under
        (each step record notes it); pass ``KeepAll()`` to a manager that
        must not delete anything.
    background : bool, optional
        Save in a background thread: :meth:`save` copies the state in memory
        and returns; the simulation goes on while the copy is written.  The
        next save, :meth:`wait` and :meth:`close` wait for it and raise its
        error, if any, on every rank.  Needs ``MPI_THREAD_MULTIPLE`` under MPI.
        The copy goes into buffers kept between saves (one copy of the state
        stays allocated until :meth:`close`), by as many threads as this
        rank has cores to itself (the cores of the node divided among its ranks).
    prefix : str, optional
        File names are ``<prefix>-<step, 12 digits>.scda``.
    sync : bool, optional
        ``fsync`` every checkpoint file (``MPI_File_sync``), its records and
        the directory on commit (default True); it sets ``access.sync``.
    access : amrckpt.scda.FileAccess, optional
        How the checkpoints are written: MPI-IO hints (``info``, also used
        by every restore; see ``docs/scaling.md`` for Lustre and GPFS
        values, and ``AMRCKPT_MPIIO_HINTS`` for hints from the environment),
        byte backend, truncation and line-break ``style``, as for
        :func:`amrckpt.save`.  Its ``sync`` is the manager's ``sync``.
    check_mesh : bool, optional
        Check the mesh's leaves on every save, as :func:`amrckpt.save` does (default True).
    fs : FileSystem, optional
        The file operations of the directory's rank-0 steps (records,
        renames, links, directory fsync); default the operating system's
        (:class:`~amrckpt.manager.LocalFileSystem`).
        ``amrckpt.testing.FaultyFileSystem`` injects faults.
    cache : NodeCache, optional
        A node-local level (SCR's cache): each save writes every rank's
        pieces of the file into its node's cache directory (with partner
        copies on other nodes), committed there as here, and blocks only for
        that; the shared file, byte-identical to a direct save's, is written
        by a flush.  A restart takes the newest step complete in a cache
        (read in place by the same process count and node layout, a lost
        node's pieces from its partners; flushed first, then loaded, on
        another) or in the directory (any process count).  Not with
        ``background=True``.
    flush_policy : SavePolicy, optional
        When a cached step is flushed into the directory, in the background
        (asked after every cached save, e.g. ``EveryNSteps(1000)``); a step
        is also flushed when a policy asks to halt and at :meth:`close`
        (default: only then).
    abort_on_error : bool, optional
        In an MPI job of several processes (default True): an exception of
        one rank's own that leaves a ``with CheckpointManager(...)`` block
        (not one that amrckpt raised on every rank) waits at most
        :data:`EXIT_WAIT` seconds for the other ranks to leave theirs the
        same way; if they do not, it is logged with its traceback
        (rank-tagged) and the job ends (``MPI_Abort``), so that the other
        ranks do not wait forever in their next collective.  An exception
        that nothing catches ends the job the same way, after its traceback
        (a ``sys.excepthook``, as ``python -m mpi4py`` installs).  False:
        the exception propagates, and a plain ``mpiexec python script.py``
        may hang.  No effect without MPI or on one process.
    collective_timeout : float, optional
        Seconds a collective call of this manager waits for the other ranks
        to arrive before it raises
        :class:`~amrckpt.errors.CollectiveTimeoutError` naming who did not
        come (default ``AMRCKPT_COLLECTIVE_TIMEOUT``, else 600).  It bounds
        how far apart the ranks may reach a call, not how long a save takes.

    Raises
    ------
    ManagerError
        On every rank: another manager holds the directory, its lock file is
        not amrckpt's (a link, a special file, or a file it did not create:
        never truncated), or it cannot be created or used.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        schema: type[S],
        *,
        comm: Any = None,
        save_policy: SavePolicy | None = None,
        keep_policy: KeepPolicy | None = None,
        background: bool = False,
        prefix: str = "ckpt",
        sync: bool = True,
        access: FileAccess | None = None,
        check_mesh: bool = True,
        fs: FileSystem | None = None,
        cache: NodeCache | None = None,
        flush_policy: SavePolicy | None = None,
        abort_on_error: bool = True,
        collective_timeout: float | None = None,
    ) -> None:
        level: Level | None = None
        self._watched = False
        with collective(comm, "CheckpointManager", timeout=collective_timeout) as call:
            self.comm: Comm = call.comm
            self.log = RankLogger(log, self.comm.rank, self.comm.size)
            self._dir = CheckpointDirectory(directory, prefix=prefix, fs=fs, sync=sync, log=self.log)
            try:
                self.access = FileAccess.of(access).replace(sync=sync)  # refused on every rank if not a FileAccess
                watch(call, collective_timeout)  # this manager's timeout; exit notices under MPI
                self._watched = True
                self.schema = schema
                self.save_policy: SavePolicy = save_policy if save_policy is not None else EveryNSteps(100)
                self.keep_policy: KeepPolicy = keep_policy if keep_policy is not None else KeepLast(3)
                self.abort_on_error = abort_on_error
                if abort_on_error and mpi_of(self.comm) is not None and self.comm.size > 1:
                    install_excepthook()  # an uncaught exception on one rank ends the job (python -m mpi4py's behaviour)
                self._last_step: int | None = None
                self._last_time = time.time()
                self._last_save_time: float | None = None
                self.halt_requested = False
                self._aside = SetAside(self._dir)  # damaged checkpoints kept aside, or (if that failed) never overwritten
                self._closed = False
                self.restored_step: int | None = None
                self.restored_from: str | None = None
                self.skipped: tuple[Skipped, ...] = ()
                call.run(self._dir.open, on=0)  # mkdir, lock, cut-short commits: every step of rank 0's agreed, OSErrors included
                call.agree("CheckpointManager: open the directory")
                kw: dict[str, Any] = {"keep_policy": self.keep_policy, "access": self.access, "check_mesh": check_mesh}
                level = open_level(call, self._dir, cache, background, flush_policy, aside=self._aside, log=self.log, **kw)
                self._level: Level = level
                AnyOf([self.save_policy]).bind(self.comm)  # collective: e.g. BeforeWallTime learns the job's end on rank 0
                AnyOf([self.save_policy]).start()
            except BaseException:
                if level is not None:
                    level.release()
                self._dir.close()
                if self._watched:
                    unwatch(self.comm)
                raise

    @property
    def directory(self) -> Path:
        """The checkpoint directory."""
        return self._dir.path

    @property
    def prefix(self) -> str:
        """The prefix of the checkpoints' names."""
        return self._dir.names.prefix

    @property
    def sync(self) -> bool:
        """Whether files and directory are synced on commit."""
        return self._dir.sync

    def path_of(self, step: int) -> Path:
        """Return the file of the checkpoint of ``step``: ``<directory>/<prefix>-<step:012d>.scda``. Not collective."""
        return self._dir.path_of(step)

    # -- deciding -------------------------------------------------------------

    @collective_method("CheckpointManager.decide")
    def decide(self, step: int) -> Decision:
        """Ask the save policy on every rank; return the decision they share. Collective.

        One allreduce (the maxima of whether to save, whether to halt, and
        the lowest rank that wants to save) decides; when a save happens, a
        second carries that rank's reason text (its policies' reasons joined
        by ``"; "``, e.g. ``"received SIGTERM"`` of the one rank that got
        the signal) to every rank for the history.

        Returns
        -------
        Decision
            The same on every rank.
        """
        call = current_call(self.comm)
        assert call is not None
        moment = Moment(step, time.time(), self._last_step, self._last_time, tuple(self._level.seconds), self._last_save_time)
        return shared_decision(call, self.save_policy, moment)

    # -- saving ---------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Any,
        *,
        force: bool = False,
        overwrite: bool = False,
        time_value: float | None = None,
        metrics: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SaveHandle:
        """Save ``state`` as the checkpoint of ``step`` if the policy says so (or ``force``). Collective.

        Parameters
        ----------
        step : int
            The simulation step (the checkpoint's name).
        state : CheckpointSchema or checkpointable object
            This rank's state: an instance of the manager's schema, or an
            object of a class decorated with :func:`~amrckpt.checkpointable`.
        force : bool, optional
            Save whatever the policy says.
        overwrite : bool, optional
            Allow a step that has a checkpoint (replaced atomically: the old
            one stays until the new one is committed, and its records are
            replaced with it) or is lower than the newest checkpoint (the newer
            ones stay, and a restart still takes the newest: :meth:`delete`
            them for a run that goes back in time).  Default False: such a
            save raises :class:`~amrckpt.errors.StepAlreadyExistsError`.
            A checkpoint of ``step`` whose metadata do not verify is kept
            aside (never overwritten, reported by a warning); damaged
            checkpoints never count.
        time_value : float, optional
            The simulation time to record (default: the state's ``time`` field).
        metrics : dict, optional
            Numbers that judge this checkpoint (``{"loss": 0.12}``), recorded
            in the step record and read by :class:`~amrckpt.manager.KeepBest`.
            JSON; the same on every rank (reduce them first).
        metadata : dict, optional
            Anything else to record with the checkpoint in its step record
            (orbax's ``custom_metadata``): JSON, the same on every rank.

        Returns
        -------
        SaveHandle
            True when a checkpoint was written (or, in the background,
            started); ``result()`` waits for a background save.  If a policy
            asked to stop, :attr:`halt_requested` becomes True.

        Raises
        ------
        StepAlreadyExistsError
            On every rank, if ``step`` has a checkpoint or is lower than the
            newest one and ``overwrite`` is False; nothing is written.
        ManagerError
            On every rank, if ``metrics`` or ``metadata`` are not JSON or
            differ between ranks, or if the manager is closed (nothing is
            written).
        SchemaError, ScdaIOError
            On every rank, if the state is invalid or the save fails; the
            previous checkpoints are untouched and no temporary file stays.
        """
        if self._closed:
            raise ManagerError(
                "CheckpointManager.save: the manager is closed (close() or the end of its with block); "
                "open a new CheckpointManager on the directory to save again"
            )
        with collective(self.comm, "CheckpointManager.save") as call:
            self._level.ready()
            decision = self.decide(step)
            if decision.halt:
                self.halt_requested = True
            if not (force or decision.save):
                return SaveHandle(step, False, None)
            reason = "forced" if force and not decision.save else decision.reason
            # Metrics and metadata checked (JSON, equal on every rank) and the step (rank 0's listing), in one allreduce:
            # ``extra`` holds the keys to add to the step record.
            unusable = frozenset(self._aside.unusable)
            extra, skipped = agreed_facts(call, metrics, metadata, lambda: self._dir.prepare_step(step, overwrite, unusable))
            self._aside.report(skipped)
            checkpoint = as_schema(self.schema, state)
            if time_value is None:
                time_value = getattr(checkpoint, "time", None) if "time" in checkpoint.__amrckpt_fields__ else None
            handle = self._level.save(step, checkpoint, {"reason": reason, "time": time_value, **extra}, decision.halt)
            self._last_step, self._last_time = step, time.time()  # a save that failed may be tried again at the same step
            self._last_save_time = self._last_time
            return handle

    def wait(self) -> None:
        """Wait for a background save and a flush in progress; raise their error (the same on every rank). Collective."""
        self._level.wait()

    def flush(self) -> int | None:
        """Flush the newest cached step of this manager into the directory, now, and wait for it (SCR's flush). Collective.

        Returns
        -------
        int or None
            The step flushed (None: no cache, or nothing cached that is not flushed).

        Raises
        ------
        ManagerError, ScdaIOError
            On every rank, if the cached step is incomplete or the write or
            commit fails; the cached step stays, the directory is as before.
        """
        with collective(self.comm, "CheckpointManager.flush"):
            self.wait()
            return self._level.flush()

    # -- discovering ----------------------------------------------------------

    def history(self) -> list[CheckpointRecord]:
        """List the checkpoints in the directory, oldest first, with their step records and validity. Collective.

        Rank 0 reads the directory, each checkpoint's metadata (footer,
        index, manifest, with CRCs) and the records beside it, and
        broadcasts.  A record that is missing or cannot be read leaves the
        step's facts unknown (``record_problem`` says why); it never makes
        this call fail.
        """
        with collective(self.comm, "CheckpointManager.history") as call:
            return call.on_root(self._dir.history, what="history")

    def latest(self) -> CheckpointRecord | None:
        """Return the newest valid checkpoint, or None. Collective.

        A newer file that does not verify (footer, index, metadata CRCs) is
        skipped, with a log message saying why (:meth:`restore_latest`
        keeps such files aside and warns).
        """
        for r in reversed(self.history()):
            if r.valid:
                return r
            self.log.warning("skipping %s: %s", r.path, r.problem)
        return None

    def all_steps(self) -> list[int]:
        """Return the steps that have a checkpoint, oldest first (orbax's ``all_steps``). Collective.

        From the directory listing alone (rank 0 lists and broadcasts): a
        file has its final name only once its commit is done, so every step
        listed was committed; none is opened or verified (:meth:`history`
        and :meth:`latest` verify).
        """
        with collective(self.comm, "CheckpointManager.all_steps") as call:
            return call.on_root(lambda: sorted(self._dir.listing().checkpoints), what="all_steps")

    def latest_step(self) -> int | None:
        """Return the newest committed step, or None (orbax's ``latest_step``). Collective.

        Like :meth:`all_steps`, from the listing without opening a file;
        :meth:`latest` returns the newest checkpoint that verifies, which a
        restart takes.
        """
        with collective(self.comm, "CheckpointManager.latest_step"):
            steps = self.all_steps()
        return steps[-1] if steps else None

    # -- restoring ------------------------------------------------------------

    def restore_latest(
        self, *, into: Any = None, partition: Any = "uniform", fields: list[str] | None = None, adapt: Any = None
    ) -> Any:
        """Load the newest checkpoint that loads and verifies; fall back to older ones. Collective.

        Every byte read is checked against its CRC32.  A checkpoint found
        damaged (a CRC32 that differs, a structure that contradicts its index,
        a missing footer), and found so again when read once more, is renamed
        aside (``<name>.damaged-<token>``, with its records: never overwritten
        or deleted by retention), reported by a
        :class:`~amrckpt.errors.CheckpointSkippedWarning` (rank 0), and the
        previous one is tried, as SCR's fallback; its step may be saved again.
        A checkpoint that cannot be read (an I/O error: ``EIO``, ``EACCES``,
        ``ENXIO``...) is no verdict: the restore raises, and the file stays
        where it is for the next restart.  A checkpoint that an older release
        kept aside as ``<name>.unreadable-<token>`` is first renamed back (if
        its step has no checkpoint) and read again.
        With a node cache, the newest step complete in the caches (same P and
        node layout; a lost node's pieces from partners), if newer than the
        directory's, is read in place from the pieces (the ranks send each
        other what they lack; :attr:`restored_from` is ``"cache"``; the step
        is flushed at :meth:`close`).  A newer cached step written by another
        process count or node layout is flushed into the directory first, by
        this job's ranks, from the node directories they see (a direct save's
        bytes, with the records of the job that cached it), and then loaded
        on this process count; if some of its writers' pieces are on no node
        that this job sees, it is passed over with a
        :class:`~amrckpt.errors.CachedStepsUnreachableWarning` (rank 0, and
        logged) naming the steps, their job shape and the ranks missing, and
        the cache's retention keeps it.

        Parameters
        ----------
        into : class decorated with :func:`~amrckpt.checkpointable`, optional
            Build an object of that class from the state (its
            ``from_checkpoint``); default: return the :class:`Restored`.
        partition : {"uniform", "weighted"} or Partition, optional
            How the leaves are split over the ranks, as for :func:`amrckpt.load`
            (default ``"uniform"``).
        fields : list of str, optional
            The fields to read, as for :func:`amrckpt.load` (default None: all).
        adapt : amrckpt.adapt.Adapt, Refine, Coarsen, Balance or a sequence of them, optional
            Change the mesh and its fields while loading, as for
            :func:`amrckpt.load` (e.g. ``Refine(levels=1)`` to continue one
            level finer); the restored state is an ordinary state of the schema.

        Returns
        -------
        Restored or object or None
            A :class:`~amrckpt.manager.Restored` (a :class:`~amrckpt.Loaded`
            with ``step`` and ``skipped``), the object built by ``into``, or
            None if there is no usable checkpoint.  The step restored is
            :attr:`restored_step`, the checkpoints skipped :attr:`skipped`.

        Raises
        ------
        ScdaIOError
            On every rank, with the errno and the file's name, if a checkpoint
            tried cannot be read (on any rank), or is not a regular file (a
            FIFO, a link: never followed); it is left where it is.
        SchemaError, CollectiveError
            On every rank, if the newest checkpoint does not match the schema,
            or a rank failed outside amrckpt's tree (``MemoryError``).

        Warns
        -----
        CheckpointSkippedWarning
            On rank 0, for each checkpoint kept aside.
        CachedStepsUnreachableWarning
            On rank 0, for cached steps of another job shape that this job cannot reach.
        """
        with collective(self.comm, "CheckpointManager.restore_latest") as call:
            self.wait()
            self.restored_step = self.restored_from = None
            self.skipped = ()

            def load_one(path: str | os.PathLike[str], access: FileAccess | None = None) -> Loaded[S]:
                kw: dict[str, Any] = {"partition": partition, "fields": fields, "adapt": adapt}
                return load(path, self.schema, comm=self.comm, access=FileAccess.of(access, info=self.access.info), **kw)

            # What an older release kept aside as unreadable is renamed back by rank 0 and read again (the cache compares with it).
            call.on_root(self._dir.readmit, what="restore: read again what was kept aside as unreadable")
            fetched, got = self._level.restore_newer(call, load_one)  # a newer step of the level's: in place, else flushed
            if fetched is not None and got is not None:
                self.restored_from = "cache"
                return self._restored(fetched, got, into)
            step, loaded, skipped = self._aside.newest(call, self.history(), load_one)
            if step is None or loaded is None:
                self.skipped = skipped
                return None
            self.restored_from = "cache" if step == fetched else "directory"
            return self._restored(step, loaded, into, skipped)

    def _restored(self, step: int, loaded: Loaded[S], into: Any, skipped: tuple[Skipped, ...] = ()) -> Any:
        self.restored_step = self._last_step = step
        self.skipped = skipped
        self._last_time = time.time()
        out = Restored.of(loaded, step, skipped)
        if into is not None:
            return into.from_checkpoint(out)
        return out

    def restore(
        self, step: int, *, into: Any = None, partition: Any = "uniform", fields: list[str] | None = None, adapt: Any = None
    ) -> Any:
        """Load the checkpoint of ``step`` (orbax's ``restore(step)``). Collective.

        Every byte read is checked against its CRC32; unlike
        :meth:`restore_latest` there is no fallback.  With a node cache, a
        step that only the caches hold is flushed into the directory first
        (by this job's ranks, whatever process count or node layout cached
        it), then loaded.

        Parameters
        ----------
        step : int
            The step to load (one of :meth:`all_steps`).
        into : class decorated with :func:`~amrckpt.checkpointable`, optional
            Build an object of that class from the state; default: return
            the :class:`~amrckpt.Loaded`.
        partition : {"uniform", "weighted"} or Partition, optional
            As for :func:`amrckpt.load` (default ``"uniform"``).
        fields : list of str, optional
            As for :func:`amrckpt.load` (default None: all).
        adapt : amrckpt.adapt.Adapt, Refine, Coarsen, Balance or a sequence of them, optional
            As for :func:`amrckpt.load`: change the mesh and its fields while loading.

        Returns
        -------
        Restored or object
            A :class:`~amrckpt.manager.Restored` (a :class:`~amrckpt.Loaded`
            with ``step``), or the object built by ``into``.  The step
            restored is also :attr:`restored_step`.

        Raises
        ------
        StepNotFoundError
            On every rank, if ``step`` has no checkpoint (nor a cached step whose
            pieces this job reaches: a
            :class:`~amrckpt.errors.CachedStepsUnreachableWarning` then says why).
        CheckpointError, ScdaError
            On every rank, if the checkpoint is damaged or does not match the schema.
        ManagerError
            On every rank, if a cached step of ``step`` is incomplete or damaged.
        """
        with collective(self.comm, "CheckpointManager.restore") as call:
            self.wait()
            self._level.flush(step)  # a step that the level alone holds
            path = call.on_root(lambda: self._dir.existing(step), what="restore: find the step")
            kw: dict[str, Any] = {"partition": partition, "fields": fields, "adapt": adapt}
            loaded: Loaded[S] = load(path, self.schema, comm=self.comm, access=FileAccess(info=self.access.info), **kw)
            return self._restored(step, loaded, into)

    def delete(self, step: int) -> None:
        """Delete the checkpoint of ``step`` and its records (orbax's ``delete``). Collective.

        Rank 0 removes the file, then its run and step records (and syncs
        the directory if ``sync``), and rewrites the history index.

        Raises
        ------
        StepNotFoundError
            On every rank, if ``step`` has no checkpoint.
        ManagerError
            On every rank, if the file cannot be removed.
        """
        with collective(self.comm, "CheckpointManager.delete") as call:
            self.wait()
            call.on_root(lambda: self._dir.delete_step(step), what="delete")
        self._aside.unusable.discard(step)

    def metadata(self, step: int) -> StepMetadata:
        """Return what is known of the checkpoint of ``step`` without reading its data (orbax's ``metadata``). Collective.

        Rank 0 reads the file's footer, index and metadata (checked against
        their CRC32s) and the step record beside it, and broadcasts.

        Returns
        -------
        StepMetadata
            The file's own description (schema, fields, leaves, geometry; the run record beside it),
            the save's ``metrics`` and ``metadata``, and the step record.

        Raises
        ------
        StepNotFoundError
            On every rank, if ``step`` has no checkpoint.
        CheckpointError
            On every rank, if its metadata do not verify.
        """
        with collective(self.comm, "CheckpointManager.metadata") as call:
            return call.on_root(lambda: self._dir.metadata(step), what="metadata")

    # -- closing --------------------------------------------------------------

    def close(self, *, flush: bool = True) -> None:
        """Wait for a background save or flush, flush the newest cached step, restore signal handlers, release the directory.

        Collective.  ``flush=False`` leaves the newest cached step in the
        node caches only (a restart in the same allocation finds it there).
        """
        self._close(flush, "CheckpointManager.close", None)

    def _close(self, flush: bool, op: str, timeout: float | None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with collective(self.comm, op, timeout=timeout):
                self._level.close(flush)  # and the newest cached step, if not flushed yet (SCR's flush at the end of a run)
        finally:
            if self._watched:
                self._watched = False
                unwatch(self.comm)
            self._level.release()
            AnyOf([self.save_policy]).stop()
            self._dir.close()  # releases the flock (rank 0)

    def __enter__(self) -> CheckpointManager[S]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        own = not getattr(exc, "_amrckpt_agreed", False)  # an error of this rank's own: the others may be anywhere
        if own and self.abort_on_error and mpi_of(self.comm) is not None and self.comm.size > 1:
            # The ranks that raised meet in a close of their own within a few seconds; every rank raised: each goes on
            # with its exception.  Otherwise (some ranks are elsewhere, or in another call) the job ends, traceback printed.
            try:
                self._close(False, "CheckpointManager.close after an exception", EXIT_WAIT)
            except AmrckptError:
                abort_job(self.comm, self.log, exc)
            return
        self.close(flush=False)  # a run that failed leaves its cached steps where they are

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, {self.schema.__name__}, P={self.comm.size})"
