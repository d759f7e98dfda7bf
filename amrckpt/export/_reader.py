"""The one place the exporters open a checkpoint: :class:`amrckpt.container.CheckpointReader`."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["open_reader"]


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
