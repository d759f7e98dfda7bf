"""The node-local level of a checkpoint directory (SCR's cache): each rank's exact pieces of the final file.

A save into the cache writes, on every rank, the pieces of the scda file
that the save's one agreement assigned to it (``(offset, bytes)`` runs:
exactly what the rank would write into the shared file) into one file of
its own, ``rank-<r, 6 digits>.pieces``, in its node's cache directory::

    <node directory>/ckpt-000000000040.cache/           a cached step (committed)
        step.json                                       what the step is: P, node layout, ranks held, records
        rank-000003.pieces                              rank 3's pieces (a rank of this node)
        rank-000001.pieces                              rank 1's pieces (a partner copy: rank 1 is on another node)
    <node directory>/.ckpt-000000000040.cache.partial-<token>/   a cached save in progress
    <node directory>/amrckpt.lock                       the node's lock (flock, held by the node's first rank)

The step is committed as the shared directory's steps are (temporary
name, write, fsync, rename, directory fsync, agreed by every rank): a
directory with its final name is complete.  :mod:`amrckpt.manager.cache._flush`
writes the pieces back into the shared file.

A pieces file is a header (magic, rank, the save's number of collective
rounds, number of pieces, data bytes, CRC32 of the table and the data, CRC32
of the header), the table of ``(offset, nbytes)`` pairs (little-endian
uint64), and the pieces' bytes one after the other.
"""

from __future__ import annotations

from ._layout import NodeCache, NodeLayout
from ._node import NodeLevel
from ._steps import CachedStep, list_cache

__all__ = ["CachedStep", "NodeCache", "NodeLayout", "NodeLevel", "list_cache"]
