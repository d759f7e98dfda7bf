"""Named reductions: the channels of one agreement, by name instead of by position.

A collective step that combines numbers over ranks builds a
:class:`Reduction` of named channels (``r.max("order.first", x)``,
``r.equal("schema", digest)``, ``r.sum("count.rho", n)``), runs it as one
``MPI_Allreduce`` (:meth:`amrckpt.comm.Call.allreduce`, which also agrees
on every rank's errors and the call tag), and reads the results by the
same names (:class:`Reduced`): no list positions outside ``comm/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ._base import Reduced

__all__ = ["Reducer", "Reduction", "Totals"]

_OPS = ("sum", "max", "min", "xor", "equal")


class Reducer(Protocol):
    """What a :class:`Reduction` runs on: the two reductions of a collective call (:class:`~amrckpt.comm.Call`'s)."""

    def allreduce(self, *args: Any, **kwargs: Any) -> Reduced: ...  # Call.allreduce
    def exscan(self, *args: Any, **kwargs: Any) -> Reduced: ...  # Call.exscan


class Reduction:
    """The named channels of one reduction over the ranks of a collective call. Not collective until :meth:`run`.

    Each channel is a Python integer of any size, or a sequence of them
    (combined element-wise), under a name unique among the reduction's
    channels of its operation (``r.max("x", v).min("x", v)`` is allowed).  Every
    rank must add the same channels in the same order (a rank that failed
    earlier in the call may add none: :meth:`run` carries its failure).

    Parameters
    ----------
    call : Reducer
        The collective call the reduction belongs to (a :class:`~amrckpt.comm.Call`).
    what : str, optional
        Names the exchange in error messages.
    """

    __slots__ = ("_call", "_channels", "_root", "_what")

    def __init__(self, call: Reducer, what: str = "") -> None:
        self._call = call
        self._what = what
        self._channels: dict[tuple[str, str], tuple[list[int], bool]] = {}
        self._root: tuple[Any, int] = (None, 0)

    def _add(self, op: str, name: str, value: int | Sequence[int]) -> Reduction:
        if (op, name) in self._channels:
            raise ValueError(f"reduction {self._what!r}: {op} channel {name!r} added twice")
        scalar = not isinstance(value, Sequence)
        values = [int(value)] if scalar else [int(v) for v in value]  # type: ignore[arg-type,union-attr]
        self._channels[op, name] = (values, scalar)
        return self

    def sum(self, name: str, value: int | Sequence[int]) -> Reduction:
        """Add a channel summed over ranks."""
        return self._add("sum", name, value)

    def max(self, name: str, value: int | Sequence[int]) -> Reduction:
        """Add a channel of the maximum over ranks."""
        return self._add("max", name, value)

    def min(self, name: str, value: int | Sequence[int]) -> Reduction:
        """Add a channel of the minimum over ranks (carried as the maximum of its negation)."""
        return self._add("min", name, value)

    def xor(self, name: str, value: int | Sequence[int]) -> Reduction:
        """Add a channel XORed over ranks (e.g. the CRC32 terms of a section)."""
        return self._add("xor", name, value)

    def equal(self, name: str, value: int) -> Reduction:
        """Add a number that must be the same on every rank (a digest, :func:`~amrckpt.comm.digest_of`)."""
        return self._add("equal", name, value)

    def root(self, value: Any, root: int = 0) -> Reduction:
        """Hand ``value`` (picklable, not None) of rank ``root`` to every rank."""
        self._root = (value, root)
        return self

    def _lists(self) -> tuple[dict[str, list[int]], dict[tuple[str, str], tuple[int, int, bool]]]:
        lists: dict[str, list[int]] = {op: [] for op in _OPS}
        where: dict[tuple[str, str], tuple[int, int, bool]] = {}
        for (op, name), (values, scalar) in self._channels.items():
            slot = "max" if op == "min" else op
            where[op, name] = (len(lists[slot]), len(values), scalar)
            lists[slot] += [-v for v in values] if op == "min" else values
        return lists, where

    def below(self) -> Totals:
        """Combine the channels over the ranks *below* this one: one ``MPI_Exscan`` (:meth:`Call.exscan`). Collective.

        Not an agreement: errors stay pending until the next one.  Rank 0,
        and a channel no rank below had, reads 0 for a sum or XOR and
        :data:`~amrckpt.comm.NONE` for a maximum.  No ``equal`` channel and
        no root value.

        Returns
        -------
        Totals
            The prefix of each channel, by name.

        Raises
        ------
        ValueError
            On this rank, before anything is sent, if the reduction has an ``equal`` channel or a root value.
        """
        lists, where = self._lists()
        if lists["equal"] or self._root[0] is not None:
            raise ValueError(f"reduction {self._what!r}: an exclusive scan has no equal channel and no root value")
        got = self._call.exscan(lists["sum"], lists["max"], lists["xor"])
        return Totals(where, got.sums, got.maxima, got.xors, [], None)

    def run(self) -> Totals:
        """Combine the channels over the ranks: one ``MPI_Allreduce`` (:meth:`Call.allreduce`). Collective.

        Returns
        -------
        Totals
            The combined channels, by name, the same on every rank.

        Raises
        ------
        CollectiveMismatchError
            On every rank, if the ranks are in different calls or exchanges.
        AmrckptError
            On every rank, if any rank failed in the call: the agreed error.
        """
        lists, where = self._lists()
        value, root = self._root
        got = self._call.allreduce(
            lists["sum"],
            lists["max"],
            lists["xor"],
            equal=lists["equal"],
            root_value=value,
            root=root,
            what=self._what,
        )
        return Totals(where, got.sums, got.maxima, got.xors, got.equal, got.value)


class Totals:
    """What a :class:`Reduction` gave, read by channel name; the same on every rank.

    A channel added as a number reads as a number, one added as a sequence
    as a list.

    Attributes
    ----------
    value : object
        The value the root handed over (:meth:`Reduction.root`), or None.
    """

    __slots__ = ("_equal", "_maxima", "_sums", "_where", "_xors", "value")

    def __init__(
        self,
        where: dict[tuple[str, str], tuple[int, int, bool]],
        sums: list[int],
        maxima: list[int],
        xors: list[int],
        equal: list[bool],
        value: Any,
    ) -> None:
        self._where = where
        self._sums, self._maxima, self._xors, self._equal = sums, maxima, xors, equal
        self.value = value

    def _get(self, op: str, name: str, source: Sequence[Any], sign: int = 1) -> Any:
        if (op, name) not in self._where:
            raise KeyError(f"no {op} channel {name!r} in this reduction")
        at, n, scalar = self._where[op, name]
        got = [sign * v for v in source[at : at + n]] if sign != 1 else list(source[at : at + n])
        return got[0] if scalar else got

    def sum(self, name: str) -> Any:
        """Return the sum over ranks of channel ``name``."""
        return self._get("sum", name, self._sums)

    def max(self, name: str) -> Any:
        """Return the maximum over ranks of channel ``name``."""
        return self._get("max", name, self._maxima)

    def min(self, name: str) -> Any:
        """Return the minimum over ranks of channel ``name``."""
        return self._get("min", name, self._maxima, -1)

    def xor(self, name: str) -> Any:
        """Return the XOR over ranks of channel ``name``."""
        return self._get("xor", name, self._xors)

    def equal(self, name: str) -> bool:
        """Return whether every rank passed the same number in channel ``name``."""
        return bool(self._get("equal", name, self._equal))
