"""The value of an hp field: a variable number of values per leaf."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SchemaError

__all__ = ["HpData"]


class HpData:
    r"""A variable number of values per leaf: all values, concatenated, and a count per leaf.

    Parameters
    ----------
    values : (sum(counts), \\*shape) numpy.ndarray
        The values of all local leaves, leaf after leaf.
    counts : (n,) array_like of int
        The number of values of each leaf (e.g. ``(p + 1)**2``), ``>= 0``.

    Raises
    ------
    SchemaError
        If the counts are negative or do not add up to ``len(values)``.
    """

    __slots__ = ("counts", "values")

    def __init__(self, values: Any, counts: Any) -> None:
        self.values = np.asarray(values)
        self.counts = np.ascontiguousarray(counts, dtype=np.int64).reshape(-1)
        if self.counts.size and int(self.counts.min()) < 0:
            raise SchemaError("HpData: counts must be non-negative")
        total = int(self.counts.sum())
        if self.values.ndim == 0 or self.values.shape[0] != total:
            raise SchemaError(f"HpData: counts add up to {total} values, values has shape {self.values.shape}")

    @classmethod
    def _checked(cls, values: np.ndarray, counts: np.ndarray) -> HpData:
        """Build from what the container read and checked (non-negative int64 counts that add up to len(values))."""
        out = cls.__new__(cls)
        out.values, out.counts = values, counts
        return out

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    @property
    def offsets(self) -> np.ndarray:
        """(n + 1,) int64: leaf i's values are ``values[offsets[i]:offsets[i + 1]]``."""
        out = np.zeros(len(self) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=out[1:])
        return out

    def cell(self, i: int) -> np.ndarray:
        """Return the values of leaf ``i``."""
        o = self.offsets
        return self.values[o[i] : o[i + 1]]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HpData):
            return NotImplemented
        return (
            self.values.dtype == other.values.dtype
            and np.array_equal(self.counts, other.counts)
            and np.array_equal(self.values, other.values)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HpData(leaves={len(self)}, values={self.values.shape[0]}, dtype={self.values.dtype})"
