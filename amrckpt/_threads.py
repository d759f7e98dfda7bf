"""amrckpt's threads: how many a rank may use, and how they are started (never an unbounded wait).

How many threads a rank may use for CPU work that releases the GIL (zlib-ng, numpy copies):

A rank should not start more threads than it has cores to itself: with as
many ranks as cores, threads only compete.  Without a collective call, the
ranks on this node are known from the launcher's environment (MPICH/Hydra
``MPI_LOCALNRANKS``, Open MPI ``OMPI_COMM_WORLD_LOCAL_SIZE``, Slurm
``SLURM_NTASKS_PER_NODE``); ``AMRCKPT_THREADS`` overrides the result.

How they start: every thread of amrckpt is started by :func:`start_thread`,
which waits a bounded time for the new thread to run.  ``Thread.start`` waits
without a bound for the new thread to signal that it runs, and a thread that
dies before (``pthread_create`` succeeded, but its first allocation failed
under memory pressure) leaves the caller waiting forever; inside a collective
save, one rank's hang holds the job.  :func:`start_thread` raises
:class:`~amrckpt.errors.ThreadStartError` instead, which the collective step
that started it agrees on.  The pools (:func:`pool`) start their workers
the same way.
"""

from __future__ import annotations

import _thread
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import Any

from .errors import ThreadStartError

__all__ = ["START_TIMEOUT", "Pool", "Worker", "default_threads", "map_shared", "pool", "start_thread"]

_log = logging.getLogger("amrckpt")

START_TIMEOUT = 30.0
"""Seconds :func:`start_thread` waits for a new thread to run (a healthy start takes well under a millisecond)."""


class Worker:
    """A thread started by :func:`start_thread`: ``join`` and ``is_alive`` as :class:`threading.Thread`'s. Not collective."""

    __slots__ = ("_done", "_started", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._started = threading.Event()
        self._done = threading.Event()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the thread ends, at most ``timeout`` seconds (None: no bound)."""
        self._done.wait(timeout)

    def is_alive(self) -> bool:
        """Whether the thread runs (started, not ended)."""
        return self._started.is_set() and not self._done.is_set()


def start_thread(target: Callable[[], Any], name: str) -> Worker:
    """Start ``target()`` in a new daemon thread and wait at most :data:`START_TIMEOUT` seconds for it to run. Not collective.

    Inside a collective call, run it as a step (:meth:`amrckpt.comm.Call.run`)
    so that a failure is every rank's error.  What ``target`` raises is its
    own business: it must catch and keep its exceptions (an exception that
    escapes is printed by Python and ends the thread).

    Parameters
    ----------
    target : callable
        Called with no argument in the new thread.
    name : str
        The thread's name (``threading.current_thread().name`` in it).

    Returns
    -------
    Worker

    Raises
    ------
    ThreadStartError
        If the thread cannot be created (``RuntimeError: can't start new
        thread``) or does not run within :data:`START_TIMEOUT` seconds.
    """
    worker = Worker(name)

    def boot() -> None:
        threading.current_thread().name = name
        worker._started.set()
        try:
            target()
        finally:
            worker._done.set()

    try:
        _start_new_thread(boot, ())
    except (RuntimeError, MemoryError) as exc:
        raise ThreadStartError(f"cannot start the thread {name!r}: {exc} (too many threads, or no memory for its stack)") from exc
    if not worker._started.wait(START_TIMEOUT):
        raise ThreadStartError(
            f"the thread {name!r} was created but did not run within {START_TIMEOUT:g} s "
            "(it died before it ran: memory pressure, or a limit on threads)"
        )
    return worker


_start_new_thread = _thread.start_new_thread  # tests replace it to make a thread fail to start


class Pool(Executor):
    """A pool of at most ``max_workers`` threads, each started by :func:`start_thread` when work first needs it.

    A :class:`concurrent.futures.Executor` (``submit``, ``map``,
    ``shutdown``) that never waits forever for a worker to start, as
    ``ThreadPoolExecutor`` would for one that dies before it runs: where no
    worker can start, the caller does the work.  Not collective.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        self.max_workers = max_workers
        self.name = name
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] = (
            queue.SimpleQueue()
        )
        self._workers: list[Worker] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` in a worker; return its future.

        A worker that cannot start (:class:`~amrckpt.errors.ThreadStartError`)
        is not an error: the workers there are take the work, or, if there
        are none, ``fn`` runs at once in the calling thread (logged once per
        failure at WARNING); the result is the same, only not overlapped.

        Raises
        ------
        RuntimeError
            After :meth:`shutdown`.
        """
        fut: Future[Any] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self.name}: submit after shutdown")
            inline = False  # a worker takes it: an idle one, a new one, or (none could start) the workers there are
            if self._idle <= 0 and len(self._workers) < self.max_workers:
                try:
                    self._workers.append(start_thread(self._run, f"{self.name}-{len(self._workers)}"))
                    self._idle += 1
                except ThreadStartError as exc:
                    inline = not self._workers  # no thread at all: the caller does the work (no overlap, same result)
                    if inline:
                        _log.warning("%s; its work runs in the calling thread", exc)
            if not inline:
                self._idle -= 1
                self._work.put((fut, fn, args, kwargs))
        if inline:
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                fut.set_exception(exc)
        return fut

    def map(
        self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None, chunksize: int = 1
    ) -> Iterator[Any]:
        """As :meth:`concurrent.futures.Executor.map` (every call submitted first, results in order)."""
        futures = [self.submit(fn, *args) for args in zip(*iterables, strict=False)]
        return (f.result(timeout) for f in futures)

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            fut, fn, args, kwargs = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
                    fut.set_exception(exc)
            del item, fut, fn, args, kwargs
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers once they are done (``wait``: wait for them)."""
        with self._lock:
            self._shutdown = True
            workers = list(self._workers)
        for _ in workers:
            self._work.put(None)
        if wait:
            for w in workers:
                w.join()


_LOCAL_RANKS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
_POOL: Pool | None = None
_POOL_SIZE = 0
_LOCK = threading.Lock()


def default_threads() -> int:
    """Return ``AMRCKPT_THREADS`` if set, else this process's cores divided by the ranks on its node (at least 1)."""
    forced = os.environ.get("AMRCKPT_THREADS", "")
    if forced.strip().isdigit():
        return max(1, int(forced))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    for name in _LOCAL_RANKS:
        m = re.match(r"\s*(\d+)", os.environ.get(name, ""))  # Slurm may say "4(x2)"
        if m and int(m.group(1)) > 0:
            return max(1, cores // int(m.group(1)))
    return max(1, cores)


def pool(threads: int) -> Pool:
    """Return a shared pool of at least ``threads`` worker threads (for work that does not wait on other work in it)."""
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < threads:
            old = _POOL
            _POOL, _POOL_SIZE = Pool(threads, "amrckpt-work"), threads
            if old is not None:
                old.shutdown(wait=False)
        return _POOL


def map_shared(fn: Callable[[Any], Any], items: Sequence[Any], threads: int) -> list[Any]:
    """Return ``[fn(x) for x in items]`` computed by ``threads`` threads, the calling one among them.

    Each thread takes the next item not yet taken (one shared iterator:
    uneven items balance themselves, and a thread starts once, not once per
    item).  After an exception no item is started; every thread is waited
    for, then the first exception is raised.  Serially for one thread or
    one item.

    Raises
    ------
    BaseException
        The first exception raised by ``fn``.
    """
    n = min(len(items), threads)
    if n <= 1:
        return [fn(x) for x in items]
    out: list[Any] = [None] * len(items)
    todo = iter(range(len(items)))  # next() on a range iterator is atomic under the GIL
    failed: list[BaseException] = []

    def work() -> None:
        for i in todo:
            if failed:
                return
            try:
                out[i] = fn(items[i])
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller after every thread stopped
                failed.append(exc)
                return

    helpers = [pool(n - 1).submit(work) for _ in range(n - 1)]
    work()
    for h in helpers:
        h.result()
    if failed:
        raise failed[0]
    return out
