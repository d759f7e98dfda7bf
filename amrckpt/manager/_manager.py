"""The checkpoint manager: when to save, atomic commits, retention, discovery, background saves."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from .. import _faults
from .._logging import RankLogger
from ..comm import Call, Comm, SerialComm, as_comm, collective, collective_method, current_call, digest_of
from ..container import CheckpointInfo, read_info, run_record_path, write_run_record
from ..errors import (
    AmrckptError,
    CheckpointError,
    ManagerError,
    ScdaError,
    ScdaIOError,
    ScdaUsageError,
    SchemaError,
    StepAlreadyExistsError,
    StepNotFoundError,
)
from ..restart import Loaded, load
from ..schema import CheckpointSchema, save
from ._policies import Decision, EveryNSteps, Moment, SavePolicy, leaves
from ._retention import KeepLast, KeepPolicy, kept_steps
from ._snapshot import Snapshots, cores_per_rank

__all__ = [
    "CheckpointManager",
    "CheckpointRecord",
    "ManagerError",
    "SaveHandle",
    "StepAlreadyExistsError",
    "StepMetadata",
    "StepNotFoundError",
]

log = logging.getLogger("amrckpt.manager")

S = TypeVar("S", bound=CheckpointSchema)


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint in a manager's directory (what :meth:`CheckpointManager.history` lists).

    Attributes
    ----------
    step : int
        The simulation step.
    path : str
        The file.
    valid : bool
        Whether its footer, index and metadata verify (CRC32).
    problem : str or None
        Why it is not valid.
    time : float or None
        The simulation time (the schema's inline field ``time``, if any).
    saved_at : str or None
        UTC time the save started (ISO 8601).
    save_seconds : float or None
        Wall-clock seconds the save took, from writing to commit.
    nbytes : int
        The file's size.
    writer_size : int or None
        The number of processes that wrote it.
    reason : str or None
        Why it was written (the policy's reason, or ``"forced"``).
    metrics : dict or None
        The ``metrics`` passed to :meth:`CheckpointManager.save` (JSON), from the history.
    metadata : dict or None
        The ``metadata`` passed to :meth:`CheckpointManager.save` (JSON), from the history.
    """

    step: int
    path: str
    valid: bool
    problem: str | None = None
    time: float | None = None
    saved_at: str | None = None
    save_seconds: float | None = None
    nbytes: int = 0
    writer_size: int | None = None
    reason: str | None = None
    metrics: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class StepMetadata:
    """What :meth:`CheckpointManager.metadata` returns for one step (orbax's ``StepMetadata``).

    Attributes
    ----------
    step : int
        The simulation step.
    path : str
        The checkpoint file.
    info : CheckpointInfo
        What :func:`amrckpt.read_info` reads: the file's manifest (schema,
        fields, dtypes, leaves, inline values such as ``time``) and index,
        checked against their CRC32s, and the run record beside the file
        (writers, save time); the data are not read.
    metrics : dict or None
        The ``metrics`` of the save (JSON), from the history.
    metadata : dict or None
        The user ``metadata`` of the save (orbax's ``custom_metadata``), from the history.
    record : dict
        The whole history record of the step (``saved_at``, ``save_seconds``,
        ``reason``, ``writer_size``... and any key later versions add); empty
        if the history has none.
    """

    step: int
    path: str
    info: CheckpointInfo
    metrics: dict[str, Any] | None
    metadata: dict[str, Any] | None
    record: dict[str, Any]


class SaveHandle:
    """The outcome of :meth:`CheckpointManager.save`: done at once, or a background save in flight (a future).

    True (``bool(handle)``) when a checkpoint was written or, in the
    background, started; False when the save policy did not ask for one.

    An error of a background save is raised once by the manager's next
    :meth:`~CheckpointManager.save`, :meth:`~CheckpointManager.wait` or
    :meth:`~CheckpointManager.close`, on every rank, unless :meth:`result`
    or :meth:`exception` reported it first; :meth:`result` raises it each
    time it is called.  The error itself is agreed on by all ranks (the
    commit is collective), so the same calls give the same outcome on every
    rank.

    Attributes
    ----------
    step : int
        The step of the save.
    saved : bool
        Whether a checkpoint was written (or started in the background).
    path : pathlib.Path or None
        The checkpoint's file once committed (None if nothing is saved).
    """

    def __init__(self, step: int, saved: bool, path: Path | None, thread: threading.Thread | None = None) -> None:
        self.step = step
        self.saved = saved
        self.path = path
        self._thread = thread
        self._error: BaseException | None = None
        self._reported = False

    def __bool__(self) -> bool:
        return self.saved

    def __repr__(self) -> str:
        state = "running" if not self.done() else ("failed" if self._error is not None else "done")
        return f"SaveHandle(step={self.step}, saved={self.saved}, {state})"

    def done(self) -> bool:
        """Return whether the save has finished (at once for a save in the foreground). Not collective.

        For a background save the answer may differ between ranks at the
        same moment: poll with it, finish with :meth:`result`.
        """
        return self._thread is None or not self._thread.is_alive()

    def _join(self, timeout: float | None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the background save of step {self.step} is still running after {timeout} s")

    def result(self, timeout: float | None = None) -> Path | None:
        """Wait for the save; return the checkpoint's path (None if nothing was saved), or raise its error.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (default: until the save ends).

        Returns
        -------
        pathlib.Path or None

        Raises
        ------
        AmrckptError
            The save's error, the same on every rank (see the class).
        TimeoutError
            If the save is still running after ``timeout`` (on this rank only).
        """
        self._join(timeout)
        if self._error is not None:
            self._reported = True
            raise self._error
        return self.path if self.saved else None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the save; return its error (then not raised again by the manager) or None.

        Raises
        ------
        TimeoutError
            If the save is still running after ``timeout`` (on this rank only).
        """
        self._join(timeout)
        if self._error is not None:
            self._reported = True
        return self._error


HISTORY = "amrckpt-history.jsonl"
LOCK = ".amrckpt.lock"


def read_history(directory: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """Read a manager's history (``amrckpt-history.jsonl``): the newest entry of each step.

    Not collective.  The history is advisory (the checkpoints are the
    truth): a missing file gives ``{}``, and lines that do not parse are
    skipped.

    Returns
    -------
    dict of int to dict
        Step to its entry (step, path, time, save_seconds, nbytes,
        writer_size, reason, saved_at, hostname, ...).
    """
    logged: dict[int, dict[str, Any]] = {}
    with contextlib.suppress(OSError):
        for line in (Path(directory) / HISTORY).read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                e = json.loads(line)
                logged[int(e["step"])] = e
    return logged


class CheckpointManager(Generic[S]):
    """Checkpoints a simulation into a directory: when to save, atomically, what to keep, where to restart.

    Collective: create and use it on every rank of ``comm``.  Each call of
    :meth:`save` asks the save policy on every rank and takes one shared
    decision (an allreduce), so a signal received by one rank is enough.  A
    checkpoint is written under a temporary name, synced (``fsync``,
    ``MPI_File_sync``), closed, renamed by rank 0 and the directory synced:
    a file with the final name ``<prefix>-<step>.scda`` is always complete,
    and a job killed at any moment leaves at most a temporary file, removed
    by the next manager.  Retention deletes old checkpoints only after a new
    one is committed and never deletes the newest valid one.  A lock on the
    directory (``flock``, held by rank 0) keeps a second manager out.

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
        What to keep, e.g. ``KeepLast(3) | KeepEvery(1000)`` (default ``KeepLast(3)``).
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
        ``fsync`` files and directory on commit (default True).
    save_kwargs : dict, optional
        Passed to :func:`amrckpt.save` (``style``, ``check_mesh``...).
    info : dict of str to str, or mpi4py.MPI.Info, optional
        MPI-IO hints for every save and restore (``save_kwargs["info"]``
        wins for saves); see ``docs/scaling.md`` for Lustre and GPFS values,
        and ``AMRCKPT_MPIIO_HINTS`` for hints from the environment.
    abort_on_error : bool, optional
        When an exception leaves a ``with CheckpointManager(...)`` block on
        any rank, log it with its traceback (rank-tagged) and call
        ``MPI_Abort`` on the communicator, so that the other ranks do not
        wait forever in their next collective (default False: the exception
        propagates).  ``python -m mpi4py`` aborts the job for an uncaught
        exception anywhere; this covers the ``with`` block for a program
        that cannot be started that way.  No effect without MPI or on one
        process.

    Raises
    ------
    ManagerError
        On every rank: another manager holds the directory, or it cannot be
        created or written.
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
        save_kwargs: dict[str, Any] | None = None,
        info: Any = None,
        abort_on_error: bool = False,
    ) -> None:
        with collective(comm, "CheckpointManager") as call:
            self.comm: Comm = call.comm
            self._init(
                call, directory, schema, save_policy, keep_policy, background, prefix, sync, save_kwargs, info, abort_on_error
            )

    def _init(
        self,
        call: Call,
        directory: str | os.PathLike[str],
        schema: type[S],
        save_policy: SavePolicy | None,
        keep_policy: KeepPolicy | None,
        background: bool,
        prefix: str,
        sync: bool,
        save_kwargs: dict[str, Any] | None,
        info: Any,
        abort_on_error: bool,
    ) -> None:
        self.log = RankLogger(log, self.comm.rank, self.comm.size)
        self.directory = Path(directory)
        self.schema = schema
        self.save_policy: SavePolicy = save_policy if save_policy is not None else EveryNSteps(100)
        self.keep_policy: KeepPolicy = keep_policy if keep_policy is not None else KeepLast(3)
        self.prefix = prefix
        self.sync = sync
        self.save_kwargs = dict(save_kwargs or {})
        self.info = info
        if info is not None:
            self.save_kwargs.setdefault("info", info)
        self.abort_on_error = abort_on_error
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", prefix):
            raise ManagerError(f"prefix {prefix!r}: use letters, digits and _ . + - only")
        self._pattern = re.compile(re.escape(prefix) + r"-(\d{12,})\.scda")
        self._lock_fd = -1
        self._dir_id: tuple[int, int] | None = None
        self._save_seconds: list[float] = []
        self._last_step: int | None = None
        self._last_time = time.time()
        self._last_save_time: float | None = None
        self.halt_requested = False
        self._pending: SaveHandle | None = None
        self._unusable: set[int] = set()  # steps a restore found damaged: a save may replace them
        self._bg_comm: Comm | None = None
        self._closed = False
        self.restored_step: int | None = None
        call.run(self._open_directory, on=0)  # every step of rank 0's is agreed on, OSErrors included
        call.agree("CheckpointManager: open the directory")
        self._snapshots: Snapshots | None = None
        if background:
            self._bg_comm = self._background_comm()
            self._snapshots = Snapshots(cores_per_rank(getattr(self.comm, "mpi_comm", None)))
        bind = getattr(self.save_policy, "bind", None)  # collective: e.g. BeforeWallTime learns the job's end on rank 0
        if bind is not None:
            bind(self.comm)
        start = getattr(self.save_policy, "start", None)
        if start is not None:
            start()

    # -- directory, lock, stale files ---------------------------------------

    def _open_directory(self) -> None:
        d = self.directory
        try:
            d.mkdir(parents=True, exist_ok=True)
            st = d.stat()
            self._dir_id = (st.st_dev, st.st_ino)
            fd = os.open(d / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ManagerError(f"cannot use the checkpoint directory {str(d)!r}: {exc.strerror or exc}") from exc
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                owner = (d / LOCK).read_text(errors="replace").strip() or "another process"
                raise ManagerError(f"the checkpoint directory {str(d)!r} is in use by another manager ({owner})") from exc
            self.log.warning("cannot lock %s (%s): the file system has no flock; two managers would not be kept apart", d, exc)
            fd = -1
        except ImportError:  # not a POSIX system
            pass
        if fd >= 0:
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {os.uname().nodename} since {since}\n".encode())
        self._lock_fd = fd
        for stale in d.glob(f".{self.prefix}-*.partial-*"):  # left by a save that never committed
            self.log.info("removing %s, left by a save that did not finish", stale)
            with contextlib.suppress(OSError):
                stale.unlink()
        for stale in d.glob(f".{HISTORY}.partial-*"):  # a history rewrite cut short (the history itself is intact)
            with contextlib.suppress(OSError):
                stale.unlink()
        for kept in d.glob(f".{self.prefix}-*.previous-*"):  # a same-step checkpoint set aside by a commit that was cut short
            final = d / kept.name[1:].rsplit(".previous-", 1)[0]
            with contextlib.suppress(OSError):
                if final.exists():
                    kept.unlink()
                else:
                    self.log.info("putting back %s, set aside by a commit that did not finish", final.name)
                    os.replace(kept, final)

    def _background_comm(self) -> Comm:
        if getattr(self.comm, "mpi_comm", None) is not None:
            from mpi4py import MPI

            if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
                raise ManagerError("background saves need MPI_THREAD_MULTIPLE (mpi4py.rc.thread_level = 'multiple')")
        return self.comm.dup()

    def path_of(self, step: int) -> Path:
        """Return the file of the checkpoint of ``step``."""
        return self.directory / f"{self.prefix}-{step:012d}.scda"

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
        moment = Moment(step, time.time(), self._last_step, self._last_time, tuple(self._save_seconds), self._last_save_time)

        def ask() -> Decision:
            mine = [p.decide(moment) for p in leaves(self.save_policy)]  # every policy is asked (triggers are consumed)
            return Decision(any(d.save for d in mine), any(d.halt for d in mine), "; ".join(d.reason for d in mine if d.reason))

        local = call.run(ask) or Decision(False, False, "")
        P = self.comm.size
        key = P - self.comm.rank if local.save else 0  # the largest key is the lowest saving rank
        save, halt, top = call.allreduce(maxima=[int(local.save), int(local.halt), key], what="decide").maxima
        if not save:
            return Decision(False, bool(halt), "")
        reason = call.allreduce(root_value=local.reason, root=P - top, what="decide: reason").value
        return Decision(True, bool(halt), str(reason))

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
            one stays until the new one is committed, and its history record
            is replaced) or is lower than the newest checkpoint (the newer
            ones stay, and a restart still takes the newest: :meth:`delete`
            them for a run that goes back in time).  Default False: such a
            save raises :class:`~amrckpt.errors.StepAlreadyExistsError`.
            Checkpoints that a restore of this manager found damaged never
            count.
        time_value : float, optional
            The simulation time to record (default: the state's ``time`` field).
        metrics : dict, optional
            Numbers that judge this checkpoint (``{"loss": 0.12}``), recorded
            in the history and read by :class:`~amrckpt.manager.KeepBest`.
            JSON; the same on every rank (reduce them first).
        metadata : dict, optional
            Anything else to record with the checkpoint in the history
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
            differ between ranks.
        SchemaError, ScdaIOError
            On every rank, if the state is invalid or the save fails; the
            previous checkpoints are untouched and no temporary file stays.
        """
        if self._closed:
            raise ScdaUsageError("CheckpointManager.save: the manager is closed")
        with collective(self.comm, "CheckpointManager.save"):
            return self._save(step, state, force, overwrite, time_value, metrics, metadata)

    def _save(
        self,
        step: int,
        state: Any,
        force: bool,
        overwrite: bool,
        time_value: float | None,
        metrics: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> SaveHandle:
        self.wait()
        decision = self.decide(step)
        if decision.halt:
            self.halt_requested = True
        if not (force or decision.save):
            return SaveHandle(step, False, None)
        reason = "forced" if force and not decision.save else decision.reason
        extra = self._preflight(step, overwrite, metrics, metadata)
        checkpoint = self._as_schema(state)
        if time_value is None:
            time_value = getattr(checkpoint, "time", None) if "time" in checkpoint.__amrckpt_fields__ else None
        self._last_step, self._last_time = step, time.time()
        self._last_save_time = self._last_time
        if self._bg_comm is None:
            self._commit(self.comm, step, checkpoint, reason, time_value, extra, overwrite)
            return SaveHandle(step, True, self.path_of(step))
        assert self._snapshots is not None
        copy = self._snapshots.take(checkpoint)  # the only blocking part of a background save
        handle = SaveHandle(step, True, self.path_of(step))
        handle._thread = threading.Thread(
            target=self._background,
            args=(handle, copy, reason, time_value, extra, overwrite),
            name=f"amrckpt-save-{step}",
            daemon=True,
        )
        self._pending = handle
        handle._thread.start()
        return handle

    def _preflight(
        self, step: int, overwrite: bool, metrics: dict[str, Any] | None, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Check metrics and metadata (JSON, equal on every rank) and the step (rank 0's listing). Collective.

        Returns the keys to add to the history record.
        """
        call = current_call(self.comm)
        assert call is not None

        def check() -> tuple[dict[str, Any], str]:
            extra: dict[str, Any] = {}
            try:
                for name, value in (("metrics", metrics), ("metadata", metadata)):
                    if value is None:
                        continue
                    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                        raise ManagerError(f"save: {name} must be a dict with str keys, not {type(value).__name__}")
                    extra[name] = json.loads(json.dumps(value))
                return extra, json.dumps(extra, sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise ManagerError(f"save: metrics and metadata must be JSON: {exc}") from exc

        extra, text = call.run(check) or ({}, "")
        if not call.allreduce(equal=[digest_of(text)], what="save: metrics").equal[0]:
            texts = call.allgather(text, what="save: metrics")  # only when they differ: name the ranks
            ranks = [r for r, t in enumerate(texts) if t != texts[0]]
            raise call.agreed(
                ManagerError(
                    f"save: metrics or metadata differ between ranks ({ranks} differ from rank 0): "
                    "pass values reduced over the ranks"
                )
            )
        call.on_root(lambda: self._check_step(step, overwrite), what="save: check the step")
        return extra

    def _check_step(self, step: int, overwrite: bool) -> None:
        """Raise StepAlreadyExistsError if ``step`` has a checkpoint or one newer exists (rank 0)."""
        self._begin_commit()  # first: the directory gone or replaced says so, not "cannot list"
        if overwrite:
            return
        newer = sorted(s for s in self._files() if s >= step and s not in self._unusable)
        newer = [s for s in newer if self._check(s)[0]]  # a damaged checkpoint (restart skips it) does not count
        if not newer:
            return
        if newer[0] == step:
            raise StepAlreadyExistsError(
                f"step {step} has a checkpoint ({self.path_of(step).name}): pass overwrite=True to replace it"
            )
        raise StepAlreadyExistsError(
            f"step {step} is lower than the newest checkpoint, step {newer[-1]}: pass overwrite=True to save it anyway "
            "(a restart still takes the newest), or delete the newer steps first"
        )

    def _as_schema(self, state: Any) -> S:
        if isinstance(state, self.schema):
            return state
        to_checkpoint = getattr(state, "to_checkpoint", None)
        if to_checkpoint is not None:
            out = to_checkpoint()
            if isinstance(out, self.schema):
                return out
        raise SchemaError(f"save: expected a {self.schema.__name__} or a checkpointable object, got {type(state).__name__}")

    def _background(
        self, handle: SaveHandle, state: S, reason: str, time_value: float | None, extra: dict[str, Any], overwrite: bool
    ) -> None:
        assert self._bg_comm is not None
        try:
            self._commit(self._bg_comm, handle.step, state, reason, time_value, extra, overwrite)
        except BaseException as exc:  # noqa: BLE001 - re-raised on every rank by wait() or the handle
            handle._error = exc

    def wait(self) -> None:
        """Wait for a background save; raise its error (the same on every rank) unless its handle reported it. Collective-safe."""
        handle, self._pending = self._pending, None
        if handle is None:
            return
        handle._join(None)
        if handle._error is not None and not handle._reported:
            handle._reported = True
            raise handle._error

    def _commit(
        self,
        comm: Comm,
        step: int,
        state: S,
        reason: str,
        time_value: float | None,
        extra: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        """Write, sync, close, rename on rank 0, sync the directory; then retention. Collective on ``comm``.

        The agreement after the rename is the commit point: if it fails (an
        error on rank 0, or a communication error), rank 0 takes the rename
        back, so that a save that raises never leaves a new checkpoint behind.
        After it, nothing collective remains: history and retention (rank 0)
        are advisory and only logged if they fail.
        """
        with collective(comm, "CheckpointManager.commit") as call:
            self._commit_in(call, step, state, reason, time_value, extra, overwrite)

    def _commit_in(
        self,
        call: Call,
        step: int,
        state: S,
        reason: str,
        time_value: float | None,
        extra: dict[str, Any] | None,
        overwrite: bool,
    ) -> None:
        comm = call.comm
        final = self.path_of(step)
        token = call.on_root(self._begin_commit, what="commit: check the directory")
        tmp = self.directory / f".{final.name}.partial-{token}"
        t0 = time.time()
        try:
            result = save(state, tmp, comm=comm, sync=self.sync, **self.save_kwargs)
        except BaseException:
            if comm.rank == 0:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise
        renamed = False
        backup: Path | None = None

        def rename() -> None:
            nonlocal renamed, backup
            try:
                if final.exists():  # a checkpoint of the same step: keep a link to put it back if the commit fails
                    backup = self.directory / f".{final.name}.previous-{token}"
                    os.link(final, backup)
                    with contextlib.suppress(FileNotFoundError):  # its run record is not the new file's
                        run_record_path(final).unlink()
                _inject("rename", comm, final)
                os.replace(tmp, final)
                renamed = True
                if self.sync:
                    _fsync_directory(self.directory, comm)
            except OSError as exc:
                raise ScdaIOError(exc.errno or errno.EIO, f"cannot commit {final.name}: {exc.strerror or exc}") from exc

        call.run(rename, on=0)
        try:
            call.agree("commit")
        except BaseException:
            if comm.rank == 0:
                self._roll_back(tmp, final, renamed, backup)
            raise
        if backup is not None:
            with contextlib.suppress(OSError):
                backup.unlink()
        seconds = time.time() - t0
        self._save_seconds.append(seconds)
        self.log.info("checkpoint %s committed (%.0f bytes, %.3f s): %s", final.name, result.nbytes, seconds, reason)
        if comm.rank == 0:
            # What depends on the run is kept beside the file, never in it (the file is a function of the state).
            run = result.run.model_copy(update={"save_seconds": seconds}) if result.run is not None else None
            entry = {"step": step, "path": final.name, "time": time_value, "save_seconds": seconds, "nbytes": result.nbytes}
            entry |= {"writer_size": comm.size, "reason": reason, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))}
            if run is not None:
                entry |= {"hostname": run.hostname, "mpi_library": run.mpi_library, "amrckpt_version": run.amrckpt_version}
            entry |= {"saved_at_unix": t0, **(extra or {})}
            try:
                if run is not None:
                    write_run_record(final, run, sync=self.sync)
                if overwrite or backup is not None:  # one record per step: the replaced checkpoint's goes
                    self._rewrite_history(drop={step}, add=entry)
                else:
                    self._append_history(entry)
                self._unusable.discard(step)
                self._apply_retention()
            except Exception as exc:  # noqa: BLE001 - committed already; the other ranks have returned
                self.log.warning(
                    "checkpoint %s committed, but history or retention failed: %s: %s", final.name, type(exc).__name__, exc
                )

    def _begin_commit(self) -> str:
        """Check that the directory is still the one locked (rank 0); return a token for the temporary name."""
        try:
            st = self.directory.stat()
        except OSError as exc:
            raise ManagerError(
                f"the checkpoint directory {str(self.directory)!r} is gone ({exc.strerror or exc}): it was removed "
                "or moved away while this manager used it; nothing was saved"
            ) from exc
        if self._dir_id is not None and (st.st_dev, st.st_ino) != self._dir_id:
            raise ManagerError(
                f"the checkpoint directory {str(self.directory)!r} was replaced (moved away, or removed and made again) "
                "while this manager used it; nothing was saved: open a new CheckpointManager to use the new directory"
            )
        return uuid.uuid4().hex[:12]

    def _roll_back(self, tmp: Path, final: Path, renamed: bool, backup: Path | None) -> None:
        """Undo a commit that the ranks did not agree on (rank 0): the directory is left as it was before."""
        with contextlib.suppress(OSError):
            tmp.unlink()
        if renamed:
            with contextlib.suppress(OSError):
                final.unlink()
        if backup is not None:
            with contextlib.suppress(OSError):
                os.replace(backup, final)
        if renamed and self.sync:
            with contextlib.suppress(OSError):
                _fsync_directory(self.directory, None)
        self.log.warning("the commit of %s failed; the directory is as before the save", final.name)

    def _append_history(self, entry: dict[str, Any]) -> None:
        try:
            with open(self.directory / HISTORY, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
        except OSError as exc:  # the history is advisory: the checkpoints themselves are the truth
            self.log.warning("cannot append to %s: %s", HISTORY, exc)

    def _rewrite_history(self, drop: set[int], add: dict[str, Any] | None = None) -> None:
        """Rewrite the history without the records of ``drop`` (and with ``add``), atomically (rank 0)."""
        path = self.directory / HISTORY
        try:
            lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        except OSError as exc:
            self.log.warning("cannot read %s: %s", HISTORY, exc)
            return
        kept = []
        for line in lines:
            try:
                step = int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                step = None
            if step not in drop:
                kept.append(line)
        if add is not None:
            kept.append(json.dumps(add))
        tmp = self.directory / f".{HISTORY}.partial-{uuid.uuid4().hex[:12]}"
        try:
            tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self.log.warning("cannot rewrite %s: %s", HISTORY, exc)

    def _apply_retention(self) -> None:
        """Delete what the keep policy drops (rank 0, after a commit; never the newest valid checkpoint)."""
        steps = sorted(self._files())
        if not steps:
            return
        keep = kept_steps(self.keep_policy, steps, read_history(self.directory))
        newest_valid = next((s for s in reversed(steps) if self._check(s)[0]), None)
        if newest_valid is not None:
            keep.add(newest_valid)
        for s in steps:
            if s not in keep:
                self.log.info("retention: removing %s", self.path_of(s).name)
                with contextlib.suppress(OSError):
                    self.path_of(s).unlink()
                with contextlib.suppress(OSError):
                    run_record_path(self.path_of(s)).unlink()

    # -- discovering ----------------------------------------------------------

    def _files(self) -> dict[int, Path]:
        out = {}
        try:
            names = os.listdir(self.directory)
        except OSError as exc:
            raise ManagerError(f"cannot list the checkpoint directory {str(self.directory)!r}: {exc.strerror or exc}") from exc
        for name in names:
            m = self._pattern.fullmatch(name)
            if m:
                out[int(m.group(1))] = self.directory / name
        return out

    def _check(self, step: int) -> tuple[bool, str | None]:
        try:
            read_info(self.path_of(step), comm=SerialComm())
        except (AmrckptError, OSError) as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return True, None

    def history(self) -> list[CheckpointRecord]:
        """List the checkpoints in the directory, oldest first, with their metadata and validity.

        Collective: rank 0 reads the directory and the checkpoints' metadata
        (footer, index, manifest, with CRCs; the run record and history
        beside them) and broadcasts.
        """
        with collective(self.comm, "CheckpointManager.history") as call:
            return call.on_root(self._history, what="history")

    def _history(self) -> list[CheckpointRecord]:
        logged = read_history(self.directory)
        records = []
        for step, path in sorted(self._files().items()):
            e = logged.get(step, {})
            try:
                info = read_info(path, comm=SerialComm())
            except (AmrckptError, OSError) as exc:
                records.append(
                    CheckpointRecord(
                        step,
                        str(path),
                        False,
                        f"{type(exc).__name__}: {exc}",
                        nbytes=_size(path),
                        metrics=e.get("metrics"),
                        metadata=e.get("metadata"),
                    )
                )
                continue
            t = info.manifest.values.get("time")
            records.append(
                CheckpointRecord(
                    step,
                    str(path),
                    True,
                    None,
                    t if isinstance(t, (int, float)) else e.get("time"),
                    info.saved_at or e.get("saved_at"),
                    e.get("save_seconds"),
                    _size(path),
                    info.writer_size or e.get("writer_size"),
                    e.get("reason"),
                    e.get("metrics"),
                    e.get("metadata"),
                )
            )
        return records

    def latest(self) -> CheckpointRecord | None:
        """Return the newest valid checkpoint, or None. Collective.

        A newer file that does not verify (footer, index, metadata CRCs) is
        skipped, with a warning saying why.
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
            return call.on_root(lambda: sorted(self._files()), what="all_steps")

    def latest_step(self) -> int | None:
        """Return the newest committed step, or None (orbax's ``latest_step``). Collective.

        Like :meth:`all_steps`, from the listing without opening a file;
        :meth:`latest` returns the newest checkpoint that verifies, which a
        restart takes.
        """
        with collective(self.comm, "CheckpointManager.latest_step"):
            steps = self.all_steps()
        return steps[-1] if steps else None

    def restore_latest(self, *, into: Any = None, partition: Any = "uniform", fields: list[str] | None = None) -> Any:
        """Load the newest checkpoint that loads and verifies; fall back to older ones. Collective.

        Every byte read is checked against its CRC32; a checkpoint that
        fails (damaged data, a missing footer) is skipped with a warning and
        the previous one is tried, as SCR falls back to the previous
        checkpoint.  A step skipped so may be saved again without
        ``overwrite``.

        Parameters
        ----------
        into : class decorated with :func:`~amrckpt.checkpointable`, optional
            Build an object of that class from the state (its
            ``from_checkpoint``); default: return the :class:`~amrckpt.Loaded`.
        partition : {"uniform", "weighted"} or Partition, optional
            How the leaves are split over the ranks, as for :func:`amrckpt.load`
            (default ``"uniform"``).
        fields : list of str, optional
            The fields to read, as for :func:`amrckpt.load` (default None: all).

        Returns
        -------
        Loaded or object or None
            None if there is no usable checkpoint.  The step restored is
            :attr:`restored_step`.
        """
        with collective(self.comm, "CheckpointManager.restore_latest"):
            return self._restore_latest(into, partition, fields)

    def _restore_latest(self, into: Any, partition: Any, fields: list[str] | None) -> Any:
        self.wait()
        self.restored_step = None
        for r in reversed(self.history()):
            if not r.valid:
                self.log.warning("skipping %s: %s", r.path, r.problem)
                self._unusable.add(r.step)
                continue
            try:
                loaded: Loaded[S] = load(r.path, self.schema, comm=self.comm, partition=partition, fields=fields, info=self.info)
            except (CheckpointError, ScdaError) as exc:
                self.log.warning("cannot restore %s, trying the previous checkpoint: %s: %s", r.path, type(exc).__name__, exc)
                self._unusable.add(r.step)
                continue
            return self._restored(r.step, loaded, into)
        return None

    def _restored(self, step: int, loaded: Loaded[S], into: Any) -> Any:
        self.restored_step = self._last_step = step
        self._last_time = time.time()
        if into is not None:
            return into.from_checkpoint(loaded)
        return loaded

    def _existing(self, step: int) -> Path:
        """Return the file of ``step`` (rank 0); raise StepNotFoundError if there is none."""
        path = self.path_of(step)
        if not path.is_file():
            have = sorted(self._files())
            raise StepNotFoundError(f"no checkpoint of step {step} in {str(self.directory)!r} (steps: {have if have else 'none'})")
        return path

    def restore(self, step: int, *, into: Any = None, partition: Any = "uniform", fields: list[str] | None = None) -> Any:
        """Load the checkpoint of ``step`` (orbax's ``restore(step)``). Collective.

        Every byte read is checked against its CRC32; unlike
        :meth:`restore_latest` there is no fallback.

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

        Returns
        -------
        Loaded or object
            The step restored is also :attr:`restored_step`.

        Raises
        ------
        StepNotFoundError
            On every rank, if ``step`` has no checkpoint.
        CheckpointError, ScdaError
            On every rank, if the checkpoint is damaged or does not match the schema.
        """
        with collective(self.comm, "CheckpointManager.restore") as call:
            self.wait()
            path = call.on_root(lambda: self._existing(step), what="restore: find the step")
            loaded: Loaded[S] = load(path, self.schema, comm=self.comm, partition=partition, fields=fields, info=self.info)
            return self._restored(step, loaded, into)

    def delete(self, step: int) -> None:
        """Delete the checkpoint of ``step`` and its history record (orbax's ``delete``). Collective.

        Rank 0 removes the file and its run record (and syncs the directory
        if ``sync``); the history loses the step's record.

        Raises
        ------
        StepNotFoundError
            On every rank, if ``step`` has no checkpoint.
        ManagerError
            On every rank, if the file cannot be removed.
        """

        def remove() -> None:
            path = self._existing(step)
            try:
                path.unlink()
                with contextlib.suppress(FileNotFoundError):  # the run record beside it
                    run_record_path(path).unlink()
                if self.sync:
                    _fsync_directory(self.directory, None)
            except OSError as exc:
                raise ManagerError(f"cannot delete {path.name}: {exc.strerror or exc}") from exc
            self._rewrite_history(drop={step})
            self.log.info("deleted %s", path.name)

        with collective(self.comm, "CheckpointManager.delete") as call:
            self.wait()
            call.on_root(remove, what="delete")
        self._unusable.discard(step)

    def metadata(self, step: int) -> StepMetadata:
        """Return what is known of the checkpoint of ``step`` without reading its data (orbax's ``metadata``). Collective.

        Rank 0 reads the file's footer, index and metadata (checked against
        their CRC32s) and the step's history record, and broadcasts.

        Returns
        -------
        StepMetadata
            The file's own description (schema, fields, leaves, geometry; the run record beside it),
            the save's ``metrics`` and ``metadata``, and the history record.

        Raises
        ------
        StepNotFoundError
            On every rank, if ``step`` has no checkpoint.
        CheckpointError
            On every rank, if its metadata do not verify.
        """

        def read() -> StepMetadata:
            path = self._existing(step)
            info = read_info(path, comm=SerialComm())
            record = read_history(self.directory).get(step, {})
            return StepMetadata(step, str(path), info, record.get("metrics"), record.get("metadata"), record)

        with collective(self.comm, "CheckpointManager.metadata") as call:
            return call.on_root(read, what="metadata")

    # -- closing --------------------------------------------------------------

    def close(self) -> None:
        """Wait for a background save, restore signal handlers, release the directory. Collective."""
        if self._closed:
            return
        self._closed = True
        try:
            with collective(self.comm, "CheckpointManager.close"):
                self.wait()
        finally:
            stop = getattr(self.save_policy, "stop", None)
            if stop is not None:
                stop()
            if self._bg_comm is not None:
                self._bg_comm.free()
            if self._snapshots is not None:
                self._snapshots.clear()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    def __enter__(self) -> CheckpointManager[S]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and self.abort_on_error and getattr(self.comm, "mpi_comm", None) is not None and self.comm.size > 1:
            self._abort(exc)
        self.close()

    def _abort(self, exc: BaseException) -> None:
        """Report ``exc`` (this rank only) and abort the whole MPI job: the other ranks may wait in a collective."""
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.log.rank_error("aborting the MPI job (abort_on_error=True), an exception left the manager's with block:\n%s", text)
        # The process ends within the next call: the traceback goes to stderr even where logging is not configured.
        sys.stderr.write(f"amrckpt: rank {self.comm.rank} of {self.comm.size}: aborting the MPI job: {text}")
        sys.stderr.flush()
        cast(Any, self.comm).mpi_comm.Abort(1)
        # MPICH's MPI_Abort can return before the process manager kills the job (seen with the mpich 5 wheel):
        # this rank must not go on into the collectives after the with block.
        os._exit(1)

    def __repr__(self) -> str:
        return f"CheckpointManager({str(self.directory)!r}, {self.schema.__name__}, P={self.comm.size})"


def _inject(kind: str, comm: Comm | None, path: Path) -> None:
    """Raise the OSError of an injected fault (amrckpt._faults), if one is due; a no-op unless a test injects faults."""
    if _faults.ACTIVE is not None:
        exc = _faults.io_error(kind, comm if comm is not None else as_comm(None), str(path))
        if exc is not None:
            raise exc


def _fsync_directory(directory: Path, comm: Comm | None) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        _inject("fsync", comm, directory)
        os.fsync(fd)
    finally:
        os.close(fd)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def record_dict(r: CheckpointRecord) -> dict[str, Any]:
    """Return a record as a JSON-compatible dict (for tools)."""
    return asdict(r)
