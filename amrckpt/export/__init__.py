"""Look at checkpoints in ParaView, VisIt, pyvista and yt.

- :func:`to_vtkhdf`: a checkpoint, or a manager's directory of them (a time
  series), as a VTKHDF ``UnstructuredGrid`` with one cell per leaf; or,
  ``format="htg"``, a checkpoint of box trees on a grid as a VTKHDF
  ``HyperTreeGrid`` (:func:`vtkhdf_formats` says which a checkpoint allows).
- :func:`to_yt`: a checkpoint as a yt dataset.
- :func:`mesh_geometry`, :func:`leaf_corners`, :func:`tree_boxes`,
  :func:`leaf_boxes`: where trees and leaves lie (p4est's vertex map of a
  connectivity, or boxes); :func:`shared_corners`: the distinct corner
  points of a block of leaves, as the VTKHDF export writes them.

``import amrckpt.export`` imports neither h5py nor yt nor VTK: each is
imported by the function that needs it (``pip install 'amrckpt[export]'``: h5py
for VTKHDF; ``'amrckpt[viz]'`` adds pyvista, VTK and yt).
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
from ._htg import HtgGrid, HtgLayout, htg_grid, htg_layout, htg_values
from ._points import POINT_BLOCK_LEAVES, shared_corners
from ._sink import RowSink
from ._vtkhdf import DEFAULT_CHUNK_LEAVES, FORMATS, ExportResult, to_vtkhdf, vtkhdf_formats
from ._yt import to_yt

__all__ = [
    "DEFAULT_CHUNK_LEAVES",
    "FORMATS",
    "POINT_BLOCK_LEAVES",
    "POSITION_NAMES",
    "CellArray",
    "ExportResult",
    "HpSummary",
    "HtgGrid",
    "HtgLayout",
    "PointSet",
    "RowSink",
    "cell_corners",
    "checkpoint_paths",
    "float32_exact",
    "htg_grid",
    "htg_layout",
    "htg_values",
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
    "vtkhdf_formats",
    "tree_boxes",
]
