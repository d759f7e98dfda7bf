"""p4est's files, read and written by amrckpt, and checkpoints converted to and from them (layer 5).

p4est (Burstedde, Wilcox, Ghattas, SIAM J. Sci. Comput. 33(3), 2011) saves a
forest with ``p4est_save_ext`` (``p8est_save_ext`` in 3D): its connectivity,
a header with the partition and ``pertree``, and one record per quadrant
(``x``, ``y`` [, ``z``], ``level``, then the quadrant's data).
:func:`read_p4est` and :func:`write_p4est` read and write those bytes on any
number of ranks, each rank its own quadrants; :func:`p4est_to_checkpoint` and
:func:`checkpoint_to_p4est` convert (``amrckpt convert --from p4est``,
``--to p4est``): the connectivity becomes the mesh's geometry, the quadrant
data a ``Cells`` field ``data`` of raw bytes, a saved partition the run
record beside the checkpoint.  A file that p4est saved without a partition
converts to a checkpoint and back byte for byte.
"""

from __future__ import annotations

from ._convert import DATA_FIELD, P4estSource, checkpoint_to_p4est, p4est_schema, p4est_to_checkpoint
from ._savefile import DEFAULT_PACKAGE_VERSION, P4estFile, P4estHeader, read_p4est, read_p4est_header, write_p4est

__all__ = [
    "DATA_FIELD",
    "DEFAULT_PACKAGE_VERSION",
    "P4estFile",
    "P4estHeader",
    "P4estSource",
    "checkpoint_to_p4est",
    "p4est_schema",
    "p4est_to_checkpoint",
    "read_p4est",
    "read_p4est_header",
    "write_p4est",
]
