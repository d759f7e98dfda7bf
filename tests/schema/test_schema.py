"""Checkpoint schemas: declaration, save and load, validation, evolution, byte order, integrity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, Params, assert_state_equal, global_state

import amrckpt as ac
from amrckpt import scda
from amrckpt.comm import run_threads
from amrckpt.errors import ChecksumError, IncompleteCheckpointError, SchemaError

G = global_state(seed=1)


def save_on(P: int, path: Path, g: Any = G, counts: list[int] | None = None, **kw: Any) -> list[Any]:
    return run_threads(P, lambda comm: ac.save(g.for_rank(comm, counts), path, comm=comm, **kw))


# -- declaring schemas -------------------------------------------------------


def test_schema_declaration_errors() -> None:
    with pytest.raises(SchemaError, match=r"name=\.\.\., version"):

        class NoName(ac.CheckpointSchema):
            step: int = ac.Inline()

    with pytest.raises(SchemaError, match="exactly one of"):

        class NoKind(ac.CheckpointSchema, name="x", version=1):
            step: int = 3

    with pytest.raises(SchemaError, match="need a Mesh"):

        class NoMesh(ac.CheckpointSchema, name="x", version=1):
            rho: ac.CellData = ac.Cells("<f8")

    with pytest.raises(SchemaError, match=r"meshes a, b: say whose leaves these are \(mesh=\.\.\.\)"):

        class TwoMeshes(ac.CheckpointSchema, name="x", version=1):
            a: ac.Forest = ac.Mesh()
            b: ac.Forest = ac.Mesh()
            rho: ac.CellData = ac.Cells("<f8")

    with pytest.raises(SchemaError, match="mesh='c' is not a Mesh"):

        class WrongMesh(ac.CheckpointSchema, name="x", version=1):
            a: ac.Forest = ac.Mesh()
            rho: ac.CellData = ac.Cells("<f8", mesh="c")

    with pytest.raises(SchemaError, match="58 bytes"):
        type("Long", (ac.CheckpointSchema,), {"__annotations__": {"x" * 59: int}, "x" * 59: ac.Inline()}, name="x", version=1)

    with pytest.raises(SchemaError, match="version"):

        class BadVersion(ac.CheckpointSchema, name="x", version=0):
            step: int = ac.Inline()

    with pytest.raises(SchemaError, match="not a numpy dtype"):
        ac.Cells("float128x")
    with pytest.raises(SchemaError, match="fixed-size"):
        ac.Cells(object)


# -- save and load -----------------------------------------------------------


@pytest.mark.parametrize("P", [1, 2, 3])
@pytest.mark.parametrize("Q", [1, 2, 4])
def test_save_on_P_load_on_Q(tmp_path: Path, P: int, Q: int) -> None:
    path = tmp_path / "ckpt.scda"
    res = save_on(P, path)
    assert res[0].num_leaves == G.N and res[0].nbytes == path.stat().st_size

    def read(comm: Any) -> tuple[int, int]:
        loaded = ac.load(path, Advection, comm=comm)
        lo, hi = loaded.partition.local_range(comm.rank)
        assert_state_equal(loaded.state, G.local(lo, hi))
        assert loaded.info.provenance is None  # format 2: nothing about the run in the file
        assert loaded.info.writer_partition is None  # saved without a run record
        assert {"step", "rho", "modes", "amrckpt manifest"} <= set(loaded.verified)
        return lo, hi

    ranges = run_threads(Q, read)
    assert ranges == [(G.N * q // Q, G.N * (q + 1) // Q) for q in range(Q)]  # p4est_load's uniform split


def test_file_does_not_depend_on_P(tmp_path: Path) -> None:
    """Format 2: the whole file, index and footer included, is byte-identical for any P and partition."""
    blobs = {}
    for P in (1, 2, 3, 4):
        path = tmp_path / f"p{P}.scda"
        save_on(P, path, counts=None if P != 4 else [G.N, 0, 0, 0])
        blobs[P] = path.read_bytes()
    assert len(set(blobs.values())) == 1


def test_weighted_and_explicit_partitions(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.scda"
    save_on(2, path)

    def read(comm: Any, how: Any) -> tuple[int, int]:
        loaded = ac.load(path, Advection, comm=comm, partition=how)
        lo, hi = loaded.partition.local_range(comm.rank)
        assert_state_equal(loaded.state, G.local(lo, hi))
        return lo, hi

    explicit = ac.Partition.from_counts([G.N - 5, 0, 5])
    assert run_threads(3, read, explicit) == [(0, G.N - 5), (G.N - 5, G.N - 5), (G.N - 5, G.N)]
    ranges = run_threads(3, read, "weighted")
    weights = 13 + 8 + 16 + 8 * G.counts  # mesh record, rho, vel, modes of each leaf
    loads = [int(weights[lo:hi].sum()) for lo, hi in ranges]
    assert max(loads) - min(loads) <= 2 * int(weights.max())
    with pytest.raises(SchemaError, match="leaves on"):
        run_threads(2, read, ac.Partition.uniform(G.N, 3))


def test_fields_subset_jumps_through_the_index(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.scda"
    save_on(1, path)
    # Damage 'modes': a subset without it still loads (and verifies) fine.
    e = ac.read_info(path).index.entry("modes")
    blob = bytearray(path.read_bytes())
    blob[(e.offset + e.end) // 2] ^= 0x10
    path.write_bytes(bytes(blob))
    loaded = ac.load(path, Advection, fields=["step", "rho"])
    assert loaded.state.step == 42 and np.array_equal(loaded.state.rho, G.rho)
    assert "modes" not in loaded.state.__dict__ and "modes" not in loaded.verified
    with pytest.raises(ChecksumError, match="'modes'"):
        ac.load(path, Advection)
    with pytest.raises(SchemaError, match="no fields"):
        ac.load(path, Advection, fields=["nope"])


def test_inline_fields_are_readable_text(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.scda"
    save_on(1, path)
    with scda.fopen_read(path) as f:
        f.fread_section_header()  # manifest
        manifest = json.loads(f.fread_block_data().tobytes())  # type: ignore[union-attr]
        h = f.fread_section_header()
        assert (h.type, h.user_string) == ("I", b"step")  # type: ignore[union-attr]
        assert f.fread_inline_data() == b"42".ljust(31) + b"\n"
    assert manifest["values"] == {"step": 42, "time": 1.25}
    assert manifest["fields"][4] == {
        "name": "rho",
        "kind": "cells",
        "section": "A",
        "dtype": "<f8",
        "shape": [],
        "units": "kg m^-3",
        "description": None,
        "compressed": False,
        "native_byteorder": False,
        "mesh": "mesh",
        "count": None,
    }


def test_a_plain_scda_reader_walks_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.scda"
    save_on(2, path)
    names = [s.user_string for s in scda.scan(path).sections]
    assert names == [
        b"amrckpt manifest",
        b"step",
        b"time",
        b"params",
        b"mesh",
        b"rho",
        b"vel",
        b"modes",  # layout "counts": the counts per leaf,
        b"modes",  # then the values
        b"amrckpt index",
        b"amrckpt footer 1",
    ]


# -- validation before writing ----------------------------------------------


def test_invalid_state_raises_on_every_rank_naming_field_and_rank(tmp_path: Path) -> None:
    path = tmp_path / "bad.scda"

    def body(comm: Any, mutate: Any) -> str:
        st = G.for_rank(comm)
        if comm.rank == 1:
            mutate(st)
        try:
            ac.save(st, path, comm=comm)
        except SchemaError as exc:
            assert set(exc.rank_errors) == ({1} if "differs" not in str(exc) else set())
            return str(exc)
        return "no error"

    cases = [
        (lambda st: setattr(st, "rho", st.rho.astype("<f4")), "'rho': dtype <f4"),
        (lambda st: setattr(st, "rho", st.rho[:-1]), "'rho': shape"),
        (lambda st: setattr(st, "vel", st.vel[:, :1]), "'vel': shape"),
        (lambda st: setattr(st, "modes", _drop_last_leaf(st.modes)), "'modes': 43 leaves of values; the mesh has 44"),
        (lambda st: setattr(st, "modes", ac.HpData(st.modes.values.astype("<f4"), st.modes.counts)), "'modes': dtype <f4"),
        (lambda st: setattr(st, "time", 2.5), "'time' differs between ranks"),
    ]
    for mutate, want in cases:
        msgs = run_threads(3, body, mutate)
        if "differs" in want:
            assert all(want in m for m in msgs), msgs
        else:
            assert len(set(msgs)) == 1 and want in msgs[0] and "[rank 1]" in msgs[0], msgs
    assert not path.exists() or path.stat().st_size == 0


def _drop_last_leaf(h: ac.HpData) -> ac.HpData:
    return ac.HpData(h.values[: h.values.shape[0] - int(h.counts[-1])], h.counts[:-1])


def test_global_fields_must_agree_and_leaves_follow_across_ranks(tmp_path: Path) -> None:
    path = tmp_path / "bad.scda"

    def swapped(comm: Any) -> None:  # ranks hold each other's leaves: out of order across ranks
        ac.save(
            G.for_rank(comm, None) if comm.size == 1 else G.local(*[(G.N // 2, G.N), (0, G.N // 2)][comm.rank]), path, comm=comm
        )

    with pytest.raises(SchemaError, match="not in curve order across ranks"):
        run_threads(2, swapped)

    def params(comm: Any) -> None:
        st = G.for_rank(comm)
        st.params = Params(cfl=0.1 * (comm.rank + 1))
        ac.save(st, path, comm=comm)

    with pytest.raises(SchemaError, match="'params' differs between ranks"):
        run_threads(2, params)


def test_inline_too_long_and_mesh_checks(tmp_path: Path) -> None:
    class Long(ac.CheckpointSchema, name="long", version=1):
        label: str = ac.Inline()

    with pytest.raises(SchemaError, match="31"):
        ac.save(Long(label="x" * 40), tmp_path / "l.scda")

    def own_copy() -> Advection:  # a Forest keeps views of the arrays it is given
        st = G.local(0, 10)
        m = st.mesh
        st.mesh = ac.Forest(m.tree.copy(), m.level.copy(), m.x.copy(), m.y.copy(), num_trees=m.num_trees)
        return st

    st = own_copy()
    st.mesh.x[3] += 1  # not aligned to its level
    with pytest.raises(SchemaError, match="not aligned"):
        ac.save(st, tmp_path / "m.scda")
    ac.save(st, tmp_path / "unchecked-ranges.scda", check_mesh=False)  # the opt-out skips the ranges too (p4est's forests)
    st = own_copy()
    st.mesh.level[[2, 5]] = st.mesh.level[[5, 2]]
    st.mesh.x[[2, 5]] = st.mesh.x[[5, 2]]
    st.mesh.y[[2, 5]] = st.mesh.y[[5, 2]]
    ac.save(st, tmp_path / "unchecked.scda", check_mesh=False)  # the opt-out of the local checks
    with pytest.raises(SchemaError, match=r"'mesh': Forest: not a linear forest: leaf 3 .*sfc_order, or pass check_mesh=False"):
        ac.save(st, tmp_path / "m.scda")  # checked by default
    assert not (tmp_path / "m.scda").exists()  # refused before anything was written
    st = own_copy()
    ac.save(st, tmp_path / "ok.scda")  # checked, and remembered: a mesh is not checked twice
    ac.save(st, tmp_path / "ok.scda")
    st.mesh.level[[2, 5]] = st.mesh.level[[5, 2]]  # changed in place after a save that passed
    st.mesh.x[[2, 5]] = st.mesh.x[[5, 2]]
    st.mesh.y[[2, 5]] = st.mesh.y[[5, 2]]
    with pytest.raises(SchemaError, match="not a linear forest: leaf 3"):
        ac.save(st, tmp_path / "m.scda")  # other records: checked again


# -- byte order and evolution -------------------------------------------------


class NativeAdvection(ac.CheckpointSchema, name="advection2d", version=2):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    params: Params = ac.Block()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("f8")  # native byte order
    vel: ac.CellData = ac.Cells("f8", shape=(2,), compress=True)
    modes: ac.HpData = ac.HpCells("f8")


class BigEndianAdvection(ac.CheckpointSchema, name="advection2d", version=2):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    params: Params = ac.Block()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells(">f8")
    vel: ac.CellData = ac.Cells(">f8", shape=(2,), compress=True)
    modes: ac.HpData = ac.HpCells(">f8")


def test_other_byte_order_is_converted(tmp_path: Path) -> None:
    """A file stored big-endian (as a big-endian machine writes a native schema) loads as native data."""
    path = tmp_path / "be.scda"
    ac.save(G.local(0, G.N, BigEndianAdvection), path)  # little-endian arrays are swapped on the way out
    m = ac.read_info(path).manifest
    assert m.field("rho").dtype == ">f8" and not m.field("rho").native_byteorder
    loaded = ac.load(path, NativeAdvection)
    assert loaded.state.rho.dtype == np.dtype("=f8") and np.array_equal(loaded.state.rho, G.rho)
    assert loaded.state.modes.values.dtype == np.dtype("=f8") and np.array_equal(loaded.state.modes.values, G.modes)
    be = ac.load(path, BigEndianAdvection).state
    assert be.rho.dtype.str == ">f8" and np.array_equal(be.rho, G.rho)
    # A native schema writes the machine's order and says so.
    ac.save(G.local(0, G.N, NativeAdvection), tmp_path / "n.scda")
    spec = ac.read_info(tmp_path / "n.scda").manifest.field("rho")
    assert spec.native_byteorder and spec.dtype == np.dtype("=f8").str


class AdvectionV1(ac.CheckpointSchema, name="evolving", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    density: ac.CellData = ac.Cells("<f4")


class AdvectionV3(ac.CheckpointSchema, name="evolving", version=3):
    step: int = ac.Inline()
    nu: float = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")


@AdvectionV3.migration(from_version=1)
def _rename_and_widen(fields: dict[str, Any]) -> dict[str, Any]:
    fields["rho"] = fields.pop("density").astype("<f8")  # renamed, widened
    return fields


@AdvectionV3.migration(from_version=2)
def _add_viscosity(fields: dict[str, Any]) -> dict[str, Any]:
    fields["nu"] = 1e-3  # added with a default
    return fields


class AdvectionV4(ac.CheckpointSchema, name="evolving", version=4):
    step: int = ac.Inline()


def test_migrations_run_in_order(tmp_path: Path) -> None:
    path = tmp_path / "v1.scda"
    lv = G.leaves
    rho32 = G.rho.astype("<f4")

    def write(comm: Any) -> None:
        lo, hi = G.N * comm.rank // comm.size, G.N * (comm.rank + 1) // comm.size
        mesh = ac.Forest(lv.tree[lo:hi], lv.level[lo:hi], lv.x[lo:hi], lv.y[lo:hi], num_trees=2)
        ac.save(AdvectionV1(step=7, mesh=mesh, density=rho32[lo:hi]), path, comm=comm)

    run_threads(2, write)

    def read(comm: Any) -> bool:
        st, part = ac.load(path, AdvectionV3, comm=comm)
        lo, hi = part.local_range(comm.rank)
        return st.nu == 1e-3 and st.rho.dtype == np.dtype("<f8") and np.array_equal(st.rho, rho32[lo:hi].astype("<f8"))

    assert run_threads(3, read) == [True] * 3
    with pytest.raises(SchemaError, match=r"version 1 of schema 'evolving'; AdvectionV4 is version 4.*from version 1 to 2"):
        ac.load(path, AdvectionV4)
    ac.save(AdvectionV4(step=1), tmp_path / "v4.scda")
    with pytest.raises(SchemaError, match="update the program"):
        ac.load(tmp_path / "v4.scda", AdvectionV3)
    with pytest.raises(SchemaError, match="holds schema 'evolving', not 'advection2d'"):
        ac.load(path, Advection)
    with pytest.raises(SchemaError, match="registered twice"):
        AdvectionV3.migration(from_version=1)(lambda f: f)


# -- integrity ----------------------------------------------------------------


def test_bit_flips_are_caught_by_verification(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.scda"
    save_on(2, path)
    good = path.read_bytes()
    index = ac.read_info(path).index
    rng = np.random.default_rng(0)
    for e in index.sections:
        pos = int(rng.integers(e.offset, e.end))
        bad = bytearray(good)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        path.write_bytes(bytes(bad))
        report = ac.verify(path)
        assert not report.ok and any(repr(e.name) in p.message for p in report.problems), (e.name, report.problems)
        # A ChecksumError naming the section, also where the damage broke the section's structure before its bytes
        # were read: the reader then CRCs the section, and damage is the better explanation.
        with pytest.raises(ac.errors.ChecksumError) as info:
            ac.load(path, Advection)
        assert info.value.section == e.name, (pos, e.name, info.value)
    path.write_bytes(good)
    assert ac.verify(path).ok


def test_truncated_files_are_incomplete(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.scda"
    save_on(1, path)
    good = path.read_bytes()
    for cut in sorted({0, 100, 128, 4000, len(good) // 2, len(good) - 96, len(good) - 32, len(good) - 1}):
        path.write_bytes(good[:cut])
        with pytest.raises(IncompleteCheckpointError):  # cut short, the file header included: the save did not finish
            ac.load(path, Advection)
        report = ac.verify(path)
        assert not report.ok and report.problems
    path.write_bytes(good[: len(good) - 96])  # cut exactly at a section boundary: still incomplete
    with pytest.raises(IncompleteCheckpointError, match="footer"):
        ac.load(path, Advection)


def test_json_schemas_in_the_repository_are_current() -> None:
    """schemas/*.json are generated from the pydantic models (python -m amrckpt.schema.jsonschema)."""
    from _support import REPO

    for name, schema in ac.container.json_schemas().items():
        path = REPO / "schemas" / name
        assert path.exists(), f"{path} is missing: run python -m amrckpt.schema.jsonschema"
        assert json.loads(path.read_text()) == schema, f"{path} is stale: run python -m amrckpt.schema.jsonschema"


def test_a_save_crcs_every_byte_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CRC32s of the payloads written as they are (mesh records, rho, the hp values) are started in the helper thread
    and taken by the writer: no byte of the file is CRC'd twice.  A mesh of arrays (packed into records by the helper
    thread while the rest is written) is also CRC'd once as arrays, the key of its order check, unless checks are off."""
    from _support import count_crc_bytes
    from amrckpt import _crc
    from amrckpt.schema import _save

    crcd = count_crc_bytes(monkeypatch, (_crc, "crc32"), (_save, "crc32"))
    state = G.local(0, G.N)
    path = tmp_path / "once.scda"
    ac.save(state, path)
    size = path.stat().st_size
    key = len(state.mesh) * ac.container.mesh_record_dtype(state.mesh.dim).itemsize  # its arrays: as many bytes
    assert crcd[0] <= size + key, (crcd[0], size)  # every byte of the file at most once (vel is compressed: its chunks only)
    crcd[0] = 0
    ac.save(state, path, check_mesh=False)
    assert crcd[0] <= size
    assert_state_equal(ac.load(path, Advection).state, state)
