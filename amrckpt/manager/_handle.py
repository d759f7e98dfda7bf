"""The outcome of a save: done at once, or a background save in flight (a future)."""

from __future__ import annotations

from pathlib import Path

from .._threads import Worker

__all__ = ["SaveHandle"]


class SaveHandle:
    """The outcome of :meth:`CheckpointManager.save`: done at once, or a background save in flight (a future).

    True (``bool(handle)``) when a checkpoint was written or, in the
    background, started; False when the save policy did not ask for one.

    An error of a background save is raised once by the manager's next
    :meth:`~CheckpointManager.save`, :meth:`~CheckpointManager.wait` or
    :meth:`~CheckpointManager.close`, on every rank, unless :meth:`result`
    or :meth:`exception` reported it first; :meth:`result` raises it each
    time it is called.  The error itself is agreed on by all ranks (the
    commit is collective), so the same calls give the same outcome on every
    rank.

    Attributes
    ----------
    step : int
        The step of the save.
    saved : bool
        Whether a checkpoint was written (or started in the background).
    path : pathlib.Path or None
        The checkpoint's file once committed (None if nothing is saved).
    """

    def __init__(self, step: int, saved: bool, path: Path | None, thread: Worker | None = None) -> None:
        self.step = step
        self.saved = saved
        self.path = path
        self._thread = thread
        self._error: BaseException | None = None
        self._reported = False

    def __bool__(self) -> bool:
        return self.saved

    def __repr__(self) -> str:
        state = "running" if not self.done() else ("failed" if self._error is not None else "done")
        return f"SaveHandle(step={self.step}, saved={self.saved}, {state})"

    def done(self) -> bool:
        """Return whether the save has finished (at once for a save in the foreground). Not collective.

        For a background save the answer may differ between ranks at the
        same moment: poll with it, finish with :meth:`result`.
        """
        return self._thread is None or not self._thread.is_alive()

    def _join(self, timeout: float | None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the background save of step {self.step} is still running after {timeout} s")

    def result(self, timeout: float | None = None) -> Path | None:
        """Wait for the save; return the checkpoint's path (None if nothing was saved), or raise its error.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait at most (default: until the save ends).

        Returns
        -------
        pathlib.Path or None

        Raises
        ------
        AmrckptError
            The save's error, the same on every rank (see the class).
        TimeoutError
            If the save is still running after ``timeout`` (on this rank only).
        """
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self.path if self.saved else None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the save; return its error (then not raised again by the manager) or None.

        Raises
        ------
        TimeoutError
            If the save is still running after ``timeout`` (on this rank only).
        """
        self._join(timeout)
        if self._error is not None:
            self._reported = True
        return self._error
