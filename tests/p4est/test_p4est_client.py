"""What a real p4est client found (issue 36), checked against the real libp4est (tests/p4est/p4est_tool.c).

A p4est file whose flipped level byte leaves a hole in the forest: p4est refuses to load it, and so does amrckpt
(convert, read on any number of ranks), and verify calls such a forest in a checkpoint INVALID.  A checkpoint without
a field 'data' is refused by convert --to p4est unless --data names the field to write.  docs/p4est.md's claims: a C
struct as one structured field gives p4est_save_ext's bytes, and mpi4py's wheel runs on the system's Open MPI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from p4est import build

import amrckpt as ac
from _support import REPO
from amrckpt import sfc
from amrckpt.cli import main
from amrckpt.comm import run_threads
from amrckpt.container import verify
from amrckpt.errors import P4estFormatError
from amrckpt.p4est import p4est_to_checkpoint, read_p4est

REASON = build.skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the real libp4est is not available: {REASON}")


def _p4est_loads(dim: int, path: Path, data_size: int) -> subprocess.CompletedProcess[str]:
    cmd = [str(build.tool(dim)), "load", os.fspath(path), str(data_size)]
    return subprocess.run(cmd, capture_output=True, text=True, env=build.tool_env(), check=False, timeout=120)


def _holed(tmp_path: Path, dim: int) -> tuple[Path, list[tuple[int, Path]]]:
    """A forest saved by libp4est, and copies with the level byte of one quadrant flipped (a finer level: a hole after it)."""
    src = tmp_path / "saved.p4est"
    build.run(dim, "save", "star" if dim == 2 else "rotcubes", "2", "8", "3", "0", src)
    h = read_p4est(src).header
    N, rec = h.num_quadrants, h.record_nbytes
    raw = src.read_bytes()
    levels = np.frombuffer(raw, dtype=np.uint8, offset=h.data_offset).reshape(N, rec)[:, 4 * dim]
    even = np.flatnonzero(levels % 2 == 0)  # level 2 -> 3: the quadrant shrinks to its first child, a hole after it
    picks = sorted({int(even[0]), int(even[len(even) // 2]), int(even[-1])})
    out = []
    for i in picks:
        blob = bytearray(raw)
        blob[h.data_offset + i * rec + 4 * dim] ^= 0x01
        path = tmp_path / f"flipped-{i}.p4est"
        path.write_bytes(bytes(blob))
        out.append((i, path))
    return src, out


@pytest.mark.parametrize("dim", [2, 3])
def test_a_flipped_level_byte_that_leaves_a_hole_is_refused_as_p4est_refuses_it(
    tmp_path: Path, dim: int, capsys: pytest.CaptureFixture[str]
) -> None:
    src, flipped = _holed(tmp_path, dim)
    N = read_p4est(src).header.num_quadrants
    assert _p4est_loads(dim, src, 8).returncode == 0
    for i, path in flipped:
        res = _p4est_loads(dim, path, 8)
        assert res.returncode != 0 and "invalid forest" in res.stdout + res.stderr, res.stderr[-500:]  # p4est_load_ext refuses it
        out = tmp_path / f"out-{i}.scda"
        assert main(["convert", os.fspath(path), os.fspath(out), "--from", "p4est"]) == 1
        err = capsys.readouterr().err
        assert "P4estFormatError" in err and "not a complete forest" in err, err
        assert re.search(rf"quadrant {i}\b", err) and "tree" in err, err
        assert not out.exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
        # On 3 ranks cut right after the shrunk quadrant: the rank after it sees the hole, with the quadrant before its own.
        part = ac.Partition.from_offsets([0, i + 1, (i + 1 + N) // 2, N]) if i + 1 < N else ac.Partition.uniform(N, 3)
        with pytest.raises(P4estFormatError, match=rf"not a complete forest.*quadrant {i}\b"):
            run_threads(3, lambda comm, path=path, part=part: read_p4est(path, comm=comm, partition=part))


def test_verify_calls_a_p4est_forest_with_a_hole_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, flipped = _holed(tmp_path, 2)
    good = tmp_path / "good.scda"
    p4est_to_checkpoint(src, good)
    assert main(["verify", os.fspath(good)]) == 0
    assert capsys.readouterr().out.startswith("OK")
    i, path = flipped[1]
    bad = tmp_path / "holed.scda"
    p4est_to_checkpoint(path, bad, check=False)  # unchecked: the hole goes into a checkpoint whose CRC32s all match
    assert main(["verify", os.fspath(bad)]) == 1
    line = capsys.readouterr().out
    assert line.startswith("INVALID") and "not a complete forest" in line and re.search(rf"quadrant {i}\b", line), line
    for P in (2, 3):
        reps = run_threads(P, lambda comm: verify(bad, comm=comm))
        assert all(not r.ok and r.problems == reps[0].problems for r in reps)
        assert reps[0].problems[0].kind == "invalid" and re.search(rf"quadrant {i}\b", reps[0].problems[0].message)


def test_verify_checks_amrckpt_s_own_meshes_for_holes_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """amrckpt's meshes may hold any linear set of leaves: complete only with --complete."""

    class Part(ac.CheckpointSchema, name="part", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2, brick=(2, 1))

    lv = sfc.uniform_leaves(2, num_trees=2, dim=2)
    keep = np.arange(lv.num_leaves) != 5
    ac.save(Part(mesh=ac.Forest(lv.tree[keep], lv.level[keep], lv.x[keep], lv.y[keep], num_trees=2)), tmp_path / "p.scda")
    assert main(["verify", os.fspath(tmp_path / "p.scda")]) == 0
    assert main(["verify", "--complete", os.fspath(tmp_path / "p.scda")]) == 1
    assert "INVALID" in capsys.readouterr().out


class Heat(ac.CheckpointSchema, name="client heat", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2, brick=(2, 1), periodic=(True, False))
    u: ac.CellData = ac.Cells("<f8")
    flux: ac.CellData = ac.Cells("<f4", shape=(2,))


def test_to_p4est_without_a_data_field_names_the_fields_and_data_chooses_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No field 'data': refused, naming the fields that could serve; --data u writes a file p4est loads with its 8 bytes."""
    lv = sfc.uniform_leaves(2, num_trees=2, dim=2)
    n = lv.num_leaves
    u = np.linspace(0.0, 1.0, n)
    flux = np.arange(2 * n, dtype="<f4").reshape(n, 2)
    ck = tmp_path / "heat.scda"
    ac.save(Heat(step=3, mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=2), u=u, flux=flux), ck)
    out = tmp_path / "heat.p4est"
    assert main(["convert", os.fspath(ck), os.fspath(out), "--to", "p4est"]) == 1
    err = capsys.readouterr().err
    assert "no field 'data'" in err and "'u', 'flux'" in err and "--data FIELD" in err, err
    assert not out.exists()
    assert main(["convert", os.fspath(ck), os.fspath(out), "--to", "p4est", "--data", "u"]) == 0
    assert f"quadrants {n}" in build.run(2, "load", out, "8")  # libp4est: p4est_load_ext with data_size 8
    pf = read_p4est(out)
    assert pf.header.data_size == 8 and pf.data is not None and pf.data.view("<f8").ravel().tobytes() == u.tobytes()
    assert main(["convert", os.fspath(ck), os.fspath(tmp_path / "f.p4est"), "--to", "p4est", "--data", "flux"]) == 0
    assert f"quadrants {n}" in build.run(2, "load", tmp_path / "f.p4est", "8")
    assert main(["convert", os.fspath(ck), os.fspath(tmp_path / "n.p4est"), "--to", "p4est", "--no-data"]) == 0
    assert f"quadrants {n}" in build.run(2, "load", tmp_path / "n.p4est", "0")
    assert main(["convert", os.fspath(ck), os.fspath(tmp_path / "x.p4est"), "--to", "p4est", "--data", "nope"]) == 1
    assert "no field 'nope'" in capsys.readouterr().err


CELL_C = r"""
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
typedef struct cell { double u; float v[3]; int8_t flag; } cell_t;
int main (void)
{
  printf ("%zu %zu %zu %zu\n", sizeof (cell_t), offsetof (cell_t, u), offsetof (cell_t, v), offsetof (cell_t, flag));
  return 0;
}
"""


def test_a_c_struct_as_one_structured_field_converts_to_p4est_save_ext_s_bytes(tmp_path: Path) -> None:
    """docs/p4est.md's cell_t: numpy's align=True is gcc's layout, and its records are the data p4est_save_ext wrote."""
    cell_t = np.dtype([("u", "<f8"), ("v", "<f4", (3,)), ("flag", "i1")], align=True)
    (tmp_path / "cell.c").write_text(CELL_C, encoding="utf-8")
    cc = shutil.which("cc", path="/usr/bin:/usr/local/bin") or "gcc"
    subprocess.run([cc, str(tmp_path / "cell.c"), "-o", str(tmp_path / "cell")], check=True, env=build.tool_env())
    got = subprocess.run([str(tmp_path / "cell")], capture_output=True, text=True, check=True).stdout.split()
    assert [int(v) for v in got] == [cell_t.itemsize, *(cell_t.fields[k][1] for k in cell_t.names)]
    src = tmp_path / "cells.p4est"
    build.run(2, "save", "star", "2", str(cell_t.itemsize), "9", "0", src)  # data_size = sizeof (cell_t)
    pf = read_p4est(src)
    assert pf.data is not None and pf.header.data_size == cell_t.itemsize

    class Cellular(ac.CheckpointSchema, name="cellular", version=1):
        mesh: ac.Forest = ac.Mesh(dim=2, geometry=pf.connectivity)
        cell: ac.CellData = ac.Cells(cell_t)

    ck = tmp_path / "cells.scda"
    ac.save(Cellular(mesh=pf.forest, cell=pf.data.view(cell_t)[:, 0]), ck)
    back = ac.load(ck, Cellular).state.cell
    assert back.dtype == cell_t and back.tobytes() == pf.data.tobytes()
    out = tmp_path / "again.p4est"
    assert main(["convert", os.fspath(ck), os.fspath(out), "--to", "p4est", "--data", "cell"]) == 0
    assert out.read_bytes() == src.read_bytes()  # p4est_save_ext's bytes, padding included
    assert "connectivity_is_equal 1 is_equal 1" in build.run(2, "equal", src, out, str(cell_t.itemsize))


OMPI_JOB = """
import numpy as np
from mpi4py import MPI
import amrckpt as ac
from amrckpt import sfc

comm = MPI.COMM_WORLD


class S(ac.CheckpointSchema, name="ompi", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2, brick=(2, 1))
    u: ac.CellData = ac.Cells("<f8")


lv = sfc.uniform_leaves(3, num_trees=2, dim=2)
N = lv.num_leaves
a, b = N * comm.rank // comm.size, N * (comm.rank + 1) // comm.size
mesh = ac.Forest(lv.tree[a:b], lv.level[a:b], lv.x[a:b], lv.y[a:b], num_trees=2)
ac.save(S(mesh=mesh, u=np.arange(a, b, dtype="<f8")), "job.scda", comm=comm)
state, part = ac.load("job.scda", S, comm=comm)
ok = np.array_equal(state.u, np.arange(*part.local_range(comm.rank)))
row = f"{comm.rank} {comm.size} {MPI.__file__.rsplit('/', 1)[1]} {MPI.Get_library_version().split(',')[0]} {ok}"
rows = comm.gather(row, root=0)  # one writer: two ranks' prints can interleave in mpiexec's forwarded stdout
if comm.rank == 0:
    print("\\n".join(rows), flush=True)
"""


def test_the_mpi4py_wheel_runs_amrckpt_on_the_system_open_mpi(tmp_path: Path) -> None:
    """docs/p4est.md: the binary wheel of the venv, told MPI4PY_MPIABI=openmpi, saves and loads on 2 Open MPI ranks."""
    launcher = shutil.which("mpiexec.openmpi", path="/usr/bin:/usr/local/bin")
    if launcher is None:
        pytest.skip("Open MPI's mpiexec.openmpi is not installed (apt-get install openmpi-bin)")
    (tmp_path / "job.py").write_text(OMPI_JOB, encoding="utf-8")
    env = build.tool_env() | {"MPI4PY_MPIABI": "openmpi", "PYTHONPATH": str(REPO)}
    cmd = [launcher, "-n", "2", sys.executable, "job.py"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = sorted(res.stdout.splitlines())
    assert len(lines) == 2 and all("MPI.openmpi" in x and "Open MPI" in x and x.endswith("True") for x in lines), lines
