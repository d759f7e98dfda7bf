"""amrckpt.export's HyperTreeGrid (VTKHDF 2.4), read back by VTK's own vtkHDFReader from the vtk wheel.

The leaf boxes expected are computed here from the leaves' integer
coordinates and the brick's tree boxes; VTK's hyper trees are flattened to
their leaves by VTK (vtkHyperTreeGridToUnstructuredGrid) and matched to the
checkpoint's leaves by box; coarse nodes are walked with VTK's cursor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import amrckpt as ac
from _support import random_forest
from amrckpt import sfc
from amrckpt.cli import main
from amrckpt.errors import UnsupportedFormatError
from amrckpt.export import htg_layout


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'amrckpt[viz]')")


class Brick2(ac.CheckpointSchema, name="htg-brick2", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    mesh: ac.Forest = ac.Mesh(dim=2, brick=(3, 2), lower=(0, 0), upper=(6, 2), units="m")
    rho: ac.CellData = ac.Cells("<f4", units="kg")
    vel: ac.CellData = ac.Cells("<f8", shape=(2,))
    tag: ac.CellData = ac.Cells("<i4")
    modes: ac.HpData = ac.HpCells("<f8")


class Brick3(ac.CheckpointSchema, name="htg-brick3", version=1):
    mesh: ac.Forest = ac.Mesh(dim=3, brick=(2, 1, 2))
    rho: ac.CellData = ac.Cells("<f8")
    vel: ac.CellData = ac.Cells("<f8", shape=(3,))
    tag: ac.CellData = ac.Cells("<i4")
    modes: ac.HpData = ac.HpCells("<f8")


def _state(dim: int, seed: int) -> tuple[ac.CheckpointSchema, sfc.Leaves]:
    T = 6 if dim == 2 else 4
    lv = random_forest(seed, num_trees=T, dim=dim, max_level=4 if dim == 2 else 3)
    N = lv.num_leaves
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 4, N)
    coords = [lv.x, lv.y] + ([lv.z] if dim == 3 else [])
    kw: dict[str, Any] = {
        "mesh": ac.Forest(lv.tree, lv.level, *coords, num_trees=T),
        "rho": rng.random(N).astype("<f4" if dim == 2 else "<f8"),
        "vel": rng.standard_normal((N, dim)),
        "tag": rng.integers(-100, 100, N).astype("<i4"),
        "modes": ac.HpData(rng.standard_normal(int(counts.sum())), counts),
    }
    return (Brick2(step=3, time=1.5, **kw) if dim == 2 else Brick3(**kw)), lv


def _tree_boxes(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with ac.container.CheckpointReader(path) as r:
        return ac.export.tree_boxes(r)


def _expected_boxes(lv: sfc.Leaves, lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dim = lv.dim
    t = np.asarray(lv.tree, dtype=np.int64)
    coords = [lv.x, lv.y] + ([lv.z] if dim == 3 else [])
    ext = (upper - lower)[t]
    lo = lower[t] + np.stack([np.asarray(c, dtype=np.float64) for c in coords], 1) / 2.0 ** sfc.MAXLEVEL[dim] * ext
    return lo, lo + ext * 0.5 ** np.asarray(lv.level, dtype=np.float64)[:, None]


def _read(path: Path) -> Any:
    vtk = need("vtk")
    reader = vtk.vtkHDFReader()
    reader.SetFileName(os.fspath(path))
    reader.Update()
    return reader.GetOutput()


def _leaves_of(htg: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """VTK's leaves of a hyper tree grid: their boxes and cell data (VTK's own flattening)."""
    import vtk
    from vtkmodules.util.numpy_support import vtk_to_numpy

    f = vtk.vtkHyperTreeGridToUnstructuredGrid()
    f.SetInputData(htg)
    f.Update()
    ug = f.GetOutput()
    pts = vtk_to_numpy(ug.GetPoints().GetData())
    cells = ug.GetCells()
    offsets = vtk_to_numpy(cells.GetOffsetsArray())
    conn = vtk_to_numpy(cells.GetConnectivityArray())
    nv = int(offsets[1] - offsets[0])
    corners = pts[conn].reshape(ug.GetNumberOfCells(), nv, 3)
    return corners.min(axis=1), corners.max(axis=1), ug.GetCellData()


def _walk(htg: Any, name: str) -> tuple[int, int]:
    """Check every coarse node of every tree: ``name`` is its leaves' volume average, ``level`` its depth.

    Integer arrays: that average rounded to the nearest integer.  Returns (coarse nodes, leaves).
    """
    import vtk
    from vtkmodules.util.numpy_support import vtk_to_numpy

    raw = vtk_to_numpy(htg.GetCellData().GetArray(name))
    integer = raw.dtype.kind in "iu"
    vals = raw.astype(np.float64)
    level = vtk_to_numpy(htg.GetCellData().GetArray("level"))
    cursor = vtk.vtkHyperTreeGridNonOrientedCursor()
    counts = [0, 0]

    def visit() -> float:
        g = cursor.GetGlobalNodeIndex()
        assert level[g] == cursor.GetLevel()
        if cursor.IsLeaf():
            counts[1] += 1
            return float(vals[g])
        counts[0] += 1
        kids = []
        for c in range(cursor.GetNumberOfChildren()):
            cursor.ToChild(c)
            kids.append(visit())
            cursor.ToParent()
        mean = float(np.mean(kids))  # equal volumes: the mean of the children's averages is the volume average
        assert vals[g] == (np.rint(mean) if integer else pytest.approx(mean, rel=1e-6, abs=1e-6))
        return mean

    for index in range(htg.GetMaxNumberOfTrees()):
        if htg.GetTree(index) is not None:
            htg.InitializeNonOrientedCursor(cursor, index)
            visit()
    return counts[0], counts[1]


@pytest.mark.parametrize("dim", [2, 3])
def test_brick_read_by_vtk_leaves_and_values(dim: int, tmp_path: Path) -> None:
    need("h5py")
    need("vtk")
    from vtkmodules.util.numpy_support import vtk_to_numpy

    state, lv = _state(dim, seed=5 + dim)
    path = tmp_path / "b.scda"
    ac.save(state, path)
    assert ac.export.vtkhdf_formats(path) == {"unstructured": None, "htg": None}
    res = ac.export.to_vtkhdf(path, tmp_path / "b.vtkhdf", format="htg", chunk_leaves=37)
    N = lv.num_leaves
    C = 1 << dim
    assert res.format == "htg" and res.num_cells == (N,) and res.num_nodes == (N + (N - len(set(lv.tree))) // (C - 1),)
    assert res.arrays == ("level", "tree", "rho", "vel", "tag", "modes.count", "modes.first")
    htg = _read(res.path)
    assert htg.GetClassName() == "vtkHyperTreeGrid"
    assert htg.GetNumberOfLeaves() == N and htg.GetNumberOfCells() == res.num_nodes[0]
    lo, hi, cd = _leaves_of(htg)
    assert len(lo) == N
    want_lo, want_hi = _expected_boxes(lv, *_tree_boxes(path))
    # match VTK's leaves to the checkpoint's by their lower corner
    got = np.lexsort(lo[:, :dim].T[::-1])
    want = np.lexsort(want_lo.T[::-1])
    np.testing.assert_allclose(lo[got, :dim], want_lo[want], rtol=0, atol=1e-12)
    np.testing.assert_allclose(hi[got, :dim], want_hi[want], rtol=0, atol=1e-12)
    counts = np.asarray(state.modes.counts)
    first = np.asarray(state.modes.values)[np.cumsum(counts) - counts]
    for name, v in (
        ("rho", state.rho),
        ("vel", state.vel),
        ("tag", state.tag),
        ("modes.first", first),
        ("level", lv.level),
        ("tree", lv.tree),
    ):
        arr = vtk_to_numpy(cd.GetArray(name))
        assert np.array_equal(arr[got], np.asarray(v)[want]), name
    assert vtk_to_numpy(cd.GetArray("rho")).dtype == np.asarray(state.rho).dtype
    coarse, leaves = _walk(htg, "rho")
    assert leaves == N and coarse == res.num_nodes[0] - N
    _walk(htg, "tag")  # integers: the mean rounded


def test_the_layout_is_each_trees_breadth_first_order() -> None:
    """htg_layout against a reference that builds each tree node by node (one tree, one node at a time)."""
    for dim, seed in ((2, 1), (3, 2), (2, 3)):
        lv = random_forest(seed, num_trees=3, dim=dim, max_level=5 if dim == 2 else 3)
        starts = np.append(np.flatnonzero(np.diff(lv.tree, prepend=-1)), lv.num_leaves).astype(np.int64)
        lay = htg_layout(lv.level, starts, dim)
        bits, depths, per_depth, leaf_rows = [], [], [], []
        row = 0
        for t in range(3):
            lev = lv.level[starts[t] : starts[t + 1]].tolist()
            # breadth-first: a node is (first leaf, number of leaves under it, depth)
            frontier = [(0, len(lev), 0)]
            levels = []
            while frontier:
                levels.append(frontier)
                nxt = []
                for a, n, d in frontier:
                    if lev[a] == d:
                        assert n == 1
                        leaf_rows.append((starts[t] + a, row))
                    else:
                        k = a
                        for _ in range(1 << dim):  # each child's leaves: until they fill 2**-dim of the node
                            need_vol, b = 2.0 ** (-dim * (d + 1)), k
                            while need_vol > 1e-300:
                                need_vol -= 2.0 ** (-dim * lev[b])
                                b += 1
                            nxt.append((k, b - k, d + 1))
                            k = b
                    row += 1
                frontier = nxt
            depths.append(len(levels))
            per_depth += [len(f) for f in levels]
            for f in levels[:-1]:
                bits += [lev[a] != d for a, _, d in f]
        assert lay.rows == row
        assert lay.descriptor.tolist() == bits
        assert lay.depth_per_tree.tolist() == depths
        assert lay.cells_per_tree_depth.tolist() == per_depth
        vals = np.arange(lv.num_leaves, dtype=np.float64)
        out = ac.export.htg_values(lay, vals)
        for leaf, r in leaf_rows:
            assert out[r] == leaf


def test_not_a_brick_allows_unstructured_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need("h5py")

    class Star(ac.CheckpointSchema, name="htg-star", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2, geometry=sfc.Connectivity.star())
        q: ac.CellData = ac.Cells("<f8")

    lv = random_forest(3, num_trees=6, dim=2, max_level=3)
    path = tmp_path / "star.scda"
    ac.save(Star(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=6), q=np.zeros(lv.num_leaves)), path)
    formats = ac.export.vtkhdf_formats(path)
    assert formats["unstructured"] is None and "not axis-aligned boxes" in str(formats["htg"])
    with pytest.raises(UnsupportedFormatError, match="allows --format unstructured only"):
        ac.export.to_vtkhdf(path, tmp_path / "s.vtkhdf", format="htg")
    assert not (tmp_path / "s.vtkhdf").exists()
    assert main(["export", os.fspath(path), os.fspath(tmp_path / "s.vtkhdf"), "--format", "htg"]) == 2
    err = capsys.readouterr().err
    assert "not axis-aligned boxes" in err and "allows --format unstructured only" in err
    assert main(["export", os.fspath(path), os.fspath(tmp_path / "s.vtkhdf")]) == 0


def test_cli_htg_and_a_series_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need("h5py")
    state, lv = _state(2, seed=1)
    run = tmp_path / "run"
    run.mkdir()
    ac.save(state, run / "ckpt-000000000001.scda")
    out = tmp_path / "b.vtkhdf"
    assert main(["export", os.fspath(run / "ckpt-000000000001.scda"), os.fspath(out), "--format", "htg"]) == 0
    assert f"{lv.num_leaves} leaves" in capsys.readouterr().out
    h5py = need("h5py")
    with h5py.File(out) as f:
        assert f["VTKHDF"].attrs["Type"] == b"HyperTreeGrid" and list(f["VTKHDF"].attrs["Version"]) == [2, 4]
        assert list(f["VTKHDF/XCoordinates"][:]) == [0, 2, 4, 6] and list(f["VTKHDF/ZCoordinates"][:]) == [0]
        assert f["VTKHDF/FieldData/time"][0] == 1.5
    assert main(["export", os.fspath(run), os.fspath(out), "--format", "htg"]) == 2
    assert "not a series" in capsys.readouterr().err
    with pytest.raises(UnsupportedFormatError, match="not a series"):
        ac.export.to_vtkhdf(run, out, format="htg")
