"""Exports placed by p4est's connectivity (star, shell, periodic brick), particles as points, units with a slash."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from forests import random_forest

import amrckpt as ac
from amrckpt import sfc
from amrckpt.cli import main


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'amrckpt[viz]')")


def read_vtk(path: Path, step: int | None = None) -> Any:
    vtk = need("vtk")
    reader = vtk.vtkHDFReader()
    reader.SetFileName(os.fspath(path))
    reader.UpdateInformation()
    if step is not None:
        reader.SetStep(step)
    reader.Update()
    return reader.GetOutput()


def cells(grid: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points of each cell as a list of (k, 3), their VTK types, the offsets)."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    pts = vtk_to_numpy(grid.GetPoints().GetData())
    ca = grid.GetCells()
    return pts, vtk_to_numpy(ca.GetOffsetsArray()), vtk_to_numpy(ca.GetConnectivityArray())


def cell_array(grid: Any, name: str) -> np.ndarray:
    from vtkmodules.util.numpy_support import vtk_to_numpy

    arr = grid.GetCellData().GetArray(name)
    assert arr is not None, f"no cell array {name!r}"
    return vtk_to_numpy(arr)


def expected_corners(lv: sfc.Leaves, place: Any) -> np.ndarray:
    """Each leaf's corners in VTK order, placed by ``place(tree, ref)`` (a reference independent of the exporter)."""
    dim = lv.dim
    L = sfc.MAXLEVEL[dim]
    quad = [(0, 0), (1, 0), (1, 1), (0, 1)]
    order = quad if dim == 2 else [(*c, 0) for c in quad] + [(*c, 1) for c in quad]
    coords = [lv.x, lv.y] + ([lv.z] if lv.z is not None else [])
    side = 2.0 ** -lv.level.astype(np.float64)
    out = []
    for corner in order:
        ref = np.stack([coords[a] / 2.0**L + corner[a] * side for a in range(dim)], axis=1)
        out.append(place(lv.tree, ref))
    return np.stack(out, axis=1)


SHELL_MAP = ac.container.GeometryMap(kind="p8est shell", R1=1.0, R2=2.0)


class Star(ac.CheckpointSchema, name="star", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2, geometry=sfc.Connectivity.star())
    q: ac.CellData = ac.Cells("<f8", units="m/s")
    particles: np.ndarray = ac.Array([("id", "<i8"), ("x", "<f8", (2,)), ("mass", "<f4")])


def _star(tmp_path: Path, n_particles: int = 9) -> tuple[Path, sfc.Leaves, np.ndarray]:
    lv = random_forest(2, 6, seed=3, level=1, rounds=2)
    parts = np.zeros(n_particles, dtype=[("id", "<i8"), ("x", "<f8", (2,)), ("mass", "<f4")])
    parts["id"] = np.arange(n_particles) + 100
    parts["x"] = np.random.default_rng(0).random((n_particles, 2))
    parts["mass"] = np.arange(n_particles, dtype="<f4") / 2
    path = tmp_path / "star.scda"
    mesh = ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=6)
    ac.save(Star(mesh=mesh, q=np.arange(lv.num_leaves, dtype="<f8"), particles=parts), path)
    return path, lv, parts


def test_star_leaves_by_the_vertex_map_particles_as_points_and_a_slash_in_units(tmp_path: Path) -> None:
    need("h5py")
    path, lv, parts = _star(tmp_path)
    res = ac.export.to_vtkhdf(path, tmp_path / "star.vtkhdf", units_in_names=True, chunk_leaves=17)
    assert res.points == ("particles",)
    assert "q [m\u2215s]" in res.arrays and "particles.mass" in res.arrays and "particles.x" in res.arrays
    grid = read_vtk(tmp_path / "star.vtkhdf")
    N, M = lv.num_leaves, len(parts)
    assert grid.GetNumberOfCells() == N + M
    pts, _, conn = cells(grid)
    types = np.array([grid.GetCellType(i) for i in range(N + M)])
    assert (types[:N] == 9).all() and (types[N:] == 1).all()
    quads = pts[conn[: 4 * N]].reshape(N, 4, 3)
    want = expected_corners(lv, sfc.Connectivity.star().map_points)
    assert np.allclose(quads, want, rtol=0, atol=1e-12)
    assert np.allclose(pts[conn[4 * N :]][:, :2], parts["x"]) and (pts[conn[4 * N :]][:, 2] == 0).all()
    q = cell_array(grid, "q [m\u2215s]")  # the array is there (a "/" in an HDF5 name would have hidden it)
    assert np.array_equal(q[:N], np.arange(N)) and np.isnan(q[N:]).all()
    ids = cell_array(grid, "particles.id")
    assert (ids[:N] == -1).all() and np.array_equal(ids[N:], parts["id"])
    assert np.array_equal(cell_array(grid, "level")[N:], np.full(M, 255))
    # Every star tree is a quadrilateral around the centre: the leaves' quads do not overlap (their areas add up).
    x, y = quads[:, :, 0], quads[:, :, 1]
    area = 0.5 * np.abs((x * np.roll(y, -1, 1) - np.roll(x, -1, 1) * y).sum(axis=1))
    corners = sfc.Connectivity.star().tree_corners()
    tx, ty = corners[:, [0, 1, 3, 2], 0], corners[:, [0, 1, 3, 2], 1]
    tree_area = 0.5 * np.abs((tx * np.roll(ty, -1, 1) - np.roll(tx, -1, 1) * ty).sum(axis=1))
    assert np.isclose(area.sum(), tree_area.sum(), rtol=1e-9)


def test_shell_and_periodic_brick(tmp_path: Path) -> None:
    need("h5py")
    geo = ac.container.GeometrySpec.of_connectivity(sfc.Connectivity.shell(), map=SHELL_MAP)

    class Shell(ac.CheckpointSchema, name="shell", version=1):
        mesh: ac.Forest = ac.Mesh(dim=3, geometry=geo)

    lv = random_forest(3, 24, seed=2, level=1, rounds=1)
    ac.save(Shell(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=24)), tmp_path / "shell.scda")
    ac.export.to_vtkhdf(tmp_path / "shell.scda", tmp_path / "shell.vtkhdf")
    grid = read_vtk(tmp_path / "shell.vtkhdf")
    pts, _, conn = cells(grid)
    r = np.linalg.norm(pts[conn], axis=1)
    assert r.min() >= 1.0 - 1e-9 and r.max() <= 2.0 + 1e-9 and r.max() > 1.99 and r.min() < 1.01
    shell = sfc.Connectivity.shell()
    want = expected_corners(lv, lambda t, ref: sfc.shell_map(shell, t, ref, 1.0, 2.0))
    assert np.allclose(pts[conn].reshape(-1, 8, 3), want, atol=1e-12)

    class Brick(ac.CheckpointSchema, name="pbrick", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2, brick=(3, 2), periodic=(True, True), lower=(0, 0), upper=(6, 2))

    lb = random_forest(2, 6, seed=4, level=1, rounds=1)
    ac.save(Brick(mesh=ac.Forest(lb.tree, lb.level, lb.x, lb.y, num_trees=6)), tmp_path / "brick.scda")
    ac.export.to_vtkhdf(tmp_path / "brick.scda", tmp_path / "brick.vtkhdf")
    pts, _, conn = cells(read_vtk(tmp_path / "brick.vtkhdf"))
    quads = pts[conn].reshape(-1, 4, 3)
    brick = sfc.Connectivity.brick((3, 2), (True, True)).scaled((0, 0), (6, 2), (3, 2))
    assert np.array_equal(quads, expected_corners(lb, brick.map_points).astype(quads.dtype))
    assert quads.dtype == np.float32  # trees that are boxes: float32 where exact, as before
    assert quads[:, :, 0].max() == 6.0 and quads[:, :, 1].max() == 2.0  # periodic: placed once, not wrapped


def test_series_with_particles_and_the_cli(tmp_path: Path) -> None:
    need("h5py")
    run = tmp_path / "run"
    run.mkdir()
    for step, n in ((1, 4), (2, 7)):
        path, _, _ = _star(tmp_path, n)
        os.replace(path, run / f"ckpt-{step:012d}.scda")
    res = ac.export.to_vtkhdf(run, tmp_path / "series.vtkhdf")
    assert res.series and res.points == ("particles",)
    lv = random_forest(2, 6, seed=3, level=1, rounds=2)
    for k, n in enumerate((4, 7)):
        grid = read_vtk(tmp_path / "series.vtkhdf", step=k)
        assert grid.GetNumberOfCells() == lv.num_leaves + n
        ids = cell_array(grid, "particles.id")
        assert np.array_equal(ids[lv.num_leaves :], np.arange(n) + 100)
    out = tmp_path / "cli.vtkhdf"
    assert main(["export", os.fspath(run / "ckpt-000000000002.scda"), os.fspath(out), "--units-in-names"]) == 0
    grid = read_vtk(out)
    assert grid.GetCellData().GetArray("q [m\u2215s]") is not None


def test_yt_and_plot_place_leaves_by_the_vertex_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lv, _ = _star(tmp_path)
    need("yt")
    ds = ac.to_yt(path)
    coords = ds.index.meshes[0].connectivity_coords
    want = expected_corners(lv, sfc.Connectivity.star().map_points)[:, :, :2].reshape(-1, 2)
    assert np.allclose(np.asarray(coords), want)
    need("matplotlib")
    png = tmp_path / "star.png"
    assert main(["plot", os.fspath(path), "--field", "q", "--output", os.fspath(png)]) == 0
    assert png.stat().st_size > 1000 and "9 particles" in capsys.readouterr().out


def test_plot_slices_a_shell_into_an_annulus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need("matplotlib")
    from amrckpt.cli._plot import _plot_leaves

    geo = ac.container.GeometrySpec.of_connectivity(sfc.Connectivity.shell(), map=SHELL_MAP)

    class Shell(ac.CheckpointSchema, name="shell", version=1):
        mesh: ac.Forest = ac.Mesh(dim=3, geometry=geo)
        q: ac.CellData = ac.Cells("<f8")

    lv = random_forest(3, 24, seed=1, level=1, rounds=1)
    path = tmp_path / "shell.scda"
    ac.save(Shell(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=24), q=np.ones(lv.num_leaves)), path)
    verts, values, plane, *_ = _plot_leaves(os.fspath(path), ac.read_info(path), "q", None, None, 2, None)
    assert plane is not None and abs(plane) < 1e-12 and len(values) == len(verts) > 0
    r = np.linalg.norm(verts.reshape(-1, 2), axis=1)
    assert r.min() >= 1.0 - 1e-9 and r.max() <= 2.0 + 1e-9  # the cut of the shell by z = 0: an annulus
    angles = np.arctan2(verts[:, :, 1], verts[:, :, 0]).ravel()
    assert np.histogram(angles, bins=8, range=(-np.pi, np.pi))[0].min() > 0  # all the way round
    png = tmp_path / "shell.png"
    assert main(["plot", os.fspath(path), "--field", "q", "--slice", "z", "--output", os.fspath(png)]) == 0
    assert "cut by z = 0" in capsys.readouterr().out


@pytest.mark.parametrize("which", ["star", "shell", "periodic brick"])
def test_shared_points_stay_in_their_tree(which: str, tmp_path: Path) -> None:
    """A vertex that trees share (the star's centre, the shell's seams) is a point of each tree; within a tree, one point."""
    need("h5py")
    if which == "star":
        path, lv, parts = _star(tmp_path)
        place, M = sfc.Connectivity.star().map_points, len(parts)
    elif which == "shell":
        geo = ac.container.GeometrySpec.of_connectivity(sfc.Connectivity.shell(), map=SHELL_MAP)

        class Shell(ac.CheckpointSchema, name="shell", version=1):
            mesh: ac.Forest = ac.Mesh(dim=3, geometry=geo)

        lv = random_forest(3, 24, seed=5, level=1, rounds=1)
        path = tmp_path / "shell.scda"
        ac.save(Shell(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=24)), path)
        shell = sfc.Connectivity.shell()
        place, M = (lambda t, ref: sfc.shell_map(shell, t, ref, 1.0, 2.0)), 0
    else:

        class Brick(ac.CheckpointSchema, name="pbrick", version=1):
            mesh: ac.Forest = ac.Mesh(dim=2, brick=(3, 2), periodic=(True, True), lower=(0, 0), upper=(6, 2))

        lv = random_forest(2, 6, seed=6, level=1, rounds=2)
        path = tmp_path / "brick.scda"
        ac.save(Brick(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=6)), path)
        place, M = sfc.Connectivity.brick((3, 2), (True, True)).scaled((0, 0), (6, 2), (3, 2)).map_points, 0
    res = ac.export.to_vtkhdf(path, tmp_path / "out.vtkhdf", chunk_leaves=13)
    pts, _, conn = cells(read_vtk(res.path))
    N, nv = lv.num_leaves, 1 << lv.dim
    ids = conn[: nv * N].reshape(N, nv)
    assert np.allclose(pts[ids], expected_corners(lv, place), rtol=0, atol=1e-12)
    assert len(pts) == res.num_points[0] and len(pts) - M < nv * N // 2  # shared: far fewer than the per-leaf 2**dim
    owner = np.full(len(pts), -1)
    for t in range(int(lv.tree.max()) + 1):
        mine = np.unique(ids[lv.tree == t])
        assert (owner[mine] == -1).all()  # no point is used by two trees
        owner[mine] = t
        assert len(np.unique(np.round(pts[mine], 9), axis=0)) == len(mine)  # nor twice within one
    where = {tuple(p) for p in np.round(pts[: len(pts) - M], 9)}
    assert len(where) < len(pts) - M  # trees meet: some positions are points of several trees


def test_plot_names_an_array_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _, _ = _star(tmp_path)
    need("matplotlib")
    assert main(["plot", os.fspath(path), "--field", "particles", "-o", os.fspath(tmp_path / "p.png")]) == 2
    assert "field 'particles' is an array field" in capsys.readouterr().err
