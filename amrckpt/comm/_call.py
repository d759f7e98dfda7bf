"""One collective call of amrckpt: every rank's outcome shared, the same error raised on every rank.

torch.distributed.checkpoint's ``_DistWrapper`` is the model: a public
collective entry point (a save, a load, a manager call...) opens a
:class:`Call` with :func:`collective` and runs its local work through it.
:meth:`Call.run` runs a step on this rank and keeps its exception instead of
raising it; the exchanges (:meth:`Call.allreduce`, :meth:`Call.exscan`,
:meth:`Call.allgather_int`, ...) always send a well-formed payload, whatever
failed before, so that no rank is left waiting and no rank misreads what it
receives; every *agreeing* exchange raises, on every rank, the same error
when any rank holds one, naming the failing ranks and their messages.

Three promises have their home here:

- **An error on any rank is raised on every rank.**  A step that fails on
  one rank is skipped there until the next agreement, which raises it
  everywhere as the same class of amrckpt's tree (:func:`agreed_error`);
  an exception outside the tree becomes :class:`~amrckpt.errors.CollectiveError`.
- **Mismatched calls are named.**  Each call takes the next sequence number
  of its communicator; every agreeing exchange carries a digest of the call's
  operation name, its sequence number and the exchange's position in the
  call.  Ranks that made different calls (rank 0 in ``latest_step`` while
  rank 1 is in ``restore``) all raise
  :class:`~amrckpt.errors.CollectiveMismatchError` naming both.  The first
  exchange of every call is an allreduce of the same kind, so that
  mismatched calls always meet in the same MPI call.  The digest rides on
  that first allreduce: no collective is added for it.
- **``comm=None`` is not silently serial inside an MPI job.**  A call opened
  with ``comm=None`` in a process whose ``MPI.COMM_WORLD`` has more than one
  rank raises :class:`~amrckpt.errors.CommRequiredError` before anything
  is read or written.

Calls nest: an entry point called inside another on the same communicator
(``CheckpointManager.save`` calls :func:`amrckpt.save`) joins the open call.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .. import errors
from .._threads import Worker, start_thread
from . import _watchdog
from ._agreed import agreed_error, describe, desync_error, mismatch_error
from ._base import NONE, Columns, Comm, Reduced, ReduceOp, _fit, digest_of
from ._mpi import MPIComm
from ._reduction import Reduction
from ._registry import _broken, _inner, _key, _mark_broken, _next_seq, require_comm
from ._watchdog import (
    arm,
    collective_timeout,
    disarm,
    install_excepthook,
    note,
    notices,
    record,
    stall_limit,
    timeout_error,
)

__all__ = [
    "Call",
    "Reduced",
    "agreed_error",
    "collective",
    "current_call",
    "describe",
]

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


# -- the calls open on this thread ----------------------------------------------------------------------------

_open = threading.local()


def current_call(comm: Comm) -> Call | None:
    """Return the call open on ``comm`` in this thread, or None. Not collective."""
    calls: dict[Any, Call] = getattr(_open, "calls", {})
    return calls.get(_key(comm))


class collective:
    """Open a collective call of amrckpt on ``comm``, or join the one open on it in this thread.

    Collective: every rank of ``comm`` opens it at the same point of its
    program.  Leaving the outermost block agrees on whatever was not agreed
    yet (an allreduce, only if a step came after the last agreement); an
    exception that left it on some ranks only (not raised by an exchange)
    is agreed on there too.  A call opened inside another on the same
    communicator joins it, and leaves the agreeing to it.

    Parameters
    ----------
    comm : None, mpi4py.MPI.Comm or Comm
        The communicator; ``None`` is refused inside an MPI job of several
        processes (:func:`require_comm`).
    op : str
        The public name of the call (``"save"``, ``"CheckpointManager.restore"``),
        for the call tag and error messages.
    timeout : float, optional
        Seconds to wait for the other ranks at the call's first meeting
        (:meth:`Call.meet`); default the collective timeout.

    Raises
    ------
    CommRequiredError
        For ``comm=None`` inside an MPI job of several processes, on every rank.
    CollectiveMismatchError, CollectiveTimeoutError
        From the first meeting (:meth:`Call.meet`).
    """

    __slots__ = ("_call", "_outer", "_timeout")

    def __init__(self, comm: Any, op: str, timeout: float | None = None) -> None:
        c = require_comm(comm, op)
        outer = current_call(c)
        self._outer = outer is not None
        self._call = outer if outer is not None else Call(c, op)
        self._timeout = timeout

    def __enter__(self) -> Call:
        if not self._outer:
            if self._call.size > 1:
                call = self._call
                if isinstance(_inner(call.comm), MPIComm):  # a call stuck inside MPI ends the job, never hangs
                    key = _key(call.comm)
                    call._limit = stall_limit(key)
                    call._cell = arm(id(call), call.op, call.seq, call.rank, call.size, call._limit)
                try:
                    call.meet(self._timeout)  # bounded: before any blocking collective of the call
                except BaseException:
                    disarm(id(call))
                    raise
            record(self._call.op, self._call.seq, "entered")
            calls: dict[Any, Call] = getattr(_open, "calls", None) or {}
            _open.calls = {**calls, _key(self._call.comm): self._call}
        return self._call

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        call = self._call
        if exc is not None and getattr(exc, "_amrckpt_agreed", False):
            # Every rank raises it: what a rank's cleanup on the way out failed at (closing a file) is not agreed on
            # any more, and must not fail the caller's next step (a restore trying the previous checkpoint).
            call.error = None
        if self._outer:
            return  # the call that this one joined agrees when it ends
        record(call.op, call.seq, "returned" if exc is None else f"raised {type(exc).__name__}")
        try:
            if exc is None:
                if call._unagreed:
                    call.agree()
            elif (
                isinstance(exc, Exception)
                and call.size > 1
                and not getattr(exc, "_amrckpt_agreed", False)
                and _broken(call.comm) is None  # nothing can be agreed any more (a timeout, a desync): raise at once
            ):
                # An exception outside a step: this rank's own, which the others do not know about.  Agree on it
                # (best effort: the other ranks are at their next exchange; every call's code is written so that it is one).
                # Where they left the call instead (no exchange came after), the stall watchdog ends the job, naming it.
                if call._cell is not None:
                    try:
                        said = f"{type(exc).__name__}: {exc}"
                    except Exception:  # noqa: BLE001 - an error whose str() fails: its class names it
                        said = type(exc).__name__
                    note(
                        id(call),
                        f"this rank raised an error outside the call's steps ({said}) and waits "
                        "for the other ranks to agree on it. They did not come, most likely because they had left the "
                        "call (no exchange of theirs came after the point where this rank raised): the error is this "
                        "rank's alone",
                    )
                call.fail(exc)
                call.agree()
        finally:
            if call._cell is not None:
                disarm(id(call))
            calls = dict(getattr(_open, "calls", {}))
            calls.pop(_key(call.comm), None)
            _open.calls = calls


class Call:
    """One collective call on a communicator: its steps, its exchanges, its call tag.

    Made by :func:`collective`.  Every method except :meth:`run` and
    :meth:`fail` is collective: every rank calls it, in the same order,
    whatever failed on it before.

    Attributes
    ----------
    comm : Comm
        The communicator.
    op : str
        The call's name.
    seq : int
        Its number among the calls on ``comm`` (1, 2, ...).
    error : BaseException or None
        This rank's first error since the last agreement.
    """

    __slots__ = ("__weakref__", "_cell", "_exchanges", "_limit", "_unagreed", "comm", "error", "op", "seq")

    def __init__(self, comm: Comm, op: str) -> None:
        self.comm = comm
        self.op = op
        self.seq = _next_seq(comm) if comm.size > 1 else 0
        self.error: BaseException | None = None
        self._exchanges = 0
        self._unagreed = False
        self._cell: list[float] | None = None  # the stall watchdog's progress cell (an MPI call of several ranks)
        self._limit = 0.0  # and its stall limit (seconds)

    @property
    def rank(self) -> int:
        """Return this rank."""
        return self.comm.rank

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self.comm.size

    @property
    def failed(self) -> bool:
        """Whether this rank holds an error not agreed on yet."""
        return self.error is not None

    # -- local steps (not collective) ----------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        """Record an error of this rank (the first one is kept) for the next agreement. Not collective.

        Outside :meth:`run`, only where an agreement follows on every rank
        (this rank alone cannot make the others agree).
        """
        if self.error is None:
            self.error = exc

    def agreed(self, exc: E) -> E:
        """Mark ``exc`` as raised on every rank: an error decided from agreed values (what an exchange returned). Not collective.

        Leaving the call with it raises it as it is, without another
        agreement (an error of this rank alone goes through one).
        """
        exc._amrckpt_agreed = True  # type: ignore[attr-defined]
        return exc

    def run(self, fn: Callable[..., T], *args: Any, on: int | None = None, always: bool = False, **kwargs: Any) -> T | None:
        """Run a step on this rank (on rank ``on`` only, if given); keep its exception for the next agreement.

        Not collective itself, but every rank must call it at the same point
        (with ``on``, the other ranks skip the step), so that every rank
        knows a step came after the last agreement.  A step is skipped on a
        rank that failed earlier, unless ``always``: a step that makes
        collective calls of its own (an MPI-IO read or write that every rank
        joins, with nothing to move where it failed) runs on every rank.

        Returns
        -------
        object or None
            What ``fn`` returned; None if it raised, if it was skipped, or
            on ranks other than ``on``.
        """
        self._unagreed = True
        if (self.error is not None and not always) or (on is not None and self.comm.rank != on):
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - agreed on by every rank at the next agreement
            self.fail(exc)
            return None

    def start_thread(self, target: Callable[[], Any], name: str) -> Worker:
        """Start ``target()`` in a thread on every rank, agreed: one allreduce. Collective.

        Each rank starts its thread with a bounded wait
        (:func:`amrckpt._threads.start_thread`); the threads run ``target``
        only once every rank's has started, so that a rank whose thread
        could not start leaves no other rank's thread in a collective of its
        own.  ``target`` must keep its own exceptions.

        Returns
        -------
        Worker
            This rank's thread (``join``, ``is_alive``).

        Raises
        ------
        ThreadStartError
            On every rank, if any rank's thread could not start (no thread
            runs ``target`` then).
        """
        gate = threading.Event()
        go: list[bool] = []

        def gated() -> None:
            gate.wait()
            if go:
                target()

        worker = self.run(start_thread, gated, name)
        try:
            self.agree(f"start the thread {name}")
        except BaseException:
            gate.set()  # the threads that started end at once
            raise
        go.append(True)
        gate.set()
        assert worker is not None
        return worker

    # -- exchanges (collective) -------------------------------------------------------------------------

    def meet(self, timeout: float | None = None) -> None:
        """Meet the other ranks: every rank's call tag, in a reduction waited for against the clock. Collective.

        Made by :func:`collective` when the call opens, before any other
        exchange or blocking collective (:meth:`~amrckpt.comm.Comm.meet`).
        Ranks in different calls all raise
        :class:`~amrckpt.errors.CollectiveMismatchError`.  A rank that waits
        longer than the collective timeout (:mod:`amrckpt.comm._watchdog`),
        or learns that a rank ended while a manager was open, raises
        :class:`~amrckpt.errors.CollectiveTimeoutError`; the communicator is
        then broken, and every later call on it raises that error at once.

        Raises
        ------
        CollectiveMismatchError
            On every rank, if the ranks are in different calls.
        CollectiveTimeoutError
            On every rank that waited, if some did not come in time.
        """
        key = _key(self.comm)
        why = _broken(self.comm)
        if why is not None:
            exc = errors.CollectiveTimeoutError(
                f"{self.op}: this communicator cannot agree any more, because {why}; end the job (an uncaught error does)"
            )
            exc.op, exc.seq, exc.ended = self.op, self.seq, {}
            raise self.agreed(exc)
        d = self._tag()
        self._step()
        timeout = collective_timeout(key) if timeout is None else min(timeout, collective_timeout(key))
        watch = notices(key)
        ended: dict[int, str] = {}

        def poll() -> None:
            if watch is not None and watch.poll():
                ended.update(watch.ended)
                raise _PeerEnded

        now = time.time()  # wall clocks: comparable between nodes to far better than the margin below
        values = [d, -d, int(now * 1000), -int((now + timeout) * 1000)]  # with the latest arrival, the earliest deadline
        try:
            got = self.comm.meet(np.array(values, dtype=np.int64), timeout, poll if watch is not None else None)
        except _PeerEnded:
            got = None
        if got is None:
            waiting = watch.waiting_with_me(self.op, self.seq) if watch is not None and not ended else None
            exc = timeout_error(self.op, self.seq, self.rank, self.size, timeout, ended, waiting)
            _mark_broken(self.comm, f"rank {self.rank}'s {self.op} (call {self.seq}) timed out waiting for the other ranks")
            if "mpi4py.MPI" in sys.modules:
                install_excepthook()
            raise exc
        late = (int(got[2]) + int(got[3])) / 1000  # the latest arrival after the earliest deadline (s; < 0: in time)
        if late <= -min(1.0, timeout / 10):
            if int(got[0]) != -int(got[1]):
                self._mismatch("")  # every rank is here (none gave up): the allgather that names the calls is safe
            return
        # Checked before the tags: the rank that gave up is not here to take part in _mismatch's allgather.
        # A rank waited out its deadline and went on (a reduction that timed out stays pending: MPI cannot cancel
        # it), and these ranks met that abandoned reduction: alone, the call's next exchange would wait forever.
        # Every rank that met computes the same from the same maxima, so all of them raise.
        exc = errors.CollectiveTimeoutError(
            f"rank {self.rank} of {self.size} came to {self.op} (call {self.seq} on this communicator) {late:.3g} s "
            f"after another rank gave up waiting in it ({timeout:g} s): that rank went on, and this call cannot "
            "agree with it. Make every rank make the same amrckpt calls in the same order; "
            "AMRCKPT_COLLECTIVE_TIMEOUT sets how long ranks may arrive apart. This communicator cannot agree any "
            "more: an uncaught error ends the MPI job."
        )
        exc.op, exc.seq, exc.ended = self.op, self.seq, {}
        _mark_broken(self.comm, f"rank {self.rank}'s {self.op} (call {self.seq}) came after another rank gave up")
        if "mpi4py.MPI" in sys.modules:
            install_excepthook()
        raise self.agreed(exc)

    def _step(self) -> None:
        """Count an exchange; it is progress for the stall watchdog (:func:`~amrckpt.comm._watchdog.arm`)."""
        self._exchanges += 1
        if self._cell is not None:
            _watchdog.progress(self._cell, self._limit)

    def _tag(self) -> int:
        """Return the digest of this call and exchange: operation, sequence number, position (62 bits)."""
        return digest_of(self.op, self.seq, self._exchanges)

    def allreduce(
        self,
        sums: Sequence[int] = (),
        maxima: Sequence[int] = (),
        xors: Sequence[int] = (),
        *,
        equal: Sequence[int] = (),
        root_value: Any = None,
        root: int = 0,
        what: str = "",
    ) -> Reduced:
        """Agree on every rank's errors and combine numbers, in one ``MPI_Allreduce``.

        Collective.  Carries, besides the numbers, whether each rank
        failed, the call tag, and ``equal``'s numbers (digests that must be
        the same on every rank).  A rank that failed sends empty lists; the
        others' lists may differ in length (they are padded), so nothing a
        rank sends depends on what succeeded before.

        Parameters
        ----------
        sums, maxima, xors : sequence of int
            Python integers of any size, combined element-wise over ranks.
        equal : sequence of int
            Numbers that must be equal on every rank (e.g. :func:`digest_of`
            of collective arguments); :attr:`Reduced.equal` says which are.
        root_value : object, optional
            On ``root``: a value (picklable, not None) returned on every rank.
        root : int, optional
            The rank whose ``root_value`` is returned.
        what : str, optional
            Names the exchange in error messages.

        Returns
        -------
        Reduced

        Raises
        ------
        CollectiveMismatchError
            On every rank, if the ranks are in different calls or at
            different exchanges of a call.
        AmrckptError
            On every rank, if any rank failed: the agreed error (:func:`agreed_error`).
        """
        d = self._tag()
        ok = self.error is None
        eq = [int(e) for e in equal] if ok else []
        head = [0 if ok else 1, d, -d]
        mx = head + [v for e in eq for v in (e, -e)] + ([int(v) for v in maxima] if ok else [])
        payload = Columns(
            [int(v) for v in sums] if ok else [],
            mx,
            [int(v) for v in xors] if ok else [],
            root_value if ok and self.comm.rank == root else None,
        )
        self._step()
        got = self.comm.allreduce_columns(payload)
        if got.maxima[1] != -got.maxima[2]:
            self._mismatch(what)
        if got.maxima[1] != d:
            self._desynced("allreduce", what)
        if got.maxima[0] > 0:
            self._raise_agreed()
        self._unagreed = False
        k = 3 + 2 * len(eq)
        return Reduced(
            _fit(got.sums, len(sums), 0),
            _fit(got.maxima[k:], len(maxima), NONE),
            _fit(got.xors, len(xors), 0),
            got.value,
            [got.maxima[3 + 2 * i] == -got.maxima[4 + 2 * i] for i in range(len(eq))],
        )

    def reduction(self, what: str = "") -> Reduction:
        """Start a reduction of named channels (:class:`~amrckpt.comm.Reduction`), run as one allreduce. Not collective."""
        return Reduction(self, what)

    def agree(self, what: str = "") -> None:
        """Raise on every rank the agreed error if any rank holds one (one allreduce). Collective.

        Raises
        ------
        AmrckptError
            As :meth:`allreduce`.
        """
        self.allreduce(what=what)

    def on_root(self, fn: Callable[[], T], root: int = 0, what: str = "") -> T:
        """Run ``fn`` on ``root`` only and return its result on every rank, agreeing on every rank's errors.

        Collective: one allreduce, which carries the result (pickled) from
        the root as a broadcast would.

        Raises
        ------
        AmrckptError
            On every rank, what ``fn`` raised on the root, or any rank's
            earlier error (as :meth:`allreduce`).
        """
        value = self.run(lambda: (fn(),), on=root)
        out = self.allreduce(root_value=value, root=root, what=what).value
        return out[0]  # type: ignore[no-any-return]

    def exscan(self, sums: Sequence[int] = (), maxima: Sequence[int] = (), xors: Sequence[int] = ()) -> Reduced:
        """Exclusive prefix sums, maxima and XORs over the ranks below this one, in one ``MPI_Exscan``.

        Collective, but not an agreement: a rank learns nothing of the
        ranks above it, so errors stay pending until the next agreement.  A
        rank that failed sends empty lists; what every rank gets back is as
        long as its own lists (0 for sums and XORs, :data:`~amrckpt.comm.NONE`
        for maxima where nothing is below), whatever the ranks below sent.
        The first exchange of a call must agree on its tag, so an exscan
        that comes first is preceded by an allreduce.

        Returns
        -------
        Reduced
            ``equal`` is empty and ``value`` None.
        """
        self._first_agrees()
        ok = self.error is None
        d = self._tag()
        payload = Columns(  # the tag always: the ranks below must be at this exchange of this call
            [int(v) for v in sums] if ok else [],
            [d, -d] + ([int(v) for v in maxima] if ok else []),
            [int(v) for v in xors] if ok else [],
        )
        self._step()
        got = self.comm.exscan_columns(payload)
        if got is None:  # rank 0: nothing below
            got = Columns([], [d, -d], [])
        if got.maxima[0] != d or got.maxima[1] != -d:
            self._desynced("exscan", "")
        return Reduced(
            _fit(got.sums, len(sums), 0), _fit(got.maxima[2:], len(maxima), NONE), _fit(got.xors, len(xors), 0), None, []
        )

    def allgather_ints(self, values: Sequence[int], what: str = "") -> np.ndarray:
        """Every rank's int64 ``values``, by rank, agreeing on errors: one ``MPI_Allgather`` of ``8 (k + 2)`` bytes per rank.

        Collective and agreeing (each rank sees every rank's error flag and
        call tag).  O(P) per rank: for what is P-long by nature (a
        partition's offsets, libsc's ``proc_sizes``), never for an agreement
        alone.  Every rank passes as many values.

        Returns
        -------
        numpy.ndarray
            (P, k) int64.

        Raises
        ------
        AmrckptError
            As :meth:`allreduce`; a value outside int64 is an error of its rank.
        """
        d = self._tag()
        k = len(values)
        mine = np.zeros(k + 2, dtype=np.int64)
        if self.error is None:
            try:
                mine[2:] = np.asarray([int(v) for v in values], dtype=np.int64)
            except (OverflowError, TypeError, ValueError):
                self.fail(errors.ScdaArgumentError(f"{what or self.op}: {list(values)[:4]} do not fit int64"))
        mine[0] = 0 if self.error is None else 1
        mine[1] = d
        self._step()
        got = self.comm.allgather_array(mine)
        if (got[:, 1] != d).any():
            self._mismatch(what)
        if got[:, 0].any():
            self._raise_agreed()
        self._unagreed = False
        return np.ascontiguousarray(got[:, 2:])

    def allgather_int(self, value: int, what: str = "") -> np.ndarray:
        """Every rank's int64 ``value``, by rank: (P,) int64 (:meth:`allgather_ints` of one value). Collective, agreeing."""
        return np.ascontiguousarray(self.allgather_ints([value], what=what)[:, 0])

    def allgather(self, obj: T, what: str = "") -> list[T]:
        """Every rank's ``obj`` (pickled), by rank, agreeing on errors: one ``MPI_Allgather``. Collective, agreeing.

        O(P) per rank: for tools and error paths (naming the ranks whose
        values differ), never on a save's or a load's way.

        Raises
        ------
        AmrckptError
            As :meth:`allreduce`.
        """
        d = self._tag()
        self._step()
        got = self.comm.allgather((self.error is not None, d, None if self.error is not None else obj))
        if any(t != d for _, t, _ in got):
            self._mismatch(what)
        if any(f for f, _, _ in got):
            self._raise_agreed()
        self._unagreed = False
        return [o for _, _, o in got]  # type: ignore[misc]

    def allreduce_array(self, values: np.ndarray, op: ReduceOp) -> np.ndarray:
        """``MPI_Allreduce`` of a numeric array of the same shape on every rank (no pickling). Collective, not agreeing.

        A rank that failed passes the array's neutral element (zeros for a
        sum); the caller agrees afterwards.  Preceded by an allreduce if it
        is the call's first exchange.
        """
        self._first_agrees()
        self._step()
        return self.comm.allreduce_array(values, op)

    def relay_down(self, data: bytes | None, *, send: bool, receive: bool, forward: bool) -> bytes | None:
        """Pass byte strings to the rank below (:meth:`amrckpt.comm.MPIComm.relay_down`). Collective, not agreeing."""
        self._first_agrees()
        self._step()
        return self.comm.relay_down(data, send=send, receive=receive, forward=forward)

    def sendrecv(self, data: bytes | memoryview | None, dest: int | None, source: int | None) -> bytes | None:
        """Send bytes to ``dest``, receive from ``source`` (:meth:`amrckpt.comm.Comm.sendrecv`). Not agreeing."""
        self._first_agrees()
        self._step()
        return self.comm.sendrecv(data, dest, source)

    def _first_agrees(self) -> None:
        if self._exchanges == 0 and self.comm.size > 1:
            self.agree()

    # -- raising --------------------------------------------------------------------------------------------

    def _mismatch(self, what: str) -> None:
        """Raise, the ranks being in different calls: gather what each is in and raise that on every rank."""
        exc = mismatch_error(self.comm.allgather((self.op, self.seq, self._exchanges, what)))
        self.error = None
        self._unagreed = False
        raise exc

    def _desynced(self, exchange: str, what: str) -> None:
        """Raise on this rank alone: its exchange returned another call's result, so the ranks cannot agree any more.

        A rank that made one collective fewer or more than the others (a bug, or
        a step that escaped the helper) meets the others' next exchange with an
        earlier or later one of its own; MPI may match them, and the result
        carries another call's tag.  Nothing can be agreed on this
        communicator after that: it is marked broken (every later call raises
        at once) and, under MPI, an uncaught error ends the job
        (:func:`~amrckpt.comm._watchdog.install_excepthook`) instead of
        leaving the other ranks waiting.
        """
        exc = desync_error(self.rank, self.size, exchange, self.op, self.seq, self._exchanges, what)
        _mark_broken(self.comm, f"rank {self.rank}'s {self.op} (call {self.seq}) met another call's {exchange}")
        self.error = None
        self._unagreed = False
        if "mpi4py.MPI" in sys.modules:
            install_excepthook()
        raise exc

    def _raise_agreed(self) -> None:
        """Raise the agreed error of the failing ranks: gather every rank's error and raise the agreed one (one more allgather).

        Raises
        ------
        AmrckptError
            On every rank: the agreed error of the failing ranks (:func:`agreed_error`, of the class of the lowest
            failing rank's error).
        """  # noqa: DOC501 (agreed_error() returns it)
        error = self.error
        self.error = None
        self._unagreed = False
        descs = self.comm.allgather(describe(error))
        raise agreed_error(error, descs, self.comm.size)

    def __repr__(self) -> str:
        return f"Call({self.op!r}, seq={self.seq}, rank={self.comm.rank}, size={self.comm.size})"


class _PeerEnded(Exception):
    """A rank's exit notice arrived while this rank waited (raised out of the meeting's poll)."""
