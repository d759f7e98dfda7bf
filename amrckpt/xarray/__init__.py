"""Checkpoints in xarray and dask: a lazy backend and a covering grid (layer 7).

- :class:`AmrckptBackendEntrypoint`: xarray's engine ``"amrckpt"``
  (registered under the ``xarray.backends`` entry point):
  ``xr.open_dataset("ckpt.scda", engine="amrckpt")`` and
  ``xr.open_datatree(...)`` open a checkpoint lazily, every variable read
  by leaf ranges through :class:`amrckpt.container.CheckpointReader`'s
  range reads (the exporters' read path), with dask chunks of contiguous
  leaves (``chunks={}``).
- :func:`checkpoint_groups`: the same datasets from a :class:`CheckpointSource`.
- :func:`to_uniform`: the leaves resampled onto a regular grid at one
  level (volume averages of finer leaves, coarser ones injected); also
  ``ds.amr.to_uniform(level)``, an accessor registered when this module is
  imported.

``import amrckpt`` does not import xarray; this package does (``pip install
'amrckpt[analysis]'``).  docs/analysis.md is the guide.
"""

from __future__ import annotations

from ._backend import AmrckptBackendEntrypoint, open_groups
from ._dataset import CHUNK_NBYTES, checkpoint_groups, leaf_chunk
from ._source import CheckpointSource
from ._uniform import AmrAccessor, to_uniform

__all__ = [
    "CHUNK_NBYTES",
    "AmrAccessor",
    "AmrckptBackendEntrypoint",
    "CheckpointSource",
    "checkpoint_groups",
    "leaf_chunk",
    "open_groups",
    "to_uniform",
]
