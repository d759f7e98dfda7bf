"""The ``amrckpt`` command-line tool: every subcommand on real files, in-process and once as a subprocess.

The libsc and reference files are read in place from ``../shared/interop``
(the tests that need them skip with a reason where the folder is absent);
checkpoints and manager directories are written into tmp_path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from _support import REPO, file_entries, interop_params, require_interop
from amrckpt import scda, sfc
from amrckpt.cli import main, safe_text
from amrckpt.comm import run_threads

LIBSC = file_entries("libsc")
REFERENCE = file_entries("reference")
POSITIVE_REFERENCE = [e for e in REFERENCE if e["expect"]["decode_true"] == "ok"]
NEGATIVE_REFERENCE = [e for e in REFERENCE if e["expect"]["decode_true"] != "ok"]


def run(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    """Run the command in-process; return exit status, stdout and stderr."""
    code = main([os.fspath(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def interop(kind: str, entry: dict[str, Any]) -> Path:
    return require_interop() / kind / entry["name"]


def sections_of(path: Path) -> list[tuple[Any, ...]]:
    """Every logical section of a file (decoded): type, user string, N, E, sizes and data."""
    out = []
    with scda.fopen_read(path) as f:
        while (h := f.fread_section_header(decode=True)) is not None:
            sizes = b""
            if h.type == "I":
                data = f.fread_inline_data()
            elif h.type == "B":
                data = f.fread_block_data().tobytes()  # type: ignore[union-attr]
            elif h.type == "A":
                data = f.fread_array_data([h.elem_count]).tobytes()  # type: ignore[union-attr]
            else:
                s = f.fread_varray_sizes([h.elem_count])
                sizes = s.tobytes()  # type: ignore[union-attr]
                data = f.fread_varray_data([h.elem_count], s, f.proc_sizes()).tobytes()  # type: ignore[union-attr]
            out.append((h.type, h.user_string, h.elem_count, h.elem_size, sizes, data))
    return out


def raw_sections(path: Path) -> list[scda.SectionInfo]:
    return scda.scan(path, decode=True, check_padding=True).sections


# -- files written here ---------------------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the Advection schema (one compressed field, an hp field) written by 3 ranks."""
    path = tmp_path_factory.mktemp("ckpt") / "adv.scda"
    g = global_state(3, max_level=4)
    run_threads(3, lambda comm: ac.save(g.for_rank(comm), path, comm=comm, run_record=True))
    return path


@pytest.fixture
def copy(tmp_path: Path, ckpt: Path) -> Path:
    dst = tmp_path / "copy.scda"
    shutil.copyfile(ckpt, dst)
    return dst


class Cube(ac.CheckpointSchema, name="cube", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=3)
    T: ac.CellData = ac.Cells("<f4")


def snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in d.iterdir()}


# -- the parser -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "verify", "convert", "plot", "ls"])
def test_help_of_every_subcommand_teaches(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "example:" in out and f"amrckpt {command}" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], ckpt: Path, tmp_path: Path) -> None:
    assert run(capsys)[0] == 2  # no command
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys, "verify")[0] == 2  # FILE missing
    assert run(capsys, "convert", "--encode", "--decode", ckpt, tmp_path / "o.scda")[0] == 2
    code, _, err = run(capsys, "convert", ckpt, ckpt)
    assert code == 2 and "same file" in err
    code, _, err = run(capsys, "ls", tmp_path / "absent")
    assert code == 2 and "not a directory" in err
    code, _, err = run(capsys, "plot", ckpt, "--field", "nope")
    assert code == 2 and "rho, vel, modes" in err
    code, _, err = run(capsys, "plot", ckpt, "--field", "params")
    assert code == 2 and "block field" in err
    assert run(capsys, "--version")[0] == 0


# -- inspect --------------------------------------------------------------------


@pytest.mark.parametrize("entry", interop_params(LIBSC), ids=lambda e: e["name"])
def test_inspect_libsc_files(capsys: pytest.CaptureFixture[str], entry: dict[str, Any]) -> None:
    path = interop("libsc", entry)
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0 and "scdata0" in out and '"libsc"' in out
    assert all(c == "\n" or " " <= c <= "~" for c in out)  # binary user strings are escaped
    code, out, _ = run(capsys, "inspect", "--json", "--sections", path)
    doc = json.loads(out)
    assert code == 0 and doc["vendor"] == "libsc" and doc["checkpoint"] is None and doc["error"] is None
    assert doc["user_string_hex"] == entry["file_user_string"]["hex"]
    assert len(doc["sections"]) == entry["section_count"]
    for s, m in zip(doc["sections"], entry["sections"], strict=True):
        assert (s["type"], s["offset"], s["end"], s["user_string_hex"]) == (
            m["type"],
            m["offset"],
            m["end"],
            m["user_string"]["hex"],
        )
        assert s["data_nbytes"] == m["payload_len"] and not s["compressed"]
        assert s["raw"][0]["padding"] in ("none", "unix", "other")


def test_inspect_escapes_binary_user_strings(capsys: pytest.CaptureFixture[str]) -> None:
    path = require_interop() / "libsc" / "hdr_len58_binary.scda"
    code, out, _ = run(capsys, "inspect", path)
    user = path.read_bytes()[34:96].split(b" -")[0]
    assert code == 0 and f'user string  "{safe_text(user)}"' in out and "\\x00\\x01\\x02\\x7f\\x80\\xff\\n\\r\\t" in out
    assert safe_text(b'a\\b"\x00\xff\n') == 'a\\\\b\\"\\x00\\xff\\n'


@pytest.mark.parametrize("entry", interop_params(REFERENCE), ids=lambda e: e["name"])
def test_inspect_reference_files(capsys: pytest.CaptureFixture[str], entry: dict[str, Any]) -> None:
    code, out, _ = run(capsys, "inspect", "--json", interop("reference", entry))
    doc = json.loads(out)
    assert code == 0 and doc["line_breaks"] == entry["style"]
    if entry["expect"]["decode_true"] == "ok":
        assert doc["decoded"] and len(doc["sections"]) == entry["section_count"]
    elif not doc["decoded"]:  # a broken pair: listed raw, with the reason
        assert "ScdaDecodeError" in doc["decode_error"] and len(doc["sections"]) == entry["raw_section_count"]
    else:  # broken elements: inspect reads no data (verify finds them)
        assert len(doc["sections"]) == entry["raw_section_count"] - 1 and doc["sections"][0]["compressed"]


def test_inspect_checkpoint_shows_the_manifest(capsys: pytest.CaptureFixture[str], ckpt: Path) -> None:
    code, out, _ = run(capsys, "inspect", ckpt)
    assert code == 0
    for text in ("schema       advection2d v2", "on 3 processes", "step         42", "time         1.25", "complete     yes"):
        assert text in out
    n = ac.read_info(ckpt).manifest.num_leaves
    assert f"leaves       {n} (2D mesh, 2 trees, morton curve)" in out
    assert "vel     cells   V        <f8    (2,)   -        chunks of 16384" in out  # compress=True: chunks
    assert "rho     cells   A        <f8    -      kg m^-3  no" in out
    assert "modes   hp      A+A      <f8    -      -        no" in out  # layout "counts": counts and values
    assert "yes (" in out and '"vel"' in out  # the compressed pair, one logical section
    code, out, _ = run(capsys, "inspect", "--json", ckpt)
    ck = json.loads(out)["checkpoint"]
    assert (ck["schema_name"], ck["schema_version"], ck["num_leaves"], ck["step"], ck["time"]) == ("advection2d", 2, n, 42, 1.25)
    assert ck["writer_size"] == 3 and ck["complete"] and ck["amrckpt_version"] == ac.__version__
    assert [f["name"] for f in ck["fields"]] == ["step", "time", "params", "mesh", "rho", "vel", "modes"]
    assert ck["fields"][6] == {
        "name": "modes",
        "kind": "hp",
        "section": "A",
        "dtype": "<f8",
        "shape": [],
        "units": None,
        "compressed": False,
        "layout": "counts",
    }


def test_inspect_shows_hp_fields_in_chunks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """HpCells(compress=True): two V sections (the counts' chunks, then the values'), shown as one field."""
    from checkpoint_cases import packed_state

    path = tmp_path / "packed.scda"
    st = packed_state()
    ac.save(st.local(0, st.N), path)
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0
    assert "modes  hp      V+V      <f8    -      -      chunks of 7" in out
    assert "wide   hp      V+V      <f4    -      -      chunks of 16384" in out
    code, out, _ = run(capsys, "verify", path)
    assert code == 0


def test_inspect_truncated_checkpoint_lists_what_is_there(capsys: pytest.CaptureFixture[str], copy: Path) -> None:
    vel = ac.read_info(copy).index.entry("vel")
    with open(copy, "r+b") as fh:
        fh.truncate(vel.offset + 200)
    code, out, _ = run(capsys, "inspect", copy)
    assert code == 1
    assert '"rho"' in out and "ERROR        damaged or cut short after 6 sections" in out
    assert "complete     NO" in out  # the manifest is still shown


# -- verify ---------------------------------------------------------------------


def test_verify_every_libsc_and_reference_file(capsys: pytest.CaptureFixture[str]) -> None:
    base = require_interop()
    good = [base / "libsc" / e["name"] for e in LIBSC] + [base / "reference" / e["name"] for e in POSITIVE_REFERENCE]
    code, out, _ = run(capsys, "verify", *good)
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == ["OK"] * len(good)
    for e in NEGATIVE_REFERENCE:
        code, out, _ = run(capsys, "verify", base / "reference" / e["name"])
        assert code == 1 and out.startswith("DAMAGED") and "ScdaDecodeError" in out


def test_verify_checkpoints_good_damaged_truncated(capsys: pytest.CaptureFixture[str], ckpt: Path, tmp_path: Path) -> None:
    info = ac.read_info(ckpt)
    rho = info.index.entry("rho")
    blob = bytearray(ckpt.read_bytes())
    flipped = tmp_path / "flipped.scda"
    blob[rho.offset + 300] ^= 0x04
    flipped.write_bytes(blob)
    cut = tmp_path / "cut.scda"
    cut.write_bytes(ckpt.read_bytes()[: rho.end + 100])
    junk = tmp_path / "junk.scda"
    junk.write_bytes(b"not scda\n" * 40)
    code, out, _ = run(capsys, "verify", ckpt, flipped, cut, junk, tmp_path / "missing.scda")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 5
    assert lines[0].startswith("OK ") and "checkpoint advection2d v2, step 42" in lines[0]
    assert lines[1].startswith("DAMAGED ") and f"section 'rho' (bytes {rho.offset}..{rho.end})" in lines[1]
    assert lines[2].startswith("INCOMPLETE ") and "footer" in lines[2]
    assert lines[3].startswith("NOT-SCDA ") and lines[4].startswith("UNREADABLE ")
    assert run(capsys, "verify", ckpt)[0] == 0
    code, out, _ = run(capsys, "verify", "--json", ckpt, flipped)
    docs = json.loads(out)
    assert code == 1 and [d["status"] for d in docs] == ["OK", "DAMAGED"] and docs[1]["kind"] == "checkpoint"


def test_verify_damaged_plain_scda(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = require_interop() / "reference" / "compressed_small_unix.scda"
    sec = raw_sections(src)[10]  # "compressed V N=4"
    blob = bytearray(src.read_bytes())
    blob[sec.raw[1].data_offset + 40] ^= 0x01  # a base64 character of the first element
    bad = tmp_path / "bad.scda"
    bad.write_bytes(blob)
    code, out, _ = run(capsys, "verify", bad)
    assert code == 1 and out.startswith("DAMAGED ")
    assert f'section 10 (V "compressed V N=4", bytes {sec.offset}..{sec.end})' in out
    cut = tmp_path / "cut.scda"
    cut.write_bytes(src.read_bytes()[:5000])
    code, out, _ = run(capsys, "verify", cut)
    assert code == 1 and out.startswith("INCOMPLETE ") and "ScdaCountError" in out


# -- convert --------------------------------------------------------------------


@pytest.mark.parametrize("entry", interop_params(LIBSC), ids=lambda e: e["name"])
def test_convert_libsc_round_trip(capsys: pytest.CaptureFixture[str], entry: dict[str, Any], tmp_path: Path) -> None:
    src = interop("libsc", entry)
    enc, dec = tmp_path / "enc.scda", tmp_path / "dec.scda"
    assert run(capsys, "convert", "--encode", src, enc)[0] == 0
    assert run(capsys, "convert", "--decode", enc, dec)[0] == 0
    assert run(capsys, "verify", enc, dec)[0] == 0
    want = sections_of(src)
    assert sections_of(enc) == want == sections_of(dec)
    infos = raw_sections(enc)
    assert all(s.compressed == (s.type != "I") for s in infos)
    for s, m in zip(want, entry["sections"], strict=True):
        assert hashlib.sha256(s[5]).hexdigest() == m["payload_sha256"]
    if entry["libsc_quirk"] is None:  # decoding gives back libsc's bytes
        assert dec.read_bytes() == src.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dec.scda", "enc.scda"]  # no temporary file left


@pytest.mark.parametrize("entry", interop_params(POSITIVE_REFERENCE), ids=lambda e: e["name"])
def test_convert_reference_files_to_mime_and_back(
    capsys: pytest.CaptureFixture[str], entry: dict[str, Any], tmp_path: Path
) -> None:
    src = interop("reference", entry)
    mime, unix = tmp_path / "mime.scda", tmp_path / "unix.scda"
    code, out, _ = run(capsys, "convert", "--style", "mime", src, mime)
    assert code == 0 and "mime line breaks" in out
    assert run(capsys, "convert", "--style", "unix", "--decode", mime, unix)[0] == 0
    assert json.loads(run(capsys, "inspect", "--json", mime)[1])["line_breaks"] == "mime"
    pads = {r.padding_form for s in raw_sections(mime) for r in s.raw} - {"none"}
    assert pads <= {"mime"} and mime.read_bytes()[30:32] == b"\r\n"
    assert [s.compressed for s in raw_sections(mime)] == [s.compressed for s in raw_sections(src)]  # kept
    assert not any(s.compressed for s in raw_sections(unix))
    assert sections_of(mime) == sections_of(src) == sections_of(unix)


def test_convert_checkpoint_stays_a_checkpoint(capsys: pytest.CaptureFixture[str], ckpt: Path, tmp_path: Path) -> None:
    enc, dec = tmp_path / "enc.scda", tmp_path / "dec.scda"
    code, out, _ = run(capsys, "convert", "--encode", ckpt, enc)
    # the hp field (layout "counts": two A sections) is copied as it is
    assert code == 0 and "checkpoint of 11 sections" in out and "3 compressed" in out
    code, out, _ = run(capsys, "convert", "--decode", "--style", "mime", "--no-progress", enc, dec)
    assert code == 0 and "3 decompressed" in out  # vel (compress=True: chunks) is copied as it is
    assert run(capsys, "verify", enc, dec)[0] == 0
    want = ac.load(ckpt, Advection).state
    for path, compressed in ((enc, True), (dec, False)):
        assert ac.verify(path).ok
        m = ac.read_info(path).manifest
        assert {f.name: f.compressed for f in m.fields if f.kind not in ("inline", "hp") and f.layout != "chunks"} == dict.fromkeys(
            ["params", "mesh", "rho"], compressed
        )
        assert not m.field("modes").compressed and m.field("vel").layout == "chunks"
        assert_state_equal(ac.load(path, Advection).state, want)
        run_threads(
            2,
            lambda comm, p=path: assert_state_equal(
                ac.load(p, Advection, comm=comm).state, ac.load(ckpt, Advection, comm=comm).state
            ),
        )
    no_fields = {"fields": []}
    assert ac.read_info(dec).manifest.model_copy(update=no_fields) == ac.read_info(ckpt).manifest.model_copy(update=no_fields)


def test_convert_refuses_damaged_checkpoints(capsys: pytest.CaptureFixture[str], copy: Path, tmp_path: Path) -> None:
    rho = ac.read_info(copy).index.entry("rho")
    blob = bytearray(copy.read_bytes())
    blob[rho.offset + 300] ^= 0x04
    copy.write_bytes(blob)
    out_path = tmp_path / "out.scda"
    code, _, err = run(capsys, "convert", "--encode", copy, out_path)
    assert code == 1 and f"section 'rho' (bytes {rho.offset}..{rho.end}) does not match its CRC32" in err
    copy.write_bytes(blob[:-10])
    code, _, err = run(capsys, "convert", copy, out_path)
    assert code == 1 and "IncompleteCheckpointError" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.scda"]  # nothing written, no temporary file


# -- plot -----------------------------------------------------------------------


def test_plot_field_level_rank(
    capsys: pytest.CaptureFixture[str], ckpt: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    for field, extra in (("rho", ["--brick", "2,1"]), ("vel", []), ("modes", []), ("level", []), ("rank", ["--ranks", "5"])):
        code, out, _ = run(capsys, "plot", ckpt, "--field", field, *extra)
        png = tmp_path / f"adv-{field}.png"
        assert code == 0 and f"wrote adv-{field}.png" in out
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "uniform partition on 5 ranks" in out
    code, out, _ = run(capsys, "plot", ckpt, "--field", "rank", "-o", "r.png", "--dpi", "50")
    assert code == 0 and "on 3 ranks" in out and (tmp_path / "r.png").exists()  # default: the writers
    assert run(capsys, "plot", ckpt, "--field", "rho", "--brick", "1,1")[0] == 2  # 2 trees do not fit


def test_plot_refuses_3d_damaged_and_missing_matplotlib(
    capsys: pytest.CaptureFixture[str], copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lv = sfc.uniform_leaves(1, num_trees=1, dim=3)
    cube = tmp_path / "cube.scda"
    ac.save(Cube(step=1, mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=1), T=np.zeros(8, "<f4")), cube)
    code, _, err = run(capsys, "plot", cube, "--field", "T", "--slice", "q")  # 3D checkpoints are drawn as slices (test_export)
    assert code == 2 and "--slice" in err
    rho = ac.read_info(copy).index.entry("rho")
    blob = bytearray(copy.read_bytes())
    blob[rho.offset + 300] ^= 0x04
    copy.write_bytes(blob)
    monkeypatch.chdir(tmp_path)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        code, _, err = run(capsys, "plot", copy, "--field", "rho")
        assert code == 1 and "ChecksumError" in err and "'rho'" in err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    code, _, err = run(capsys, "plot", copy, "--field", "level")
    assert code == 1 and "pip install matplotlib" in err


# -- ls -------------------------------------------------------------------------


def test_ls_manager_directory_read_only(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    g = global_state(5, max_level=3)
    d = tmp_path / "run"
    with ac.CheckpointManager(d, Advection, save_policy=ac.EveryNSteps(10), keep_policy=ac.manager.KeepLast(5), sync=False) as m:
        for step in (10, 20, 30):
            g.step, g.time = step, step / 100
            m.save(step, g.local(0, g.N))
    (d / ".ckpt-000000000040.scda.partial-abc").write_bytes(b"x")  # a save that never finished
    before = snapshot(d)
    code, out, _ = run(capsys, "ls", d)
    assert code == 0 and "* ckpt-000000000030.scda" in out and "a restart takes ckpt-000000000030.scda (step 30)" in out
    assert out.count(" valid (metadata only)\n") == 2 and out.count(" valid (every byte)\n") == 1
    assert ".ckpt-000000000040.scda.partial-abc: a save that did not finish" in out
    assert "the others: footer, index and metadata checked, not their data" in out
    row = next(line for line in out.splitlines() if "ckpt-000000000020.scda" in line)
    size = (d / "ckpt-000000000020.scda").stat().st_size / 1024
    assert row.split()[1:6] == ["20", "0.2", f"{size:.1f}", "KiB", "1"]  # step, time, size, writers
    assert snapshot(d) == before
    newest = d / "ckpt-000000000030.scda"
    newest.write_bytes(newest.read_bytes()[:-40])  # cut short
    code, out, _ = run(capsys, "ls", d)
    assert code == 1 and "* ckpt-000000000020.scda" in out and "INVALID: IncompleteCheckpointError" in out
    blob = bytearray((d / "ckpt-000000000020.scda").read_bytes())
    blob[ac.read_info(d / "ckpt-000000000020.scda").index.entry("rho").offset + 200] ^= 1
    (d / "ckpt-000000000020.scda").write_bytes(blob)  # field data damaged: the metadata still verify
    before = snapshot(d)
    code, out, _ = run(capsys, "ls", d)  # without --verify, the restart target is still checked byte for byte
    assert code == 1 and "* ckpt-000000000010.scda" in out and "a restart takes ckpt-000000000010.scda (step 10)" in out
    row = next(line for line in out.splitlines() if "ckpt-000000000020.scda" in line)
    assert "INVALID" in row and "'rho'" in row
    code, out, _ = run(capsys, "ls", "--quick", d)  # metadata only: says so
    assert "* ckpt-000000000020.scda" in out and "a restart would try ckpt-000000000020.scda (step 20) first" in out
    assert "valid (every byte)" not in out
    assert run(capsys, "ls", "--quick", "--verify", d)[0] == 2
    code, out, _ = run(capsys, "ls", "--json", d)
    doc = json.loads(out)
    assert doc["restart"] == "ckpt-000000000010.scda"
    assert [(r["step"], r["valid"], r["checked"]) for r in doc["checkpoints"]] == [
        (10, True, "every byte"),
        (20, False, "every byte"),
        (30, False, "metadata"),
    ]
    code, out, _ = run(capsys, "ls", "--verify", "--json", d)
    doc = json.loads(out)
    assert code == 1 and doc["restart"] == "ckpt-000000000010.scda"
    assert [(r["step"], r["valid"], r["writer_size"]) for r in doc["checkpoints"]] == [
        (10, True, 1),
        (20, False, 1),
        (30, False, 1),
    ]
    assert "'rho'" in doc["checkpoints"][1]["problem"] and doc["checkpoints"][0]["reason"] == "step 10 is a multiple of 10"
    assert snapshot(d) == before  # nothing created, removed or touched
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copyfile(d / "ckpt-000000000010.scda", fresh / "ckpt-000000000010.scda")
    before = snapshot(fresh)
    code, out, _ = run(capsys, "ls", fresh)
    assert code == 0 and snapshot(fresh) == before  # no lock file, no history
    code, out, _ = run(capsys, "ls", tmp_path)
    assert code == 0 and "no checkpoints" in out


# -- as a program ---------------------------------------------------------------


def test_as_a_subprocess(ckpt: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        env.pop(var, None)
    cut = tmp_path / "cut.scda"
    cut.write_bytes(ckpt.read_bytes()[:1000])
    code = "import sys, amrckpt.cli; assert 'mpi4py' not in sys.modules and 'matplotlib' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0
    p = subprocess.run(
        [sys.executable, "-m", "amrckpt.cli", "verify", ckpt, cut], env=env, capture_output=True, text=True, check=False
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stdout.startswith("OK ") and "\nINCOMPLETE " in p.stdout


def test_convert_under_mpiexec(ckpt: Path, tmp_path: Path) -> None:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if mpiexec is None:
        pytest.skip("mpiexec is not on PATH")
    pytest.importorskip("mpi4py")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "p2.scda"
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "amrckpt.cli"]
    p = subprocess.run([*cmd, "convert", "--encode", ckpt, out], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1 and " -> " in p.stdout  # rank 0 reports
    serial = tmp_path / "p1.scda"
    assert main(["convert", "--encode", str(ckpt), str(serial)]) == 0
    assert out.read_bytes() == serial.read_bytes()  # serial-equivalent
    p = subprocess.run([*cmd, "verify", out, ckpt], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0 and p.stdout.count("OK ") == 2, p.stdout + p.stderr


def test_a_malformed_hint_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from amrckpt.cli import main

    assert main(["--hint", "nokey", "ls", "."]) == 2
    assert "expected key=value" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly(ckpt: Path, tmp_path: Path) -> None:
    """``amrckpt ... | head``: the reader is gone before the command writes; no error message, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        env.pop(var, None)
    for argv in (["inspect", str(ckpt)], ["inspect", "--json", str(ckpt)], ["--help"], ["ls", str(tmp_path)]):
        r, w = os.pipe()
        os.close(r)  # the reader went away: every write fails with EPIPE
        try:
            p = subprocess.run(
                [sys.executable, "-m", "amrckpt", *argv], stdout=w, stderr=subprocess.PIPE, env=env, text=True, check=False
            )
        finally:
            os.close(w)
        assert p.returncode == (0 if argv == ["--help"] else 141), (argv, p.stderr)  # argparse drops a help it cannot print
        assert p.stderr == "", (argv, p.stderr)


def test_python_dash_m_amrckpt(ckpt: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        env.pop(var, None)
    p = subprocess.run([sys.executable, "-m", "amrckpt", "--version"], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0 and p.stdout.startswith("amrckpt ")
    p = subprocess.run([sys.executable, "-m", "amrckpt", "verify", str(ckpt)], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0 and p.stdout.startswith("OK"), p.stdout + p.stderr
