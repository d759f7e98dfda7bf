"""The one place the exporters open a checkpoint."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["open_reader"]


def open_reader(path: str | os.PathLike[str], *, comm: Any = None, verify: bool = True) -> Any:
    """Return an open ``CheckpointReader`` of ``path`` (a context manager).

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint.
    comm : optional
        Passed to the reader (None: serial).
    verify : bool, optional
        Check what is read against the checkpoint's CRC32s.
    """
    from ._source import CheckpointReader

    return CheckpointReader(path, comm=comm, verify=verify)
