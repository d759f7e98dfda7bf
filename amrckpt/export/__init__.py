"""Look at checkpoints in ParaView, VisIt, pyvista and yt.

- :func:`to_vtkhdf`: a checkpoint, or a manager's directory of them (a time
  series), as a VTKHDF ``UnstructuredGrid`` with one cell per leaf.
- :func:`to_yt`: a checkpoint as a yt dataset.
- :func:`mesh_geometry`, :func:`leaf_corners`, :func:`tree_boxes`,
  :func:`leaf_boxes`: where trees and leaves lie (p4est's vertex map of a
  connectivity, or boxes); :func:`shared_corners`: the distinct corner
  points of a block of leaves, as the VTKHDF export writes them.

``import amrckpt.export`` imports neither h5py nor yt nor VTK: each is
imported by the function that needs it (``pip install 'amrckpt[viz]'``).
"""

from __future__ import annotations

from ._arrays import (
    POSITION_NAMES,
    CellArray,
    HpSummary,
    PointSet,
    checkpoint_paths,
    leaf_values,
    plan_arrays,
    plan_points,
    point_values,
)
from ._geometry import cell_corners, float32_exact, leaf_boxes, leaf_corners, mesh_geometry, tree_boxes
from ._points import POINT_BLOCK_LEAVES, shared_corners
from ._vtkhdf import DEFAULT_CHUNK_LEAVES, ExportResult, to_vtkhdf
from ._yt import to_yt

__all__ = [
    "DEFAULT_CHUNK_LEAVES",
    "POINT_BLOCK_LEAVES",
    "POSITION_NAMES",
    "CellArray",
    "ExportResult",
    "HpSummary",
    "PointSet",
    "cell_corners",
    "checkpoint_paths",
    "float32_exact",
    "leaf_boxes",
    "leaf_corners",
    "leaf_values",
    "mesh_geometry",
    "plan_arrays",
    "plan_points",
    "point_values",
    "shared_corners",
    "to_vtkhdf",
    "to_yt",
    "tree_boxes",
]
