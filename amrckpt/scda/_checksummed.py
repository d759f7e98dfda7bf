"""A buffer to be written as it is, with its CRC32: computed, or being computed by the helper thread; or bytes still being made."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _crc
from .._crc import LaterCrc
from ..errors import ScdaArgumentError
from ._io import byte_view

__all__ = ["Checksummed", "Produced", "unwrap"]


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
    def later(cls, make: Callable[[], np.ndarray], *, nbytes: int, last: int | None, dtype: np.dtype[Any]) -> Checksummed:
        """Make the data in the helper thread, then CRC it: a :class:`Produced` as both ``data`` and ``crc``.

        Parameters
        ----------
        make : callable
            Returns the contiguous array of exactly ``nbytes`` bytes (e.g.
            :meth:`amrckpt.sfc.Forest.to_records`); runs once, in the helper
            thread or in the first thread that needs its bytes.
        nbytes : int
            Its size in bytes, known before it is made.
        last : int or None
            Its last byte (the scda data padding depends on it), None if empty.
        dtype : numpy.dtype
            The dtype of the array ``make`` returns.

        Returns
        -------
        Checksummed
            Whose ``data`` and ``crc`` are the same :class:`Produced`: a
            deferred writer (``fwrite_array``) queues it and writes it after
            the bytes that exist; any other writer, or an encoded section,
            makes it at once.  An error of ``make`` (or bytes of another
            size: :class:`~amrckpt.errors.ScdaArgumentError`) is raised
            where the bytes or the CRC32 are first asked for, on this rank.
        """
        p = Produced(make, nbytes, last, dtype)
        return cls(p, p)

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


class Produced(LaterCrc):
    """Bytes that the helper thread makes (a mesh packed into its records), then CRCs. Not collective.

    A save knows a payload's size and last byte before the payload exists:
    a deferred writer queues it at its file offset while the helper thread
    makes it, and writes it after the pieces that exist
    (:class:`~amrckpt.scda.WritePlan`).  Whoever needs its bytes or its
    CRC32 first and finds the task not started makes it in the calling
    thread (as :class:`~amrckpt._crc.LaterCrc` does).  Not thread-safe:
    one thread asks for the result.

    Attributes
    ----------
    nbytes : int
        Its size in bytes.
    last : int or None
        Its last byte (None if empty).
    dtype : numpy.dtype
        The dtype of the array made.
    """

    __slots__ = ("_made", "dtype", "last", "make", "nbytes")

    def __init__(self, make: Callable[[], np.ndarray], nbytes: int, last: int | None, dtype: np.dtype[Any]) -> None:
        self.make = make
        self.nbytes = int(nbytes)
        self.last = last
        self.dtype = np.dtype(dtype)
        self.data = None
        self._made: tuple[memoryview, int] | None = None
        self.future = _crc.pool().submit(self._make)

    def _make(self) -> tuple[memoryview, int]:
        view = byte_view(self.make(), "produced data")
        if view.nbytes != self.nbytes:
            raise ScdaArgumentError(f"produced data: {view.nbytes} bytes made where {self.nbytes} were announced")
        return view, _crc.crc32(view)

    def made(self) -> tuple[memoryview, int]:
        """Return the bytes and their CRC32 (made here if the helper thread had not started; its error re-raised).

        Raises
        ------
        ScdaArgumentError
            On this rank, if the bytes made are not ``nbytes`` long.
        """
        if self._made is None:
            self._made = self._make() if self.future.cancel() else self.future.result()  # type: ignore[assignment]
        assert self._made is not None
        return self._made

    def result(self) -> int:
        """Return the CRC32 of the bytes (made first if they are not).

        Raises
        ------
        ScdaArgumentError
            As :meth:`made`.
        """
        return self.made()[1]

    def view(self) -> memoryview:
        """Return the bytes, a flat byte view (made first if they are not).

        Raises
        ------
        ScdaArgumentError
            As :meth:`made`.
        """
        return self.made()[0]
