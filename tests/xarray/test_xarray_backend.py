"""The xarray backend: every field kind lazily, equal to ac.load's arrays; byte ranges; dask chunks; pickling; damage."""

from __future__ import annotations

import collections
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomllib

import amrckpt as ac
from _support import REPO, random_forest
from amrckpt.scda import FileAccess
from amrckpt.testing import CountingLocalFile

xr = pytest.importorskip("xarray")
from amrckpt.xarray import AmrckptBackendEntrypoint, CheckpointSource, leaf_chunk  # noqa: E402
from amrckpt.xarray._arrays import LeafArray  # noqa: E402

ENGINE = AmrckptBackendEntrypoint


class Every(ac.CheckpointSchema, name="every_kind", version=3):
    """Every field kind and layout: inline, block, ndarray, array, mesh in chunks, cells plain/chunks/element, hp in all three."""

    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    params: dict[str, Any] = ac.Block()
    table: np.ndarray = ac.NDArray("<f4", shape=(3, 2))
    mesh: ac.Forest = ac.Mesh(dim=2, brick=(2, 1), compress=True, chunks=64)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f4", shape=(2,), compress=True, chunks=50)
    tag: ac.CellData = ac.Cells("<i2", compress="element")
    modes: ac.HpData = ac.HpCells("<f8")  # layout counts
    packed: ac.HpData = ac.HpCells("<i4", shape=(2,), compress=True, chunks=40)  # layout chunks
    big: ac.HpData = ac.HpCells("u1", compress="element")  # one V section
    particles: ac.CellData = ac.Array("<f8", shape=(3,))


def every_state(seed: int = 3) -> Every:
    lv = random_forest(seed, num_trees=2, dim=2, max_level=6)
    N = lv.num_leaves
    rng = np.random.default_rng(seed)
    i = np.arange(N)

    def hp(dtype: str, counts: np.ndarray, shape: tuple[int, ...] = ()) -> ac.HpData:
        return ac.HpData((rng.standard_normal((int(counts.sum()), *shape)) * 100).astype(dtype), counts)

    return Every(
        step=9,
        time=0.5,
        params={"cfl": 0.4, "names": ["a", "b"]},
        table=np.arange(6, dtype="<f4").reshape(3, 2),
        mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2),
        rho=rng.random(N),
        vel=rng.standard_normal((N, 2)).astype("<f4"),
        tag=(i % 7).astype("<i2"),
        modes=hp("<f8", (i % 4 + 1) ** 2),
        packed=hp("<i4", np.where((i // 30) % 3 == 1, 0, i % 5), (2,)),
        big=hp("u1", (i % 3) * 10),
        particles=rng.standard_normal((25, 3)),
    )


@pytest.fixture(scope="module")
def every(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Every]:
    path = tmp_path_factory.mktemp("xr") / "every.scda"
    st = every_state()
    ac.save(st, path)
    return path, ac.load(path, Every).state


def test_every_field_kind_equals_load(every: tuple[Path, Every]) -> None:
    path, st = every
    with xr.open_dataset(path, engine=ENGINE) as ds:
        rec = st.mesh.to_records()
        for c in ("tree", "level", "x", "y"):
            assert ds[c].dtype == rec[c].dtype and np.array_equal(ds[c].values, rec[c])
        for name in ("rho", "vel", "tag"):
            want = getattr(st, name)
            assert ds[name].dtype == want.dtype and ds[name].dims[0] == "leaf" and np.array_equal(ds[name].values, want)
        assert ds.vel.dims == ("leaf", "vel_dim_0") and ds.rho.attrs["units"] == "kg m^-3"
        for name in ("modes", "packed", "big"):
            want = getattr(st, name)
            assert ds[name].dtype == want.values.dtype and np.array_equal(ds[name].values, want.values)
            assert ds[name].dims[0] == f"{name}_values"
            assert np.array_equal(ds[f"{name}_count"].values, want.counts)
            assert np.array_equal(ds[f"{name}_offsets"].values, np.concatenate([[0], np.cumsum(want.counts)]))
        assert np.array_equal(ds.particles.values, st.particles) and ds.particles.dims == ("particles_element", "particles_dim_0")
        assert np.array_equal(ds.table.values, st.table)
        assert ds.attrs["step"] == 9 and ds.attrs["time"] == 0.5 and ds.attrs["time_units"] == "s"
        assert ds.attrs["schema_name"] == "every_kind" and ds.attrs["schema_version"] == 3
        assert ds.attrs["params"] == '{"cfl": 0.4, "names": ["a", "b"]}'


def test_hp_values_of_one_leaf(every: tuple[Path, Every]) -> None:
    """The ragged pair: a leaf's values are ``values[offsets[k]:offsets[k + 1]]``."""
    path, st = every
    with xr.open_dataset(path, engine=ENGINE) as ds:
        for name in ("modes", "packed", "big"):
            want = getattr(st, name)
            off = np.concatenate([[0], np.cumsum(want.counts)])
            for k in (0, 1, 77, len(st.rho) - 1):
                o = ds[f"{name}_offsets"][k : k + 2].values
                assert np.array_equal(ds[name][o[0] : o[1]].values, want.values[off[k] : off[k + 1]])


def test_centres_and_sizes_of_a_brick(every: tuple[Path, Every]) -> None:
    path, st = every
    rec = st.mesh.to_records()
    side = np.ldexp(1.0, -rec["level"].astype(int))
    with xr.open_dataset(path, engine=ENGINE) as ds:
        M = ds.attrs["amrckpt_maxlevel"]
        assert np.allclose(ds.dx.values, side) and np.allclose(ds.dy.values, side)
        assert np.allclose(ds.x_center.values, rec["tree"] + np.ldexp(rec["x"], -M) + side / 2)  # tree 1 is right of tree 0
        assert np.allclose(ds.y_center.values, np.ldexp(rec["y"], -M) + side / 2)


@pytest.mark.parametrize("name", ["rho", "vel", "tag", "x", "modes_count", "packed_count", "big_count"])
@pytest.mark.parametrize("a,b", [(0, 1), (5, 300), (411, 412), (100, 100)])
def test_leaf_ranges_and_steps(every: tuple[Path, Every], name: str, a: int, b: int) -> None:
    path, _ = every
    with xr.open_dataset(path, engine=ENGINE) as ds:
        whole = ds[name].values
        assert np.array_equal(ds[name].isel(leaf=slice(a, b)).values, whole[a:b])
        assert np.array_equal(ds[name].isel(leaf=slice(b, a, -3)).values, whole[b:a:-3])
        assert np.array_equal(ds[name].isel(leaf=-1).values, whole[-1])


def test_open_reads_metadata_only_and_a_range_its_bytes(tmp_path: Path) -> None:
    """Opening a file of 1e5 leaves reads under 1 MiB; a leaf range of an uncompressed field reads its bytes and headers."""
    path = tmp_path / "big.scda"
    N = 100_000
    lv = random_forest(1, num_trees=2, dim=2, max_level=9, refine=0.9)
    N = lv.num_leaves
    assert N > 50_000

    class Big(ac.CheckpointSchema, name="big", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2)
        rho: ac.CellData = ac.Cells("<f8")
        modes: ac.HpData = ac.HpCells("<f8")

    counts_ = np.full(N, 4)
    ac.save(
        Big(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2), rho=np.arange(N, dtype="<f8"),
            modes=ac.HpData(np.zeros(4 * N), counts_)),
        path,
    )  # fmt: skip
    counts: collections.Counter[str] = collections.Counter()
    access = FileAccess(local_file=CountingLocalFile.over(counts))
    with xr.open_dataset(path, engine=ENGINE, access=access, chunks={}) as ds:
        opened = counts["bytes"]
        assert opened < 1 << 20 and path.stat().st_size > 4 << 20
        a, b = 12_345, 12_345 + 1000
        got = ds.rho.isel(leaf=slice(a, b)).values
        assert np.array_equal(got, np.arange(a, b))
        assert counts["bytes"] - opened < 1000 * 8 + 4096  # the range's values, and the section's header once
        before = counts["bytes"]
        _ = ds.rho.isel(leaf=slice(a, a + 10)).values
        assert counts["bytes"] - before == 10 * 8


def test_chunked_field_reads_only_the_chunks_of_a_range(every: tuple[Path, Every]) -> None:
    path, st = every
    counts: collections.Counter[str] = collections.Counter()
    with xr.open_dataset(path, engine=ENGINE, access=FileAccess(local_file=CountingLocalFile.over(counts))) as ds:
        _ = ds.vel.isel(leaf=slice(0, 1)).values  # the section's headers
        before = counts["bytes"]
        assert np.array_equal(ds.vel.isel(leaf=slice(120, 160)).values, st.vel[120:160])  # chunks 2 and 3 of 50 leaves
        whole = next(e for e in ac.read_info(path).index.sections if e.name == "vel")
        assert counts["bytes"] - before < (whole.end - whole.offset) // 2


def test_preferred_chunks_are_dask_chunks(every: tuple[Path, Every]) -> None:
    path, st = every
    with xr.open_dataset(path, engine=ENGINE, chunks={}, chunk_nbytes=1024) as ds:
        for name in ("rho", "vel", "tag", "tree", "x_center"):
            n = ds[name].encoding["preferred_chunks"]["leaf"]
            assert ds[name].chunks[0][0] == n
        assert ds.vel.encoding["preferred_chunks"]["leaf"] % 50 == 0  # whole compression chunks
        assert ds.rho.encoding["preferred_chunks"]["leaf"] == 1024 // 8  # the widest row: 8 bytes (float64, 2 float32)
        assert np.array_equal(ds.vel.values, st.vel) and float(ds.rho.sum()) == pytest.approx(float(st.rho.sum()), rel=1e-12)
    assert leaf_chunk(8, None) == 8 << 20 and leaf_chunk(8, 16384) == 8 << 20 and leaf_chunk(8, 7) == ((8 << 20) // 7) * 7


def test_datatree_has_a_group_per_mesh(tmp_path: Path) -> None:
    class Two(ac.CheckpointSchema, name="two", version=1):
        fine: ac.Forest = ac.Mesh(dim=2)
        coarse: ac.Forest = ac.Mesh(dim=3)
        a: ac.CellData = ac.Cells("<f8", mesh="fine")
        b: ac.CellData = ac.Cells("<i4", mesh="coarse")
        pts: ac.CellData = ac.Array("<f8")

    f, c = random_forest(2, 2, 2, 4), random_forest(3, 1, 3, 2)
    st = Two(
        fine=ac.Forest(f.tree, f.level, f.x, f.y, num_trees=2), coarse=ac.Forest(c.tree, c.level, c.x, c.y, c.z, num_trees=1),
        a=np.arange(f.num_leaves, dtype=float), b=np.arange(c.num_leaves, dtype="<i4"), pts=np.ones(4),
    )  # fmt: skip
    path = tmp_path / "two.scda"
    ac.save(st, path)
    with xr.open_datatree(path, engine=ENGINE) as tree:
        assert set(tree.groups) == {"/", "/fine", "/coarse"}
        assert np.array_equal(tree["/fine"].a.values, st.a) and np.array_equal(tree["/coarse"].b.values, st.b)
        assert tree["/coarse"].z_center.shape == (c.num_leaves,) and np.array_equal(tree["/"].pts.values, st.pts)
    with xr.open_dataset(path, engine=ENGINE, group="coarse") as ds:
        assert np.array_equal(ds.b.values, st.b) and "a" not in ds
    with pytest.raises(ValueError, match="no group"):
        xr.open_dataset(path, engine=ENGINE, group="nope")


def test_drop_variables_and_guess(every: tuple[Path, Every]) -> None:
    path, _ = every
    with xr.open_dataset(path, engine=ENGINE, drop_variables=["rho", "modes", "params"]) as ds:
        assert "rho" not in ds and "modes" not in ds and "modes_count" in ds and "params" not in ds.attrs
    e = ENGINE()
    assert e.guess_can_open(path) and e.guess_can_open("x.scda") and not e.guess_can_open("x.nc")


def test_source_pickles_without_its_reader(every: tuple[Path, Every]) -> None:
    path, st = every
    with xr.open_dataset(path, engine=ENGINE) as ds:
        arr = ds.rho.variable._data
        while not isinstance(arr, LeafArray):  # xarray's lazy wrappers around the backend array
            arr = arr.array
        arr.source.run(lambda r: r.manifest)  # opened here
        back = pickle.loads(pickle.dumps(arr))
        assert not back.source._cache and back.source.path == str(path)
        assert np.array_equal(back[xr.core.indexing.BasicIndexer((slice(3, 9),))], st.rho[3:9])
    src = CheckpointSource(path)
    assert pickle.loads(pickle.dumps(src)).verify


def test_threads_read_at_once(every: tuple[Path, Every]) -> None:
    path, st = every
    import dask

    with (
        xr.open_dataset(path, engine=ENGINE, chunks={}, chunk_nbytes=256) as ds,
        dask.config.set(scheduler="threads", num_workers=4),
    ):
        assert len(ds.vel.chunks[0]) > 4
        assert np.array_equal(ds.vel.values, st.vel) and np.array_equal(ds.packed_count.values, st.packed.counts)


def test_a_damaged_chunk_is_a_checksum_error_on_read(tmp_path: Path, every: tuple[Path, Every]) -> None:
    path, _ = every
    bad = tmp_path / "bad.scda"
    raw = bytearray(path.read_bytes())
    e = next(x for x in ac.read_info(path).index.sections if x.name == "vel")
    raw[e.end - 40] ^= 0x10  # the last chunk of vel
    bad.write_bytes(bytes(raw))
    with xr.open_dataset(bad, engine=ENGINE) as ds:
        _ = ds.vel.isel(leaf=slice(0, 10)).values  # an intact chunk
        with pytest.raises(ac.errors.ChecksumError, match="'vel'"):
            _ = ds.vel.isel(leaf=slice(-3, None)).values


def test_import_amrckpt_does_not_import_xarray() -> None:
    code = "import sys, amrckpt, amrckpt.export; assert 'xarray' not in sys.modules and 'dask' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_entry_point_is_declared() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["entry-points"]["xarray.backends"] == {"amrckpt": "amrckpt.xarray:AmrckptBackendEntrypoint"}
    assert any(d.startswith("xarray") for d in meta["optional-dependencies"]["analysis"])
    assert "amrckpt[analysis]" in meta["optional-dependencies"]["test"]
