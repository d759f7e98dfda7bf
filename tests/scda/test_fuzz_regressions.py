"""One test per crash that fuzzing found (tests/fuzz/campaign.py), each on its minimal input.

Each input is built here from a valid file by the one change that mattered,
so the test says what the damage was; the acceptable outcome is an error of
amrckpt's tree (or, for the command line, exit status 1 and our message).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz.harness import Fuzzy, _fuzzy_state, edit_checkpoint

import amrckpt as ac
from amrckpt import restart, scda
from amrckpt.cli import main
from amrckpt.errors import AmrckptError, CheckpointError, ScdaDecodeError


def _cli(*argv: Any) -> tuple[int, str]:
    """Exit status and everything printed (stdout, then stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue() + err.getvalue()


def _read_all(path: Path) -> None:
    with scda.fopen_read(path) as f:
        while (h := f.fread_section_header(decode=True)) is not None:
            if h.type == "B":
                f.fread_block_data()
            elif h.type == "A":
                f.fread_array_data([h.elem_count])


@pytest.mark.parametrize("kind", ["A", "B"])
@pytest.mark.parametrize("U", [2**64, 10**26 - 1])
def test_compressed_section_with_a_u_entry_beyond_64_bits(tmp_path: Path, kind: str, U: int) -> None:
    """Crash 1: OverflowError in np.full / np.array when the U entry of an 'A/B compressed scda 00' header
    held 20 to 26 digits (U >= 2**64).  Now rejected when the header is read: deflate expands at most
    1032-fold, so U cannot exceed 1032 times the file's size."""
    p = tmp_path / "u.scda"
    with scda.fopen_write(p) as f:
        if kind == "A":
            f.fwrite_array(np.arange(6, dtype="<u8"), [6], 8, b"a", encode=True)
        else:
            f.fwrite_block(b"0123456789" * 3, b"b", encode=True)
    blob = bytearray(p.read_bytes())
    at = 128 + 64  # the U entry: the data of the inline section that starts the pair
    assert blob[at : at + 2] == b"U "
    blob[at : at + 32] = scda.count_entry(b"U", U, "unix")
    p.write_bytes(bytes(blob))
    with pytest.raises(ScdaDecodeError, match="cannot come from a file"):
        _read_all(p)
    with pytest.raises(ScdaDecodeError, match="cannot come from a file"):
        scda.scan(p)
    code, text = _cli("verify", "--no-progress", p)
    assert code == 1 and "cannot come from a file" in text and "Traceback" not in text
    # A U the file can hold is still read to the end (and then found wrong by the decoder).
    blob[at : at + 32] = scda.count_entry(b"U", 9, "unix")
    p.write_bytes(bytes(blob))
    with pytest.raises(ScdaDecodeError, match="announces"):
        _read_all(p)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    p = tmp_path_factory.mktemp("ck") / "c.ckpt"
    ac.save(_fuzzy_state(3, 1), p)
    return p.read_bytes()


def _set_field(name: str, key: str, value: Any) -> Any:
    def edit(doc: Any) -> Any:
        for fs in doc["fields"]:
            if fs["name"] == name:
                fs[key] = value
        return doc

    return edit


@pytest.mark.parametrize("shape", [[2**40], [10**6, 10**6], [3]])
def test_cells_shape_in_the_manifest_does_not_size_an_allocation(tmp_path: Path, checkpoint: bytes, shape: list[int]) -> None:
    """Crash 2: ValueError "array is too big" (or a MemoryError, or gigabytes allocated) in restart.load when
    a manifest (with correct CRC32s) gave a cell field a huge per-leaf shape: the array was allocated from
    the manifest's shape before the file's element size was compared.  Now compared first."""
    p = tmp_path / "shape.ckpt"
    p.write_bytes(edit_checkpoint(checkpoint, "amrckpt manifest", _set_field("rho", "shape", shape)))
    assert restart.verify(p).ok  # every CRC32 is right: only the manifest's meaning is wrong
    for verify in (True, False):
        with pytest.raises(CheckpointError, match="'rho' has 8-byte values in the file"):
            restart.load(p, Fuzzy, verify=verify)


def test_every_regression_input_is_an_amrckpt_error_for_every_reader(tmp_path: Path, checkpoint: bytes) -> None:
    """The inputs above, given to every reader of the harness: only acceptable outcomes."""
    from fuzz.harness import READERS, run_target

    p = tmp_path / "x.ckpt"
    p.write_bytes(edit_checkpoint(checkpoint, "amrckpt manifest", _set_field("vel", "shape", [2**40])))
    for name, target in READERS.items():
        assert run_target(name, target, p, p.stat().st_size) is None, name
    with pytest.raises(AmrckptError):
        restart.load(p, Fuzzy)


@pytest.mark.parametrize("num_leaves", [2**31, 10**6, 9])
@pytest.mark.parametrize("partition", ["uniform", "weighted"])
def test_num_leaves_in_the_manifest_does_not_size_an_allocation(
    tmp_path: Path, checkpoint: bytes, num_leaves: int, partition: str
) -> None:
    """Crash 3: MemoryError ("Unable to allocate 26.0 GiB") in restart.load when a manifest (with correct
    CRC32s) gave num_leaves = 2**31 for a file of 8 leaves: the mesh records, and for a weighted partition
    the leaf weights, were allocated from the manifest's count.  Now every leaf section's N is compared
    with num_leaves first."""
    p = tmp_path / "leaves.ckpt"

    def edit(doc: Any) -> Any:
        doc["meshes"][0]["num_leaves"] = num_leaves
        return doc

    p.write_bytes(edit_checkpoint(checkpoint, "amrckpt manifest", edit))
    with pytest.raises(CheckpointError, match=f"has 8 leaves in the file, the manifest {num_leaves}"):
        restart.load(p, Fuzzy, partition=partition)  # type: ignore[arg-type]


def test_weighted_partition_with_a_huge_cell_shape(tmp_path: Path, checkpoint: bytes) -> None:
    """Crash 4: OverflowError in restart.load(partition="weighted") when a manifest gave a cell field the
    shape [2**63]: the bytes per leaf (a Python int beyond int64) were added to an int64 array.  Now
    refused when they exceed the file's size."""
    p = tmp_path / "w.ckpt"
    p.write_bytes(edit_checkpoint(checkpoint, "amrckpt manifest", _set_field("vel", "shape", [2**63])))
    with pytest.raises(CheckpointError, match="more than the file holds"):
        restart.load(p, Fuzzy, partition="weighted")
    with pytest.raises(CheckpointError, match="'vel' has 8-byte values in the file"):
        restart.load(p, Fuzzy)


@pytest.mark.parametrize("end", [2**31, 10**30])
def test_verify_of_an_index_entry_beyond_the_file(tmp_path: Path, checkpoint: bytes, end: int) -> None:
    """Crash 5 (memory): restart.verify and `amrckpt verify` allocated a 64 MiB read buffer for a
    10 KB file whose index (with a correct CRC32 in the footer) said that a section ends at byte 2**31:
    the CRC pass read every range as the index gave it.  Now a range not inside the file is reported
    as a problem, and nothing is read for it."""
    from fuzz.harness import READERS, run_target

    p = tmp_path / "end.ckpt"

    def edit(doc: Any) -> Any:
        doc["sections"][0]["end"] = end
        return doc

    p.write_bytes(edit_checkpoint(checkpoint, None, edit))
    rep = restart.verify(p)
    texts = [q.message for q in rep.problems]
    assert not rep.ok and any("'file header' (bytes 0.." in x and "is not inside the file" in x for x in texts)
    for name in ("restart.verify", "cli verify"):
        assert run_target(name, READERS[name], p, p.stat().st_size) is None
    code, text = _cli("verify", "--no-progress", p)
    assert code == 1 and "is not inside the file" in text


@pytest.mark.parametrize("shape", [[10**30], [2**63], [2**40, 3]])
def test_hp_shape_beyond_the_file(tmp_path: Path, checkpoint: bytes, shape: list[int]) -> None:
    """Crash 6: OverflowError in restart.load when a manifest gave an hp field (values of (2,) >i4) the
    shape [10**30]: the bytes per value, a Python int beyond 64 bits, went into np.uint64.  Now refused
    when one value would be larger than the file."""
    p = tmp_path / "hp.ckpt"
    p.write_bytes(edit_checkpoint(checkpoint, "amrckpt manifest", _set_field("pairs", "shape", shape)))
    for partition in ("uniform", "weighted"):
        with pytest.raises(CheckpointError, match="more than the file holds"):
            restart.load(p, Fuzzy, partition=partition)  # type: ignore[arg-type]
