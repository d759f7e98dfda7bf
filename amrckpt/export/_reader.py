"""The one place the exporters open a checkpoint: :class:`amrckpt.container.CheckpointReader`."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["HpWindow", "open_reader"]


def open_reader(path: str | os.PathLike[str], *, comm: Any = None, verify: bool = True) -> Any:
    """Return an open :class:`amrckpt.container.CheckpointReader` of ``path`` (a context manager).

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    comm : optional
        The communicator of the reader (None: serial); the exporters read
        leaf ranges with its non-collective ``read_mesh``, ``read_cells`` and
        ``read_hp``.
    verify : bool, optional
        Check the metadata against the checkpoint's CRC32s.
    """
    from ..container import CheckpointReader

    return CheckpointReader(path, comm=comm, verify=verify)


class HpWindow:
    """A reader whose ``read_hp`` reads ``window`` leaves at a time and hands out slices, for a sequential stream.

    ``CheckpointReader.read_hp`` continues from the end of the previous range,
    so streaming costs one read of every size anyway; windows of many chunks
    make fewer, larger reads (one per window instead of one per chunk); the
    memory held is one window of values.
    Everything else is the wrapped reader's.  Not thread-safe: one thread
    streams through it.

    Parameters
    ----------
    reader : amrckpt.container.CheckpointReader
        The open checkpoint.
    window : int
        Leaves per window.
    """

    def __init__(self, reader: Any, window: int) -> None:
        self._reader = reader
        self._window = max(1, int(window))
        self._held: dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)

    def read_hp(self, name: str, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(counts, values)`` of leaves ``start .. start + count - 1``, as ``CheckpointReader.read_hp``."""
        held = self._held.get(name)
        if held is None or not (held[0] <= start and start + count <= held[0] + len(held[1])):
            m = self._reader.manifest
            ms = m.mesh_of(m.field(name))
            total = ms.num_leaves if ms is not None else start + count
            n = max(count, min(self._window, total - start))
            counts, values = self._reader.read_hp(name, start, n)
            offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
            held = (start, counts, values, offsets)
            self._held[name] = held
        first, counts, values, offsets = held
        i, j = start - first, start - first + count
        return counts[i:j], values[offsets[i] : offsets[j]]
