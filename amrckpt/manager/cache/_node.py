"""The node-local level of a manager: cached saves, flushes in the background, restarts from the nearest good copy.

:class:`NodeLevel` is what :class:`~amrckpt.CheckpointManager` holds when
it is given a :class:`~amrckpt.manager.NodeCache`: this rank's node cache
(:class:`~amrckpt.manager.cache._level.CacheLevel`), the node layout, the flush
policy, and the flush in progress (a thread on a duplicated communicator,
as a background save).  Its methods are collective on the manager's
communicator unless they say otherwise.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ..._files import new_token
from ..._logging import RankLogger
from ..._threads import Worker, start_thread
from ...comm import Call, Comm, current_call, mpi_of
from ...errors import AmrckptError, CachedStepsUnreachableWarning, ManagerError, ThreadStartError
from ...scda import FileAccess
from ...schema import CheckpointSchema
from .._directory import CheckpointDirectory
from .._handle import SaveHandle
from .._policies import AnyOf, Moment, Never, SavePolicy, shared_decision
from .._records import step_records
from .._retention import KeepPolicy
from ._flush import Cached, cache_step, flush_step, gather_pieces, newest_cached
from ._layout import NodeCache, NodeLayout, ranks_of, shape_of
from ._level import CacheLevel
from ._pieces import Pieces
from ._read import NotInPiecesError, pieces_access, root_extra
from ._reshape import Unreachable, flush_other_shape, newest_other_shape

__all__ = ["NodeLevel"]


class NodeLevel:
    """A manager's node cache, node layout, flush policy and flush in progress.

    Parameters
    ----------
    call : Call
        The manager's open call (collective: the layout is found, the node
        caches opened and locked, saves cut short removed, agreed).
    cache : NodeCache
        Where and how.
    flush_policy : SavePolicy or None
        When a cached step is flushed to the shared directory (asked after
        every cached save; None: only at halt and close).
    directory : CheckpointDirectory
        The shared directory, open (its newest step, read on rank 0, is the
        newest flushed: :meth:`unflushed`); its prefix and sync are the cache's.
    keep_policy : KeepPolicy
        The directory's retention, after each flush.
    access : FileAccess
        How the manager writes: ``info`` and ``backend`` for the flushes'
        shared files, ``style`` for the cached pieces.
    check_mesh : bool
        As for :func:`amrckpt.save`.
    log : RankLogger
        The manager's logger.
    """

    def __init__(
        self,
        call: Call,
        cache: NodeCache,
        flush_policy: SavePolicy | None,
        directory: CheckpointDirectory,
        *,
        keep_policy: KeepPolicy,
        access: FileAccess,
        check_mesh: bool,
        log: RankLogger,
    ) -> None:
        if not isinstance(cache, NodeCache):
            raise call.agreed(ManagerError(f"cache must be an amrckpt.NodeCache, not {type(cache).__name__}"))
        self.cache = cache
        self.flush_policy: SavePolicy = flush_policy if flush_policy is not None else Never()
        self.log = log
        self.comm = call.comm
        self.directory = directory
        self.keep_policy = keep_policy
        self.access = FileAccess(info=access.info, backend=access.backend)  # the flushes' shared files
        self.style = access.style
        self.check_mesh = check_mesh
        self.seconds: list[float] = []
        self.layout = NodeLayout.of(call, cache)
        rank = call.comm.rank
        prefix, sync = directory.names.prefix, directory.sync
        self.level = CacheLevel(cache.path_of(self.layout.node(rank)), prefix, sync=sync, log=log, recycle=cache.recycle)
        self.first = self.layout.first(rank)
        call.run(self.level.open, self.first)

        def opened() -> tuple[str, int | None]:
            return new_token(), max(directory.listing().checkpoints, default=None)

        # Agrees on open's errors too; the directory's newest step is the newest flushed so far (unflushed()).
        self._token, self._floor = call.on_root(opened, what="CheckpointManager: open the node cache")
        self._found = set(self.level.steps())  # kept by the retention while newer than the newest flushed (unflushed())
        self._saves = 0  # with _token, names each cached save's temporary directories without a collective call
        self.flushed: int | None = None  # the newest step flushed (or found in the shared directory)
        self.cached: int | None = None  # the newest step cached by this manager
        self._last_flush_time = time.time()
        self._thread: Worker | None = None
        self._retention: Callable[[], None] | None = None  # the cache's retention after the last cached save, not started
        self._retiring: Worker | None = None  # ... and started
        self._flushing: int | None = None
        self._error: BaseException | None = None
        self._pending: BaseException | None = None  # a background flush's error, for the next save unless made moot
        self._comm: Comm | None = None
        m = mpi_of(call.comm)
        self._threads = m.thread_multiple() if m is not None else call.comm.size == 1
        if self._threads:
            self._comm = call.comm.dup()
        AnyOf([self.flush_policy]).bind(call.comm)  # collective: e.g. BeforeWallTime learns the job's end
        AnyOf([self.flush_policy]).start()

    # -- saving -----------------------------------------------------------------------------------

    def _cache(self, step: int, state: CheckpointSchema, records: Callable[[Any, float, float], Mapping[str, bytes]]) -> Cached:
        """Save ``state`` into the node caches (:func:`~amrckpt.manager.cache._flush.cache_step`). Collective.

        The save blocks for writing and committing the step; the cache's
        retention (freeing the pages of the steps beyond ``keep``: a few ms
        per 100 MB on a tmpfs) then runs in a thread, started by
        :meth:`start_retention` once the caller has made its last collective
        call of the save (a thread freeing pages beside a rank waiting in a
        collective call slows the call on every rank), and waited for by the
        next call that uses the cache.
        """
        self.wait_retention()
        protect = {self._flushing} if self._flushing is not None and self.busy() else set()  # a flush that ended reads nothing more
        protect |= self.unflushed()
        self._saves += 1
        done = cache_step(
            self.comm,
            self.level,
            self.layout,
            step,
            state,
            style=self.style,
            check_mesh=self.check_mesh,
            records=records,
            keep=self.cache.keep,
            protect=protect,
            log=self.log,
            token=f"{self._token}{self._saves:08x}",
        )
        self._retention = done.retention
        self.cached = step
        return done

    def unflushed(self) -> set[int]:
        """Return the steps of this node's cache that retention keeps: found at open, newer than the newest flushed. Not collective.

        The newest flushed: the directory's newest when the manager opened,
        or a step flushed or restored since.  Such steps (cached by a job
        that ended before flushing them, by this job's shape or another)
        are never removed or recycled by this manager's retention.
        """
        floor = max((s for s in (self._floor, self.flushed) if s is not None), default=-1)
        return {s for s in self._found if s > floor}

    @property
    def _flush_kw(self) -> dict[str, Any]:
        """The keywords of every flush: the shared files' access, the directory's keep policy, the log."""
        return {"access": self.access, "keep_policy": self.keep_policy, "log": self.log}

    def start_retention(self) -> None:
        """Start the retention of the last cached save in a thread, if it has not started. Not collective."""
        retention, self._retention = self._retention, None
        if retention is not None:
            try:
                self._retiring = start_thread(retention, "amrckpt-cache-retention")
            except ThreadStartError as exc:  # not collective: this rank removes its old files itself, now
                self.log.rank_warning("cache retention runs in the caller: %s", exc)
                retention()

    def wait_retention(self) -> None:
        """Wait for the retention of the last cached save (started first if it has not). Not collective."""
        self.start_retention()
        thread, self._retiring = self._retiring, None
        if thread is not None:
            thread.join()

    def ready(self) -> None:
        """Nothing to wait for before a save's decision: a flush in progress goes on. Not collective."""

    def save(self, step: int, state: CheckpointSchema, facts: dict[str, Any], halt: bool) -> SaveHandle:
        """Save into the node caches; flush in the background if the flush policy (or ``halt``) asks. Collective.

        ``facts`` are the step record's (reason, time, metrics...).  Once the
        step is cached, this save succeeds: an error of a flush (an earlier
        background flush, or the start of this step's) is raised by the
        next save, before it saves anything, unless a newer flush succeeds
        first.
        """
        if self._pending is not None:
            self._settle()  # an earlier background flush failed: raise it before this step is saved (unless moot)
        name = self.directory.names.build_name(step)
        facts = {**facts, "keep_policy": repr(self.keep_policy)}

        def records(result: Any, t0: float, seconds: float) -> Mapping[str, bytes]:
            return step_records(step, name, result, self.comm.size, t0, seconds, facts)

        done = self._cache(step, state, records)
        call = current_call(self.comm)
        assert call is not None
        try:
            moment = Moment(step, time.time(), self.flushed, self._last_flush_time)
            flush = shared_decision(call, self.flush_policy, moment).save or halt
        finally:
            self.start_retention()  # after the save's last collective call
        if flush:
            try:
                self._flush(step, background=True)
            except AmrckptError as exc:  # agreed; the step is cached: this save succeeded, the next one reports it
                self._pending = exc
                self.log.warning("the flush of the cached step %d could not run (%s); the next save raises it", step, exc)
        self.seconds.append(done.seconds)
        return SaveHandle(step, True, self.directory.path_of(step))

    # -- flushing ---------------------------------------------------------------------------------

    def flush(self, step: int | None = None) -> int | None:
        """Flush a cached step into the directory, and wait; return it (None: nothing flushed). Collective.

        ``step`` None: the newest cached step of this manager, unless it is
        flushed.  Otherwise the cached ``step``, if the directory lacks it,
        whatever job shape cached it (:meth:`flush_cached`).
        """
        if step is not None:
            call = current_call(self.comm)
            assert call is not None
            if call.on_root(lambda: step in self.directory.listing().checkpoints, what="restore: look"):
                return None
            return step if self.flush_cached(call, step) else None
        if self.cached is None or (self.flushed is not None and self.flushed >= self.cached):
            return None
        self._flush(self.cached, background=False)
        return self.cached

    def _flush(self, step: int, *, background: bool) -> None:
        """Flush the cached ``step`` into the directory: in a thread on the duplicated communicator if ``background``.

        Collective on ``comm``.  A flush in progress is waited for first (one
        at a time); the cache's retention of the last save may go on (it
        removes older steps, never the one flushed).  An error of the flush
        waited for is not raised here, after this step was cached: it is
        kept for the next save, which raises it before it saves anything,
        unless this newer flush succeeds (which makes it moot; logged at
        WARNING either way).
        """
        failed = self._flushing
        joined, err = self._join_flush()
        if err is not None:
            self._pending = err
            self.log.warning(
                "the background flush of the cached step %s failed (%s); step %d is flushed now, "
                "and the error is raised by the next save unless this flush succeeds",
                failed,
                err,
                step,
            )
        elif joined:
            self._pending = None

        def run(c: Comm) -> None:
            flush_step(c, self.level, self.layout, self.directory, step, **self._flush_kw)
            self.flushed = step if self.flushed is None else max(self.flushed, step)
            self._last_flush_time = time.time()

        if not (background and self._threads and self._comm is not None):
            run(self.comm)
            self._pending = None  # made moot by this newer flush
            return

        def target() -> None:
            try:
                assert self._comm is not None
                run(self._comm)
            except BaseException as exc:  # noqa: BLE001 - raised on every rank by wait()
                self._error = exc

        self._flushing = step
        call = current_call(self.comm)
        assert call is not None
        self._thread = call.start_thread(target, f"amrckpt-flush-{step}")  # agreed: never one rank's hang

    def wait(self) -> None:
        """Wait for the flush in progress and the cache's retention; raise the flush's error (on every rank). Collective-safe."""
        self.wait_retention()
        self._settle()

    def _join_flush(self) -> tuple[bool, BaseException | None]:
        """Wait for the flush in progress, if any; return whether there was one, and its error. Collective-safe."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        self._flushing = None
        err, self._error = self._error, None
        return thread is not None, err

    def _settle(self) -> None:
        """Wait for the flush in progress; raise its error, else an earlier one that it did not make moot. Collective-safe.

        A background flush's error is the same on every rank (the flush is
        collective and agrees on its errors), so every rank raises it.
        """
        err = self._unsettled()
        if err is not None:
            raise err

    def _unsettled(self) -> BaseException | None:
        """Wait for the flush in progress; return what :meth:`_settle` raises (None: nothing). Collective-safe."""
        joined, err = self._join_flush()
        pending, self._pending = self._pending, None
        if err is None and pending is not None and joined:
            self.log.warning("a newer flush succeeded after a failed one: %s", pending)
            return None
        return err if err is not None else pending

    def busy(self) -> bool:
        """Whether a flush is in progress. Not collective."""
        return self._thread is not None and self._thread.is_alive()

    # -- restarting -------------------------------------------------------------------------------

    def restore_newer(self, call: Call, load_cached: Callable[[str, FileAccess | None], Any]) -> tuple[int | None, Any]:
        """Restart from the newest cached step newer than the directory's newest that is complete. Collective, agreeing.

        Every rank finds its pieces of the step (its node's copy, else a
        partner's: :func:`~amrckpt.manager.cache._flush.gather_pieces`) and
        ``load_cached(path, access)`` loads the step through ``access``,
        which serves every read from this rank's pieces
        (:mod:`~amrckpt.manager.cache._read`): SCR's restart
        from the cache, with no shared file.  The load checks every byte it
        uses by the file's CRC32s, so the pieces files' own CRC32s are not
        computed first (each byte is CRC'd once); if the load fails, they
        are, a damaged copy is replaced by a partner's, and the load is
        tried once more.  If the load needs bytes that a rank does not hold
        (a partition other than the save's) or still fails, the step is
        flushed into ``directory`` from checked pieces instead (the caller
        loads it from there).  A step incomplete or damaged on every copy is
        skipped (logged) and the next older one is tried.

        A step cached by another process count or node layout (another job
        shape) is never read in place: if every old rank's pieces are in a
        node directory that some rank of this job sees, the step is flushed
        into ``directory`` by this job's ranks
        (:func:`~amrckpt.manager.cache._reshape.flush_other_shape`) and the caller
        loads it from there, on this job's process count; if some are not,
        an older step is tried, and a
        :class:`~amrckpt.errors.CachedStepsUnreachableWarning` (rank 0,
        also logged at WARNING) names the steps passed over, the shape that
        wrote them and the ranks missing.  The cache's retention keeps
        those steps (:meth:`save`).

        Returns
        -------
        (int or None, object or None)
            ``(step, loaded)`` read from the cache; ``(step, None)`` if the
            step was flushed to be loaded from the shared directory;
            ``(None, None)`` if no cached step newer than ``than`` is complete.

        Warns
        -----
        CachedStepsUnreachableWarning
            On rank 0, for cached steps newer than ``than`` of another job
            shape whose pieces this job cannot all reach.
        """
        self.wait_retention()
        than = call.on_root(lambda: max(self.directory.listing().checkpoints, default=None), what="all_steps")
        unreachable: list[Unreachable] = []
        got = self._restore_newer(call, than, load_cached, unreachable)
        if unreachable:
            newest = f"the directory's newest (step {than})" if than is not None else "the directory's newest (it has none)"
            took = f"the cached step {got[0]}" if got[0] is not None else newest
            text = _unreachable_message(
                unreachable, f"newer than {newest}", f"The restart takes {took} instead", self.cache, self.layout
            )
            call.on_root(lambda: _warn(text, self.log), what="restore: cached steps that cannot be reached")
        if got[0] is not None:
            self._floor = got[0] if self._floor is None else max(self._floor, got[0])
        return got

    def flush_cached(self, call: Call, step: int) -> bool:
        """Flush the cached ``step`` into ``directory`` (which lacks it), whatever job shape cached it. Collective, agreeing.

        For :meth:`~amrckpt.CheckpointManager.restore` of a step that is in
        the node caches only: cached by this job's shape, it is flushed as
        any flush (:func:`~amrckpt.manager.cache._flush.flush_step`); by another,
        with this job's ranks (:func:`~amrckpt.manager.cache._reshape.flush_other_shape`).

        Returns
        -------
        bool
            Whether it was flushed (False: no cache holds it, or its pieces
            cannot all be reached: a
            :class:`~amrckpt.errors.CachedStepsUnreachableWarning` on rank 0 says why).

        Raises
        ------
        ManagerError
            On every rank, if the step is incomplete or damaged.
        AmrckptError
            On every rank, what the write or the commit raised (the directory is as before).
        """
        self.wait_retention()
        prefix = self.level.names.prefix
        if newest_cached(call, self.level, self.layout, step + 1) == step:
            flush_step(call.comm, self.level, self.layout, self.directory, step, **self._flush_kw)
        elif newest_other_shape(call, self.cache, prefix, self.layout, step + 1) == step:
            done = flush_other_shape(call, self.cache, prefix, self.layout, self.directory, step, **self._flush_kw)
            if isinstance(done, Unreachable):
                outcome = f"restore({step}) cannot load it"
                text = _unreachable_message([done], "that restore() asked for", outcome, self.cache, self.layout)
                call.on_root(lambda: _warn(text, self.log), what="restore: a cached step that cannot be reached")
                return False
        else:
            return False
        self.flushed = step if self.flushed is None else max(self.flushed, step)
        return True

    def _restore_newer(
        self, call: Call, than: int | None, load_cached: Callable[[str, FileAccess | None], Any], unreachable: list[Unreachable]
    ) -> tuple[int | None, Any]:
        """:meth:`restore_newer`'s search; the cached steps of another shape that cannot be reached go into ``unreachable``."""
        below: int | None = None
        prefix = self.level.names.prefix
        while True:
            step = newest_cached(call, self.level, self.layout, below)
            other = newest_other_shape(call, self.cache, prefix, self.layout, below)
            if other is not None and (step is None or other > step) and (than is None or other > than):
                try:
                    done = flush_other_shape(call, self.cache, prefix, self.layout, self.directory, other, **self._flush_kw)
                except AmrckptError as exc:
                    self.log.warning(
                        "the cached step %d (of another job shape) cannot be flushed (%s); trying an older step", other, exc
                    )
                    below = other
                    continue
                if isinstance(done, Unreachable):
                    unreachable.append(done)
                    below = other
                    continue
                self.flushed = other if self.flushed is None else max(self.flushed, other)
                return other, None
            if step is None or (than is not None and step <= than):
                return None, None
            pieces: Pieces | None = None
            try:
                pieces = gather_pieces(call, self.level, self.layout, step, verify=False)
                loaded, err = self._load_in_place(call, step, pieces, load_cached)
                if err is not None:  # the pieces' CRC32s checked, damaged copies replaced by partners' (a flush needs them so too)
                    self.log.warning("the cached step %d cannot be read in place (%s); checking its pieces", step, err)
                    pieces.close()
                    pieces = gather_pieces(call, self.level, self.layout, step)
                    if not isinstance(err, NotInPiecesError):  # damaged bytes, now replaced: read in place again
                        loaded, err = self._load_in_place(call, step, pieces, load_cached)
                if err is None:
                    self.cached = step if self.cached is None else max(self.cached, step)  # flushed at close, if not before
                    return step, loaded
                self.log.warning("the cached step %d cannot be read in place (%s); flushing it first", step, err)
                flush_step(call.comm, self.level, self.layout, self.directory, step, pieces=pieces, **self._flush_kw)
            except AmrckptError as exc:
                self.log.warning("the cached step %d cannot be used (%s); trying an older copy", step, exc)
                below = step
                continue
            finally:
                if pieces is not None:
                    pieces.close()
            self.flushed = step
            return step, None

    def _load_in_place(
        self, call: Call, step: int, pieces: Pieces, load_cached: Callable[[str, FileAccess | None], Any]
    ) -> tuple[Any, AmrckptError | None]:
        """Load the cached ``step`` from this rank's ``pieces``; return what it gave, or the error (agreed). Collective."""
        size, extra = root_extra(call, pieces)
        path = str(self.level.step_path(step))
        try:
            return load_cached(path, pieces_access(pieces, size, path, call.comm.rank, extra)), None
        except AmrckptError as exc:  # raised on every rank: the load agrees
            return None, exc

    def close(self, flush: bool) -> None:
        """Wait for the flush in progress; flush the newest cached step if ``flush``; raise what was not raised. Collective.

        The newest cached step is flushed even when the flush waited for
        failed; then the error of this flush, else the earlier one (not
        made moot by a newer flush), is raised, on every rank.
        """
        self.wait_retention()
        earlier = self._unsettled()
        try:
            if flush:
                self.flush()
        except BaseException:
            if earlier is not None:
                self.log.warning("the flush at close failed too; an earlier flush had failed: %s", earlier)
            raise
        if earlier is not None:
            raise earlier

    def release(self) -> None:
        """Free the duplicated communicator and release the node's lock (after :meth:`close`)."""
        self.wait_retention()
        AnyOf([self.flush_policy]).stop()
        if self._comm is not None:
            self._comm.free()
            self._comm = None
        self.level.close()


def _unreachable_message(found: list[Unreachable], which: str, outcome: str, cache: NodeCache, layout: NodeLayout) -> str:
    """Return the warning for cached steps of another shape that a restart cannot reach (agreed values: the same on every rank)."""
    groups: dict[tuple[int, int, tuple[int, ...]], list[int]] = {}
    for u in found:
        groups.setdefault((u.size, u.layout, u.missing), []).append(u.step)
    parts = [
        f"the step{'s' if len(steps) > 1 else ''} {', '.join(map(str, sorted(steps)))}, written by {shape_of(size, digest)}: "
        f"the pieces of {ranks_of(size, digest, missing)} are in no cache directory that this job's ranks see"
        for (size, digest, missing), steps in sorted(groups.items(), key=lambda g: min(g[1]))
    ]
    here = shape_of(layout.node_of.shape[0], layout.digest)
    return (
        f"the node caches ({str(cache.directory)!r}) hold cached steps {which} that were written by another "
        f"process count or node layout than this job's ({here}) and cannot be reached: {'; '.join(parts)}. "
        f"{outcome}. The cached steps are kept (the cache's retention removes no step newer than "
        "the newest flushed one): make the missing node directories visible to the job, or restart on the nodes and "
        "process count that wrote them, to restart from them"
    )


def _warn(text: str, log: RankLogger) -> None:
    """Log ``text`` at WARNING and issue it as a :class:`~amrckpt.errors.CachedStepsUnreachableWarning` (stderr). Rank 0."""
    log.warning("%s", text)
    warnings.warn(text, CachedStepsUnreachableWarning, stacklevel=2)
