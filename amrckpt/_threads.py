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
from concurrent.futures import ThreadPoolExecutor

__all__ = ["default_threads", "pool"]

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
