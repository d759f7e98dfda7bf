"""p4est save files without the library: amrckpt writes and reads them on any P; damaged files are named, never crash."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from forests import random_forest
from hypothesis import given, settings
from hypothesis import strategies as st

import amrckpt as ac
from amrckpt import sfc
from amrckpt.cli import main
from amrckpt.comm import run_threads
from amrckpt.errors import P4estFormatError, SchemaError
from amrckpt.p4est import checkpoint_to_p4est, p4est_to_checkpoint, read_p4est, read_p4est_header, write_p4est

CONNS = {2: sfc.Connectivity.star(), 3: sfc.Connectivity.brick((2, 1, 2), (True, False, False))}


def _forest(dim: int, seed: int = 1) -> tuple[sfc.Leaves, sfc.Connectivity]:
    conn = CONNS[dim]
    return random_forest(dim, conn.num_trees, seed=seed, level=1, rounds=2), conn


def _slice(lv: sfc.Leaves, a: int, b: int, K: int) -> ac.Forest:
    return ac.Forest(lv.tree[a:b], lv.level[a:b], lv.x[a:b], lv.y[a:b], None if lv.z is None else lv.z[a:b], num_trees=K)


def _write(path: Path, dim: int, P: int, data_size: int, save_partition: bool = False) -> tuple[sfc.Leaves, np.ndarray]:
    lv, conn = _forest(dim)
    N = lv.num_leaves
    data = (np.arange(N * data_size) % 251).astype(np.uint8).reshape(N, data_size)

    def body(comm: Any) -> int:
        a, b = N * comm.rank // P, N * (comm.rank + 1) // P
        d = data[a:b] if data_size else None
        return write_p4est(path, _slice(lv, a, b, conn.num_trees), conn, d, comm=comm, save_partition=save_partition)

    run_threads(P, body)
    return lv, data


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("data_size", [0, 7])
def test_written_on_any_P_the_same_bytes_read_on_any_Q(tmp_path: Path, dim: int, data_size: int) -> None:
    digests = set()
    for P in (1, 2, 3, 4):
        path = tmp_path / f"f{P}.p4est"
        lv, data = _write(path, dim, P, data_size)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1
    h = read_p4est_header(path)
    assert h.num_quadrants == lv.num_leaves and h.data_size == data_size and h.saved_partition is None
    assert h.header_bytes() == path.read_bytes()[: h.data_offset] and h.data_offset % 32 == 0
    for Q in (1, 3):

        def read(comm: Any) -> bool:
            pf = read_p4est(path, comm=comm)
            a, b = pf.partition.local_range(comm.rank)
            assert pf.forest == _slice(lv, a, b, CONNS[dim].num_trees)
            assert (pf.data is None) == (data_size == 0)
            if data_size:
                assert np.array_equal(pf.data, data[a:b])  # type: ignore[arg-type]
            return True

        assert all(run_threads(Q, read))


def test_a_saved_partition_is_in_the_header_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "p.p4est"
    lv, _ = _write(path, 2, 3, 4, save_partition=True)
    h = read_p4est_header(path)
    N = lv.num_leaves
    assert h.saved_partition == ac.Partition.uniform(N, 3)
    parts = run_threads(3, lambda comm: read_p4est(path, comm=comm, partition="saved").partition)
    assert all(p == ac.Partition.uniform(N, 3) for p in parts)
    with pytest.raises(SchemaError, match="ranks"):
        run_threads(2, lambda comm: read_p4est(path, comm=comm, partition="saved"))
    ck = tmp_path / "p.scda"
    res = p4est_to_checkpoint(path, ck)
    assert res.run is not None and res.run.writer_size == 3 and (tmp_path / "p.scda.run.json").exists()
    back = tmp_path / "back.p4est"
    run_threads(3, lambda comm: checkpoint_to_p4est(ck, back, comm=comm, partition="writer", save_partition=True))
    assert back.read_bytes() == path.read_bytes()


def test_cli_convert_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "f.p4est"
    _write(src, 3, 1, 16)
    ck, back = tmp_path / "f.scda", tmp_path / "g.p4est"
    assert main(["convert", os.fspath(src), os.fspath(ck), "--from", "p4est"]) == 0
    assert "quadrants, schema p8est" in capsys.readouterr().out
    assert main(["convert", os.fspath(ck), os.fspath(back), "--to", "p4est"]) == 0
    assert back.read_bytes() == src.read_bytes()
    assert main(["convert", os.fspath(ck), os.fspath(back), "--to", "p4est", "--encode"]) == 2
    (tmp_path / "junk.p4est").write_bytes(b"p4est\0\0\0" + b"\1" * 300)
    assert main(["convert", os.fspath(tmp_path / "junk.p4est"), os.fspath(tmp_path / "j.scda"), "--from", "p4est"]) == 1
    err = capsys.readouterr().err
    assert "P4estFormatError" in err and not (tmp_path / "j.scda").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_a_checkpoint_without_a_connectivity(tmp_path: Path) -> None:
    """No geometry: a row of unit trees, p4est's brick (K, 1); boxes (format 2): refused, with the reason."""

    class Row(ac.CheckpointSchema, name="row", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2)

    lv = sfc.uniform_leaves(2, num_trees=3, dim=2)
    ac.save(Row(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=3)), tmp_path / "row.scda")
    checkpoint_to_p4est(tmp_path / "row.scda", tmp_path / "row.p4est")
    assert read_p4est(tmp_path / "row.p4est").connectivity == sfc.Connectivity.brick((3, 1))

    class Boxes(ac.CheckpointSchema, name="boxes", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2, geometry=ac.container.GeometrySpec(tree_lower=[[0, 0]] * 3, tree_upper=[[1, 1]] * 3))

    ac.save(Boxes(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=3)), tmp_path / "boxes.scda")
    with pytest.raises(ac.errors.CheckpointError, match="boxes"):
        checkpoint_to_p4est(tmp_path / "boxes.scda", tmp_path / "boxes.p4est")


_GOOD: dict[str, Any] = {}


def _good(tmp: Path) -> bytes:
    if not _GOOD:
        p = tmp / "good.p4est"
        lv, _ = _write(p, 2, 1, 3)
        _GOOD["bytes"], _GOOD["N"] = p.read_bytes(), lv.num_leaves
    out: bytes = _GOOD["bytes"]
    return out


def test_a_partition_or_pertree_word_with_its_top_bit_set_raises_p4est_format_error(tmp_path: Path) -> None:
    """A count of 2^63 or more (one flipped top bit) is refused before it is cast to int64."""
    good = _good(tmp_path)
    (tmp_path / "good.p4est").write_bytes(good)
    header = read_p4est_header(tmp_path / "good.p4est")
    words = np.concatenate([header.global_first_quadrant[1:], header.pertree[1:]]).astype("<u8").tobytes()
    start = good.index(words)  # the partition, then pertree, each a little-endian uint64
    for w in range(len(words) // 8):
        blob = bytearray(good)
        blob[start + 8 * w + 7] ^= 0x80
        (tmp_path / "bad.p4est").write_bytes(bytes(blob))
        with pytest.raises(P4estFormatError, match="impossible count"):
            read_p4est(tmp_path / "bad.p4est")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_damaged_files_raise_p4est_format_error(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    tmp = tmp_path_factory.mktemp("dmg")
    good = _good(tmp)
    blob = bytearray(good)
    how = data.draw(st.sampled_from(["cut", "flip", "word"]))
    if how == "cut":
        blob = blob[: data.draw(st.integers(0, len(good) - 1))]
    elif how == "flip":
        i = data.draw(st.integers(0, len(good) - 1))
        blob[i] ^= 1 << data.draw(st.integers(0, 7))
    else:  # a header word set to something large: counts that would allocate far more than the file
        i = data.draw(st.sampled_from([48, 56, 64, 72, 80, 88, 96]))
        blob[i : i + 8] = struct.pack("<Q", data.draw(st.sampled_from([2**31 - 1, 2**40, 2**63])))
    path = tmp / "bad.p4est"
    path.write_bytes(bytes(blob))
    try:
        pf = read_p4est(path)
    except P4estFormatError as exc:
        assert exc.section and exc.offset >= -1
        return
    # A flipped bit inside the quadrant data (or one that leaves the forest valid) is not visible in a p4est file.
    assert how == "flip" and len(pf.forest) == _GOOD["N"]


def test_write_p4est_refuses_bad_data(tmp_path: Path) -> None:
    lv, conn = _forest(2)
    forest = _slice(lv, 0, lv.num_leaves, conn.num_trees)
    with pytest.raises(SchemaError, match="rows"):
        write_p4est(tmp_path / "x.p4est", forest, conn, np.zeros((3, 2), np.uint8))

    def differ(comm: Any) -> None:
        N = lv.num_leaves
        a, b = N * comm.rank // 2, N * (comm.rank + 1) // 2
        rows = np.zeros((b - a, 2 + comm.rank), np.uint8)
        write_p4est(tmp_path / "y.p4est", _slice(lv, a, b, conn.num_trees), conn, rows, comm=comm)

    with pytest.raises(SchemaError, match="different sizes"):
        run_threads(2, differ)
    with pytest.raises(SchemaError, match="connectivity"):
        write_p4est(tmp_path / "z.p4est", forest, sfc.Connectivity.unit(2))
    with pytest.raises(ac.errors.ScdaError) as info:
        read_p4est(tmp_path / "missing.p4est")
    assert isinstance(info.value, FileNotFoundError)
