"""The watchdog of amrckpt's collective calls: a bounded first meeting, a flight recorder, and exit notices.

torch's NCCL watchdog and its flight recorder are the model.  Every
collective call of amrckpt (:class:`~amrckpt.comm.Call`) starts with a
*meeting*: a nonblocking ``MPI_Iallreduce`` of its call tag that Python
polls against the clock (:meth:`~amrckpt.comm.Comm.meet`), before any
blocking collective (a communicator duplication, ``MPI_File_open``) can
hold the interpreter.  A rank that waits longer than the collective timeout
raises :class:`~amrckpt.errors.CollectiveTimeoutError` naming its own call,
what it knows of the other ranks, and its last calls (the flight
recorder); a rank whose process ends while a manager is open tells the
others (:func:`watch`), so that those waiting fail at once.

The timeout is ``AMRCKPT_COLLECTIVE_TIMEOUT`` (seconds) in the environment,
or the ``collective_timeout=`` of a :class:`~amrckpt.CheckpointManager` for
its communicator; default :data:`DEFAULT_TIMEOUT`.  It bounds how long the
ranks may arrive apart at a call (the skew of their programs), not how long
a call takes: a save of any size passes it.

After the meeting, a rank can still be stuck *inside* a call: in an MPI
collective that another rank never reaches, in ROMIO's own deadlock, or in
a read of a hung file server.  Python cannot release it from there, so the
*stall watchdog* ends the job instead of letting it hang: a call of an MPI
job of several processes that makes no progress (no exchange between the
ranks) for :func:`stall_limit` seconds, twice the timeout, prints its
message, the flight recorder and every thread's stack on stderr, and calls
``MPI_Abort``.  It is a daemon thread (started once per process, at the
first such call) that wakes every second.  Where the stuck call holds the
interpreter lock (a pickle-based mpi4py collective, a C extension that does
not release it) that thread cannot run, so every such call also sets
:func:`faulthandler.dump_traceback_later` with ``exit=True`` for a grace
period after the limit, and the thread moves it on while the call makes
progress: the interpreter's own C timer then prints every thread's stack
and ends the process, and the launcher ends the job.  That timer is the
process's one: amrckpt sets it while such a call runs and cancels it after,
which replaces a timer set by the program (e.g. pytest's
``faulthandler_timeout``).
"""

from __future__ import annotations

import atexit
import collections
import faulthandler
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

from .. import errors

__all__ = [
    "DEFAULT_TIMEOUT",
    "Notices",
    "collective_timeout",
    "flight_recorder",
    "install_excepthook",
    "record",
    "set_timeout",
    "stall_limit",
    "timeout_error",
]

DEFAULT_TIMEOUT = 600.0
"""Seconds a rank waits at the start of a collective call for the others (torch's NCCL default, 10 minutes)."""

_timeouts: dict[Any, float] = {}
_ring: collections.deque[tuple[float, str, int, str]] = collections.deque(maxlen=16)
_ring_lock = threading.Lock()


def collective_timeout(key: Any = None) -> float:
    """Return the timeout, in seconds, of a meeting on the communicator ``key``. Not collective.

    A manager's ``collective_timeout=`` for its communicator wins, then
    ``AMRCKPT_COLLECTIVE_TIMEOUT``, then :data:`DEFAULT_TIMEOUT`.

    Raises
    ------
    ScdaArgumentError
        If ``AMRCKPT_COLLECTIVE_TIMEOUT`` is not a positive number of seconds.
    """
    if key in _timeouts:
        return _timeouts[key]
    text = os.environ.get("AMRCKPT_COLLECTIVE_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise errors.ScdaArgumentError(
            f"AMRCKPT_COLLECTIVE_TIMEOUT={text!r}: give a positive number of seconds (default {DEFAULT_TIMEOUT:g})"
        )
    return value


def set_timeout(key: Any, seconds: float) -> None:
    """Set the meeting timeout of the communicator ``key`` (its last :func:`unwatch` drops it). Not collective."""
    _timeouts[key] = float(seconds)


def record(op: str, seq: int, event: str) -> None:
    """Note a collective call's event in this process's flight recorder (the last 16 are kept). Not collective."""
    with _ring_lock:
        _ring.append((time.time(), op, seq, event))


def flight_recorder() -> list[str]:
    """Return this process's last collective calls, oldest first, as lines. Not collective."""
    with _ring_lock:
        entries = list(_ring)
    return [
        f"{time.strftime('%H:%M:%S', time.localtime(t))}.{int(t % 1 * 1000):03d} {op} (call {seq}): {ev}"
        for t, op, seq, ev in entries
    ]


class Notices:
    """The exit notices of the ranks of one communicator: sent at a rank's exit, read by the ranks that wait.

    Built collectively by :func:`watch` (a duplicate of the communicator
    carries them, so that no message of the user's can take them).  Not
    collective otherwise.
    """

    TAG = 0x5CDE
    WAIT_TAG = 0x5CDF

    def __init__(self, mpi_comm: Any, MPI: Any) -> None:
        self.mpi_comm = mpi_comm
        self._MPI = MPI
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()
        self.ended: dict[int, str] = {}

    def poll(self) -> dict[int, str]:
        """Receive the notices that have arrived; return every rank that ended so far, with what it said."""
        MPI = self._MPI
        status = MPI.Status()
        while self.mpi_comm.Iprobe(source=MPI.ANY_SOURCE, tag=self.TAG, status=status):
            src = status.Get_source()
            try:
                text = str(self.mpi_comm.recv(source=src, tag=self.TAG))
            except Exception as exc:  # noqa: BLE001 - a notice that cannot be read still says the rank ended
                text = f"(its notice could not be read: {exc})"
            self.ended[src] = text
        return dict(self.ended)

    def waiting_with_me(self, op: str, seq: int, window: float = 2.0) -> set[int]:
        """Tell the other ranks that this one timed out in ``(op, seq)``; return the ranks that said the same within ``window`` s.

        Only on a timeout's path: O(P) messages.
        """
        MPI = self._MPI
        me = (op, seq)
        reqs = [self.mpi_comm.isend(me, dest=r, tag=self.WAIT_TAG) for r in range(self.size) if r != self.rank]
        heard: set[int] = set()
        status = MPI.Status()
        deadline = time.monotonic() + window
        while time.monotonic() < deadline and len(heard) < self.size - 1:
            while self.mpi_comm.Iprobe(source=MPI.ANY_SOURCE, tag=self.WAIT_TAG, status=status):
                src = status.Get_source()
                if self.mpi_comm.recv(source=src, tag=self.WAIT_TAG) == me:
                    heard.add(src)
            reqs = [r for r in reqs if not r.Test()]
            self.poll()
            time.sleep(0.01)
        return heard

    def send_exit(self, text: str) -> None:
        """Tell every other rank that this process ends (``MPI_Isend``), waiting at most 2 s for the sends."""
        MPI = self._MPI
        if not MPI.Is_initialized() or MPI.Is_finalized():
            return
        reqs = [self.mpi_comm.isend(text, dest=r, tag=self.TAG) for r in range(self.size) if r != self.rank]
        deadline = time.monotonic() + 2.0
        while reqs and time.monotonic() < deadline:
            reqs = [r for r in reqs if not r.Test()]
            time.sleep(0.001)


_notices: dict[Any, Notices] = {}
_exit_hooked = False


def notices(key: Any) -> Notices | None:
    """Return the exit notices of the communicator ``key``, if a manager watches it. Not collective."""
    return _notices.get(key)


def watch(key: Any, mpi_comm: Any | None) -> None:
    """Start (or count one more use of) the exit notices of ``mpi_comm``. Collective: ``MPI_Comm_dup`` on every rank.

    Called by a manager when it opens, after its first meeting; a process
    that ends while a manager watches tells the other ranks (``atexit``).
    """
    global _exit_hooked
    _watches[key] = _watches.get(key, 0) + 1
    if key in _notices or mpi_comm is None:
        return
    from mpi4py import MPI

    _notices[key] = Notices(mpi_comm.Dup(), MPI)
    if not _exit_hooked:
        atexit.register(_at_exit)
        _exit_hooked = True


_watches: dict[Any, int] = {}


def unwatch(key: Any) -> None:
    """Count one watch of ``key`` less (the last drops its exit notices and timeout). Not collective (MPI keeps the duplicate)."""
    n = _watches.get(key, 0) - 1
    if n > 0:
        _watches[key] = n
        return
    _watches.pop(key, None)
    _notices.pop(key, None)
    _timeouts.pop(key, None)


def _at_exit() -> None:
    """Tell the ranks of every watched communicator that this process ends, with its last collective call."""
    last = flight_recorder()[-1:] or ["no collective call of amrckpt"]
    exc = getattr(sys, "last_value", None)
    why = f"after an uncaught {type(exc).__name__}: {exc}" if exc is not None else "its program ended"
    for n in list(_notices.values()):
        try:
            n.send_exit(f"its process ended ({why}) while a manager was open; its last call: {last[0]}")
        except Exception:  # noqa: BLE001 - at exit, a notice that cannot be sent is not worth a traceback
            pass
    _notices.clear()


def timeout_error(
    op: str, seq: int, rank: int, size: int, waited: float, ended: dict[int, str], waiting: set[int] | None = None
) -> errors.CollectiveTimeoutError:
    """Build the error a rank raises when the others did not come to ``op`` within ``waited`` seconds. Not collective.

    ``ended``: the ranks known to have ended; ``waiting``: the other ranks
    known to wait in the same call (None: unknown).
    """
    if ended:
        who = "; ".join(f"rank {r} ended: {t}" for r, t in sorted(ended.items()))
        head = f"rank {rank} of {size} in {op} (call {seq} on this communicator): {who}. The other ranks cannot be waited for"
        missing = tuple(sorted(ended))
    else:
        missing = () if waiting is None else tuple(r for r in range(size) if r != rank and r not in waiting)
        known = ""
        if waiting is not None:
            here = sorted({rank, *waiting})
            known = f" (ranks {', '.join(map(str, here))} waited in it; rank{'s' if len(missing) != 1 else ''} " + (
                f"{', '.join(map(str, missing))} did not come)"
            )
        head = (
            f"rank {rank} of {size} waited {waited:.3g} s in {op} (call {seq} on this communicator) for ranks that did not "
            f"come{known}: a collective call made on some ranks only (under a condition that differs between ranks, e.g. "
            "`if rank == 0: ...`), or a rank that is stuck or died without ending the job"
        )
    recent = flight_recorder()
    exc = errors.CollectiveTimeoutError(
        f"{head}. Make every rank make the same amrckpt calls in the same order; AMRCKPT_COLLECTIVE_TIMEOUT "
        f"(now {waited:g} s) sets how long ranks may arrive apart. This communicator cannot agree any more: an "
        f"uncaught error ends the MPI job. This rank's last calls: " + " | ".join(recent)
    )
    exc.op, exc.seq, exc.ended, exc.missing = op, seq, dict(ended), missing
    exc._amrckpt_agreed = True  # type: ignore[attr-defined]  # every rank that waited raises it; nothing to agree on
    return exc


_hook_installed = False


def install_excepthook() -> None:
    """End the MPI job (``MPI_Abort``) after printing an uncaught exception's traceback, as ``python -m mpi4py`` does.

    Not collective.  Installed once per process, by a manager of an MPI job
    of several processes (unless ``abort_on_error=False``) and before a
    :class:`~amrckpt.errors.CollectiveTimeoutError` is raised: an
    uncaught exception on one rank would otherwise leave the others waiting
    forever.  Chains to the hook it replaces.
    """
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(exc_type: Any, exc: BaseException, tb: Any) -> None:
        previous(exc_type, exc, tb)
        try:
            from mpi4py import MPI

            if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
                sys.stderr.write(
                    f"amrckpt: rank {MPI.COMM_WORLD.Get_rank()}: an uncaught {exc_type.__name__} ends the MPI job "
                    "(MPI_Abort), so that the other ranks do not wait forever (CheckpointManager(abort_on_error=False) "
                    "keeps the old behaviour)\n"
                )
                sys.stderr.flush()
                time.sleep(0.5)  # the process manager forwards what this rank printed before it kills the job
                MPI.COMM_WORLD.Abort(1)
                os._exit(1)
        except Exception:  # noqa: BLE001 - the traceback was printed; nothing more can be done
            traceback.print_exc()

    sys.excepthook = hook


# -- the stall watchdog -------------------------------------------------------------------------------------------

POLL = 1.0
"""Seconds between two looks of the stall watchdog at the open calls."""

_calls: dict[int, tuple[str, int, int, int, float, list[float]]] = {}  # id -> (op, seq, rank, size, limit, [progress])
_calls_lock = threading.Lock()  # also serializes the calls of faulthandler's timer
_armed: list[float] = []  # the deadline (time.monotonic()) faulthandler's timer is set for, if it is
_last_set = [0.0]  # when it was set last (time.monotonic())
_notes: dict[int, str] = {}  # id -> what the stalled call's rank was doing, for the message
_stall_thread: Any = None
_log = logging.getLogger("amrckpt.comm")


def stall_limit(key: Any = None) -> float:
    """Return the seconds a call of the communicator ``key`` may go without progress before the job is ended. Not collective.

    Twice :func:`collective_timeout`: 20 minutes by default.
    """
    return 2.0 * collective_timeout(key)


def _grace(limit: float) -> float:
    """Seconds faulthandler's timer waits after the stall watchdog's own limit."""
    return min(60.0, limit / 2)


def _set_timer(deadline: float, now: float) -> None:
    """Set faulthandler's timer (``exit=True``) for ``deadline``; hold ``_calls_lock``."""
    try:
        faulthandler.dump_traceback_later(max(POLL, deadline - now), exit=True)
    except RuntimeError:  # its C thread cannot start now (no memory): the watchdog's next look tries again
        _armed.clear()
        return
    _armed[:] = [deadline]
    _last_set[0] = now


def arm(ident: int, op: str, seq: int, rank: int, size: int, limit: float) -> list[float]:
    """Watch the call ``ident`` for stalls; return its progress cell (``cell[0] = time.monotonic()`` is progress). Not collective.

    Sets faulthandler's timer if no open call has, and starts the
    watchdog's thread at the first call of the process; a thread that
    cannot start leaves the calls to the timer alone (logged once): no rank
    takes another path for it.
    """
    global _stall_thread
    now = time.monotonic()
    cell = [now]
    with _calls_lock:
        _calls[ident] = (op, seq, rank, size, limit, cell)
        if not _armed:
            _set_timer(now + limit + _grace(limit), now)
        start = _stall_thread is None
        if start:
            _stall_thread = False  # started once, or tried once
    if start:
        from .._threads import start_thread

        try:
            _stall_thread = start_thread(_watch_stalls, "amrckpt-stall-watchdog")
        except errors.ThreadStartError as exc:
            _log.warning("the stall watchdog's thread cannot start (%s): only faulthandler's timer ends a stuck call", exc)
    return cell


def progress(cell: list[float], limit: float) -> None:
    """Note progress of a watched call (an exchange begins); move faulthandler's timer on, at most once a second. Not collective.

    From the calling thread itself, so that the timer is set for this
    exchange even if it then holds the interpreter lock until the end (a
    pickle-based mpi4py collective), where the watchdog's thread cannot run.
    """
    now = time.monotonic()
    cell[0] = now
    if now - _last_set[0] > POLL:
        with _calls_lock:
            deadline = min(c[0] + lim + _grace(lim) for *_, lim, c in _calls.values()) if _calls else now + limit + _grace(limit)
            _set_timer(deadline, now)


def note(ident: int, text: str) -> None:
    """Say what the watched call ``ident`` waits for, for the message if it stalls (:func:`_abort_stalled`). Not collective."""
    with _calls_lock:
        if ident in _calls:
            _notes[ident] = text


def disarm(ident: int) -> None:
    """Stop watching the call ``ident``; cancel faulthandler's timer if no call is open. Not collective."""
    with _calls_lock:
        _calls.pop(ident, None)
        _notes.pop(ident, None)
        if not _calls and _armed:
            faulthandler.cancel_dump_traceback_later()
            _armed.clear()


def _watch_stalls() -> None:
    """End the job when a watched call makes no progress for its limit (the watchdog's thread).

    While calls make progress, it moves faulthandler's timer on, so that
    the timer fires only for a call that stalled while holding the
    interpreter lock (where this thread cannot run).
    """
    while True:
        time.sleep(POLL)
        now = time.monotonic()
        with _calls_lock:
            calls = list(_calls.values())
            notes = [_notes.get(ident, "") for ident in _calls]
            if calls:
                deadline = min(cell[0] + limit + _grace(limit) for *_, limit, cell in calls)
                if not _armed or abs(deadline - _armed[0]) > POLL:
                    _set_timer(deadline, now)
        for (op, seq, rank, size, limit, cell), text in zip(calls, notes, strict=True):
            if now - cell[0] > limit:
                _abort_stalled(op, seq, rank, size, limit, now - cell[0], text)


def _abort_stalled(op: str, seq: int, rank: int, size: int, limit: float, stalled: float, text: str = "") -> None:
    """Print why, the flight recorder and every thread's stack; end the MPI job (``MPI_Abort``).

    ``text`` says what the call waits for, where :func:`note` said it.
    """
    why = text or (
        "a rank is stuck inside MPI or the file system (a collective that another rank never reaches, a "
        "deadlock inside MPI-IO, a hung file server), and Python cannot release it from there"
    )
    try:
        sys.stderr.write(
            f"amrckpt: rank {rank} of {size}: {op} (call {seq} on its communicator) has made no progress for "
            f"{stalled:.0f} s (the limit is {limit:g} s, twice AMRCKPT_COLLECTIVE_TIMEOUT) after every rank met at its "
            f"start: {why}. The MPI job is "
            "ended (MPI_Abort) so that it does not hang; its checkpoints are as a kill leaves them (the newest one "
            "that was committed is whole). This rank's last calls: " + " | ".join(flight_recorder()) + "\n"
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        time.sleep(0.5)  # the process manager forwards what this rank printed before it kills the job
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
    finally:
        os._exit(1)
