"""Rows of the datasets of one VTKHDF file, written through h5py's public API: the exporters' one way to write."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RowSink"]


class RowSink:
    """Writes rows of the datasets of one VTKHDF file, by name, through h5py's public API.

    The exporters hold the layout (which dataset, which rows); the sink
    writes ``data`` into rows ``start .. start + len(data) - 1`` of a
    dataset with :meth:`h5py.Dataset.write_direct` (one ``H5Dwrite`` of a
    hyperslab; no copy when ``data`` already has the dataset's dtype and is
    C-contiguous).  A dataset created chunked and unlimited along its rows
    (``maxshape=(None, ...)``) grows as rows are written past its end
    (:meth:`h5py.Dataset.resize`).  Not collective: under the ``mpio``
    driver each rank writes its own rows independently; the writers of one
    file share a sink on one thread.

    Parameters
    ----------
    datasets : dict of str to h5py.Dataset
        The datasets, by the names the exporters use (``"Offsets"``,
        ``"cell:rho"``...).
    """

    def __init__(self, datasets: dict[str, Any]) -> None:
        self.d = datasets
        self._grows: dict[str, bool] = {}

    def put(self, name: str, start: int, data: Any) -> None:
        """Write ``data`` (rows of dataset ``name``, in its row shape) from row ``start``. Not collective.

        Parameters
        ----------
        name : str
            The dataset.
        start : int
            Its first row written.
        data : array_like
            ``(n, *row_shape)``, cast to the dataset's dtype.

        Raises
        ------
        KeyError
            If there is no dataset ``name``.
        ValueError
            If the rows pass the end of a dataset that does not grow.
        """
        ds = self.d[name]
        a = np.ascontiguousarray(data, dtype=ds.dtype)
        n = a.shape[0]
        if not n:
            return
        grows = self._grows.get(name)
        if grows is None:
            grows = self._grows[name] = ds.maxshape[0] is None
        if grows and start + n > ds.shape[0]:
            ds.resize(start + n, axis=0)
        elif start + n > ds.shape[0]:
            raise ValueError(f"rows {start} .. {start + n - 1} of {name!r} pass its end ({ds.shape[0]} rows)")
        ds.write_direct(a, dest_sel=np.s_[start : start + n])

    def close(self) -> None:
        """Nothing to release: the h5py file holds the datasets (kept for the exporters' ``finally``)."""
