"""What reading a checkpoint's metadata found, and what an error of reading says of the file.

Only evidence in a checkpoint's bytes (a CRC32 that differs, a structure
that contradicts its index) is a verdict on it; an I/O error says nothing
of the file (:func:`io_error_of`).
"""

from __future__ import annotations

import builtins
import errno
import re
from dataclasses import dataclass

from .. import errors
from ..container import CheckpointInfo
from ..errors import CheckpointError, ScdaCountError, ScdaError, ScdaIOError

__all__ = ["Check", "io_error_of"]


@dataclass(frozen=True)
class Check:
    """What reading a checkpoint's metadata found.

    Attributes
    ----------
    info : CheckpointInfo or None
        The metadata, if they verify.
    problem : str or None
        Why they do not.
    unreadable : bool
        The file could not be read (an I/O error such as ``EIO``, ``EACCES``,
        or another failure that says nothing of its bytes), as opposed to
        read and found damaged (:func:`io_error_of`).
    error : BaseException or None
        The error of reading, if any.
    """

    info: CheckpointInfo | None
    problem: str | None = None
    unreadable: bool = False
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """Whether the metadata verify."""
        return self.info is not None


_ERRNO = re.compile(r"\[Errno (\d+)\] ")


def io_error_of(exc: BaseException) -> BaseException | None:
    """Return the I/O error among the failures of reading a checkpoint, or None if they are evidence in its bytes. Not collective.

    Evidence (a verdict on the file): a CRC32 that differs, a structure that
    contradicts the index, a file that ends before its index or footer says
    (:class:`~amrckpt.errors.CheckpointError`, and the scda errors other than
    :class:`~amrckpt.errors.ScdaIOError`).  Anything else is not: an I/O
    error (``EIO``, ``EINTR``, ``EAGAIN``, ``ENOMEM``, ``EBADFD``,
    ``ENXIO``, ``EACCES``, a failed close), on this rank or, for an error
    agreed by a collective call, on any rank (its
    :attr:`~amrckpt.errors.AmrckptError.rank_errors`), or a failure outside
    amrckpt's tree (``MemoryError``: :class:`~amrckpt.errors.CollectiveError`).

    Returns
    -------
    BaseException or None
        ``exc`` itself if it is such an error; a :class:`~amrckpt.errors.ScdaIOError`
        (with the errno of the rank's message) for an error of evidence on one
        rank and of I/O on another; None for evidence alone.  The same on every
        rank for an agreed error.
    """
    if not isinstance(exc, (CheckpointError, ScdaError)) or isinstance(exc, ScdaIOError):
        return exc
    for rank, text in sorted(exc.rank_errors.items()):
        name, _, message = text.partition(": ")
        cls = getattr(errors, name, None) or getattr(builtins, name, None)  # of amrckpt's tree or a builtin
        if isinstance(cls, type) and issubclass(cls, OSError) and not issubclass(cls, ScdaCountError):  # I/O, not bytes missing
            m = _ERRNO.match(message)
            out = ScdaIOError(int(m.group(1)) if m else errno.EIO, f"rank {rank}: {message[m.end() if m else 0 :]}")
            out.rank_errors = dict(exc.rank_errors)
            return out
    return None
