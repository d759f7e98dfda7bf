"""A buffer to be written as it is, with its CRC32: computed, or being computed by the helper thread."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _crc
from .._crc import LaterCrc

__all__ = ["Checksummed", "unwrap"]


@dataclass(frozen=True, slots=True)
class Checksummed:
    """The data of one section's piece and its CRC32, known before the piece is written. Not collective.

    A save knows its payloads (cell values, packed mesh records) before it
    knows where they go in the file: :meth:`start` CRCs a payload in the
    helper thread at once, while the caller packs the next one, and a
    writer opened with ``checksum=True, defer=True`` that is given a
    ``Checksummed`` as the ``data`` of :meth:`ScdaWriter.fwrite_array` or
    :meth:`ScdaWriter.fwrite_varray` takes its CRC32 for the piece instead
    of reading its bytes again.  A CRC32 does not depend on where the bytes
    go (:class:`amrckpt._crc.SectionCrc` shifts it into place).  Every other
    writer, and a compressed section, use ``data`` alone.

    Attributes
    ----------
    data : bytes-like or numpy.ndarray
        Contiguous bytes, unchanged until the writer has taken the CRC32
        (a deferred writer's ``settle``).
    crc : int or amrckpt._crc.LaterCrc
        The CRC32 of exactly the bytes of ``data``, or the one the helper
        thread computes.
    """

    data: Any
    crc: int | LaterCrc

    @classmethod
    def start(cls, data: Any) -> Checksummed:
        """CRC ``data`` (a contiguous buffer) in the helper thread, or here if it is small (:data:`amrckpt._crc.INLINE_NBYTES`)."""
        nbytes = data.nbytes if isinstance(data, np.ndarray) else memoryview(data).nbytes  # memoryview has no datetime64
        return cls(data, _crc.crc32(data) if nbytes < _crc.INLINE_NBYTES else LaterCrc(data))


def unwrap(data: Any) -> tuple[Any, int | LaterCrc | None]:
    """Return ``(data, its CRC32 or the one to come)`` of a :class:`Checksummed`, ``(data, None)`` of anything else."""
    if isinstance(data, Checksummed):
        return data.data, data.crc
    return data, None
