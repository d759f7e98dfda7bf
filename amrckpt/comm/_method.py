"""A method of an object whose every method is collective, run as one collective call (:class:`~amrckpt.comm.collective`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from ._call import collective

__all__ = ["collective_method"]

T = TypeVar("T")
_S = TypeVar("_S")
_P = ParamSpec("_P")


def collective_method(op: str) -> Callable[[Callable[Concatenate[_S, _P], T]], Callable[Concatenate[_S, _P], T]]:
    """Run a method of an object with a ``comm`` attribute as one collective call named ``op`` (:class:`~amrckpt.comm.collective`).

    For the objects whose every method is collective (an open file): each
    method is a call of its own, or joins the call open on the same
    communicator (a load that reads through the object); inside it,
    :func:`~amrckpt.comm.current_call` gives the call.
    """

    def wrap(fn: Callable[Concatenate[_S, _P], T]) -> Callable[Concatenate[_S, _P], T]:
        def method(obj: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> T:
            with collective(obj.comm, op):  # type: ignore[attr-defined]
                return fn(obj, *args, **kwargs)

        functools.update_wrapper(method, fn)
        return method

    return wrap
