"""How many threads a rank may use for CPU work that releases the GIL (zlib-ng, numpy copies).

A rank should not start more threads than it has cores to itself: with as
many ranks as cores, threads only compete.  Without a collective call, the
ranks on this node are known from the launcher's environment (MPICH/Hydra
``MPI_LOCALNRANKS``, Open MPI ``OMPI_COMM_WORLD_LOCAL_SIZE``, Slurm
``SLURM_NTASKS_PER_NODE``); ``AMRCKPT_THREADS`` overrides the result.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["default_threads", "map_shared", "pool"]

_LOCAL_RANKS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
_POOL: ThreadPoolExecutor | None = None
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


def pool(threads: int) -> ThreadPoolExecutor:
    """Return a shared pool of at least ``threads`` worker threads (for work that does not wait on other work in it)."""
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < threads:
            old = _POOL
            _POOL, _POOL_SIZE = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="amrckpt-work"), threads
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
