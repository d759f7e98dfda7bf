"""The level a manager saves through, chosen once when it is built: the directory itself, a background thread, or node caches.

:class:`Level` is the protocol that :class:`~amrckpt.CheckpointManager`
holds one of; it never asks which.  :class:`DirectLevel` saves and commits
in the caller (:func:`~amrckpt.manager._save.commit_file`);
:class:`BackgroundLevel` copies the state and commits the copy in a
thread; :class:`~amrckpt.manager.cache._node.NodeLevel` saves into node-local
caches and flushes them into the directory.  Every level hands its bytes
to the same save (:func:`amrckpt.save`) and the same commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from .._logging import RankLogger
from ..comm import Call, Comm, current_call, mpi_of
from ..errors import ManagerError
from ..scda import FileAccess
from ..schema import CheckpointSchema, save
from ._aside import SetAside
from ._directory import CheckpointDirectory
from ._handle import SaveHandle
from ._policies import SavePolicy
from ._records import step_records
from ._retention import KeepPolicy
from ._save import commit_file
from ._snapshot import Snapshots, cores_per_rank
from .cache import NodeCache, NodeLevel

__all__ = ["BackgroundLevel", "DirectLevel", "Level", "open_level"]


class Level(Protocol):
    """Where a manager's saves go, and what it waits for: chosen once, when the manager is built.

    Methods are collective on the manager's communicator, called inside
    one of its collective calls, unless they say otherwise.
    """

    seconds: list[float]
    """The seconds each save blocked (or took, in the background), oldest first: what the save policy sees."""

    def ready(self) -> None:
        """Wait for what a save's decision needs (a save in progress); raise its error."""

    def save(self, step: int, state: CheckpointSchema, facts: dict[str, Any], halt: bool) -> SaveHandle:
        """Save ``state`` as ``step``, with the step record's ``facts``; ``halt``: the run stops after it."""

    def wait(self) -> None:
        """Wait for a save or flush in progress; raise its error, the same on every rank."""

    def flush(self, step: int | None = None) -> int | None:
        """Bring a step held by this level only (None: the newest) into the directory; return it, or None."""

    def restore_newer(self, call: Call, load: Callable[[str, FileAccess | None], Any]) -> tuple[int | None, Any]:
        """Restart from a step newer than the directory's newest, if this level holds one: ``(step, loaded or None)``."""

    def close(self, flush: bool) -> None:
        """Finish what is in progress (and flush, if ``flush``); raise what was not raised yet."""

    def release(self) -> None:
        """Free threads, communicators, buffers and locks; after :meth:`close`, or instead of it if it could not run."""


def open_level(
    call: Call,
    directory: CheckpointDirectory,
    cache: NodeCache | None,
    background: bool,
    flush_policy: SavePolicy | None,
    *,
    aside: SetAside,
    **kw: Any,
) -> Level:
    """Return the level of a manager, chosen once: the node caches, a background thread, or the directory. Collective.

    ``kw``: ``keep_policy``, ``access``, ``check_mesh``, ``log`` (:class:`DirectLevel`'s).

    Raises
    ------
    ManagerError
        On every rank, for ``cache`` with ``background`` (a cached save is the fast path).
    """
    if cache is not None and background:
        raise call.agreed(ManagerError("cache= and background=True: a cached save is the fast path, use one"))
    if cache is not None:  # after the directory (its lock)
        return NodeLevel(call, cache, flush_policy, directory, **kw)
    return (BackgroundLevel if background else DirectLevel)(call.comm, directory, aside=aside, **kw)


class DirectLevel:
    """Each save writes and commits its file into the directory before it returns.

    Parameters
    ----------
    comm : Comm
        The manager's communicator.
    directory : CheckpointDirectory
        The open directory.
    keep_policy : KeepPolicy
        The retention after each commit.
    access : FileAccess
        How the files are written (its ``sync`` is the directory's).
    check_mesh : bool
        As for :func:`amrckpt.save`.
    aside : SetAside
        The damaged checkpoints kept aside: a committed step is usable again.
    log : RankLogger
        The manager's logger.
    """

    def __init__(
        self,
        comm: Comm,
        directory: CheckpointDirectory,
        *,
        keep_policy: KeepPolicy,
        access: FileAccess,
        check_mesh: bool,
        aside: SetAside,
        log: RankLogger,
    ) -> None:
        self.comm = comm
        self.directory = directory
        self.keep_policy = keep_policy
        self.access = access
        self.check_mesh = check_mesh
        self.aside = aside
        self.log = log
        self.seconds: list[float] = []

    def ready(self) -> None:
        """Nothing is in progress. Not collective."""

    def save(self, step: int, state: CheckpointSchema, facts: dict[str, Any], halt: bool) -> SaveHandle:
        """Save and commit ``step``. Collective."""
        self._commit(self.comm, step, state, facts)
        return SaveHandle(step, True, self.directory.path_of(step))

    def _commit(self, comm: Comm, step: int, state: CheckpointSchema, facts: dict[str, Any]) -> None:
        """Write ``state`` under its temporary name and commit it with its records (:func:`commit_file`). Collective on ``comm``."""
        facts = {**facts, "keep_policy": repr(self.keep_policy)}

        def write(tmp: Path) -> Any:
            return save(state, tmp, comm=comm, check_mesh=self.check_mesh, access=self.access.replace(sync=self.directory.sync))

        def records(name: str, result: Any, t0: float, seconds: float) -> Mapping[str, bytes]:
            return step_records(step, name, result, comm.size, t0, seconds, facts)

        kw: dict[str, Any] = {"keep_policy": self.keep_policy, "log": self.log, "reason": facts.get("reason")}
        self.seconds.append(commit_file(comm, self.directory, step, write, records, **kw))
        self.aside.unusable.discard(step)

    def wait(self) -> None:
        """Nothing is in progress. Not collective."""

    def flush(self, step: int | None = None) -> int | None:
        """Nothing to flush: every step is in the directory. Not collective."""
        return None

    def restore_newer(self, call: Call, load: Callable[[str, FileAccess | None], Any]) -> tuple[int | None, Any]:
        """No step is newer than the directory's. Not collective."""
        return None, None

    def close(self, flush: bool) -> None:
        """Wait for what is in progress, and raise its error."""
        self.wait()

    def release(self) -> None:
        """Nothing is held. Not collective."""


class BackgroundLevel(DirectLevel):
    """Each save copies the state in memory and commits the copy in a thread; the next save waits for it.

    The commit runs on a duplicate of the manager's communicator (MPI
    needs ``MPI_THREAD_MULTIPLE``); the copies go into buffers kept between
    saves (:class:`~amrckpt.manager._snapshot.Snapshots`), by as many
    threads as this rank has cores to itself.  Parameters as for
    :class:`DirectLevel`.  Collective (a duplicate communicator, the ranks
    of each node counted).
    """

    def __init__(self, comm: Comm, directory: CheckpointDirectory, **kw: Any) -> None:
        super().__init__(comm, directory, **kw)
        m = mpi_of(comm)
        if m is not None and not m.thread_multiple():
            raise ManagerError("background saves need MPI_THREAD_MULTIPLE (mpi4py.rc.thread_level = 'multiple')")
        self._comm: Comm | None = comm.dup()
        self._snapshots = Snapshots(cores_per_rank(comm))
        self._pending: SaveHandle | None = None

    def ready(self) -> None:
        """Wait for the save in progress; raise its error (the same on every rank). Collective-safe."""
        self.wait()

    def save(self, step: int, state: CheckpointSchema, facts: dict[str, Any], halt: bool) -> SaveHandle:
        """Copy ``state`` (the only blocking part) and commit the copy in a thread. Collective (the thread's start agreed)."""
        copy = self._snapshots.take(state)
        handle = SaveHandle(step, True, self.directory.path_of(step))
        call = current_call(self.comm)
        assert call is not None

        def run() -> None:
            try:
                assert self._comm is not None
                self._commit(self._comm, step, copy, facts)
            except BaseException as exc:  # noqa: BLE001 - re-raised on every rank by wait() or the handle
                handle._error = exc

        # Started on every rank, agreed (a thread that cannot start is every rank's ThreadStartError, never a hang).
        handle._thread = call.start_thread(run, f"amrckpt-save-{step}")
        self._pending = handle
        return handle

    def wait(self) -> None:
        """Wait for the save in progress; raise its error unless its handle reported it. Collective-safe."""
        handle, self._pending = self._pending, None
        if handle is None:
            return
        handle._join(None)
        if handle._error is not None and not handle._reported:
            handle._reported = True
            raise handle._error

    def release(self) -> None:
        """Free the duplicate communicator and the copy's buffers."""
        if self._comm is not None:
            self._comm.free()
            self._comm = None
        self._snapshots.clear()
