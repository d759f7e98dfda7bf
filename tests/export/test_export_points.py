"""The corner points that the leaves of a block share, and the sink of rows: the UnstructuredGrid's parts, without a file.

``shared_corners`` against ``leaf_corners`` (each leaf's own corners) for
every method, and ``RowSink`` writing rows through h5py's public API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import amrckpt as ac
from _support import random_forest
from amrckpt import sfc


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'amrckpt[viz]')")


def records(lv: Any) -> np.ndarray:
    """The leaves as mesh records (what ``read_mesh`` returns)."""
    rec = np.zeros(lv.num_leaves, dtype=sfc.mesh_record_dtype(lv.dim))
    rec["tree"], rec["level"], rec["x"], rec["y"] = lv.tree, lv.level, lv.x, lv.y
    if lv.dim == 3:
        rec["z"] = lv.z
    return rec


@pytest.mark.parametrize(("dim", "trees", "seed"), [(2, 1, 0), (2, 3, 1), (3, 1, 2), (3, 2, 3)])
def test_shared_corners_are_each_leafs_corners(dim: int, trees: int, seed: int) -> None:
    """pts[corners] is every leaf's own corners (leaf_corners, the per-leaf layout); a tree's points are distinct."""
    from amrckpt.container import Geometry
    from amrckpt.export import leaf_corners, shared_corners
    from amrckpt.export._points import count_shared_corners

    lv = random_forest(seed, num_trees=trees, dim=dim, max_level=6 if dim == 2 else 4)
    rec, L = records(lv), sfc.MAXLEVEL[dim]
    g = Geometry.brick_of((trees, *([1] * (dim - 1))), trees, dim, upper=(3.0 * trees, *([0.75] * (dim - 1))))
    want = leaf_corners(rec, g, L).reshape(lv.num_leaves, 1 << dim, 3)
    got = {}
    for method in ("auto", "dense", "sort", "rows"):
        for part in (slice(None), slice(5, lv.num_leaves - 3)):  # unaligned blocks too
            pts, corners = shared_corners(rec[part], g, L, method=method)
            assert corners.dtype == np.int32 and corners.shape == (len(rec[part]), 1 << dim)
            np.testing.assert_array_equal(pts[corners], want[part], err_msg=f"{method} {part}")
            got[method, part.start] = (pts, corners)
    for (method, start), (pts, corners) in got.items():  # the same points, in the same order, whatever the method
        np.testing.assert_array_equal(pts, got["auto", start][0], err_msg=method)
        np.testing.assert_array_equal(corners, got["auto", start][1], err_msg=method)
    pts, corners = got["auto", None]
    for method in ("dense", "sort", "rows"):  # where the block's points go in a longer list
        moved = shared_corners(rec, g, L, method=method, first=1000)[1]
        np.testing.assert_array_equal(moved, corners + 1000, err_msg=method)
    for t in range(trees):  # within a tree, no point twice; every point used
        used = np.unique(corners[lv.tree == t])
        assert len(np.unique(pts[used], axis=0)) == len(used)
    assert np.array_equal(np.unique(corners), np.arange(len(pts)))
    assert count_shared_corners(rec, dim, L) == len(pts) < lv.num_leaves * (1 << dim) // 2


def test_a_uniform_block_is_a_lattice_of_points() -> None:
    """A uniform block of 4**k quadrants has (2**k + 1)**2 points in x-major order; the float32 points are exact."""
    from amrckpt.container import Geometry
    from amrckpt.export import shared_corners

    lv = sfc.uniform_leaves(4, num_trees=2, dim=2)
    g = Geometry.brick_of((2, 1), 2, 2)
    pts, corners = shared_corners(records(lv), g, sfc.MAXLEVEL[2], np.float32)
    assert pts.dtype == np.float32 and len(pts) == 2 * 17**2  # two trees: their common side twice
    side = np.arange(17, dtype=np.float32) / 16
    np.testing.assert_array_equal(pts[: 17**2, 0], np.repeat(side, 17))
    np.testing.assert_array_equal(pts[: 17**2, 1], np.tile(side, 17))
    assert (pts[:, 2] == 0).all() and (corners[lv.tree == 1] >= 17**2).all()


def test_row_sink_writes_through_h5py_and_grows(tmp_path: Path) -> None:
    """RowSink: rows by slices through h5py's public API; a chunked unlimited dataset grows, a fixed one refuses to."""
    h5py = need("h5py")
    with h5py.File(tmp_path / "s.h5", "w") as f:
        fixed = f.create_dataset("fixed", (5,), dtype=np.int32)
        grows = f.create_dataset("grows", (0, 3), maxshape=(None, 3), chunks=(4, 3), dtype=np.float32)
        sink = ac.export.RowSink({"fixed": fixed, "grows": grows})
        sink.put("fixed", 1, np.arange(3, dtype=np.int64))  # cast to the dataset's dtype
        sink.put("grows", 0, np.ones((6, 3)))
        sink.put("grows", 6, np.full((3, 3), 2.0))
        sink.put("fixed", 0, np.zeros(0))
        with pytest.raises(ValueError, match="pass its end"):
            sink.put("fixed", 4, np.arange(2))
        sink.close()
        assert fixed[()].tolist() == [0, 0, 1, 2, 0] and grows.shape == (9, 3) and grows[8, 2] == 2.0
