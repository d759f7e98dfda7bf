"""The exception tree of amrckpt (layer 0: imports nothing of ours).

Every error that amrckpt raises derives from :class:`AmrckptError`.  The scda
classes mirror the error classes of libsc's ``sc_scda`` (``sc_scda.h``:
``SC_SCDA_FERR_FORMAT``, ``_USAGE``, ``_DECODE``, ``_ARG``, ``_COUNT`` and
``_MPI``), and each also derives from the matching builtin so that callers can
catch ``ValueError`` or ``OSError`` as they are used to (the zarr-python v3
convention).

Errors raised inside a collective call are agreed on by all ranks before they
propagate: every rank raises an exception of the same class, whose message
names the failing rank(s), and whose :attr:`AmrckptError.rank_errors` maps
each failing rank to its own message.
"""

from __future__ import annotations

__all__ = [
    "AdaptError",
    "AmrckptError",
    "AmrckptWarning",
    "CheckpointError",
    "CheckpointSkippedWarning",
    "CachedStepsUnreachableWarning",
    "ChecksumError",
    "CollectiveError",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "CommError",
    "CommRequiredError",
    "ConnectivityError",
    "IncompleteCheckpointError",
    "LaunchError",
    "ManagerError",
    "ManagerIOError",
    "P4estFormatError",
    "PartitionError",
    "SchemaError",
    "StepAlreadyExistsError",
    "StepNotFoundError",
    "ThreadStartError",
    "UnsupportedFormatError",
    "ScdaArgumentError",
    "ScdaCountError",
    "ScdaDecodeError",
    "ScdaError",
    "ScdaFileNotFoundError",
    "ScdaFormatError",
    "ScdaIOError",
    "ScdaPermissionError",
    "ScdaUsageError",
]


class AmrckptError(Exception):
    """Root of every exception raised by amrckpt.

    Attributes
    ----------
    rank_errors : dict of int to str
        For an error agreed on by all ranks of a collective call: the failing
        ranks and, for each, ``"ClassName: message"`` as raised there.  Empty
        for errors raised outside collective calls.
    """

    rank_errors: dict[int, str]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.rank_errors = {}


class ScdaError(AmrckptError):
    """Base class of the errors of the scda layer (libsc ``sc_scda_ferror_t``)."""


class ScdaFormatError(ScdaError, ValueError):
    """The file does not conform to the scda format (libsc ``SC_SCDA_FERR_FORMAT``).

    Raised for corrupt file contents: a wrong magic, a malformed padding, a
    count entry with a sign, leading zeros or more than 26 digits, an unknown
    section type.
    """


class ScdaUsageError(ScdaError, RuntimeError):
    """The reading or writing functions were called in a wrong order.

    libsc ``SC_SCDA_FERR_USAGE``: e.g. reading array data when the next
    section is a block, or using a closed file.
    """


class ScdaDecodeError(ScdaError, ValueError):
    """A section violates the compression convention (libsc ``SC_SCDA_FERR_DECODE``).

    Raised only when reading with ``decode=True`` (scda paper, section 3): a
    compression header not followed by the right partner section, a U entry
    that disagrees with the decoded size, an element that is not valid
    base64 or zlib.
    """


class ScdaArgumentError(ScdaError, ValueError):
    """An argument has no legal meaning (libsc ``SC_SCDA_FERR_ARG``).

    Examples: a user string longer than 58 bytes, ``elem_counts`` that do not
    have one entry per rank or do not sum to ``N``, a collective argument that
    differs between ranks.
    """


class ScdaCountError(ScdaError, OSError):
    """Fewer bytes could be read or written than required (libsc ``SC_SCDA_FERR_COUNT``).

    Typically a truncated file, or a count in the file that exceeds the
    file's size.
    """


class ScdaIOError(ScdaError, OSError):
    """The file system or MPI-IO reported an error (libsc ``SC_SCDA_FERR_MPI``).

    ``errno`` is set where the operating system or the MPI error class
    provides one (e.g. ``errno.ENOSPC`` for ``MPI_ERR_NO_SPACE``).
    """


class ScdaFileNotFoundError(ScdaIOError, FileNotFoundError):
    """The file (or its directory) does not exist."""


class ScdaPermissionError(ScdaIOError, PermissionError):
    """The file may not be read or written by this process."""


class PartitionError(AmrckptError, ValueError):
    """A partition of elements over ranks is invalid."""


class AdaptError(AmrckptError, ValueError):
    """An adaptation of a forest that cannot be done (:mod:`amrckpt.adapt`).

    A marker of the wrong length or dtype, a level out of range, a family
    split by a rank boundary, a transfer function that returns the wrong shape.
    """


class SchemaError(AmrckptError, ValueError):
    """A checkpoint schema, or the data given for it, is invalid."""


class ConnectivityError(AmrckptError, ValueError):
    """A p4est connectivity is invalid: its arrays fail p4est's ``p4est_connectivity_is_valid``, or their shapes."""


class P4estFormatError(AmrckptError, ValueError):
    """A file is not a valid p4est file (``p4est_save_ext``, ``p4est_connectivity_save``), or it is damaged.

    Attributes
    ----------
    section : str
        The part of the file that is wrong (``"connectivity header"``,
        ``"forest header"``, ``"pertree"``, ``"quadrants"``...).
    offset : int
        The byte offset of that part in the file (-1 when unknown).
    """

    section: str = ""
    offset: int = -1


class CheckpointError(AmrckptError, ValueError):
    """A file is not a valid amrckpt checkpoint (its manifest, index or footer is wrong)."""


class UnsupportedFormatError(CheckpointError):
    """A checkpoint cannot be exported in the format asked for (a HyperTreeGrid of trees that are not boxes on a grid).

    The message names why (which trees, what shape) and the formats the
    checkpoint allows (:func:`amrckpt.export.vtkhdf_formats`).
    """


class IncompleteCheckpointError(CheckpointError):
    """A checkpoint has no valid footer: the save that wrote it did not finish.

    Raised for files cut short anywhere (a killed job, a full disk).
    """


class ChecksumError(CheckpointError):
    """The bytes of a section do not match the CRC32 recorded in the index.

    Attributes
    ----------
    section : str
        The section's name (a field name, or ``"amrckpt ..."``).
    offset, end : int
        Its byte range in the file.
    """

    section: str
    offset: int
    end: int


class ManagerError(AmrckptError, RuntimeError):
    """A checkpoint manager cannot do its job: its directory is in use or not writable."""


class ManagerIOError(ManagerError, OSError):
    """The file system refused an operation on a manager's directory or node cache.

    Raised, on every rank, when the directory cannot be made, listed,
    locked or renamed in, or a cached pieces file cannot be opened: the
    message names the path and the cause, ``errno`` is that of the
    ``OSError`` (e.g. ``errno.EMFILE``), and the ``OSError`` is chained as
    ``__cause__`` on the rank that met it.  Nothing is deleted or set aside
    for it: it is never taken for damage.  Built as ``ManagerIOError(errno,
    message)``; catch it as ``OSError`` or as ``ManagerError``.
    """

    def __init__(self, *args: object) -> None:
        if len(args) == 2 and (args[0] is None or isinstance(args[0], int)):
            code, message = args
            if code is None:
                super().__init__(message)
                return
            super().__init__(code, message)
            self.errno, self.strerror = int(code), str(message)  # type: ignore[call-overload]
            return
        super().__init__(*args)

    @classmethod
    def of(cls, message: str, exc: OSError) -> ManagerIOError:
        """Return the error for ``exc`` with ``message`` (``errno`` kept)."""
        return cls(exc.errno, f"{message}: {exc.strerror or exc}")


class StepAlreadyExistsError(ManagerError):
    """A save of a step that has a checkpoint, or is lower than the newest one (orbax's ``StepAlreadyExistsError``).

    Raised on every rank by :meth:`amrckpt.CheckpointManager.save` unless
    it is called with ``overwrite=True``; nothing is written.
    """


class StepNotFoundError(ManagerError, LookupError):
    """A manager has no checkpoint of the step asked for (:meth:`~amrckpt.CheckpointManager.restore`, ``delete``, ``metadata``)."""


class AmrckptWarning(UserWarning):
    """Root of the warnings amrckpt issues (``warnings``: shown on stderr unless filtered)."""


class CheckpointSkippedWarning(AmrckptWarning):
    """A restart skipped a checkpoint that is damaged (evidence in its bytes, found twice), and kept it aside.

    Issued on rank 0 by :meth:`~amrckpt.CheckpointManager.restore_latest`
    (and by a save of a step whose checkpoint is damaged): the message names
    the checkpoint, the problem, and the name it is kept under (it is never
    overwritten).  The same steps are in the ``skipped`` list of what
    ``restore_latest`` returns.
    """


class CachedStepsUnreachableWarning(AmrckptWarning):
    """A restart found cached steps newer than the directory's newest, of another job shape, that it cannot reach.

    Issued on rank 0 by :meth:`~amrckpt.CheckpointManager.restore_latest`
    (and logged at WARNING) when the node caches hold steps written by
    another process count or node layout and some old rank's pieces are in
    no cache directory that the ranks of this job see (a node's cache
    deleted, with no partner copy).  The message names the steps, the job
    shape that wrote them (ranks and nodes) and the ranks (and nodes)
    missing; the restart takes the newest checkpoint it can reach, and the
    cache's retention keeps those steps.
    """


class CommError(AmrckptError, RuntimeError):
    """An MPI communication call (``MPI_Allreduce``, ``MPI_Bcast``...) failed (libsc ``SC_SCDA_FERR_MPI``).

    :class:`~amrckpt.comm.MPIComm` raises it for an ``mpi4py.MPI.Exception``
    from a collective; the fault injection of the tests raises it on every
    rank of the failing call.  A real MPI error
    in a collective is reported only on the ranks where MPI reports it: MPI
    offers no agreement on a broken communicator (that needs ULFM's
    ``MPIX_Comm_agree``), so amrckpt cannot promise that the other ranks see it.
    """


class LaunchError(AmrckptError, RuntimeError):
    """The processes were not started as one MPI job: the launcher started N tasks, but ``MPI.COMM_WORLD`` is smaller.

    Typically ``srun -n 4`` without a process-management interface that the
    MPI library speaks (``--mpi=none``): each task is an MPI world of one and
    would write the same files.  Raised on every such process before
    anything is written; the message names the variables compared and the fix.
    """


class CollectiveError(AmrckptError):
    """One or more ranks failed with an exception outside amrckpt's tree.

    Raised on every rank of a collective call when a rank failed with, for
    instance, a ``MemoryError`` or a bug in a user callback; the original
    exception is chained on the ranks where it happened and described in
    :attr:`rank_errors` everywhere.
    """


class CollectiveMismatchError(CollectiveError, RuntimeError):
    """The ranks made different collective calls: rank 0 in one, rank 1 in another (or at another point of it).

    Raised on every rank by the first exchange where their calls meet
    (:class:`amrckpt.comm.Call`); the message names each rank's call and
    its number on the communicator.  Typically a call made on some ranks
    only (``if rank == 0: manager.latest_step()``).
    """


class CommRequiredError(CommError):
    """``comm=None`` was passed inside an MPI job of several processes.

    Each process would act alone on the same files.  Raised on every rank
    before anything is read or written; pass ``comm=MPI.COMM_WORLD`` (or
    ``MPI.COMM_SELF`` for files of one process each).
    """


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """Ranks did not come to a collective call of amrckpt within ``AMRCKPT_COLLECTIVE_TIMEOUT`` seconds.

    Raised on every rank that waited (torch's NCCL watchdog): the message
    names its own call (operation and number on the communicator), the
    ranks that did not come (and, where they told, the call they made last
    or that their process ended), this rank's last collective calls (its
    flight recorder), and the fix.  Typically a collective call made on some
    ranks only (``if rank == 0: manager.save(...)``) or a rank that died
    without ending the job.  The communicator cannot agree any more: every
    later call of amrckpt on it raises this error at once, and an uncaught
    one ends the MPI job (``MPI_Abort``) after the traceback is printed.

    Attributes
    ----------
    op : str
        The call that waited.
    seq : int
        Its number on the communicator.
    missing : tuple of int
        The ranks that did not come (empty where this rank could not tell).
    ended : dict of int to str
        Ranks whose process ended while a manager was open, with what they said.
    """

    op: str = ""
    seq: int = 0
    missing: tuple[int, ...] = ()
    ended: dict[int, str]


class ThreadStartError(AmrckptError, RuntimeError):
    """A helper thread of amrckpt could not be started (no memory for its stack, a limit on threads).

    Raised by the step that needed it, within a bounded wait (a thread that
    dies before it runs would make ``Thread.start`` wait forever), and agreed
    on by every rank of the collective call like any step's error.
    """
