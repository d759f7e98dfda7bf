"""The in-memory copy that a background save writes: the only part of it that holds the simulation up.

A background save must copy the state, because the simulation changes its
arrays in place while the copy is written.  :class:`Snapshots` makes that
copy as fast as the memory allows:

* the arrays are copied in chunks by several threads (numpy releases the GIL
  while it copies), as many as this rank has cores to itself: the cores of
  the node shared by the ranks on it;
* the copies go into buffers kept from the previous save, so the pages are
  already mapped: on virtual machines, touching a new page costs more than
  copying into it (see benchmarks/_warm.py).  A buffer grows by a quarter
  more than asked, so that a mesh that refines a little does not reallocate
  at every save.

* an array that cannot change is not copied at all: one the user made
  read-only (``a.flags.writeable = False``) whose memory nothing else can
  write either (it owns its memory, or views only read-only arrays down to
  one that does, or an immutable ``bytes``), as a mesh that changes only at
  adaptation can be between adaptations.

The buffers hold one copy of the state between saves; :meth:`Snapshots.clear`
releases them (the manager does at ``close``).  Reusing them is safe because
the manager waits for the previous background save before it takes the next
copy.
"""

from __future__ import annotations

import copy
import os
from typing import Any, TypeVar

import numpy as np

from .._threads import Pool
from ..comm import Comm, mpi_of
from ..schema import CheckpointSchema

__all__ = ["Snapshots", "cores_per_rank", "frozen"]

S = TypeVar("S", bound=CheckpointSchema)

CHUNK_NBYTES = 8 << 20  # bytes per copy task: large enough that numpy drops the GIL, small enough to balance


def frozen(a: np.ndarray) -> bool:
    """Whether nothing can write the memory of ``a`` (so a snapshot may share it). Not collective.

    True where ``a`` is read-only and so is every array it views, down to
    one that owns its memory or to an immutable ``bytes``.  A read-only view
    of a writable array, or of memory numpy does not own (a ``bytearray``,
    an ``mmap``, C memory), is not frozen: the simulation may write it
    through another name.  Making a frozen array writable again
    (``a.flags.writeable = True``, on the array that owns the memory) while
    a background save writes it is the caller's error.
    """
    x: Any = a
    while isinstance(x, np.ndarray):
        if x.flags.writeable:
            return False
        x = x.base
    return x is None or isinstance(x, bytes)


def cores_per_rank(comm: Comm) -> int:
    """Return the cores this process may use, divided among the ranks of ``comm`` on this node (at least 1). Collective."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    m = mpi_of(comm)
    if m is not None:
        cores //= m.ranks_on_node()
    return max(1, cores)


class Snapshots:
    """Copies of a schema instance into reused buffers, by ``threads`` threads.

    Parameters
    ----------
    threads : int
        Threads that copy (1: copy in the calling thread).
    """

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))
        self._pool: Pool | None = None
        self._buffers: dict[tuple[str, str], np.ndarray] = {}

    def take(self, state: S) -> S:
        """Return a copy of ``state`` that shares no array with it. Not collective.

        Arrays (numpy arrays, and the arrays inside a :class:`~amrckpt.Forest`
        or :class:`~amrckpt.HpData`) are copied into this object's buffers,
        except those that cannot change (:func:`frozen`), which the copy
        shares; other values are deep-copied.  The copy is valid until the
        next call.
        """
        values: dict[str, Any] = {}
        jobs: list[tuple[np.ndarray, np.ndarray]] = []
        for name in type(state).model_fields:
            values[name] = self._copy(name, getattr(state, name), jobs)
        self._run(jobs)
        return type(state).model_construct(_fields_set=set(state.model_fields_set), **values)

    def clear(self) -> None:
        """Release the buffers and the threads."""
        self._buffers.clear()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _copy(self, name: str, value: Any, jobs: list[tuple[np.ndarray, np.ndarray]]) -> Any:
        if isinstance(value, np.ndarray):
            return self._array(name, "", value, jobs)
        slots = getattr(type(value), "__slots__", None)
        if slots and any(isinstance(getattr(value, s, None), np.ndarray) for s in slots):
            out = object.__new__(type(value))  # Forest, HpData: their arrays copied, checked when saved
            for s in slots:
                v = getattr(value, s)
                setattr(out, s, self._array(name, s, v, jobs) if isinstance(v, np.ndarray) else copy.deepcopy(v))
            return out
        return copy.deepcopy(value)

    def _array(self, name: str, part: str, a: np.ndarray, jobs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        if a.dtype.hasobject:
            return copy.deepcopy(a)
        if frozen(a):
            self._buffers.pop((name, part), None)  # shared, not copied: no buffer held for it
            return a
        key = (name, part)
        buf = self._buffers.get(key)
        if buf is None or buf.nbytes < a.nbytes:
            buf = np.empty(a.nbytes + a.nbytes // 4, dtype=np.uint8)
            self._buffers[key] = buf
        out = buf[: a.nbytes].view(a.dtype).reshape(a.shape) if a.nbytes else np.empty(a.shape, a.dtype)
        jobs.append((out, a))
        return out

    def _run(self, jobs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        tasks: list[tuple[np.ndarray, np.ndarray]] = []
        for dst, src in jobs:
            if self.threads > 1 and src.flags.c_contiguous and src.nbytes > CHUNK_NBYTES:
                d, s = dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8)
                tasks += [(d[i : i + CHUNK_NBYTES], s[i : i + CHUNK_NBYTES]) for i in range(0, s.nbytes, CHUNK_NBYTES)]
            else:
                tasks.append((dst, src))
        if self.threads == 1 or len(tasks) < 2:
            for d, s in tasks:
                np.copyto(d, s)
            return
        if self._pool is None:
            self._pool = Pool(self.threads, "amrckpt-copy")  # workers started with a bounded wait
        for f in [self._pool.submit(np.copyto, d, s) for d, s in tasks]:
            f.result()
