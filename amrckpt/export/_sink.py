"""Rows of the datasets of one VTKHDF file, written through h5py's public API: the exporters' one way to write."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import CellArray

__all__ = ["RowSink", "cell_dataset"]


def cell_dataset(group: Any, name: str, a: CellArray, rows: int, **kwargs: Any) -> Any:
    """Create dataset ``name`` of cell array ``a`` (a :class:`CellArray`) in ``group``: ``rows`` rows, its ``units`` attribute."""
    ds = group.create_dataset(name, (rows,) if a.ncomp == 1 else (rows, a.ncomp), dtype=a.dtype, **kwargs)
    if a.units:
        ds.attrs.create("units", np.bytes_(a.units.encode()))
    return ds


class RowSink:
    """Writes rows of the datasets of one VTKHDF file, by name, through h5py's public API.

    The exporters hold the layout (which dataset, which rows); the sink
    writes ``data`` into rows ``start .. start + len(data) - 1`` of a
    dataset with :meth:`h5py.Dataset.write_direct` (one ``H5Dwrite`` of a
    hyperslab; no copy when ``data`` already has the dataset's dtype and is
    C-contiguous).  A dataset created chunked and unlimited along its rows
    (``maxshape=(None, ...)``) grows as rows are written past its end
    (:meth:`h5py.Dataset.resize`).  The sink is the datasets' only writer
    while it writes: it asks h5py for a dataset's rows once and keeps
    count of them.  Not collective: under the ``mpio``
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
        self._rows: dict[str, tuple[int, bool]] = {}  # each dataset's rows and whether it grows (asking h5py costs)

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
        known = self._rows.get(name)
        rows, grows = known if known is not None else (ds.shape[0], ds.maxshape[0] is None)
        if start + n > rows:
            if not grows:
                raise ValueError(f"rows {start} .. {start + n - 1} of {name!r} pass its end ({rows} rows)")
            ds.resize(start + n, axis=0)
            rows = start + n
        self._rows[name] = (rows, grows)
        ds.write_direct(a, dest_sel=np.s_[start : start + n])

    def close(self) -> None:
        """Nothing to release: the h5py file holds the datasets (kept for the exporters' ``finally``)."""
