"""The top level of ``import amrckpt as ac`` is small: what the README and the docs use, at most 40 names.

Every other public name lives in its subpackage (errors in ``amrckpt.errors``,
policies in ``amrckpt.manager``); ``dir(amrckpt)`` and ``__all__`` agree, and
``import amrckpt`` imports neither MPI nor the optional libraries.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import amrckpt as ac
from _support import REPO

MAX_NAMES = 40
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def fresh_import() -> dict[str, list[str]]:
    """``dir(amrckpt)``, ``__all__`` and the modules imported, from a new interpreter that imports amrckpt alone."""
    code = (
        "import json, sys, amrckpt\n"
        "print(json.dumps({'dir': dir(amrckpt), 'all': amrckpt.__all__, 'modules': sorted(sys.modules)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def public(names: list[str]) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def test_the_top_level_has_at_most_40_names_and_dir_agrees_with_all() -> None:
    got = fresh_import()
    assert len(public(got["all"])) <= MAX_NAMES, sorted(public(got["all"]))
    assert public(got["dir"]) == public(got["all"])
    assert len(got["all"]) == len(set(got["all"]))
    for name in ("mpi4py", "xarray", "h5py", "yt", "pyvista", "amrckpt.export", "amrckpt.testing", "amrckpt.cli"):
        assert name not in got["modules"], f"import amrckpt imports {name}"


def test_every_top_level_name_resolves() -> None:
    for name in ac.__all__:
        assert getattr(ac, name) is not None


@pytest.mark.parametrize("name", sorted(public(ac.__all__)))
def test_every_top_level_name_is_used_by_the_readme_or_the_docs(name: str) -> None:
    used = re.compile(rf"\b(?:ac|amrckpt)\.{name}\b|^from amrckpt import [\w, ]*\b{name}\b", re.M)
    assert any(used.search(p.read_text(encoding="utf-8")) for p in DOCS), f"no page of the docs uses amrckpt.{name}"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("errors", "ChecksumError"),
        ("errors", "ManagerError"),
        ("manager", "KeepLast"),
        ("manager", "NodeCache"),
        ("restart", "Loaded"),
        ("schema", "SaveResult"),
        ("container", "RunRecord"),
    ],
)
def test_names_left_out_stay_in_their_subpackage(module: str, name: str) -> None:
    assert name not in ac.__all__ and not hasattr(ac, name)
    assert name in getattr(ac, module).__all__


# One file-options value, ``access=``, for save, load, read_info and verify.

ENTRY_POINTS = {"save": ac.save, "load": ac.load, "read_info": ac.read_info, "verify": ac.verify}


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_entry_points_take_access_and_no_loose_file_option(name: str) -> None:
    params = inspect.signature(ENTRY_POINTS[name]).parameters
    assert params["access"].kind is inspect.Parameter.KEYWORD_ONLY and params["access"].default is None
    assert not {"style", "sync", "info", "backend", "truncate"} & set(params)
    assert ac.FileAccess is ac.scda.FileAccess


def test_access_carries_every_file_option(tmp_path: Path) -> None:
    from checkpoint_cases import Advection, global_state

    g = global_state(seed=3, max_level=3)
    state = g.local(0, g.N)
    ac.save(state, tmp_path / "mime.scda", access=ac.FileAccess(style="mime", sync=True, truncate=False))
    ac.save(state, tmp_path / "unix.scda", access=ac.FileAccess(backend="posix"))
    assert (tmp_path / "mime.scda").read_bytes() != (tmp_path / "unix.scda").read_bytes()
    posix = ac.FileAccess(backend="posix")
    assert ac.load(tmp_path / "mime.scda", Advection, access=posix).state.step == state.step
    assert ac.read_info(tmp_path / "mime.scda", access=posix).manifest.schema_name == "advection2d"
    assert ac.verify(tmp_path / "mime.scda", access=posix).ok


def test_the_loose_file_keywords_are_gone(tmp_path: Path) -> None:
    """The file options (style, sync, info, backend, truncate) are fields of access=, not keywords of the calls."""
    from checkpoint_cases import global_state

    g = global_state(seed=3, max_level=2)
    with pytest.raises(TypeError, match=r"save\(\) got an unexpected keyword argument 'sync'"):
        ac.save(g.local(0, g.N), tmp_path / "x.scda", sync=True)
    with pytest.raises(TypeError, match=r"load\(\) got an unexpected keyword argument 'backend'"):
        ac.load(tmp_path / "x.scda", backend="posix")
    with pytest.raises(TypeError, match=r"verify\(\) got an unexpected keyword argument 'info'"):
        ac.verify(tmp_path / "x.scda", info={})
    with pytest.raises(TypeError, match=r"read_info\(\) got an unexpected keyword argument 'info'"):
        ac.read_info(tmp_path / "x.scda", info={})
    assert not (tmp_path / "x.scda").exists()
