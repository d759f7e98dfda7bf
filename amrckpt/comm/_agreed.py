"""The error every rank raises after an agreement: each rank's error described, gathered, and rebuilt as one.

:func:`describe` turns a rank's exception into a small tuple that travels
through a gather; :func:`agreed_error` builds, from every rank's tuple, the
one exception that every rank raises: the failing rank's own class when it
is of amrckpt's tree (``SchemaError``, ``ChecksumError``...), its message,
and the ranks that failed (torch DCP's ``_DistWrapper`` gathers and raises a
``CheckpointException`` the same way).  Not collective.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import errors

__all__ = ["Description", "agreed_error", "describe", "desync_error", "mismatch_error"]


def _ranks(ranks: Sequence[int]) -> str:
    """``rank 2`` or ``ranks 0, 1``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


Description = tuple[str | None, str, str, int | None, bool]


def describe(error: BaseException | None) -> Description | None:
    """Describe an error for gathering: (class name if ours, ``"Class: message"``, message, errno, remote), or None.

    ``remote``: the error says only that another rank failed (an attribute
    ``remote`` set to True, e.g. ROMIO's "open failed on a remote node").
    """
    if error is None:
        return None
    ours = isinstance(error, errors.AmrckptError)
    code = error.errno if isinstance(error, OSError) else None
    message = error.strerror if isinstance(error, OSError) and error.strerror and code is not None else str(error)
    return (
        type(error).__name__ if ours else None,
        f"{type(error).__name__}: {error}",
        message,
        code,
        getattr(error, "remote", False) is True,
    )


def _tree_class(name: str) -> type[errors.AmrckptError]:
    """Return the class of amrckpt's error tree named ``name`` (CollectiveError if none)."""
    todo: list[type[errors.AmrckptError]] = [errors.AmrckptError]
    while todo:
        cls = todo.pop()
        if cls.__name__ == name:
            return cls
        todo.extend(cls.__subclasses__())
    return errors.CollectiveError


def agreed_error(error: BaseException | None, descs: Sequence[Description | None], size: int) -> BaseException:
    """Return the exception every rank raises, given every rank's description (:func:`describe`) and its own error.

    The class is that of the lowest failing rank's error (the lowest whose
    error is not only a report of another rank's failure, ``remote``) if it is of
    amrckpt's tree (otherwise :class:`~amrckpt.errors.ScdaIOError` for an
    ``OSError`` with an errno, :class:`~amrckpt.errors.CollectiveError` for anything else), its
    message names that rank and the others that failed, and
    :attr:`~amrckpt.errors.AmrckptError.rank_errors` maps each failing rank
    to ``"Class: message"``.  ``errno`` is kept for OSError classes.  On a
    single rank the error itself is returned.  The failing ranks chain their
    own error as ``__cause__`` when the result is raised from it.
    """
    failed = {r: d for r, d in enumerate(descs) if d is not None}
    first = min((r for r, d in failed.items() if not d[4]), default=min(failed))
    cls_name, text, message, code, _ = failed[first]
    if size == 1 and cls_name is not None and isinstance(error, errors.AmrckptError):
        if not error.rank_errors:
            error.rank_errors = {0: text}
        error._amrckpt_agreed = True  # type: ignore[attr-defined]
        return error
    if cls_name is not None:
        cls = _tree_class(cls_name)
    else:  # not of amrckpt's tree: an OS error keeps its errno (as ScdaIOError), anything else is a CollectiveError
        cls = errors.ScdaIOError if code is not None else errors.CollectiveError
    if cls_name is None:
        message = f"rank {first} failed: {text}"
    elif size > 1:
        message = f"{message} [rank {first}]"
    others = sorted(set(failed) - {first})
    if others:
        message += f" ({_ranks(others)} failed as well; rank_errors has every rank's error)"
    exc = cls(code, message) if code is not None and issubclass(cls, OSError) else cls(message)
    exc.rank_errors = {r: d[1] for r, d in failed.items()}
    exc._amrckpt_agreed = True  # type: ignore[attr-defined]
    if error is not None:
        exc.__cause__ = error
    return exc


def mismatch_error(seen: Sequence[tuple[str, int, int, str]]) -> errors.CollectiveMismatchError:
    """Return the error of ranks in different calls, from what each rank is in: ``(op, seq, exchange, what)`` by rank.

    Agreed: every rank builds it from the same gathered tuples.  Not collective.
    """
    groups: dict[tuple[str, int, int, str], list[int]] = {}
    for r, t in enumerate(seen):
        groups.setdefault(tuple(t), []).append(r)  # type: ignore[arg-type]
    parts = [
        f"{_ranks(rs)} in {op} (call {seq} on this communicator, exchange {k}{': ' + w if w else ''})"
        for (op, seq, k, w), rs in groups.items()
    ]
    exc = errors.CollectiveMismatchError(
        "the ranks made different collective calls: "
        + "; ".join(parts)
        + ". Every rank must make the same amrckpt calls in the same order (a call made on some ranks only, "
        "or under a condition that differs between ranks, leaves the others in another call)"
    )
    exc.rank_errors = {r: f"CollectiveMismatchError: in {seen[r][0]} (call {seen[r][1]})" for r in range(len(seen))}
    exc._amrckpt_agreed = True  # type: ignore[attr-defined]
    return exc


def desync_error(
    rank: int, size: int, exchange: str, op: str, seq: int, exchanges: int, what: str
) -> errors.CollectiveMismatchError:
    """Return the error of a rank whose ``exchange`` returned another call's result (this rank's alone). Not collective."""
    exc = errors.CollectiveMismatchError(
        f"rank {rank} of {size}: the {exchange} of {op} (call {seq} on this communicator, "
        f"exchange {exchanges}{': ' + what if what else ''}) met another collective call of other ranks: "
        "a rank made a collective call that the others did not make. Every rank must make the same amrckpt "
        "calls in the same order. This communicator cannot agree any more: an uncaught error ends the MPI job."
    )
    exc.rank_errors = {rank: f"CollectiveMismatchError: in {op} (call {seq})"}
    return exc
