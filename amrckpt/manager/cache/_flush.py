"""The collective steps of the node-local level: a cached save, its partner copies, the flush, finding a cached step.

- :func:`cache_step` (SCR's checkpoint into the cache, with ``PARTNER``
  copies): every rank writes its pieces of the final file into its node's
  cache (:class:`~amrckpt.manager.cache._pieces_io.PiecesBackend`, through the save's
  one agreement), sends them to the ranks that keep its partner copies, and
  the node's first rank commits the node's step; the ranks agree.
- :func:`flush_step` (SCR's flush; with partner copies, its rebuild): every
  rank reads its pieces back (from its node, else from a partner node) and
  writes them into the shared file with the same collective write as a
  direct save (:meth:`amrckpt.scda.Backend.write_gathered`), committed as a
  save is (:func:`~amrckpt.manager._save.commit_file`): the file is
  byte-identical to the direct save's.
- :func:`newest_cached`: the newest step cached by every node layout like
  this job's, below a bound.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._files import open_regular
from ..._logging import RankLogger, get_logger
from ...comm import Call, Comm, collective
from ...errors import ManagerError, ManagerIOError
from ...scda import MAX_CALL_NBYTES, FileAccess, Style, open_sink, os_error
from ...schema import CheckpointSchema, save
from .._directory import CheckpointDirectory
from .._retention import KeepPolicy
from .._save import commit_file
from ._layout import NodeLayout
from ._level import CacheLevel
from ._pieces import Pieces, parse_pieces, pieces_name, read_pieces

__all__ = ["Cached", "cache_step", "commit_pieces", "flush_step", "gather_pieces", "newest_cached"]

_log = get_logger("amrckpt.manager")

FORMAT = 1


@dataclass(frozen=True)
class Cached:
    """A step saved into the node caches: its bytes in the final file, the seconds the save blocked, and its retention."""

    step: int
    nbytes: int
    seconds: float
    retention: Callable[[], None]


def _send_view(path: Path) -> Any:
    """Map a pieces file read-only for sending (None if it is missing: the partner is told "sent nothing").

    A step of a collective call (:meth:`~amrckpt.comm.Call.run`): an I/O
    error (open, fstat, mmap, a failing ``close(2)``) raises
    :class:`~amrckpt.errors.ScdaIOError` with its errno there, agreed,
    instead of leaving this rank out of the partner exchange.

    Raises
    ------
    ScdaIOError
        On this rank (the collective call agrees on it), if the file cannot be opened, mapped or closed (with the errno).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    try:
        fd = open_regular(path)  # never a link followed, never a FIFO waited on
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise os_error(exc, str(path), "cannot open") from exc
    view = None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > 0:
            view = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise os_error(exc, str(path), "cannot map") from exc
    try:
        os.close(fd)
    except OSError as exc:
        if view is not None:
            view.close()
        raise os_error(exc, str(path), "cannot close") from exc
    return view


def _write_new(path: Path, data: bytes, sync: bool) -> None:
    """Write a new file (never through a link), synced if ``sync``. Raises ScdaIOError with the errno.

    Raises
    ------
    ScdaIOError
        On this rank, if the file cannot be created, written, synced or closed (with the errno).
    """  # noqa: DOC501 (os_error() returns the ScdaIOError)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise os_error(exc, str(path), "cannot create") from exc
    try:
        view = memoryview(data)
        while view.nbytes:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise os_error(exc, str(path), "cannot write") from exc
    try:
        os.close(fd)
    except OSError as exc:
        raise os_error(exc, str(path), "cannot close") from exc


def cache_step(
    comm: Comm,
    level: CacheLevel,
    layout: NodeLayout,
    step: int,
    state: CheckpointSchema,
    *,
    style: Style,
    check_mesh: bool,
    records: Callable[[Any, float, float], Mapping[str, bytes]],
    keep: int,
    protect: set[int],
    log: RankLogger,
    token: str,
) -> Cached:
    """Save ``state`` as the cached ``step`` on every node, with its partner copies; then the cache's retention. Collective.

    ``records(result, t0, seconds)`` gives the step's record files (run
    record, step record) by suffix, kept in the cached step's
    ``step.json`` until its flush publishes them beside the shared file.
    The retention (each rank unlinks its own files of the steps beyond
    ``keep``, then the node's first rank removes their directories) is
    returned, to run later (``Cached.retention``, in a thread: it makes no
    collective call and never raises; the steps it removes are listed now).
    ``token`` names the save's temporary directories (hexadecimal, the same
    on every rank and new for every save: :meth:`NodeLevel.save
    <amrckpt.manager.cache._node.NodeLevel.save>` counts its saves).

    Raises
    ------
    AmrckptError
        On every rank, what any rank's write, partner copy or commit raised;
        the caches are then as before (the save's temporary directories
        removed), but for the pieces files that ranks recycled
        (:meth:`~amrckpt.manager.cache._level.CacheLevel.recyclable`): their step,
        which the save's retention would have removed, is incomplete.
    """
    with collective(comm, "CheckpointManager.cache") as call:
        first = layout.first(comm.rank)
        commit = level.new_commit(step, token)
        tmp = commit.tmp
        t0 = time.time()
        try:
            call.run(level.make_partial, step, token)
            opener = level.opener(tmp, level.recyclable(step, keep, protect, comm.rank))
            access = FileAccess(backend=opener, style=style, sync=level.sync)
            result = save(state, tmp / "pieces", comm=comm, check_mesh=check_mesh, access=access)
            for k in range(1, layout.partners + 1):
                _partner_copy(call, layout, k, tmp, level.sync)
            if layout.partners:
                call.agree("cache: partner copies")  # every file of the step is written before a node's rename
            seconds = time.time() - t0
            info = {
                "format": FORMAT,
                "step": step,
                "size": comm.size,
                "layout": layout.digest,
                "nbytes": result.nbytes,
                "records": {k: v.decode() for k, v in records(result, t0, seconds).items()},
            }
            if first:
                call.run(level.publish, commit, info)
            call.agree("cache: commit")
        except BaseException:
            if first:
                commit.roll_back()  # the step replaced is put back, the save's directory removed
            raise
        if first:
            commit.finish()
        log.info("step %d cached (%d bytes, %.3f s)", step, result.nbytes, seconds)
        rank = comm.rank
        held = (layout.held(rank, k) for k in range(1, layout.partners + 1))
        mine = [pieces_name(r) for r in (rank, *held) if r is not None]
        retired = level.retired(keep, protect | {step})

        def retention() -> None:
            level.retire_own(retired, mine)  # every rank its own files, at once
            if first:
                gone = level.retain(keep, protect | {step})
                if gone:
                    log.info("cache retention: removed the cached steps %s of this node", gone)

    return Cached(step, result.nbytes, seconds, retention)


def _partner_copy(call: Call, layout: NodeLayout, k: int, tmp: Path, sync: bool) -> None:
    """Send this rank's pieces file to its ``k``-th partner; keep the one of the rank it partners. Collective."""
    rank = call.comm.rank
    dest, source = layout.holder(rank, k), layout.held(rank, k)  # None: no k-th partner (a node with more ranks)
    raw = call.run(_send_view, tmp / pieces_name(rank)) if dest is not None else None
    try:
        got = call.sendrecv(raw, dest, source)
    finally:
        if raw is not None:
            with contextlib.suppress(BufferError):
                raw.close()
    if source is None:
        return

    def keep() -> None:
        if got is None:
            exc = ManagerError(f"partner copy: rank {source} sent nothing")
            exc.remote = True  # type: ignore[attr-defined]  # a report of the sender's failure: its own error is agreed first
            raise exc
        _write_new(tmp / pieces_name(source), got, sync)

    call.run(keep)


def _own(
    level: CacheLevel, layout: NodeLayout, step: int, rank: int, size: int, verify: bool
) -> tuple[Pieces | None, str, ManagerIOError | None]:
    """Read this rank's pieces of the cached ``step`` from its node.

    Returns the pieces, or None with why not; and the I/O error met, if
    any (not evidence of anything missing or damaged: a partner's copy may
    still serve, else the flush fails with it).
    """
    info, error = level.read_info(step)
    if error is not None:
        return None, str(error), error
    if info is None:
        return None, f"node {layout.node(rank)} has no committed cached step {step}", None
    if info.get("size") != size or info.get("layout") != layout.digest:
        return None, f"the cached step {step} was written by another process count or node layout", None
    try:
        got = read_pieces(level.step_path(step) / pieces_name(rank), verify)
    except ManagerIOError as exc:
        if exc.errno == errno.ENOENT:
            return None, str(exc), None
        why = f"cannot read rank {rank}'s pieces of the cached step {step}: {exc.strerror}"
        return None, why, ManagerIOError(exc.errno, why)
    except ManagerError as exc:
        return None, str(exc), None
    nbytes = info.get("nbytes")
    if not isinstance(nbytes, int) or got.end > nbytes:
        got.close()
        return None, f"the pieces of rank {rank} reach beyond the {nbytes} bytes of the cached step {step}: damaged", None
    return got, "", None


def gather_pieces(call: Call, level: CacheLevel, layout: NodeLayout, step: int, *, verify: bool = True) -> Pieces:
    """Return this rank's pieces of ``step``: its node's copy, else a partner's (SCR's rebuild). Collective, agreeing.

    ``verify=False`` skips the CRC32 of this node's pieces files' tables
    and data (:func:`~amrckpt.manager.cache._pieces.parse_pieces`; a partner's
    copy is always checked): for a load in place, which checks every byte
    it uses by the file's own CRC32s; a damaged copy is then found by that
    load, not here.

    Raises
    ------
    ManagerIOError
        On every rank, if some rank's pieces could not be read for an I/O
        error (its ``errno``) and no partner's copy served.
    ManagerError
        On every rank, if some rank's pieces are on no node (or damaged on every node).
    """
    rank, P = call.comm.rank, call.comm.size
    mine, why, io_error = _own(level, layout, step, rank, P, verify)
    needs = call.allgather_ints([int(mine is None)], what="flush: find the pieces")
    for k in range(1, layout.partners + 1):
        if not needs.any():
            break
        q = layout.held(rank, k)  # the rank whose k-th copy this node keeps (None: none)
        send = q is not None and bool(needs[q])
        raw = None
        if q is not None and send and level.info(step) is not None:  # a step: its error is agreed, never one rank's exit
            raw = call.run(_send_view, level.step_path(step) / pieces_name(q))
        got = call.sendrecv(raw, q if send else None, layout.holder(rank, k) if needs[rank] else None)
        if raw is not None:
            with contextlib.suppress(BufferError):
                raw.close()
        if mine is None and got is not None:
            try:
                mine = parse_pieces(got, f"the partner copy of rank {rank}'s pieces")  # always verified: a rare path
            except ManagerError as exc:
                why = str(exc)
        needs = call.allgather_ints([int(mine is None)], what="flush: find the pieces")
    if needs.any():
        lost = [int(r) for r in needs.nonzero()[0]]
        if mine is None:
            _log.info("rank %d: no copy of its pieces of the cached step %d: %s", rank, step, why)
            if io_error is not None:  # an I/O error, not a piece missing: fail with it (errno kept), agreed
                call.fail(io_error)
        call.agree("flush: find the pieces")
        raise call.agreed(ManagerError(f"the cached step {step} is incomplete: no copy of the pieces of ranks {lost[:8]}"))
    assert mine is not None
    return mine


@dataclass(frozen=True)
class _Flushed:
    nbytes: int


def flush_step(
    comm: Comm,
    level: CacheLevel,
    layout: NodeLayout,
    directory: CheckpointDirectory,
    step: int,
    *,
    access: FileAccess,
    keep_policy: KeepPolicy,
    log: RankLogger,
    pieces: Pieces | None = None,
) -> int:
    """Write the cached ``step`` into the shared directory and commit it there, with its records. Collective.

    ``pieces``: this rank's pieces of the step, already found by
    :func:`gather_pieces` (kept open); default: found here (and closed).

    Returns
    -------
    int
        The bytes of the file.

    Raises
    ------
    ManagerError
        On every rank, if the cached step is incomplete (no copy of some
        rank's pieces) or damaged; nothing is written.
    AmrckptError
        On every rank, what the write or the commit raised; the shared
        directory is then as before, the cached step untouched.
    """
    with collective(comm, "CheckpointManager.flush") as call:
        own = pieces is None
        if pieces is None:
            pieces = gather_pieces(call, level, layout, step)
        try:
            info, info_error = level.read_info(step)
            nbytes = commit_pieces(
                call,
                directory,
                step,
                pieces.pieces,
                pieces.nrounds,
                info,
                info_error=info_error,
                access=access,
                keep_policy=keep_policy,
                log=log,
            )
        finally:
            if own:
                pieces.close()
    return nbytes


def commit_pieces(
    call: Call,
    directory: CheckpointDirectory,
    step: int,
    pieces: Sequence[tuple[int, memoryview]],
    nrounds: int,
    info: dict[str, Any] | None,
    *,
    access: FileAccess,
    keep_policy: KeepPolicy,
    log: RankLogger,
    info_error: BaseException | None = None,
) -> int:
    """Write this rank's ``pieces`` of the cached ``step``'s file into the shared directory; commit it with its records. Collective.

    The flush's write and commit, whoever holds the pieces: every rank
    passes the ``(offset, bytes)`` runs of the final file that it writes
    (its own, a partner's, or, after a change of job shape, those of the
    old ranks it took over), which together are the whole file.  One
    ``write_gathered`` as a direct save's (in at least ``nrounds`` rounds,
    more if a rank holds more than a save's ranks did), committed by
    :func:`~amrckpt.manager._save.commit_file` with the records of the
    lowest rank's ``info`` (the cached step's ``step.json``): the file is
    byte for byte a direct save's.

    Returns
    -------
    int
        The bytes of the file.

    Raises
    ------
    ManagerError
        On every rank, if no rank has the step's records.
    AmrckptError
        On every rank, what the write or the commit raised; the shared
        directory is then as before.
    """
    comm, P = call.comm, call.comm.size
    key = P - comm.rank if info is not None and isinstance(info.get("records"), dict) else 0
    end = max((off + b.nbytes for off, b in pieces), default=0)
    held = sum(b.nbytes for _, b in pieces)
    red = call.reduction("flush: records").max("records holder", key).max("end", end).max("rounds", nrounds)
    top = red.max("rounds held", -(-held // MAX_CALL_NBYTES)).run()
    holder = top.max("records holder")  # P - the lowest rank that holds the records (0: none)
    if holder == 0:
        if info is None and info_error is not None:  # not missing: unreadable (its errno), agreed
            call.fail(info_error)
        call.agree("flush: records")
        raise call.agreed(ManagerError(f"the cached step {step} has no step.json on any node"))
    text = call.allreduce(root_value=json.dumps(info["records"]) if info else None, root=P - holder, what="flush: records")
    records = {k: str(v).encode() for k, v in json.loads(str(text.value)).items()}
    nbytes, rounds = int(top.max("end")), max(1, int(top.max("rounds")), int(top.max("rounds held")))

    def write(tmp: Path) -> _Flushed:
        a = access.replace(truncate=True)
        backend = open_sink(tmp, comm, access=a)
        call.run(backend.write_gathered, [] if call.failed else list(pieces), rounds, always=True)
        if directory.sync:
            backend.sync(None)
        backend.close(None)
        call.agree("flush: write")
        return _Flushed(nbytes)

    commit_file(
        comm,
        directory,
        step,
        write,
        lambda name, result, t0, seconds: records,
        keep_policy=keep_policy,
        log=log,
        reason="flush of the cached step",
    )
    return nbytes


def newest_cached(call: Call, level: CacheLevel, layout: NodeLayout, below: int | None = None) -> int | None:
    """Return the newest step below ``below`` that some node holds, cached by this job's P and layout. Collective, agreeing."""
    size = call.comm.size

    def local() -> int:
        for s in sorted(level.steps(), reverse=True):
            if below is not None and s >= below:
                continue
            info = level.info(s)
            if info is not None and info.get("size") == size and info.get("layout") == layout.digest:
                return s
        return -1

    got = call.run(local)
    top = int(call.reduction("cache: newest step").max("step", got if got is not None else -1).run().max("step"))
    return None if top < 0 else top
