"""A fresh clone, without ``../shared`` beside it, passes README's commands: what CI (``.ci/run``) runs there.

The clone is a copy of the files git tracks, in a temporary directory with
no ``shared`` folder beside it.  ``.ci/run``'s own README parser (the Python
between ``<<'PY'`` and ``PY``) extracts the two commands there; the tests
that read ``../shared/interop`` then skip with the reason instead of
failing, and the whole suite collects.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _support import REPO


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files of this checkout, copied into ``<tmp>/clone`` (``<tmp>/shared`` does not exist)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout.decode().split("\0")
    dest = tmp_path_factory.mktemp("fresh") / "clone"
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    assert not (dest.parent / "shared").exists()
    return dest


def clean_env(clone: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMRCKPT_INTEROP", "PMI", "HYDRA", "OMPI", "PYTEST"))}
    env["PYTHONPATH"] = str(clone)  # the clone's package, not this checkout's
    return env


def readme_block(clone: Path, mark: str) -> str:
    """Run .ci/run's README parser in the clone, as CI does."""
    script = (clone / ".ci" / "run").read_text(encoding="utf-8")
    parser = re.search(r"<<'PY'\n(.*?)\nPY\n", script, re.S)
    assert parser, ".ci/run has no README parser"
    p = subprocess.run(
        [sys.executable, "-", mark], input=parser.group(1), cwd=clone, capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_ci_parses_both_readme_commands_in_a_fresh_clone(clone: Path) -> None:
    demo, tests = readme_block(clone, "demo-command"), readme_block(clone, "test-command")
    assert demo.endswith("python examples/restart_demo.py") and '".[local-mpi,examples]"' in demo
    assert tests.endswith("python tests/run_all.py") and '".[local-mpi,test]"' in tests
    assert all("../shared" not in c for c in (demo, tests))


def test_tests_that_need_shared_skip_in_a_fresh_clone(clone: Path) -> None:
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "not mpi and not slow"]
    cmd += ["tests/interop", "tests/scda/test_codec.py", "tests/cli/test_cli.py", "tests/property/test_fuzz_readers.py"]
    p = subprocess.run(cmd, cwd=clone, env=clean_env(clone), capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert not re.search(r"\d+ (failed|errors?)\b", p.stdout), p.stdout[-4000:]
    skipped = [line for line in p.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped and all("../shared/interop is not beside this clone" in line for line in skipped), skipped
    assert "test_libsc_quirk_file_is_rewritten_canonically" not in p.stdout or "StopIteration" not in p.stdout


def test_the_whole_suite_collects_in_a_fresh_clone(clone: Path) -> None:
    for marks in ("not mpi", "mpi"):
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marks]
        p = subprocess.run(cmd, cwd=clone, env=clean_env(clone), capture_output=True, text=True, timeout=600, check=False)
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        assert not re.search(r"\d+ errors?\b|ERROR collecting", p.stdout), p.stdout[-4000:]
