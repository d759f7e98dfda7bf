"""The container layer: reproducible bytes, format-1 golden files, the data model, random access."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from amrckpt import sfc
from amrckpt.comm import run_threads
from amrckpt.container import CheckpointReader, Geometry, read_run_record, run_record_path
from amrckpt.errors import CheckpointError, SchemaError
from amrckpt.manager import EveryNSteps
from amrckpt.testing import CountingComm

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
G = global_state(seed=7, max_level=4)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def uneven(N: int, P: int) -> list[int]:
    """A partition unlike the uniform one: rank 0 holds a third more, the last rank may be empty."""
    if P == 1:
        return [N]
    first = min(N, N // P + N // 3)
    rest = N - first
    return [first] + [rest * (p + 1) // (P - 1) - rest * p // (P - 1) for p in range(P - 1)]


# -- bytes are a function of the state ----------------------------------------


def test_one_state_one_sha256_on_any_P_at_any_time_through_save_and_manager(tmp_path: Path) -> None:
    """P = 1..4, uniform and uneven partitions, two moments, plain save and the manager: one file."""
    digests = {}
    for P in (1, 2, 3, 4):
        for how in ("uniform", "uneven"):
            path = tmp_path / f"{how}-{P}.scda"
            counts = None if how == "uniform" else uneven(G.N, P)
            res = run_threads(P, lambda comm, c=counts, p=path: ac.save(G.for_rank(comm, c), p, comm=comm))
            assert res[0].run.writer_size == P  # what depends on the run is returned, not written
            digests[path.name] = sha256(path)
    time.sleep(1.1)  # a later moment: nothing of the clock is in the file
    later = tmp_path / "later.scda"
    run_threads(2, lambda comm: ac.save(G.for_rank(comm), later, comm=comm))
    digests[later.name] = sha256(later)
    for P in (1, 3):
        d = tmp_path / f"manager-{P}"

        def body(comm: Any, d: Path = d) -> None:
            with ac.CheckpointManager(d, Advection, comm=comm, save_policy=EveryNSteps(1)) as mgr:
                mgr.save(G.step, G.for_rank(comm))

        run_threads(P, body)
        path = d / f"ckpt-{G.step:012d}.scda"
        digests[f"manager-{P}"] = sha256(path)
        run = read_run_record(path)  # the manager keeps the run beside the file
        assert run is not None and run.writer_size == P and run.global_first_quadrant[-1] == G.N  # type: ignore[index]
    assert len(set(digests.values())) == 1, digests


def test_run_record_restores_the_writing_partition(tmp_path: Path) -> None:
    path = tmp_path / "w.scda"
    counts = uneven(G.N, 3)
    run_threads(3, lambda comm: ac.save(G.for_rank(comm, counts), path, comm=comm, run_record=True))
    assert json.loads(run_record_path(path).read_text())["writer_size"] == 3

    def read(comm: Any) -> tuple[int, int]:
        loaded = ac.load(path, Advection, comm=comm, partition="writer")
        lo, hi = loaded.partition.local_range(comm.rank)  # type: ignore[union-attr]
        assert_state_equal(loaded.state, G.local(lo, hi))
        return lo, hi

    bounds = np.concatenate([[0], np.cumsum(counts)])
    assert run_threads(3, read) == [(int(bounds[p]), int(bounds[p + 1])) for p in range(3)]
    with pytest.raises(SchemaError, match="written on 3 ranks; this job has 2"):
        run_threads(2, lambda comm: ac.load(path, Advection, comm=comm, partition="writer"))
    run_record_path(path).unlink()
    with pytest.raises(SchemaError, match=r"writing partition is unknown .*run\.json"):
        ac.load(path, Advection, partition="writer")


# -- format 1 is still read -----------------------------------------------------


@pytest.mark.parametrize("P", [1, 3])
def test_golden_format_1_files_load(P: int) -> None:
    ref = np.load(GOLDEN / "advection2d-seed3.npz")
    path = GOLDEN / f"advection2d-v2-format1-P{P}.scda"
    loaded = ac.load(path, Advection)
    st = loaded.state
    assert loaded.info.manifest.format_version == 1 and loaded.info.provenance is not None
    assert loaded.info.writer_size == P and loaded.info.writer_partition.size == P  # type: ignore[union-attr]
    assert np.array_equal(st.mesh.tree, ref["tree"]) and np.array_equal(st.mesh.x, ref["x"])
    assert np.array_equal(st.rho, ref["rho"]) and np.array_equal(st.vel, ref["vel"])
    assert np.array_equal(st.modes.values, ref["modes"]) and np.array_equal(st.modes.counts, ref["counts"])
    assert ac.verify(path).ok
    if P == 3:
        got = run_threads(3, lambda comm: ac.load(path, Advection, comm=comm, partition="writer").partition)
        assert got[0] == loaded.info.writer_partition


@pytest.mark.parametrize("Q", [1, 2])
def test_golden_format_2_with_the_hp_field_in_a_v_section_loads(Q: int) -> None:
    """Format 2 as first written (an hp field as one V section, no ``layout`` in the manifest) is still read."""
    ref = np.load(GOLDEN / "advection2d-seed3.npz")
    path = GOLDEN / "advection2d-v2-format2-P1.scda"
    got = run_threads(Q, lambda comm: ac.load(path, Advection, comm=comm).state)
    assert ac.read_info(path).manifest.field("modes").layout is None
    st = got[0]
    lo = int(np.sum([len(g.mesh) for g in got[:0]]))
    assert np.array_equal(st.rho, ref["rho"][lo : lo + len(st.mesh)])
    values = np.concatenate([g.modes.values for g in got])
    counts = np.concatenate([g.modes.counts for g in got])
    assert np.array_equal(values, ref["modes"]) and np.array_equal(counts, ref["counts"])
    assert ac.verify(path).ok


def test_golden_format_1_migrates_from_schema_v1(tmp_path: Path) -> None:
    """A format-1 file of schema v1 (big-endian rho, MIME) loads into v2 through a migration."""

    class V2(ac.CheckpointSchema, name="advection2d", version=2):
        step: int = ac.Inline()
        mesh: ac.Forest = ac.Mesh(dim=2)
        rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
        nu: float = ac.Inline(0.0)

    @V2.migration(from_version=1)
    def up(fields: dict[str, Any]) -> dict[str, Any]:
        fields["rho"] = fields["rho"].astype("<f8")
        fields["nu"] = 0.1
        return fields

    ref = np.load(GOLDEN / "advection2d-seed3.npz")
    st = ac.load(GOLDEN / "advection2d-v1-format1-P1.scda", V2).state
    assert st.step == 7 and st.nu == 0.1 and np.array_equal(st.rho, ref["rho"]) and st.rho.dtype == np.dtype("<f8")
    # convert rewrites it in format 2, field for field
    out = tmp_path / "v1-format2.scda"
    ac.container.convert(GOLDEN / "advection2d-v1-format1-P1.scda", out)
    info = ac.read_info(out)
    assert info.manifest.format_version == 2 and info.provenance is None
    assert np.array_equal(ac.load(out, V2).state.rho, ref["rho"])


# -- the data model ----------------------------------------------------------------

PARTICLE = np.dtype([("id", "<i8"), ("x", "<f8", (3,)), ("alive", "?")])


class Rich(ac.CheckpointSchema, name="rich", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    coarse: ac.Forest = ac.Mesh(dim=2, brick=(2, 1), lower=(0.0, 0.0), upper=(2e3, 1e3), units="m")
    fine: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", mesh="coarse", units="kg m^-3")
    phi: ac.CellData = ac.Cells("<f4", mesh="fine")
    particles: np.ndarray = ac.Array(PARTICLE)
    table: np.ndarray = ac.NDArray("<f8", shape=(3, 4))
    profile: np.ndarray = ac.NDArray(">i4")


def rich_global() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    c = sfc.uniform_leaves(2, num_trees=2, dim=2)
    f = sfc.uniform_leaves(3, num_trees=1, dim=2)
    parts = np.zeros(23, dtype=PARTICLE)
    parts["id"] = np.arange(23) * 7
    parts["x"] = rng.standard_normal((23, 3))
    parts["alive"] = rng.random(23) < 0.5
    return {
        "c": c,
        "f": f,
        "rho": rng.random(c.num_leaves),
        "phi": rng.random(f.num_leaves).astype("<f4"),
        "particles": parts,
        "table": np.arange(12, dtype="<f8").reshape(3, 4),
        "profile": np.arange(-5, 6, dtype=">i4"),
    }


RG = rich_global()


def rich_rank(comm: Any, particle_counts: list[int] | None = None) -> Rich:
    P, r = comm.size, comm.rank
    c, f = RG["c"], RG["f"]
    a, b = c.num_leaves * r // P, c.num_leaves * (r + 1) // P
    u, v = f.num_leaves * r // P, f.num_leaves * (r + 1) // P
    counts = particle_counts or [23 * (p + 1) // P - 23 * p // P for p in range(P)]
    lo = sum(counts[:r])
    return Rich(
        step=4,
        time=0.5,
        coarse=ac.Forest(c.tree[a:b], c.level[a:b], c.x[a:b], c.y[a:b], num_trees=2),
        fine=ac.Forest(f.tree[u:v], f.level[u:v], f.x[u:v], f.y[u:v], num_trees=1),
        rho=RG["rho"][a:b],
        phi=RG["phi"][u:v],
        particles=RG["particles"][lo : lo + counts[r]],
        table=RG["table"].copy(),
        profile=RG["profile"].copy(),
    )


@pytest.mark.parametrize("P", [1, 2, 3])
@pytest.mark.parametrize("Q", [1, 2, 4])
def test_two_meshes_arrays_and_replicated_arrays_on_any_P_and_Q(tmp_path: Path, P: int, Q: int) -> None:
    path = tmp_path / "rich.scda"
    run_threads(P, lambda comm: ac.save(rich_rank(comm, [23, *([0] * (P - 1))] if P > 1 else None), path, comm=comm))

    def read(comm: Any) -> bool:
        loaded = ac.load(path, Rich, comm=comm)
        st, parts = loaded.state, loaded.partitions
        a, b = parts["coarse"].local_range(comm.rank)
        u, v = parts["fine"].local_range(comm.rank)
        x, y = parts["particles"].local_range(comm.rank)
        assert (x, y) == (23 * comm.rank // comm.size, 23 * (comm.rank + 1) // comm.size)
        assert np.array_equal(st.rho, RG["rho"][a:b]) and np.array_equal(st.phi, RG["phi"][u:v])
        assert st.particles.dtype == PARTICLE and np.array_equal(st.particles, RG["particles"][x:y])
        assert np.array_equal(st.table, RG["table"]) and st.profile.dtype == np.dtype(">i4")
        assert np.array_equal(st.profile, RG["profile"])
        assert len(st.coarse) == b - a and len(st.fine) == v - u and loaded.partition == parts["coarse"]
        return True

    assert all(run_threads(Q, read))
    m = ac.read_info(path).manifest
    assert [ms.field for ms in m.meshes] == ["coarse", "fine"] and [ms.num_leaves for ms in m.meshes] == [32, 64]
    assert m.field("phi").mesh == "fine" and m.field("particles").count == 23 and m.field("table").shape == [3, 4]
    assert m.field("profile").shape == [11] and m.field("profile").dtype == ">i4"


def test_geometry_is_in_the_file() -> None:
    """A brick is p4est's brick connectivity, its vertices scaled onto lower..upper."""
    m = Rich.__amrckpt_fields__["coarse"]
    g = m.geometry  # type: ignore[attr-defined]
    assert g is not None and g.brick == [2, 1] and g.periodic == [False, False] and g.units == "m"
    assert g.tree_lower is None and g.connectivity is not None
    conn = g.connectivity.to_connectivity(2)
    assert conn.num_trees == 2 and np.array_equal(conn.tree_to_tree, [[0, 1, 0, 0], [0, 1, 1, 1]])
    lo, hi = conn.bounding_boxes()
    assert lo.tolist() == [[0.0, 0.0], [1000.0, 0.0]] and hi.tolist() == [[1000.0, 1000.0], [2000.0, 1000.0]]


def test_geometry_read_back_and_default(tmp_path: Path) -> None:
    path = tmp_path / "g.scda"
    ac.save(rich_rank(ac.comm.SerialComm()), path)
    assert ac.read_info(path).manifest.format_version == 3  # a connectivity in the file
    with CheckpointReader(path) as r:
        geo = r.geometry
        assert geo is not None and geo.brick == (2, 1) and geo.connectivity is not None and geo.boxes_exact
        assert np.array_equal(geo.tree_upper, [[1000.0, 1000.0], [2000.0, 1000.0]])
        fine = Geometry.of(r.manifest.meshes[1])  # none stored: unit trees in a row
        assert np.array_equal(fine.tree_lower, [[0.0, 0.0]]) and np.array_equal(fine.tree_upper, [[1.0, 1.0]])
    b = Geometry.brick_of((2, 2, 1), 3, 3)
    assert b.tree_lower.tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0]]
    with pytest.raises(SchemaError, match="brick"):
        ac.Mesh(dim=2, brick=(2,))


class Star(ac.CheckpointSchema, name="star", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2, geometry=sfc.Connectivity.star(), units="km")
    q: ac.CellData = ac.Cells("<f4")


class Plain(ac.CheckpointSchema, name="plain", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    q: ac.CellData = ac.Cells("<f4")


def test_connectivity_is_format_3_and_meshes_without_one_stay_format_2(tmp_path: Path) -> None:
    """A p4est connectivity in the manifest makes the file format 3; other files keep format 2's bytes."""
    lv = sfc.uniform_leaves(1, num_trees=6, dim=2)
    mesh = ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=6)
    star = ac.save(Star(mesh=mesh, q=np.arange(24, dtype="<f4")), tmp_path / "star.scda")
    assert star.manifest.format_version == 3
    geo = star.manifest.mesh.geometry  # type: ignore[union-attr]
    assert geo is not None and geo.connectivity is not None and geo.units == "km"
    with ac.scda.fopen_read(tmp_path / "star.scda") as f:
        f.fread_section_header()
        raw = json.loads(bytes(f.fread_block_data()))  # type: ignore[arg-type]
    assert "tree_lower" not in raw["meshes"][0]["geometry"] and "tree_to_edge" not in raw["meshes"][0]["geometry"]["connectivity"]
    with CheckpointReader(tmp_path / "star.scda") as r:
        g = r.geometry
        assert g is not None and g.connectivity == sfc.Connectivity.star() and not g.boxes_exact
        pts = g.map_points(np.zeros(4, int), [[0, 0], [1, 0], [0, 1], [1, 1]])
        assert np.allclose(pts, sfc.Connectivity.star().tree_corners()[0])
    plain = ac.save(Plain(mesh=mesh, q=np.arange(24, dtype="<f4")), tmp_path / "plain.scda")
    assert plain.manifest.format_version == 2 and plain.manifest.mesh.geometry is None  # type: ignore[union-attr]
    # A format-2 manifest that claims a connectivity is refused; boxes serialize as format 2 wrote them.
    bad = star.manifest.model_dump() | {"format_version": 2}
    with pytest.raises(ValueError, match="format 3"):
        ac.container.Manifest.model_validate(bad)
    boxes = ac.container.GeometrySpec(tree_lower=[[0.0, 0.0]], tree_upper=[[1.0, 1.0]])
    assert list(json.loads(boxes.model_dump_json())) == ["brick", "tree_lower", "tree_upper", "units", "vertices", "tree_to_vertex"]
    with pytest.raises(ValueError, match="connectivity, or tree_lower"):
        ac.container.GeometrySpec()


def test_mesh_geometry_declarations() -> None:
    """brick= with periodicity and corners, a shell map, and what is refused."""
    per = ac.Mesh(dim=3, brick=(2, 1, 3), periodic=(True, False, True)).metadata[0].geometry
    conn = per.connectivity.to_connectivity(3)
    assert conn == sfc.Connectivity.brick((2, 1, 3), (True, False, True)) and per.periodic == [True, False, True]
    shell = ac.container.GeometrySpec.of_connectivity(
        sfc.Connectivity.shell(), map=ac.container.GeometryMap(kind="p8est shell", R1=1, R2=2)
    )
    g = ac.Mesh(dim=3, geometry=shell).metadata[0].geometry
    assert g.map is not None and g.map.R2 == 2.0
    with pytest.raises(SchemaError, match="a 2D connectivity for a 3D mesh"):
        ac.Mesh(dim=3, geometry=sfc.Connectivity.star())
    with pytest.raises(ValueError, match="R1 < R2"):
        ac.container.GeometryMap(kind="p8est shell", R1=2, R2=1)
    with pytest.raises(SchemaError, match="lower < upper"):
        ac.Mesh(dim=2, brick=(2, 2), lower=(0, 0), upper=(1, 0))


def test_replicated_and_distributed_arrays_are_checked(tmp_path: Path) -> None:
    def differ(comm: Any) -> Any:
        st = rich_rank(comm)
        if comm.rank == 1:
            st.table = st.table + 1.0
        return ac.save(st, tmp_path / "x.scda", comm=comm)

    with pytest.raises(SchemaError, match="field 'table' differs between ranks"):
        run_threads(2, differ)
    assert not (tmp_path / "x.scda").exists()
    st = rich_rank(ac.comm.SerialComm())
    with pytest.raises(SchemaError, match=r"field 'table': shape \(4, 3\)"):
        st.table = np.zeros((4, 3))
        ac.save(st, tmp_path / "y.scda")


def test_inline_fields_always_load_with_fields(tmp_path: Path) -> None:
    path = tmp_path / "a.scda"
    ac.save(G.local(0, G.N), path)
    st = ac.load(path, Advection, fields=["rho"]).state
    assert st.step == G.step and st.time == G.time and np.array_equal(st.rho, G.rho)
    assert "vel" not in st.__dict__ or st.__dict__.get("vel") is None


def test_every_rank_passing_the_whole_mesh_is_named(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match=r"every rank passed the same \d+ leaves.*not the whole mesh"):
        run_threads(3, lambda comm: ac.save(G.local(0, G.N), tmp_path / "w.scda", comm=comm))
    assert not (tmp_path / "w.scda").exists()


def test_unknown_kind_and_missing_count_are_refused(tmp_path: Path) -> None:
    from fuzz.harness import edit_checkpoint

    path = tmp_path / "a.scda"
    ac.save(rich_rank(ac.comm.SerialComm()), path)
    raw = path.read_bytes()

    def kind(doc: Any) -> Any:
        doc["fields"][0]["kind"] = "teapot"
        return doc

    def count(doc: Any) -> Any:
        next(f for f in doc["fields"] if f["name"] == "particles")["count"] = None
        return doc

    for edit, msg in ((kind, "the manifest is not valid: Input should be 'inline'"), (count, "no element count")):
        bad = tmp_path / "bad.scda"
        bad.write_bytes(edit_checkpoint(raw, "amrckpt manifest", edit))
        with pytest.raises(CheckpointError, match=msg):
            ac.load(bad, Rich)


# -- random access by leaf range ------------------------------------------------------


@pytest.mark.parametrize("compress", [False, True])
def test_ranges_of_leaves_on_one_rank(tmp_path: Path, compress: bool) -> None:
    class A(ac.CheckpointSchema, name="advection2d", version=2):
        step: int = ac.Inline()
        time: float = ac.Inline(units="s")
        params: dict[str, Any] = ac.Block()
        mesh: ac.Forest = ac.Mesh(dim=2, compress=compress)
        rho: ac.CellData = ac.Cells("<f8", compress=compress)
        vel: ac.CellData = ac.Cells("<f8", shape=(2,), compress=compress)
        modes: ac.HpData = ac.HpCells("<f8", compress=compress)

    path = tmp_path / "r.scda"
    st = G.local(0, G.N)
    ac.save(A(**{**dict(st), "params": {"cfl": 0.4}}), path)
    off = np.concatenate([[0], np.cumsum(G.counts)])
    with CheckpointReader(path) as r:
        for lo, n in ((0, G.N), (3, 17), (G.N - 5, 5), (G.N, 0)):
            rec = r.read_mesh(lo, n)
            assert np.array_equal(rec["x"], G.leaves.x[lo : lo + n]) and np.array_equal(rec["level"], G.leaves.level[lo : lo + n])
            assert np.array_equal(r.read_cells("vel", lo, n), G.vel[lo : lo + n])
            counts, values = r.read_hp("modes", lo, n)
            assert np.array_equal(counts, G.counts[lo : lo + n]) and np.array_equal(values, G.modes[off[lo] : off[lo + n]])
        with pytest.raises(ValueError, match="not inside"):
            r.read_cells("rho", G.N - 1, 2)


def test_ranges_are_checked_against_the_index(tmp_path: Path) -> None:
    """A range read of a damaged field raises ChecksumError at check_crcs; the undamaged fields pass."""
    path = tmp_path / "d.scda"
    ac.save(G.local(0, G.N), path)
    e = ac.read_info(path).index.entry("rho")
    raw = bytearray(path.read_bytes())
    raw[e.end - 40] ^= 0x01  # a data byte of rho
    path.write_bytes(bytes(raw))
    with CheckpointReader(path) as r:
        r.read_cells("vel", 0, 5)
        assert "vel" in r.check_crcs()
        r.read_cells("rho", 0, 5)
        with pytest.raises(ac.errors.ChecksumError, match="'rho'"):
            r.check_crcs()
    with CheckpointReader(path, verify=False) as r:
        r.read_cells("rho", 0, 5)
        assert r.check_crcs() == ()


# -- layouts of issue 18: hp counts + values, chunked compression ------------------------


class Layouts(ac.CheckpointSchema, name="layouts", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", chunks=7)  # chunks of 7 leaves straddle every partition
    vel: ac.CellData = ac.Cells("<f4", shape=(3,), chunks=1000, level=6)
    modes: ac.HpData = ac.HpCells("<f8")  # layout "counts", u1
    wide: ac.HpData = ac.HpCells("<i2")  # counts above 255: u2
    big: ac.HpData = ac.HpCells("u1", compress="element")  # per-element compression: one V section
    packed: ac.HpData = ac.HpCells("<i2", compress=True, chunks=7)  # counts and values in chunks of 7 leaves: two V sections
    particles: ac.CellData = ac.Array("<i8", chunks=5)


def _layouts_global() -> dict[str, Any]:
    rng = np.random.default_rng(18)
    N = G.N
    x = np.linspace(0.0, 1.0, N)
    wide_counts = np.where(np.arange(N) % 11 == 0, 300, np.arange(N) % 3).astype(np.int64)
    big_counts = (np.arange(N) % 4) * 100
    return {
        "rho": np.sin(7 * x),
        "vel": rng.standard_normal((N, 3)).astype("<f4"),
        "wide_counts": wide_counts,
        "wide": rng.integers(-999, 999, int(wide_counts.sum())).astype("<i2"),
        "big_counts": big_counts,
        "big": np.repeat(np.arange(N, dtype=np.uint8), big_counts),
        "particles": np.arange(40, dtype="<i8") * 3,
    }


LG = _layouts_global()


def _layouts_rank(comm: Any, counts: list[int] | None = None) -> Layouts:
    P, r = comm.size, comm.rank
    counts = counts or [G.N * (p + 1) // P - G.N * p // P for p in range(P)]
    lo, hi = sum(counts[:r]), sum(counts[: r + 1])
    st = G.local(lo, hi)

    def hp(name: str, counts_: np.ndarray) -> ac.HpData:
        off = np.concatenate([[0], np.cumsum(counts_)])
        return ac.HpData(LG[name][off[lo] : off[hi]], counts_[lo:hi])

    plo, phi = 40 * r // P, 40 * (r + 1) // P
    return Layouts(
        step=3,
        mesh=st.mesh,
        rho=LG["rho"][lo:hi],
        vel=LG["vel"][lo:hi],
        modes=st.modes,
        wide=hp("wide", LG["wide_counts"]),
        big=hp("big", LG["big_counts"]),
        packed=hp("wide", LG["wide_counts"]),
        particles=LG["particles"][plo:phi],
    )


def test_layouts_one_sha256_on_any_P_and_read_on_any_Q(tmp_path: Path) -> None:
    """Chunked fields and hp counts + values: one file for P = 1..4 (uniform and uneven), read back on Q = 1..3."""
    digests = {}
    for P in (1, 2, 3, 4):
        for how in ("uniform", "uneven"):
            path = tmp_path / f"{how}-{P}.scda"
            counts = None if how == "uniform" else uneven(G.N, P)
            run_threads(P, lambda comm, c=counts, p=path: ac.save(_layouts_rank(comm, c), p, comm=comm))
            digests[path.name] = sha256(path)
    assert len(set(digests.values())) == 1, digests
    path = tmp_path / "uniform-1.scda"
    m = ac.read_info(path).manifest
    assert [(f.name, f.section, f.layout, f.count_dtype, f.chunk) for f in m.fields if f.layout] == [
        ("rho", "V", "chunks", None, 7),
        ("vel", "V", "chunks", None, 1000),
        ("modes", "A", "counts", "u1", None),
        ("wide", "A", "counts", "<u2", None),
        ("packed", "V", "chunks", "<u2", 7),
        ("particles", "V", "chunks", None, 5),
    ]
    assert m.field("big").layout is None and m.field("big").section == "V"
    assert "layout" not in m.field("big").model_dump_json()  # fields in one section keep format 2's bytes
    for Q in (1, 2, 3):
        got = run_threads(Q, lambda comm: ac.load(path, Layouts, comm=comm).state)
        assert np.array_equal(np.concatenate([g.rho for g in got]), LG["rho"])
        assert np.array_equal(np.concatenate([g.vel for g in got]), LG["vel"])
        assert np.array_equal(np.concatenate([g.particles for g in got]), LG["particles"])
        for name, want in (("wide", "wide"), ("big", "big"), ("packed", "wide")):
            assert np.array_equal(np.concatenate([getattr(g, name).values for g in got]), LG[want])
            assert np.array_equal(np.concatenate([getattr(g, name).counts for g in got]), LG[f"{want}_counts"])
        assert np.array_equal(np.concatenate([g.modes.values for g in got]), G.modes)
    assert ac.verify(path).ok
    with CheckpointReader(path) as r:
        for lo, n in ((0, G.N), (3, 17), (G.N - 5, 5), (G.N, 0), (6, 1)):
            assert np.array_equal(r.read_cells("rho", lo, n), LG["rho"][lo : lo + n])
            assert np.array_equal(r.read_cells("vel", lo, n), LG["vel"][lo : lo + n])
            off = np.concatenate([[0], np.cumsum(LG["wide_counts"])])
            for name in ("wide", "packed"):
                counts, values = r.read_hp(name, lo, n)
                assert np.array_equal(counts, LG["wide_counts"][lo : lo + n]) and np.array_equal(
                    values, LG["wide"][off[lo] : off[lo + n]]
                )


def test_hp_counts_widened_on_a_helper_thread_equal_the_serial_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The int64 copy of an hp field's counts, made on a helper thread while the values are read, is the same array."""
    import threading

    from amrckpt.container import _sections

    path = tmp_path / "layouts.scda"
    run_threads(1, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    want = run_threads(2, lambda comm: ac.load(path, Layouts, comm=comm).state)
    where: list[str] = []
    real = _sections.pool

    def watched(threads: int) -> Any:
        p = real(threads)

        class Watched:
            def submit(self, fn: Any, *args: Any) -> Any:
                return p.submit(lambda: (where.append(threading.current_thread().name), fn(*args))[1])

        return Watched()

    monkeypatch.setattr(_sections, "_WIDEN_LATER", 1)
    monkeypatch.setattr(_sections, "pool", watched)
    monkeypatch.setenv("AMRCKPT_THREADS", "2")
    got = run_threads(2, lambda comm: ac.load(path, Layouts, comm=comm).state)
    assert len(where) == 4 and all(name.startswith("amrckpt-work") for name in where)  # modes and wide, on both ranks
    for g, w in zip(got, want, strict=True):
        for name in ("modes", "wide"):
            assert getattr(g, name).counts.dtype == np.int64
            assert getattr(g, name) == getattr(w, name)


def test_layouts_survive_convert(tmp_path: Path) -> None:
    src, dst = tmp_path / "a.scda", tmp_path / "b.scda"
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), src, comm=comm))
    from amrckpt.container import convert

    convert(src, dst, compress="decode")
    st = ac.load(dst, Layouts).state
    assert np.array_equal(st.rho, LG["rho"]) and np.array_equal(st.wide.values, LG["wide"])
    assert np.array_equal(st.big.values, LG["big"])


@pytest.mark.parametrize("name", ["the same name", "a hard link", "a symbolic link"])
def test_convert_and_rewrite_refuse_to_write_over_their_source(tmp_path: Path, name: str) -> None:
    """A file would be overwritten in place while it is read: every rank refuses alike, and nothing is written."""
    from amrckpt import scda
    from amrckpt.container import convert
    from amrckpt.errors import ScdaArgumentError

    src = tmp_path / "a.scda"
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), src, comm=comm))
    dst = {"the same name": src, "a hard link": tmp_path / "hard.scda", "a symbolic link": tmp_path / "soft.scda"}[name]
    if name == "a hard link":
        dst.hardlink_to(src)
    elif name == "a symbolic link":
        dst.symlink_to(src)
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    for fn in (convert, scda.rewrite):

        def body(comm: Any, fn: Any = fn) -> str:
            try:
                fn(src, dst, comm=comm, compress="decode")
            except ScdaArgumentError as exc:
                return str(exc)
            return "written"

        got = run_threads(3, body)
        assert len(set(got)) == 1 and "itself; write to another name" in got[0], got
        assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert np.array_equal(ac.load(src, Layouts).state.rho, LG["rho"])


def test_convert_and_rewrite_of_a_missing_source_say_it_is_missing(tmp_path: Path) -> None:
    """The same-file check passes a missing source on to the open, which names it (not an error of the check)."""
    from amrckpt import scda
    from amrckpt.container import convert
    from amrckpt.errors import ScdaFileNotFoundError

    dst = tmp_path / "out.scda"
    dst.write_bytes(b"an existing file")
    for fn in (convert, scda.rewrite):

        def body(comm: Any, fn: Any = fn) -> str:
            try:
                fn(tmp_path / "missing.scda", dst, comm=comm)
            except ScdaFileNotFoundError as exc:
                return f"{type(exc).__name__} {exc.errno} {'missing.scda' in str(exc)}"
            return "written"

        assert run_threads(2, body) == ["ScdaFileNotFoundError 2 True"] * 2
    assert dst.read_bytes() == b"an existing file"


def test_chunks_and_per_element_compression_exclude_each_other() -> None:
    with pytest.raises(SchemaError, match="exclude each other"):
        ac.Cells("<f8", compress="element", chunks=10)
    with pytest.raises(SchemaError, match="positive int"):
        ac.Cells("<f8", chunks=0)
    with pytest.raises(SchemaError, match="element"):
        ac.Cells("<f8", compress="zstd")
    with pytest.raises(SchemaError, match="element"):
        ac.Mesh(compress="chunks")


class _Compressed(ac.CheckpointSchema, name="compressed", version=1):
    """compress=True on a mesh, cells (chunks given and not) and an array."""

    mesh: ac.Forest = ac.Mesh(dim=2, compress=True)
    rho: ac.CellData = ac.Cells("<f8", compress=True)
    vel: ac.CellData = ac.Cells("<f4", shape=(2,), compress=True, chunks=7)
    part: ac.CellData = ac.Array("<i8", compress=True)


def _compressed_state(lo: int, hi: int, plo: int, phi: int) -> _Compressed:
    lv = random_forest_leaves()
    s = np.linspace(0.0, 1.0, lv.num_leaves)
    return _Compressed(
        mesh=ac.Forest(lv.tree[lo:hi], lv.level[lo:hi], lv.x[lo:hi], lv.y[lo:hi], num_trees=2),
        rho=np.sin(7 * s)[lo:hi],
        vel=np.stack([s, s * s], axis=1).astype("<f4")[lo:hi],
        part=np.arange(1000, dtype="<i8")[plo:phi],
    )


def random_forest_leaves() -> Any:
    from _support import random_forest

    return random_forest(3, num_trees=2, dim=2, max_level=6)


def test_compress_true_is_chunks_on_every_kind_and_the_bytes_do_not_depend_on_P(tmp_path: Path) -> None:
    """compress=True: the mesh, cells and arrays in shuffled, deflated chunks; one file for P = 1..3; loads under any P."""
    N = random_forest_leaves().num_leaves
    digests = set()
    for P in (1, 2, 3):
        path = tmp_path / f"c{P}.scda"

        def save(comm: Any, path: Path = path, P: int = P) -> None:
            r = comm.rank
            lo, hi = N * r // P, N * (r + 1) // P
            ac.save(_compressed_state(lo, hi, 1000 * r // P, 1000 * (r + 1) // P), path, comm=comm)

        run_threads(P, save)
        digests.add(sha256(path))
    assert len(digests) == 1
    fields = {f.name: f for f in CheckpointReader(tmp_path / "c1.scda").manifest.fields}
    assert {k: (f.layout, f.chunk, f.compressed) for k, f in fields.items()} == {
        "mesh": ("chunks", ac.container.DEFAULT_CHUNK, False),
        "rho": ("chunks", ac.container.DEFAULT_CHUNK, False),
        "vel": ("chunks", 7, False),
        "part": ("chunks", ac.container.DEFAULT_CHUNK, False),
    }
    want = _compressed_state(0, N, 0, 1000)
    got = run_threads(2, lambda comm: ac.load(tmp_path / "c1.scda", _Compressed, comm=comm).state)
    assert np.array_equal(np.concatenate([g.rho for g in got]), want.rho)
    assert np.array_equal(np.concatenate([g.vel for g in got]), want.vel)
    assert np.array_equal(np.concatenate([g.part for g in got]), want.part)
    assert np.array_equal(np.concatenate([g.mesh.to_records() for g in got]), want.mesh.to_records())
    back = ac.load(tmp_path / "c1.scda").state  # schemaless: the chunks of the mesh come back from the manifest
    assert np.array_equal(back.mesh.x, want.mesh.x)


class _Element(ac.CheckpointSchema, name="element", version=1):
    """compress="element" on every kind that has it: the scda paper's per-element convention."""

    mesh: ac.Forest = ac.Mesh(dim=2, compress="element")
    rho: ac.CellData = ac.Cells("<f8", compress="element")
    vel: ac.CellData = ac.Cells("<f4", shape=(2,), compress="element", level=3)
    part: ac.CellData = ac.Array("<i8", compress="element")
    modes: ac.HpData = ac.HpCells("<f8", compress="element")


ELEMENT_SHA256 = "949db9ba44bb1e1affd6f7db7617fcee3a0bc023a910562bd71512023cc3c011"
"""The file of :class:`_Element`'s state as ``compress=True`` wrote it before ``True`` meant chunks (commit 3ed2e3f)."""


def test_compress_element_writes_the_bytes_of_the_per_element_convention(tmp_path: Path) -> None:
    """compress="element" gives, byte for byte, the file that compress=True wrote with the per-element convention."""
    lv = sfc.uniform_leaves(3, num_trees=2, dim=2)
    n = lv.num_leaves
    s = np.linspace(0.0, 1.0, n)
    counts = np.arange(n) % 4
    st = _Element(
        mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2),
        rho=np.sin(7 * s),
        vel=np.stack([s, s * s], axis=1).astype("<f4"),
        part=np.arange(5, dtype="<i8"),
        modes=ac.HpData(np.cos(np.arange(int(counts.sum()), dtype=float)), counts),
    )
    path = tmp_path / "element.scda"
    ac.save(st, path)
    assert sha256(path) == ELEMENT_SHA256
    back = ac.load(path, _Element).state
    assert np.array_equal(back.rho, st.rho) and np.array_equal(back.modes.values, st.modes.values)


@pytest.mark.parametrize(
    ("field", "part", "Q"),
    [("rho", 0, 1), ("rho", 0, 3), ("wide", 0, 2), ("wide", 1, 1), ("modes", 0, 2), ("packed", 0, 2), ("packed", 1, 3)],
)
def test_a_damaged_layout_section_is_a_checksum_error_on_every_rank(tmp_path: Path, field: str, part: int, Q: int) -> None:
    """A byte flipped in a chunk, in hp counts or in hp values: ChecksumError on every rank, naming the field."""
    from amrckpt.errors import ChecksumError

    path = tmp_path / "d.scda"
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    e = [x for x in ac.read_info(path).index.sections if x.name == field][part]
    raw = bytearray(path.read_bytes())
    raw[e.end - 40] ^= 0x5A  # inside the data (the last 32 bytes may be padding)
    path.write_bytes(bytes(raw))

    def body(comm: Any) -> str:
        with pytest.raises(ChecksumError) as info:
            ac.load(path, Layouts, comm=comm)
        return str(info.value)

    assert all(field in msg for msg in run_threads(Q, body))


def test_chunked_data_of_the_wrong_size_on_one_rank_is_refused_on_every_rank(tmp_path: Path) -> None:
    from amrckpt.container._chunks import write_chunks
    from amrckpt.errors import ScdaArgumentError

    def body(comm: Any) -> str:
        with ac.scda.fopen_write(tmp_path / "w.scda", b"x", comm=comm) as f:
            data = np.zeros(10 if comm.rank else 9)  # rank 0 holds one value too few
            with pytest.raises(ScdaArgumentError) as info:
                write_chunks(f, data, ac.scda.Share.of([10, 10, 10], comm.rank), 8, 7, b"rho")
            return str(info.value)

    assert all("rank 0" in m for m in run_threads(3, body))  # raised on every rank, naming the one at fault


def test_ranges_of_layouts_are_checked_against_the_index(tmp_path: Path) -> None:
    """read_hp of layout "counts" checks both its sections at check_crcs; read_cells of chunks its section."""
    path = tmp_path / "d.scda"
    run_threads(1, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    values = ac.read_info(path).index.sections
    e = [x for x in values if x.name == "wide"][1]
    raw = bytearray(path.read_bytes())
    raw[e.end - 40] ^= 0x01  # a byte of the values, not of the counts
    path.write_bytes(bytes(raw))
    with CheckpointReader(path) as r:
        r.read_cells("rho", 0, 5)
        r.read_hp("modes", 0, 5)
        assert {"rho", "modes"} <= set(r.check_crcs())
        r.read_hp("wide", 3, 4)
        with pytest.raises(ac.errors.ChecksumError, match="'wide'"):
            r.check_crcs()


CHUNK_PARTS = [
    [37],
    [0, 37],
    [37, 0],
    [10, 27],
    [3, 3, 31],  # ranks with fewer than K leaves: a chunk spans three ranks
    [1, 0, 2, 0, 34],  # empty ranks inside a chunk
    [7, 7, 7, 16],  # every rank starts a chunk: no relay for counts lists
    [0, 0, 0, 37],
    [36, 1, 0, 0],
    [2, 1, 1, 33],
]


@pytest.mark.parametrize("counts", CHUNK_PARTS)
def test_write_chunks_bytes_do_not_depend_on_the_partition(tmp_path: Path, counts: list[int]) -> None:
    """The heads reach a chunk's first rank from neighbour to neighbour; the bytes are those of one rank."""
    from amrckpt.container._chunks import write_chunks
    from amrckpt.scda import Share

    K, E = 7, 8
    data = np.arange(37, dtype="<f8") ** 1.5

    def body(comm: Any, counts: list[int], path: Path) -> int:
        r = comm.rank
        lo, hi = sum(counts[:r]), sum(counts[: r + 1])
        cc = CountingComm(comm)
        with ac.scda.fopen_write(path, b"x", comm=cc) as f:
            before = cc.total
            write_chunks(f, data[lo:hi], Share.of(counts, r), E, K, b"rho")
            return cc.total - before

    ref = tmp_path / "ref.scda"
    run_threads(1, body, [37], ref)
    path = tmp_path / "p.scda"
    ncoll = run_threads(len(counts), body, counts, path)
    assert path.read_bytes() == ref.read_bytes()
    relay = len(counts) > 1  # the heads of the chunks are relayed whenever there are several ranks
    # The call's first allreduce (the call tag: write_chunks is called alone here, not inside a save), [the relay],
    # the exscan of the compressed sizes, the agreement; then fwrite_varray's 3 (not deferred here)
    assert ncoll == [(len(counts) > 1) + relay + 2 + 3] * len(counts)


def test_a_format_2_brick_keeps_its_row_major_numbering(tmp_path: Path) -> None:
    """Boxes per tree, as Mesh(brick=(4, 2)) wrote them in format 2 (row-major): read as they were written."""
    lo = [[float(k % 4), float(k // 4)] for k in range(8)]
    old = ac.container.GeometrySpec(brick=[4, 2], tree_lower=lo, tree_upper=[[x + 1, y + 1] for x, y in lo])

    class OldBrick(ac.CheckpointSchema, name="old brick", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2, geometry=old)

    lv = sfc.uniform_leaves(0, num_trees=8, dim=2)
    res = ac.save(OldBrick(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=8)), tmp_path / "old.scda")
    assert res.manifest.format_version == 2
    with CheckpointReader(tmp_path / "old.scda") as r:
        g = r.geometry
        assert g is not None and g.connectivity is None and g.tree_lower[2].tolist() == [2.0, 0.0]  # row-major
        assert g.map_points([2], [[0.5, 0.5]])[0].tolist() == [2.5, 0.5, 0.0]
    new = Geometry.of(_mesh_spec_of_brick())
    assert new.tree_lower[2].tolist() == [0.0, 1.0]  # Mesh(brick=(4, 2)) now: p4est's Morton order


def _mesh_spec_of_brick() -> Any:
    from amrckpt.container import MeshSpec

    geo = ac.Mesh(dim=2, brick=(4, 2)).metadata[0].geometry
    return MeshSpec(field="mesh", dim=2, num_trees=8, curve="morton", maxlevel=30, record=[], geometry=geo)


def test_hp_counts_of_ranges_read_no_values(tmp_path: Path) -> None:
    """read_hp_counts gives read_hp's counts on every hp layout (counts, one V section, chunks), without the values' bytes."""
    path = tmp_path / "d.scda"
    run_threads(1, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    with CheckpointReader(path) as r:
        for name in ("modes", "wide", "big", "packed"):
            for lo, n in ((0, G.N), (3, 17), (G.N - 5, 5), (G.N, 0), (8, 1)):
                assert np.array_equal(r.read_hp_counts(name, lo, n), r.read_hp(name, lo, n)[0])
        with pytest.raises(ValueError, match="not hp"):
            r.read_hp_counts("rho", 0, 1)
        assert {"modes", "wide", "big", "packed"} <= set(r.check_crcs())


def test_a_damaged_chunk_read_in_part_is_a_checksum_error(tmp_path: Path) -> None:
    """A range read decodes its chunks with their Adler-32: a flipped byte in a chunk it reads is the field's ChecksumError."""
    path = tmp_path / "d.scda"
    run_threads(1, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    e = next(x for x in ac.read_info(path).index.sections if x.name == "rho")
    raw = bytearray(path.read_bytes())
    raw[e.end - 48] ^= 0x01  # a byte of the last chunk's stream
    path.write_bytes(bytes(raw))
    with CheckpointReader(path) as r:
        r.read_cells("rho", 0, 7)  # the first chunk: intact
        with pytest.raises(ac.errors.ChecksumError, match="'rho'"):
            r.read_cells("rho", G.N - 3, 3)
