"""examples/treemesh_checkpoint.py: a discretize TreeMesh and its model, saved on 2 processes, restored on 3, bit for bit.

The example runs as a real client would: separate mpiexec jobs for saving
and restoring, and one plain ``python`` process for the quick round trip.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _support import REPO

pytest.importorskip("discretize", reason="the TreeMesh example needs discretize (pip install -e '.[examples]')")

EXAMPLE = REPO / "examples" / "treemesh_checkpoint.py"


def mpiexec() -> str:
    """The mpiexec of the mpich wheel beside this Python, else the one on PATH (as tests/killing.py)."""
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("no mpiexec: it comes with the test extra (the mpich wheel)")
    return exe


def run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{cmd} exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def on(P: int, *args: str) -> list[str]:
    return [mpiexec(), "-n", str(P), sys.executable, "-m", "mpi4py", str(EXAMPLE), *args]


@pytest.mark.parametrize(
    "mesh",
    [
        ("--dim", "3", "--base", "32"),  # one tree; TreeMesh's order is already Morton
        ("--dim", "3", "--base", "32,16,8"),  # a 4 x 2 x 1 brick of trees; TreeMesh's order is not Morton
        ("--dim", "2", "--base", "128,32", "--diagonal-balance"),
    ],
    ids=["3d-one-tree", "3d-brick", "2d-brick"],
)
def test_save_on_2_restore_on_3(tmp_path: Path, mesh: tuple[str, ...]) -> None:
    pytest.importorskip("mpi4py")
    path = tmp_path / "treemesh.scda"
    saved = run(on(2, "--save", str(path), *mesh), tmp_path)
    assert "saved on 2 process(es)" in saved
    assert path.stat().st_size > 0
    restored = run(on(3, "--restore", str(path)), tmp_path)
    assert "restored on 3 process(es)" in restored and "written by 2" in restored
    assert "IDENTICAL" in restored and "DIFFERENT" not in restored
    # The model's sha256 in TreeMesh order, as saved, is the one restored.
    digest = saved.split("saved:")[1].split()[0]
    assert f"after:    {digest}" in restored
    if "32,16,8" in mesh:
        assert "amrckpt's (tree major, Morton): no" in restored


@pytest.mark.parametrize("args", [(), ("--dim", "2", "--partition", "weighted")], ids=["default", "2d-weighted"])
def test_single_process_round_trip(tmp_path: Path, args: tuple[str, ...]) -> None:
    out = run([sys.executable, str(EXAMPLE), *args], tmp_path)
    assert "saved on 1 process(es)" in out and "restored on 1 process(es)" in out
    assert "IDENTICAL" in out and "DIFFERENT" not in out


def test_a_changed_model_is_reported_different(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: a model one ulp off in one cell restores as DIFFERENT, exit status 1."""
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("treemesh_checkpoint", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, example)  # its dataclasses look their module up
    spec.loader.exec_module(example)
    build = example.BuildParams(dim=2, base=[32, 32], diagonal_balance=False)
    mesh = example.build_mesh(build.dim, build.base, build.diagonal_balance)
    model = example.conductivity(mesh)
    model[mesh.n_cells // 2] = np.nextafter(model[mesh.n_cells // 2], np.inf)
    path = tmp_path / "changed.scda"
    example.save(mesh, model, str(path), build)
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--restore", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DIFFERENT: model (TreeMesh order) differ" in proc.stdout and "IDENTICAL" not in proc.stdout
