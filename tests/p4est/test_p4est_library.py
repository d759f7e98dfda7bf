"""amrckpt against the real libp4est (Debian's libp4est-dev, p4est 2.2 with Open MPI): tests/p4est/p4est_tool.c.

The C tool saves forests with p4est's own functions (p4est_save_ext on 1 to 3 Open MPI processes, with and without
data and partition) on the connectivities below; amrckpt converts them to checkpoints and back, and p4est loads
what amrckpt wrote and compares it (p4est_is_equal with data, p4est_connectivity_is_equal).  The tool runs as its own
process, on the system's Open MPI; amrckpt runs here, serially or on threads.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from p4est import build

import amrckpt as ac
from amrckpt import sfc
from amrckpt.comm import run_threads
from amrckpt.errors import P4estFormatError
from amrckpt.p4est import checkpoint_to_p4est, p4est_to_checkpoint, read_p4est, write_p4est

REASON = build.skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the real libp4est is not available: {REASON}")

CONNECTIVITIES = {
    2: ["unit", "brick:3,2:10", "periodic", "star", "moebius", "corner", "pillow", "rotwrap", "cubed", "disk"],
    3: ["unit", "brick:2,3,2:101", "periodic", "rotcubes", "shell", "sphere", "twocubes", "twowrap", "rotwrap"],
}
CASES = [(dim, name) for dim, names in CONNECTIVITIES.items() for name in names]
DATA = {0: 0, 1: 8, 2: 3, 3: 16}  # data sizes, by case number modulo 4


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _equal(dim: int, a: Path, b: Path, data_size: int) -> None:
    out = build.run(dim, "equal", a, b, str(data_size))
    assert "connectivity_is_equal 1 is_equal 1" in out, out


@pytest.mark.parametrize(("dim", "name"), CASES, ids=[f"{d}d-{n}" for d, n in CASES])
def test_p4est_file_to_checkpoint_and_back_byte_for_byte(tmp_path: Path, dim: int, name: str) -> None:
    """p4est_save_ext (no partition) -> checkpoint -> p4est file: the same bytes; p4est loads it and compares equal."""
    k = CASES.index((dim, name))
    ds = DATA[k % 4]
    src = tmp_path / "saved.p4est"
    build.run(dim, "save", name, "1", str(ds), str(k + 1), "0", src)
    ck = tmp_path / "forest.scda"
    res = p4est_to_checkpoint(src, ck)
    m = res.manifest
    assert m.schema_name == ("p4est" if dim == 2 else "p8est") and m.format_version == 3
    assert [fs.name for fs in m.fields] == ["p4est", "mesh", *(["data"] if ds else [])]
    back = tmp_path / "back.p4est"
    checkpoint_to_p4est(ck, back)
    assert back.read_bytes() == src.read_bytes()
    _equal(dim, src, back, ds)
    # The connectivity in the checkpoint is p4est's, and its geometry places every tree by its vertices.
    conn = read_p4est(src).connectivity
    with ac.container.CheckpointReader(ck) as r:
        assert r.geometry is not None and r.geometry.connectivity == conn
    # Read on 3 ranks (threads) and written again: the same checkpoint and the same p4est file.
    ck3, back3 = tmp_path / "forest3.scda", tmp_path / "back3.p4est"
    run_threads(3, lambda comm: p4est_to_checkpoint(src, ck3, comm=comm))
    run_threads(3, lambda comm: checkpoint_to_p4est(ck3, back3, comm=comm))
    assert _sha(ck3) == _sha(ck) and back3.read_bytes() == src.read_bytes()


@pytest.mark.parametrize(("dim", "name", "np_"), [(2, "star", 2), (3, "rotcubes", 3), (2, "brick:3,2:10", 3)])
def test_saved_partition_goes_to_the_run_record_and_back(tmp_path: Path, dim: int, name: str, np_: int) -> None:
    """p4est_save_ext on several Open MPI processes, with the partition: it goes to the run record, and comes back."""
    if build.mpirun() is None:
        pytest.skip("Open MPI's mpirun.openmpi is not installed (apt-get install openmpi-bin)")
    src, ck, back = tmp_path / "part.p4est", tmp_path / "part.scda", tmp_path / "back.p4est"
    build.run(dim, "save", name, "2", "4", "7", "1", src, np=np_)
    res = p4est_to_checkpoint(src, ck)
    saved = read_p4est(src).header.saved_partition
    assert saved is not None and saved.size == np_
    run = ac.container.read_run_record(ck)
    assert run is not None and run.writer_size == np_ and run.global_first_quadrant == saved.global_first_quadrant.tolist()
    assert res.partition == saved
    # Without the partition p4est's "saved on 1 process" file; with it, on as many ranks, the bytes p4est wrote.
    run_threads(np_, lambda comm: checkpoint_to_p4est(ck, back, comm=comm, partition="writer", save_partition=True))
    assert back.read_bytes() == src.read_bytes()
    flat = tmp_path / "flat.p4est"
    checkpoint_to_p4est(ck, flat)
    _equal(dim, src, flat, 4)
    parts = run_threads(np_, lambda comm: ac.load(ck, comm=comm, partition="writer").partition)
    assert all(p == saved for p in parts)


@pytest.mark.parametrize("dim", [2, 3])
def test_a_brick_checkpoint_exports_p4est_new_brick(tmp_path: Path, dim: int) -> None:
    """A checkpoint of Mesh(brick=...) made in Python loads in p4est with p4est_connectivity_new_brick's connectivity."""
    shape, periodic = ((4, 2), (True, False)) if dim == 2 else ((2, 1, 3), (False, True, True))

    class Brick(ac.CheckpointSchema, name="brick", version=1):
        mesh: ac.Forest = ac.Mesh(dim=dim, brick=shape, periodic=periodic)
        q: ac.CellData = ac.Cells("<f8")

    K = int(np.prod(shape))
    lv = sfc.uniform_leaves(2, num_trees=K, dim=dim)
    mesh = ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=K)
    ck = tmp_path / "brick.scda"
    ac.save(Brick(mesh=mesh, q=np.arange(len(mesh), dtype="<f8")), ck)
    out = tmp_path / "brick.p4est"
    checkpoint_to_p4est(ck, out, data_field="q")
    flags = "".join("1" if p else "0" for p in periodic)
    name = f"brick:{','.join(map(str, shape))}:{flags}"
    # p4est's own uniform forest of level 2 on p4est_connectivity_new_brick, compared without data, and the data read back.
    out_nodata = tmp_path / "brick-nodata.p4est"
    checkpoint_to_p4est(ck, out_nodata, data_field=None)
    assert "connectivity_is_equal 1 is_equal 1" in build.run(dim, "check", out_nodata, name, "2", "0", "-1")
    pf = read_p4est(out)
    assert pf.header.data_size == 8 and np.array_equal(pf.data.view("<f8").ravel(), np.arange(len(mesh)))  # type: ignore[union-attr]
    conn_file = tmp_path / "brick.conn"
    build.run(dim, "conn", name, conn_file)
    assert sfc.Connectivity.from_p4est_bytes(conn_file.read_bytes())[0] == sfc.Connectivity.brick(shape, periodic)


def test_builtin_connectivities_equal_p4est_s(tmp_path: Path) -> None:
    """amrckpt's built-ins are p4est's, array for array, and its bytes are p4est_connectivity_save's."""
    ours = {
        (2, "unit"): sfc.Connectivity.unit(2),
        (3, "unit"): sfc.Connectivity.unit(3),
        (2, "periodic"): sfc.Connectivity.periodic(2),
        (3, "periodic"): sfc.Connectivity.periodic(3),
        (2, "star"): sfc.Connectivity.star(),
        (3, "shell"): sfc.Connectivity.shell(),
    }
    for shape in [(1, 1), (2, 1), (1, 3), (3, 2), (5, 3), (4, 4), (1, 1, 1), (2, 3, 1), (3, 2, 2), (4, 3, 5), (1, 1, 4)]:
        for per in {(0,) * len(shape), (1,) * len(shape), (1, 0, 1)[: len(shape)], (0, 1, 0)[: len(shape)]}:
            name = f"brick:{','.join(map(str, shape))}:{''.join(map(str, per))}"
            ours[(len(shape), name)] = sfc.Connectivity.brick(shape, [bool(p) for p in per])
    for dim in (2, 3):
        mine = {name: conn for (d, name), conn in ours.items() if d == dim}
        files = {name: tmp_path / f"{dim}-{name.replace(':', '_').replace(',', '_')}.conn" for name in mine}
        build.run(dim, "conn", *[x for name in mine for x in (name, files[name])])
        for name, conn in mine.items():
            assert files[name].read_bytes() == conn.to_p4est_bytes("2.2"), name
        out = build.run(dim, "checkconn", *[x for name in mine for x in (files[name], name)])
        assert out.count("connectivity_is_equal 1") == len(mine), out
        theirs = {name: tmp_path / f"p{dim}-{k}.conn" for k, name in enumerate(CONNECTIVITIES[dim])}
        build.run(dim, "conn", *[x for name in theirs for x in (name, theirs[name])])
        for f in theirs.values():
            conn, version, nbytes = sfc.Connectivity.from_p4est_bytes(f.read_bytes())
            assert version == "2.2" and nbytes == f.stat().st_size and conn.to_p4est_bytes(version) == f.read_bytes()


def test_check_agrees_with_p4est_connectivity_is_valid(tmp_path: Path) -> None:
    """Single changes to valid connectivities: amrckpt's check and p4est's p4est_connectivity_is_valid agree."""
    rng = np.random.default_rng(11)
    bases = [sfc.Connectivity.star(), sfc.Connectivity.brick((3, 2), (True, False)), sfc.Connectivity.shell()]
    bases += [sfc.Connectivity.brick((2, 2, 2), (True, True, False)), sfc.Connectivity.periodic(3)]
    changed_by_dim: dict[int, list[tuple[sfc.Connectivity, Path, str]]] = {2: [], 3: []}
    for trial in range(80):
        conn = bases[trial % len(bases)]
        arrays: dict[str, Any] = {n: getattr(conn, n) for n in ("vertices", "tree_to_vertex", "tree_to_tree", "tree_to_face")}
        arrays |= {n: getattr(conn, n) for n in ("tree_to_edge", "ett_offset", "edge_to_tree", "edge_to_edge")}
        arrays |= {n: getattr(conn, n) for n in ("tree_to_corner", "ctt_offset", "corner_to_tree", "corner_to_corner")}
        choices = ("tree_to_tree", "tree_to_face", "tree_to_edge", "edge_to_edge", "tree_to_corner", "corner_to_corner")
        present = [n for n in choices if arrays[n] is not None and arrays[n].size]
        name = present[int(rng.integers(0, len(present)))]
        a = arrays[name].copy()
        flat = a.reshape(-1)
        i = int(rng.integers(0, flat.size))
        limit = {
            "tree_to_tree": conn.num_trees,
            "tree_to_face": 2 * conn.dim * (2 if conn.dim == 2 else 4),
            "tree_to_edge": conn.num_edges,
            "edge_to_edge": 24,
            "tree_to_corner": conn.num_corners,
            "corner_to_corner": 1 << conn.dim,
        }[name]
        low = -1 if name in ("tree_to_edge", "tree_to_corner") else 0
        flat[i] = int(rng.integers(low, limit))
        arrays[name] = a
        changed = sfc.Connectivity(conn.dim, **arrays)
        f = tmp_path / f"c{trial}.conn"
        f.write_bytes(changed.to_p4est_bytes("2.2"))
        changed_by_dim[conn.dim].append((changed, f, f"trial {trial}: {name}[{i}] = {flat[i]}"))
    verdicts = []
    for dim, cases in changed_by_dim.items():
        out = build.run(dim, "valid", *[f for _, f, _ in cases]).split()
        theirs = [out[k + 1] == "1" for k in range(len(out)) if out[k] == "valid"]
        assert len(theirs) == len(cases)
        for (changed, _, what), ok in zip(cases, theirs, strict=True):
            assert changed.is_valid() == ok, what
            verdicts.append(ok)
    assert any(verdicts) and not all(verdicts)


def test_p4est_cannot_tell_a_flipped_bit_amrckpt_can(tmp_path: Path) -> None:
    """p4est_load_ext loads a p4est file with a flipped data bit; the checkpoint of the same forest names the section."""
    src = tmp_path / "f.p4est"
    build.run(2, "save", "star", "2", "8", "3", "0", src)
    blob = bytearray(src.read_bytes())
    blob[-3] ^= 0x10
    flipped = tmp_path / "flipped.p4est"
    flipped.write_bytes(bytes(blob))
    assert "quadrants" in build.run(2, "load", flipped, "8")  # p4est: loaded, no complaint
    ck = tmp_path / "f.scda"
    p4est_to_checkpoint(src, ck)
    raw = bytearray(ck.read_bytes())
    entry = ac.read_info(ck).index.entry("data")
    raw[entry.offset + 200] ^= 0x10
    (tmp_path / "g.scda").write_bytes(bytes(raw))
    with pytest.raises(ac.errors.ChecksumError, match="'data'"):
        ac.load(tmp_path / "g.scda")
    # A flipped quadrant coordinate, though, amrckpt sees in the p4est file too.
    blob = bytearray(src.read_bytes())
    start = read_p4est(src).header.data_offset
    blob[start + 20 * 5 + 2] ^= 0x04
    (tmp_path / "h.p4est").write_bytes(bytes(blob))
    with pytest.raises(P4estFormatError, match="quadrants"):
        read_p4est(tmp_path / "h.p4est")


def test_write_p4est_of_a_random_forest_loads_in_p4est(tmp_path: Path) -> None:
    """A forest that p4est did not make (refined in numpy) on p4est's star: p4est loads it and it is valid; data round trip."""
    from forests import random_forest

    lv = random_forest(2, 6, seed=5, level=1, rounds=3)
    forest = ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=6)
    data = np.arange(len(forest) * 5, dtype=np.uint8).reshape(-1, 5)
    out = tmp_path / "r.p4est"

    def write(comm: Any) -> int:
        N = len(forest)
        a, b = N * comm.rank // comm.size, N * (comm.rank + 1) // comm.size
        part = ac.Forest(lv.tree[a:b], lv.level[a:b], lv.x[a:b], lv.y[a:b], num_trees=6)
        return write_p4est(out, part, sfc.Connectivity.star(), data[a:b], comm=comm)

    sizes = run_threads(2, write)
    assert sizes[0] == out.stat().st_size
    assert f"quadrants {len(forest)}" in build.run(2, "load", out, "5")
    _equal(2, out, out, 5)
    back = read_p4est(out)
    assert back.forest == forest and np.array_equal(back.data, data)  # type: ignore[arg-type]
