"""One checkpoint as the backend's variables see it: a picklable handle that opens the file lazily in each process."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from xarray.backends import CachingFileManager
from xarray.backends.locks import SerializableLock

from ..container import CheckpointReader, Manifest, handler_for

__all__ = ["COUNTS_BLOCK_LEAVES", "CheckpointSource"]

T = TypeVar("T")

COUNTS_BLOCK_LEAVES = 1 << 20
"""Leaves whose hp counts are read at a time when a field's offsets are computed (8 MiB of int64 held per block)."""


def _open(path: str, mode: Any = None, **kwargs: Any) -> CheckpointReader:
    """Open ``path`` for :class:`~xarray.backends.CachingFileManager` (which passes ``mode`` once unpickled): read-only."""
    return CheckpointReader(path, **kwargs)


class CheckpointSource:
    """A checkpoint read by leaf ranges from any process: its path, opened by each process on first use. Not collective.

    Pickles as its path and options (dask ships it to workers); each process
    opens one :class:`amrckpt.container.CheckpointReader` (footer, index,
    manifest, and the headers of every field's sections with the data of
    blocks and replicated arrays; xarray's
    :class:`~xarray.backends.CachingFileManager`) and reads
    through its range reads, one at a time (a lock: the reader keeps the
    cursors and CRC32s of its ranges).  What a process computes once (the
    offsets of an hp field's leaves) is kept in that process, never pickled.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    verify : bool, optional
        Check CRC32s (:class:`~amrckpt.container.CheckpointReader`).
    access : amrckpt.scda.FileAccess, optional
        How the file is opened (a ``local_file`` opener counts reads in the
        tests); it must pickle for a distributed scheduler.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True, access: Any = None) -> None:
        self.path = os.fspath(path)
        self.verify = verify
        self.access = access
        self._manager: CachingFileManager[CheckpointReader] = CachingFileManager(
            _open, self.path, kwargs={"verify": verify, "access": access, "fields": "all"}
        )
        self._lock = SerializableLock()
        self._cache: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "verify": self.verify, "access": self.access, "manager": self._manager, "lock": self._lock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.verify, self.access = state["path"], state["verify"], state["access"]
        self._manager, self._lock, self._cache = state["manager"], state["lock"], {}

    def run(self, fn: Callable[[CheckpointReader], T]) -> T:
        """Return ``fn(reader)`` with this process's reader, holding the lock. Not collective.

        Raises
        ------
        CheckpointError, ChecksumError, ScdaError
            Whatever opening the file or ``fn`` raises.
        """
        with self._lock:
            return fn(self._manager.acquire())

    def cached(self, key: str, make: Callable[[], T]) -> T:
        """Return ``make()``, computed once per process and kept under ``key``. Not collective."""
        got = self._cache.get(key)
        if got is None:
            got = self._cache[key] = make()
        out: T = got
        return out

    def hp_offsets(self, name: str, num_leaves: int) -> np.ndarray:
        """Where each leaf's values of hp field ``name`` begin, and their total: ``(num_leaves + 1,)`` int64. Not collective.

        Read once per process: the field's counts, :data:`COUNTS_BLOCK_LEAVES`
        leaves at a time (``CheckpointReader.read_hp_counts``: the counts,
        their chunks, or the size entries of the leaves; never the values).
        """

        def make() -> np.ndarray:
            off = np.zeros(num_leaves + 1, dtype=np.int64)
            for lo in range(0, num_leaves, COUNTS_BLOCK_LEAVES):
                n = min(COUNTS_BLOCK_LEAVES, num_leaves - lo)
                counts = self.run(operator.methodcaller("read_hp_counts", name, lo, n))
                np.cumsum(counts, out=off[lo + 1 : lo + n + 1])
                off[lo + 1 : lo + n + 1] += off[lo]
            return off

        return self.cached(f"offsets:{name}", make)

    def hp_total(self, name: str, num_leaves: int) -> int:
        """Return the number of values of hp field ``name`` (the length of its values dimension). Not collective.

        Layout ``counts``: from the header of its values section, found when
        the file was opened; other layouts: the sum of its counts
        (:meth:`hp_offsets`, read once per process).
        """

        def total(r: CheckpointReader) -> int | None:
            fs = r.manifest.field(name)
            secs = r.sections(name)
            if fs.layout == "counts" and len(secs) == 2:
                return int(secs[1].header.elem_count)
            return None

        got = self.run(total)
        return got if got is not None else int(self.hp_offsets(name, num_leaves)[-1])

    def manifest(self) -> Manifest:
        """Return the checkpoint's manifest (opening the file in this process if needed). Not collective."""
        return self.run(lambda r: r.manifest)

    def read_whole(self, name: str) -> Any:
        """Field ``name`` whole: a block's JSON value or a replicated array (read and CRC'd by the root when opened).

        Raises
        ------
        ValueError
            On this rank, if field ``name`` is read by ranges (a field per leaf).
        """
        fs_kind = self.run(lambda r: r.manifest.field(name).kind)
        if handler_for(fs_kind).partitioned:
            raise ValueError(f"field {name!r} is a {fs_kind} field: read it by ranges")
        return self.run(lambda r: r.read_field(name))

    def close(self) -> None:
        """Close this process's reader of the file, if open. Not collective."""
        self._manager.close()
