"""The checkpoint manager: when to save, atomic commits, retention, discovery, background saves."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .. import _faults
from .._logging import RankLogger
from ..comm import Comm, MPIComm, agree, as_comm, run_on_root
from ..errors import AmrckptError, CheckpointError, ManagerError, ScdaError, ScdaIOError, ScdaUsageError, SchemaError
from ..restart import Loaded, load, read_info
from ..schema import CheckpointSchema, save
from ._policies import Decision, EveryNSteps, Moment, SavePolicy
from ._retention import KeepLast, KeepPolicy
from ._snapshot import Snapshots, cores_per_rank

__all__ = ["CheckpointManager", "CheckpointRecord", "ManagerError"]

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


HISTORY = "amrckpt-history.jsonl"
LOCK = ".amrckpt.lock"


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
        rank has cores to itself (``amrckpt.manager._snapshot``).
    prefix : str, optional
        File names are ``<prefix>-<step, 12 digits>.scda``.
    sync : bool, optional
        ``fsync`` files and directory on commit (default True).
    save_kwargs : dict, optional
        Passed to :func:`amrckpt.save` (``style``, ``info``, ``check_mesh``...).

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
    ) -> None:
        self.comm: Comm = as_comm(comm)
        self.log = RankLogger(log, self.comm.rank, self.comm.size)
        self.directory = Path(directory)
        self.schema = schema
        self.save_policy: SavePolicy = save_policy if save_policy is not None else EveryNSteps(100)
        self.keep_policy: KeepPolicy = keep_policy if keep_policy is not None else KeepLast(3)
        self.prefix = prefix
        self.sync = sync
        self.save_kwargs = dict(save_kwargs or {})
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
        self._thread: threading.Thread | None = None
        self._async_error: BaseException | None = None
        self._bg_comm: Comm | None = None
        self._closed = False
        self.restored_step: int | None = None
        err: BaseException | None = None
        if self.comm.rank == 0:
            try:
                self._open_directory()
            except AmrckptError as exc:
                err = exc
        agree(self.comm, err, what="CheckpointManager")
        self._snapshots: Snapshots | None = None
        if background:
            self._bg_comm = self._background_comm()
            self._snapshots = Snapshots(cores_per_rank(getattr(self.comm, "mpi_comm", None)))
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
        for kept in d.glob(f".{self.prefix}-*.previous-*"):  # a same-step checkpoint set aside by a commit that was cut short
            final = d / kept.name[1:].rsplit(".previous-", 1)[0]
            with contextlib.suppress(OSError):
                if final.exists():
                    kept.unlink()
                else:
                    self.log.info("putting back %s, set aside by a commit that did not finish", final.name)
                    os.replace(kept, final)

    def _background_comm(self) -> Comm:
        if isinstance(self.comm, MPIComm):
            from mpi4py import MPI

            if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
                raise ManagerError("background saves need MPI_THREAD_MULTIPLE (mpi4py.rc.thread_level = 'multiple')")
        return self.comm.dup()

    def path_of(self, step: int) -> Path:
        """Return the file of the checkpoint of ``step``."""
        return self.directory / f"{self.prefix}-{step:012d}.scda"

    # -- deciding -------------------------------------------------------------

    def decide(self, step: int) -> Decision:
        """Ask the save policy on every rank; return the decision they share. Collective.

        One allreduce decides; when the decision is to save, one allgather
        collects the reasons of the ranks that asked for it (for the
        history), so every rank records the same reason.
        """
        moment = Moment(step, time.time(), self._last_step, self._last_time, tuple(self._save_seconds), self._last_save_time)
        local = self.save_policy.decide(moment)
        save_flag, halt = self.comm.allreduce_max([int(local.save), int(local.halt)])
        if not save_flag:
            return Decision(False, bool(halt), "")
        reasons = self.comm.allgather(local.reason if local.save else "")
        return Decision(True, bool(halt), "; ".join(dict.fromkeys(r for r in reasons if r)))

    # -- saving ---------------------------------------------------------------

    def save(self, step: int, state: Any, *, force: bool = False, time_value: float | None = None) -> bool:
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
        time_value : float, optional
            The simulation time to record (default: the state's ``time`` field).

        Returns
        -------
        bool
            Whether a checkpoint was written (or, in the background, started).
            If a policy asked to stop, :attr:`halt_requested` becomes True.

        Raises
        ------
        SchemaError, ScdaIOError, ManagerError
            On every rank, if the state is invalid or the save fails; the
            previous checkpoints are untouched and no temporary file stays.
        """
        if self._closed:
            raise ScdaUsageError("CheckpointManager.save: the manager is closed")
        self.wait()
        decision = self.decide(step)
        if decision.halt:
            self.halt_requested = True
        if not (force or decision.save):
            return False
        reason = "forced" if force and not decision.save else decision.reason
        checkpoint = self._as_schema(state)
        if time_value is None:
            time_value = getattr(checkpoint, "time", None) if "time" in checkpoint.__amrckpt_fields__ else None
        self._last_step, self._last_time = step, time.time()
        self._last_save_time = self._last_time
        if self._bg_comm is None:
            self._commit(self.comm, step, checkpoint, reason, time_value)
        else:
            assert self._snapshots is not None
            copy = self._snapshots.take(checkpoint)  # the only blocking part of a background save
            self._thread = threading.Thread(
                target=self._background, args=(step, copy, reason, time_value), name=f"amrckpt-save-{step}", daemon=True
            )
            self._thread.start()
        return True

    def _as_schema(self, state: Any) -> S:
        if isinstance(state, self.schema):
            return state
        to_checkpoint = getattr(state, "to_checkpoint", None)
        if to_checkpoint is not None:
            out = to_checkpoint()
            if isinstance(out, self.schema):
                return out
        raise SchemaError(f"save: expected a {self.schema.__name__} or a checkpointable object, got {type(state).__name__}")

    def _background(self, step: int, state: S, reason: str, time_value: float | None) -> None:
        assert self._bg_comm is not None
        try:
            self._commit(self._bg_comm, step, state, reason, time_value)
        except BaseException as exc:  # noqa: BLE001 - re-raised on every rank by wait()
            self._async_error = exc

    def wait(self) -> None:
        """Wait for a background save; re-raise its error (the same on every rank). Collective-safe."""
        t, self._thread = self._thread, None
        if t is not None:
            t.join()
        err, self._async_error = self._async_error, None
        if err is not None:
            raise err

    def _commit(self, comm: Comm, step: int, state: S, reason: str, time_value: float | None) -> None:
        """Write, sync, close, rename on rank 0, sync the directory; then retention. Collective on ``comm``.

        The agreement after the rename is the commit point: if it fails (an
        error on rank 0, or a communication error), rank 0 takes the rename
        back, so that a save that raises never leaves a new checkpoint behind.
        After it, nothing collective remains: history and retention (rank 0)
        are advisory and only logged if they fail.
        """
        final = self.path_of(step)
        token = run_on_root(comm, self._begin_commit)
        tmp = self.directory / f".{final.name}.partial-{token}"
        t0 = time.time()
        try:
            result = save(state, tmp, comm=comm, sync=self.sync, **self.save_kwargs)
        except BaseException:
            if comm.rank == 0:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise
        err: BaseException | None = None
        renamed = False
        backup: Path | None = None
        if comm.rank == 0:
            try:
                if final.exists():  # a checkpoint of the same step: keep a link to put it back if the commit fails
                    backup = self.directory / f".{final.name}.previous-{token}"
                    os.link(final, backup)
                _inject("rename", comm, final)
                os.replace(tmp, final)
                renamed = True
                if self.sync:
                    _fsync_directory(self.directory, comm)
            except OSError as exc:
                err = ScdaIOError(exc.errno or errno.EIO, f"cannot commit {final.name}: {exc.strerror or exc}")
        try:
            agree(comm, err, what="commit")
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
            entry = {"step": step, "path": final.name, "time": time_value, "save_seconds": seconds, "nbytes": result.nbytes}
            entry |= {"writer_size": comm.size, "reason": reason, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))}
            try:
                self._append_history(entry)
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

    def _apply_retention(self) -> None:
        """Delete what the keep policy drops (rank 0, after a commit; never the newest valid checkpoint)."""
        steps = sorted(self._files())
        if not steps:
            return
        keep = set(self.keep_policy.keep(steps))
        newest_valid = next((s for s in reversed(steps) if self._check(s)[0]), None)
        if newest_valid is not None:
            keep.add(newest_valid)
        for s in steps:
            if s not in keep:
                self.log.info("retention: removing %s", self.path_of(s).name)
                with contextlib.suppress(OSError):
                    self.path_of(s).unlink()

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
            read_info(self.path_of(step))
        except (AmrckptError, OSError) as exc:
            return False, f"{type(exc).__name__}: {exc}"
        return True, None

    def history(self) -> list[CheckpointRecord]:
        """List the checkpoints in the directory, oldest first, with their metadata and validity.

        Collective: rank 0 reads the directory and the checkpoints' metadata
        (footer, index, manifest, provenance, with CRCs) and broadcasts.
        """
        return run_on_root(self.comm, self._history)

    def _history(self) -> list[CheckpointRecord]:
        logged: dict[int, dict[str, Any]] = {}
        with contextlib.suppress(OSError):
            for line in (self.directory / HISTORY).read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    e = json.loads(line)
                    logged[int(e["step"])] = e
        records = []
        for step, path in sorted(self._files().items()):
            e = logged.get(step, {})
            try:
                info = read_info(path)
            except (AmrckptError, OSError) as exc:
                records.append(CheckpointRecord(step, str(path), False, f"{type(exc).__name__}: {exc}", nbytes=_size(path)))
                continue
            t = info.manifest.values.get("time")
            records.append(
                CheckpointRecord(
                    step,
                    str(path),
                    True,
                    None,
                    t if isinstance(t, (int, float)) else e.get("time"),
                    info.provenance.saved_at,
                    e.get("save_seconds"),
                    _size(path),
                    info.provenance.writer_size,
                    e.get("reason"),
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

    def restore_latest(self, *, into: Any = None, partition: Any = "uniform", fields: list[str] | None = None) -> Any:
        """Load the newest checkpoint that loads and verifies; fall back to older ones. Collective.

        Every byte read is checked against its CRC32; a checkpoint that
        fails (damaged data, a missing footer) is skipped with a warning and
        the previous one is tried, as SCR falls back to the previous
        checkpoint.

        Parameters
        ----------
        into : class decorated with :func:`~amrckpt.checkpointable`, optional
            Build an object of that class from the state (its
            ``from_checkpoint``); default: return the :class:`~amrckpt.Loaded`.
        partition, fields : optional
            As for :func:`amrckpt.load`.

        Returns
        -------
        Loaded or object or None
            None if there is no usable checkpoint.  The step restored is
            :attr:`restored_step`.
        """
        self.wait()
        self.restored_step = None
        for r in reversed(self.history()):
            if not r.valid:
                self.log.warning("skipping %s: %s", r.path, r.problem)
                continue
            try:
                loaded: Loaded[S] = load(r.path, self.schema, comm=self.comm, partition=partition, fields=fields)
            except (CheckpointError, ScdaError) as exc:
                self.log.warning("cannot restore %s, trying the previous checkpoint: %s: %s", r.path, type(exc).__name__, exc)
                continue
            self.restored_step = self._last_step = r.step
            self._last_time = time.time()
            if into is not None:
                return into.from_checkpoint(loaded)
            return loaded
        return None

    # -- closing --------------------------------------------------------------

    def close(self) -> None:
        """Wait for a background save, restore signal handlers, release the directory. Collective."""
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
        finally:
            stop = getattr(self.save_policy, "stop", None)
            if stop is not None:
                stop()
            if self._bg_comm is not None and isinstance(self._bg_comm, MPIComm):
                self._bg_comm.free()
            if self._snapshots is not None:
                self._snapshots.clear()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    def __enter__(self) -> CheckpointManager[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
