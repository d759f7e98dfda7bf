"""amrckpt.export and ``amrckpt export``: checkpoints read back by VTK's own vtkHDFReader, pyvista and yt.

The expected leaf boxes are computed here from the leaves' integer
coordinates (not by amrckpt.export), and every cell of every export is
compared with them and with the fields' values.  Tests skip with a reason
where h5py, vtk, pyvista or yt are absent (``pip install 'amrckpt[viz]'``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Heat3D, global_state, heat3d

import amrckpt as ac
from _support import REPO, random_forest
from amrckpt import sfc
from amrckpt.cli import main
from amrckpt.comm import run_threads


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'amrckpt[viz]')")


def boxes(lv: Any, brick: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each leaf's box, from its integer coordinates and a brick of unit trees (row-major)."""
    dim = len(brick)
    t = np.asarray(lv.tree, dtype=np.int64)
    origin = [t % brick[0], (t // brick[0]) % brick[1]] + ([t // (brick[0] * brick[1])] if dim == 3 else [])
    coords = [lv.x, lv.y] + ([lv.z] if dim == 3 else [])
    lo = np.stack([o + np.asarray(c, dtype=np.float64) / 2.0 ** sfc.MAXLEVEL[dim] for o, c in zip(origin, coords, strict=True)], 1)
    return lo, lo + 0.5 ** np.asarray(lv.level, dtype=np.float64)[:, None]


def read_vtk(path: Path, step: int | None = None) -> Any:
    vtk = need("vtk")
    reader = vtk.vtkHDFReader()
    reader.SetFileName(os.fspath(path))
    reader.UpdateInformation()
    if step is not None:
        reader.SetStep(step)
    reader.Update()
    return reader, reader.GetOutput()


def cell_bounds(grid: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cell: lower and upper corner of its points' bounding box, and its VTK type."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    pts = vtk_to_numpy(grid.GetPoints().GetData())
    cells = grid.GetCells()
    offsets = vtk_to_numpy(cells.GetOffsetsArray())
    conn = vtk_to_numpy(cells.GetConnectivityArray())
    n = grid.GetNumberOfCells()
    nv = np.diff(offsets)
    assert n == 0 or (nv == nv[0]).all()
    corners = pts[conn].reshape(n, int(nv[0]) if n else 1, 3)
    types = np.array([grid.GetCellType(i) for i in range(n)], dtype=np.uint8)
    return corners.min(axis=1), corners.max(axis=1), types


def cell_array(grid: Any, name: str) -> np.ndarray:
    from vtkmodules.util.numpy_support import vtk_to_numpy

    arr = grid.GetCellData().GetArray(name)
    assert arr is not None, f"no cell array {name!r}"
    return vtk_to_numpy(arr)


def field_value(grid: Any, name: str) -> Any:
    from vtkmodules.util.numpy_support import vtk_to_numpy

    return vtk_to_numpy(grid.GetFieldData().GetArray(name)).tolist()


def hp_first(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    start = np.cumsum(counts) - counts
    return np.where(counts > 0, values[np.minimum(start, max(len(values) - 1, 0))], np.nan)


@pytest.fixture(scope="module")
def adv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A 2D checkpoint on two trees (a compressed vector field, an hp field) written by 3 ranks."""
    path = tmp_path_factory.mktemp("adv") / "adv.scda"
    g = global_state(5, max_level=5)
    run_threads(3, lambda comm: ac.save(g.for_rank(comm), path, comm=comm))
    return path, g


@pytest.fixture(scope="module")
def cube(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Heat3D, Any]:
    path = tmp_path_factory.mktemp("cube") / "cube.scda"
    state, lv = heat3d(1, step=7)
    ac.save(state, path)
    return path, state, lv


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[Heat3D, Any]]]:
    """A manager's directory of three 3D checkpoints whose meshes differ."""
    d = tmp_path_factory.mktemp("run") / "run"
    states = [heat3d(10 + s, step=s, max_level=2 + s % 2) for s in (1, 2, 3)]
    with ac.CheckpointManager(d, Heat3D, save_policy=ac.EveryNSteps(1)) as manager:
        for state, _ in states:
            assert manager.save(state.step, state)
    return d, states


# -- VTKHDF read by VTK -----------------------------------------------------------


def test_2d_checkpoint_of_3_ranks_read_by_vtk(adv: tuple[Path, Any], tmp_path: Path) -> None:
    need("h5py")
    path, g = adv
    res = ac.export.to_vtkhdf(path, tmp_path / "adv.vtkhdf", ranks=4)
    assert res.num_cells == (g.N,) and not res.series and res.steps == (42,) and res.times == (1.25,)
    assert res.arrays == ("level", "tree", "rho", "vel", "modes.count", "modes.first", "rank")
    _, grid = read_vtk(res.path)
    assert grid.GetNumberOfCells() == g.N
    lo, hi, types = cell_bounds(grid)
    want_lo, want_hi = boxes(g.leaves, (2, 1))  # the default geometry: a row of unit trees
    np.testing.assert_array_equal(lo[:, :2], want_lo)
    np.testing.assert_array_equal(hi[:, :2], want_hi)
    assert (lo[:, 2] == 0).all() and (hi[:, 2] == 0).all()
    assert (types == 9).all()  # VTK_QUAD
    np.testing.assert_array_equal(cell_array(grid, "rho"), g.rho)
    np.testing.assert_array_equal(cell_array(grid, "vel"), g.vel)
    np.testing.assert_array_equal(cell_array(grid, "level"), g.leaves.level)
    np.testing.assert_array_equal(cell_array(grid, "tree"), g.leaves.tree)
    np.testing.assert_array_equal(cell_array(grid, "modes.count"), g.counts)
    np.testing.assert_array_equal(cell_array(grid, "modes.first"), hp_first(g.counts, g.modes))
    np.testing.assert_array_equal(cell_array(grid, "rank"), ac.Partition.uniform(g.N, 4).owner(np.arange(g.N)))
    assert field_value(grid, "step") == [42] and field_value(grid, "time") == [1.25]


def test_3d_checkpoint_read_by_vtk_every_dtype(cube: tuple[Path, Heat3D, Any], tmp_path: Path) -> None:
    h5py = need("h5py")
    path, state, lv = cube
    res = ac.export.to_vtkhdf(path, tmp_path / "cube.vtkhdf", hp="mean", chunk_leaves=7)
    assert res.arrays == ("level", "tree", "T", "grad", "flag", "z.real", "z.imag", "rec.p", "rec.n", "modes.count", "modes.mean")
    _, grid = read_vtk(res.path)
    N = len(lv.tree)
    assert grid.GetNumberOfCells() == N
    lo, hi, types = cell_bounds(grid)
    want_lo, want_hi = boxes(lv, (2, 1, 1))
    np.testing.assert_array_equal(lo, want_lo)
    np.testing.assert_array_equal(hi, want_hi)
    assert (types == 12).all()  # VTK_HEXAHEDRON
    np.testing.assert_array_equal(cell_array(grid, "T"), state.T)
    np.testing.assert_array_equal(cell_array(grid, "grad"), state.grad)
    np.testing.assert_array_equal(cell_array(grid, "flag"), state.flag.astype(np.uint8))
    np.testing.assert_array_equal(cell_array(grid, "z.real"), state.z.real)
    np.testing.assert_array_equal(cell_array(grid, "z.imag"), state.z.imag)
    np.testing.assert_array_equal(cell_array(grid, "rec.p"), state.rec["p"])
    np.testing.assert_array_equal(cell_array(grid, "rec.n"), state.rec["n"])
    counts, values = state.modes.counts, state.modes.values
    start = np.cumsum(counts) - counts
    mean = np.array([values[s : s + c].mean() if c else np.nan for s, c in zip(start, counts, strict=True)])
    np.testing.assert_allclose(cell_array(grid, "modes.mean"), mean, rtol=1e-14)
    with h5py.File(res.path) as f:
        assert f["VTKHDF/CellData/T"].attrs["units"] == b"K"
        assert f["VTKHDF/CellData/grad"].attrs["units"] == b"K/m"


def test_chunks_and_brick(cube: tuple[Path, Heat3D, Any], tmp_path: Path) -> None:
    """The file does not depend on the chunk size; --brick moves the trees."""
    h5py = need("h5py")
    path, _, lv = cube
    a = ac.export.to_vtkhdf(path, tmp_path / "a.vtkhdf", chunk_leaves=1)
    b = ac.export.to_vtkhdf(path, tmp_path / "b.vtkhdf")
    with h5py.File(a.path) as fa, h5py.File(b.path) as fb:
        names: list[str] = []
        fa["VTKHDF"].visit(lambda n: names.append(n) if isinstance(fa["VTKHDF"][n], h5py.Dataset) else None)
        for n in names:
            np.testing.assert_array_equal(fa["VTKHDF"][n][()], fb["VTKHDF"][n][()], err_msg=n)
    c = ac.export.to_vtkhdf(path, tmp_path / "c.vtkhdf", brick=(1, 1, 2), units_in_names=True)
    _, grid = read_vtk(c.path)
    lo, hi, _ = cell_bounds(grid)
    want_lo, want_hi = boxes(lv, (1, 1, 2))
    np.testing.assert_array_equal(lo, want_lo)
    np.testing.assert_array_equal(hi, want_hi)
    assert "T [K]" in c.arrays and grid.GetCellData().GetArray("T [K]") is not None
    with pytest.raises(ValueError, match="brick"):
        ac.export.to_vtkhdf(path, tmp_path / "d.vtkhdf", brick=(1, 1, 1))


def test_time_series_read_by_vtk_and_pyvista(run_dir: tuple[Path, list[tuple[Heat3D, Any]]], tmp_path: Path) -> None:
    need("h5py")
    d, states = run_dir
    res = ac.export.to_vtkhdf(d, tmp_path / "run.vtkhdf")
    assert res.series and res.steps == (1, 2, 3) and res.times == (0.25, 0.5, 0.75)
    reader, _ = read_vtk(res.path)
    assert reader.GetNumberOfSteps() == 3
    from vtkmodules.vtkCommonExecutionModel import vtkStreamingDemandDrivenPipeline

    times = reader.GetOutputInformation(0).Get(vtkStreamingDemandDrivenPipeline.TIME_STEPS())
    assert list(times) == [0.25, 0.5, 0.75]
    for k, (state, lv) in enumerate(states):
        _, grid = read_vtk(res.path, step=k)
        assert grid.GetNumberOfCells() == len(lv.tree) == res.num_cells[k]
        lo, hi, _ = cell_bounds(grid)
        want_lo, want_hi = boxes(lv, (2, 1, 1))
        np.testing.assert_array_equal(lo, want_lo)
        np.testing.assert_array_equal(hi, want_hi)
        np.testing.assert_array_equal(cell_array(grid, "T"), state.T)
        np.testing.assert_array_equal(cell_array(grid, "modes.count"), state.modes.counts)
        assert field_value(grid, "step") == [state.step] and field_value(grid, "time") == [state.time]
    pv = need("pyvista")  # pyvista's HDFReader reads the first step; the others through VTK's reader, wrapped
    for k, (state, lv) in enumerate(states):
        mesh = pv.read(os.fspath(res.path)) if k == 0 else pv.wrap(read_vtk(res.path, step=k)[1])
        assert mesh.n_cells == len(lv.tree)
        np.testing.assert_array_equal(mesh.cell_data["T"], state.T)
        bounds = np.array([mesh.get_cell(i).bounds for i in (0, mesh.n_cells - 1)])
        want_lo, want_hi = boxes(lv, (2, 1, 1))
        np.testing.assert_array_equal(bounds[:, 0::2], want_lo[[0, -1]])
        np.testing.assert_array_equal(bounds[:, 1::2], want_hi[[0, -1]])


def test_series_from_a_list_and_a_missing_directory(run_dir: tuple[Path, list[tuple[Heat3D, Any]]], tmp_path: Path) -> None:
    need("h5py")
    d, _ = run_dir
    files = sorted(d.glob("ckpt-*.scda"))[::-1]
    res = ac.export.to_vtkhdf(files, tmp_path / "rev.vtkhdf")
    assert res.steps == (3, 2, 1) and res.series
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        ac.export.to_vtkhdf(tmp_path / "empty", tmp_path / "x.vtkhdf")


# -- yt ---------------------------------------------------------------------------------


def test_to_yt_2d(adv: tuple[Path, Any]) -> None:
    yt = need("yt")
    path, g = adv
    ds = ac.to_yt(path, ranks=3)
    assert ds.dimensionality == 2 and float(ds.current_time) == 1.25 and ds.parameters["step"] == 42
    ad = ds.r[:]
    np.testing.assert_array_equal(ad["connect1", "rho"].d, g.rho)
    assert str(ad["connect1", "rho"].units) == "kg/m**3"
    np.testing.assert_array_equal(ad["connect1", "vel_1"].d, g.vel[:, 1])
    np.testing.assert_array_equal(ad["connect1", "modes.count"].d, g.counts)
    mesh = ds.index.meshes[0]
    corners = mesh.connectivity_coords[mesh.connectivity_indices]
    want_lo, want_hi = boxes(g.leaves, (2, 1))
    np.testing.assert_array_equal(corners.min(axis=1), want_lo)
    np.testing.assert_array_equal(corners.max(axis=1), want_hi)
    # leaf centres: the value of the element that holds each centre is that leaf's
    centres = 0.5 * (want_lo + want_hi)
    for i in np.random.default_rng(0).choice(g.N, 5, replace=False):
        inside = np.all((corners.min(axis=1) <= centres[i]) & (centres[i] < corners.max(axis=1)), axis=1)
        assert np.flatnonzero(inside).tolist() == [i]
        assert ad["connect1", "rho"].d[inside][0] == g.rho[i]
    yt.set_log_level(50)
    frb = yt.SlicePlot(ds, "z", ("connect1", "rho")).frb
    img = np.asarray(frb["connect1", "rho"])
    assert np.isfinite(img).any()


def test_to_yt_3d(cube: tuple[Path, Heat3D, Any]) -> None:
    need("yt")
    path, state, lv = cube
    ds = ac.to_yt(path, length_unit="m")
    assert ds.dimensionality == 3 and float(ds.current_time) == 1.75
    ad = ds.r[:]
    np.testing.assert_array_equal(ad["connect1", "T"].d, state.T.astype(np.float64))
    assert str(ad["connect1", "T"].units) == "K" and str(ad["connect1", "grad_2"].units) == "K/m"
    np.testing.assert_array_equal(ad["connect1", "grad_2"].d, state.grad[:, 2])
    mesh = ds.index.meshes[0]
    corners = mesh.connectivity_coords[mesh.connectivity_indices]
    want_lo, want_hi = boxes(lv, (2, 1, 1))
    np.testing.assert_array_equal(corners.min(axis=1), want_lo)
    np.testing.assert_array_equal(corners.max(axis=1), want_hi)


def test_yt_units() -> None:
    from amrckpt.export._yt import yt_units

    need("unyt")
    assert yt_units("kg m^-3") == "kg*m**-3" and yt_units("1") == yt_units(None) == "dimensionless"
    assert yt_units("furlongs per fortnight squared") == "dimensionless"


# -- the command line ---------------------------------------------------------------


def test_cli_export_and_3d_plot(
    capsys: pytest.CaptureFixture[str],
    run_dir: tuple[Path, list[tuple[Heat3D, Any]]],
    cube: tuple[Path, Heat3D, Any],
    tmp_path: Path,
) -> None:
    need("h5py")
    d, states = run_dir
    out = tmp_path / "run.vtkhdf"
    assert main(["export", os.fspath(d), os.fspath(out), "--ranks", "2"]) == 0
    assert "time series of 3 step(s)" in capsys.readouterr().out
    reader, grid = read_vtk(out, step=2)
    assert reader.GetNumberOfSteps() == 3 and grid.GetNumberOfCells() == len(states[2][1].tree)
    assert cell_array(grid, "rank").max() == 1
    assert main(["export", os.fspath(tmp_path / "nothing"), os.fspath(out)]) == 2
    assert main(["export", os.fspath(cube[0]), os.fspath(out), "--brick", "1,1"]) == 2
    need("matplotlib")
    png = tmp_path / "slice.png"
    assert main(["plot", os.fspath(cube[0]), "--field", "grad", "--slice", "x=0.75", "-o", os.fspath(png)]) == 0
    assert "cut by x = 0.75" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", os.fspath(cube[0]), "--field", "level", "--slice", "z=5", "-o", os.fspath(png)]) == 2


def test_import_amrckpt_stays_light() -> None:
    code = (
        "import sys, amrckpt\n"
        "heavy = [m for m in ('h5py', 'yt', 'vtk', 'vtkmodules', 'pyvista', 'amrckpt.export') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "amrckpt.export.to_vtkhdf\n"
        "heavy = [m for m in ('h5py', 'yt', 'vtk', 'vtkmodules', 'pyvista') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# -- the pictures of docs/visualisation.md ------------------------------------------


def test_docs_pictures_regenerate(tmp_path: Path) -> None:
    """docs/_gen_visualisation.py makes every picture of the page from the examples (rendered off-screen)."""
    for module in ("h5py", "pyvista", "yt", "matplotlib", "discretize"):
        need(module)
    proc = subprocess.run(
        [sys.executable, str(REPO / "docs" / "_gen_visualisation.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (REPO / "docs" / "visualisation.md").read_text(encoding="utf-8")
    for name in ("visualisation-pyvista.png", "visualisation-yt.png", "visualisation-slice3d.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, name
        assert (REPO / "docs" / "img" / name).is_file() and f"img/{name}" in page


def test_points_are_float32_only_where_exact(cube: tuple[Path, Heat3D, Any], tmp_path: Path) -> None:
    h5py = need("h5py")
    from amrckpt.export import float32_exact

    unit = (np.zeros((2, 2)), np.array([[1.0, 1.0], [2.0, 1.0]]))
    assert float32_exact(*unit, 20) and not float32_exact(*unit, 24)
    assert not float32_exact(np.zeros((1, 2)), np.full((1, 2), 0.1), 3)  # 0.1 is no float32
    assert float32_exact(np.array([[-4.0, 2.0]]), np.array([[-2.0, 4.0]]), 10)
    path = cube[0]
    a = ac.export.to_vtkhdf(path, tmp_path / "a.vtkhdf")
    b = ac.export.to_vtkhdf(path, tmp_path / "b.vtkhdf", points="float64")
    with h5py.File(a.path) as fa, h5py.File(b.path) as fb:
        assert fa["VTKHDF/Points"].dtype == np.float32 and fb["VTKHDF/Points"].dtype == np.float64
        np.testing.assert_array_equal(fa["VTKHDF/Points"][()], fb["VTKHDF/Points"][()])


def test_benchmark_quick(tmp_path: Path) -> None:
    need("h5py")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_export.py"), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    result = json.loads(out.read_text())
    assert result["leaves"] >= 2000 and result["ratio_export_over_load"] > 0 and "ratio export / load" in proc.stdout
    assert not list(tmp_path.glob("amrckpt-bench-*"))


class Coupled(ac.CheckpointSchema, name="coupled-viz", version=1):
    step: int = ac.Inline()
    ocean: ac.Forest = ac.Mesh(dim=2, brick=(2, 1), lower=(0.0, 0.0), upper=(2e5, 1e5), units="m")
    ice: ac.Forest = ac.Mesh(dim=2)
    T: ac.CellData = ac.Cells("<f8", mesh="ocean", units="K")
    h: ac.CellData = ac.Cells("<f4", mesh="ice", units="m")


def test_stored_geometry_and_several_meshes(tmp_path: Path) -> None:
    """Trees are placed by the geometry in the file; each mesh exports with its own fields."""
    h5py = need("h5py")
    ocean, ice = random_forest(4, num_trees=2, dim=2, max_level=4), sfc.uniform_leaves(2, num_trees=1, dim=2)
    state = Coupled(
        step=1,
        ocean=ac.Forest(ocean.tree, ocean.level, ocean.x, ocean.y, num_trees=2),
        ice=ac.Forest(ice.tree, ice.level, ice.x, ice.y, num_trees=1),
        T=np.arange(ocean.num_leaves, dtype=float),
        h=np.ones(ice.num_leaves, dtype="<f4"),
    )
    ac.save(state, tmp_path / "c.scda")
    res = ac.export.to_vtkhdf(tmp_path / "c.scda", tmp_path / "ocean.vtkhdf")
    assert res.arrays == ("level", "tree", "T") and res.num_cells == (ocean.num_leaves,)
    _, grid = read_vtk(res.path)
    lo, hi, _ = cell_bounds(grid)
    want_lo, want_hi = boxes(ocean, (2, 1))
    np.testing.assert_allclose(lo[:, :2], want_lo * 1e5, rtol=0, atol=1e-9)  # trees of 1e5 m
    np.testing.assert_allclose(hi[:, :2], want_hi * 1e5, rtol=0, atol=1e-9)
    with h5py.File(res.path) as f:
        assert f["VTKHDF/Points"].dtype == np.float64  # 1e5 m / 2**4 is no float32
        assert f["amrckpt"].attrs["length_units"] == "m"
    ice_res = ac.export.to_vtkhdf(tmp_path / "c.scda", tmp_path / "ice.vtkhdf", mesh="ice")
    assert ice_res.arrays == ("level", "tree", "h") and ice_res.num_cells == (16,)
    with pytest.raises(ValueError, match="no mesh 'sea'"):
        ac.export.to_vtkhdf(tmp_path / "c.scda", tmp_path / "x.vtkhdf", mesh="sea")
    need("yt")
    ds = ac.to_yt(tmp_path / "c.scda")
    assert str(ds.length_unit.units) == "m" and ds.r[:]["connect1", "T"].size == ocean.num_leaves
    assert ac.to_yt(tmp_path / "c.scda", mesh="ice").r[:]["connect1", "h"].size == 16


def test_hp_window_slices_like_the_reader(adv: tuple[Path, Any]) -> None:
    from amrckpt.container import CheckpointReader
    from amrckpt.export._reader import HpWindow

    path, g = adv
    with CheckpointReader(path) as r:
        w = HpWindow(r, window=5)
        for start in range(0, g.N, 3):
            n = min(3, g.N - start)
            want, got = r.read_hp("modes", start, n), w.read_hp("modes", start, n)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
        assert w.read_hp("modes", 0, g.N)[0].sum() == g.counts.sum() and w.manifest is r.manifest


# -- damage: every byte read is checked, in the one pass that reads it ---------------------------


class Layouts(ac.CheckpointSchema, name="export-layouts", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    plain: ac.CellData = ac.Cells("<f8")
    element: ac.CellData = ac.Cells("<f8", shape=(2,), compress=True)
    chunked: ac.CellData = ac.Cells("<f4", chunks=7)
    modes: ac.HpData = ac.HpCells("<f8")
    packed: ac.HpData = ac.HpCells("<f4", compress=True)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2D checkpoint with a section of every layout the export reads (A, V, chunks, hp counts and values)."""
    lv = random_forest(11, num_trees=2, dim=2, max_level=5)
    N = lv.num_leaves
    rng = np.random.default_rng(11)
    counts, packed = rng.integers(0, 4, N), rng.integers(1, 3, N)
    state = Layouts(
        step=3,
        mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2),
        plain=rng.random(N),
        element=rng.standard_normal((N, 2)),
        chunked=rng.random(N).astype("<f4"),
        modes=ac.HpData(rng.standard_normal(int(counts.sum())), counts),
        packed=ac.HpData(rng.random(int(packed.sum())).astype("<f4"), packed),
    )
    path = tmp_path_factory.mktemp("layouts") / "layouts.scda"
    ac.save(state, path)
    return path


SECTIONS = [("mesh", 0), ("plain", 0), ("element", 0), ("chunked", 0), ("modes", 0), ("modes", 1), ("packed", 0), ("packed", 1)]
"""The sections of ``layouts`` (hp fields have two: counts and values, or their chunks)."""


@pytest.mark.parametrize(("name", "k"), SECTIONS)
def test_a_damaged_section_is_refused_naming_it(layouts: Path, tmp_path: Path, name: str, k: int) -> None:
    """One byte changed in the data of any section the export reads: ChecksumError naming it, and no file."""
    need("h5py")
    entries = [e for e in ac.read_info(layouts).index.sections if e.name in {n for n, _ in SECTIONS}]
    assert [(e.name, [x.name for x in entries[:i]].count(e.name)) for i, e in enumerate(entries)] == SECTIONS  # all, in order
    e = [x for x in entries if x.name == name][k]
    raw = bytearray(layouts.read_bytes())
    raw[e.end - 1 - (e.end - e.offset) // 3] ^= 0x10  # in the data, past the header
    bad = tmp_path / "bad.scda"
    bad.write_bytes(bytes(raw))
    out = tmp_path / "bad.vtkhdf"
    for chunk in (7, ac.export.DEFAULT_CHUNK_LEAVES):
        with pytest.raises(ac.errors.ChecksumError, match=f"'{e.name}'") as info:
            ac.export.to_vtkhdf(bad, out, chunk_leaves=chunk)
        assert info.value.section == e.name and not out.exists()
    try:  # unchecked: the damaged value is converted as it is, or its bytes do not fit (not said as damage)
        assert ac.export.to_vtkhdf(bad, out, verify=False).num_cells
    except ac.errors.AmrckptError as exc:
        assert not isinstance(exc, ac.errors.ChecksumError) and name in ("element", "chunked", "modes", "packed")


# -- shared corner points ---------------------------------------------------------------


def _datasets(path: Path) -> dict[str, np.ndarray]:
    h5py = need("h5py")
    with h5py.File(path) as f:
        names: list[str] = []
        f["VTKHDF"].visit(lambda n: names.append(n) if isinstance(f["VTKHDF"][n], h5py.Dataset) else None)
        return {n: f["VTKHDF"][n][()] for n in names}


def test_export_cells_are_the_per_leaf_corners(adv: tuple[Path, Any], cube: tuple[Path, Heat3D, Any], tmp_path: Path) -> None:
    """Each cell of the shared-point output is exactly the leaf's corners as the per-leaf layout wrote them."""
    from amrckpt.container import CheckpointReader
    from amrckpt.export import leaf_corners, mesh_geometry

    for path in (adv[0], cube[0]):
        res = ac.export.to_vtkhdf(path, tmp_path / "x.vtkhdf")
        with CheckpointReader(path) as r:
            ms = r.manifest.meshes[0]
            rec = r.read_mesh(0, ms.num_leaves)
            per_leaf = leaf_corners(rec, mesh_geometry(r), ms.maxlevel)
        _, grid = read_vtk(res.path)
        from vtkmodules.util.numpy_support import vtk_to_numpy

        pts = vtk_to_numpy(grid.GetPoints().GetData())
        conn = vtk_to_numpy(grid.GetCells().GetConnectivityArray())
        nv = 1 << ms.dim
        np.testing.assert_array_equal(pts[conn], per_leaf.astype(pts.dtype))
        assert res.num_points == (len(pts),) and len(pts) < nv * ms.num_leaves // 2


def test_points_do_not_depend_on_chunks_or_ranks(adv: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Blocks of 64 leaves: chunks that cut them, and every rank's part of a parallel export, give the same file."""
    from amrckpt.export import _unstructured

    monkeypatch.setattr(_unstructured, "POINT_BLOCK_LEAVES", 64)
    path, g = adv
    want = _datasets(ac.export.to_vtkhdf(path, tmp_path / "a.vtkhdf", ranks=3, chunk_leaves=g.N).path)
    for chunk in (1, 7, 100):
        got = _datasets(ac.export.to_vtkhdf(path, tmp_path / "b.vtkhdf", ranks=3, chunk_leaves=chunk).path)
        for n in want:
            np.testing.assert_array_equal(got[n], want[n], err_msg=f"{n} (chunks of {chunk})")
    assert len(want["Points"]) < 4 * g.N // 2
    h5py = need("h5py")
    steps = _unstructured._survey([path], "first", 3, True, None, None)
    w = _unstructured._Writer(steps, steps[0].arrays, [], False, False, True, None, 30, True)
    for P in (2, 3, 5):  # what each rank of a parallel export writes, on one file: the serial export's datasets
        plan, starts = w.plan(np.array([w.count(r, P) for r in range(P)]))
        with h5py.File(tmp_path / f"p{P}.vtkhdf", "w") as h5:
            sink = w.create(h5, plan)
            totals = [w.write_steps(r, P, sink, plan, starts, prefetch=False) for r in range(P)]
        assert all(t == [len(want["Points"])] for t in totals)
        got = _datasets(tmp_path / f"p{P}.vtkhdf")
        assert sorted(got) == sorted(want)
        for n in want:
            np.testing.assert_array_equal(got[n], want[n], err_msg=f"{n} on {P} ranks")


def test_a_leaf_too_fine_for_float32_makes_float64_points(tmp_path: Path) -> None:
    """Unit trees: leaves of level 23 have float32 corners, one of level 24 makes every point float64 (found while writing)."""
    h5py = need("h5py")

    class Fine(ac.CheckpointSchema, name="fine", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2)

    L = sfc.MAXLEVEL[2]
    for deepest, dtype in ((23, np.float32), (24, np.float64)):
        # a chain of refinements down to the deepest level, in the corner at the origin: 3 leaves per level
        levels = np.arange(1, deepest + 1)
        leaves = [(lev, (c & 1) << (L - lev), (c >> 1) << (L - lev)) for lev in levels[::-1] for c in (1, 2, 3)]
        leaves = [(deepest, 0, 0), *leaves]
        lev, x, y = (np.array(v) for v in zip(*leaves, strict=True))
        order = sfc.sfc_order(np.zeros(len(lev), dtype=np.int32), lev.astype(np.int8), x.astype(np.int32), y.astype(np.int32))
        mesh = ac.Forest(np.zeros(len(lev), dtype=np.int32), lev[order], x[order], y[order], num_trees=1)
        ac.save(Fine(mesh=mesh), tmp_path / "fine.scda")
        res = ac.export.to_vtkhdf(tmp_path / "fine.scda", tmp_path / "fine.vtkhdf", chunk_leaves=5)
        with h5py.File(res.path) as f:
            assert f["VTKHDF/Points"].dtype == dtype
        _, grid = read_vtk(res.path)
        lo, hi, _ = cell_bounds(grid)
        np.testing.assert_array_equal(lo[:, 0], x[order] / 2.0**L)
        np.testing.assert_array_equal(hi[:, 1] - lo[:, 1], 0.5 ** lev[order].astype(np.float64))


def test_the_export_reads_each_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every byte of the checkpoint is read (and CRC'd) once: no second pass to check the CRC32s, none for the levels."""
    need("h5py")
    from amrckpt import scda

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_export import build
    finally:
        sys.path.pop(0)
    state, _ = build(20000, 2)
    path = tmp_path / "b.scda"
    ac.save(state, path)
    read = [0]
    plain, vectored = scda.LocalFile.read, scda.LocalFile.readv

    def counted_read(self: Any, offset: int, nbytes: int) -> bytes:
        read[0] += nbytes
        return plain(self, offset, nbytes)

    def counted_readv(self: Any, pieces: Any) -> None:
        read[0] += sum(b.nbytes for _, b in pieces)
        vectored(self, pieces)

    monkeypatch.setattr(scda.LocalFile, "read", counted_read)
    monkeypatch.setattr(scda.LocalFile, "readv", counted_readv)
    ac.export.to_vtkhdf(path, tmp_path / "b.vtkhdf", chunk_leaves=4096)
    size = path.stat().st_size
    assert size <= read[0] <= size + 64 * 1024, (read[0], size)  # the metadata, read when each reader opens


def test_ranges_in_any_order_are_checked_without_a_second_pass(layouts: Path, tmp_path: Path) -> None:
    """Ranges read twice, overlapping, out of order or leaving gaps: check_crcs reads only what no range read."""
    from amrckpt.container import CheckpointReader

    N = ac.read_info(layouts).manifest.meshes[0].num_leaves
    ranges = [(0, 7), (0, 7), (3, 20), (50, 10), (40, 15), (N - 9, 9)]
    with CheckpointReader(layouts) as r:
        for start, count in ranges:
            r.read_cells("plain", start, count)
            r.read_hp("modes", start, count)
            r.read_cells("chunked", start, count)
        assert {"plain", "modes", "chunked"} <= set(r.check_crcs())
    with CheckpointReader(layouts) as r:
        r.read_cells("plain", 0, 1)
        data = r.sections("plain")[0].raw.data_offset  # leaf i's value at data + 8 i
    raw = bytearray(layouts.read_bytes())
    for at in (data + 8 * (N - 5) + 3, data + 8 * 30 + 1):  # a byte a range read, and one no range read
        bad = bytearray(raw)
        bad[at] ^= 0x04
        (tmp_path / "bad.scda").write_bytes(bytes(bad))
        with CheckpointReader(tmp_path / "bad.scda") as r:
            for start, count in ranges:
                r.read_cells("plain", start, count)
            with pytest.raises(ac.errors.ChecksumError, match="'plain'"):
                r.check_crcs()
    with CheckpointReader(layouts) as r:  # a range that holds the whole field: checked as it is read
        r.read_cells("plain", 0, N)
        assert "plain" in r.check_crcs()
