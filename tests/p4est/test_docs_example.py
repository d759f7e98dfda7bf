"""docs/p4est.md's example runs: its C p4est code and its Python driver (ctypes), restarted bit for bit."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from p4est import build

from _support import REPO

REASON = build.skip_reason()


def example(name: str) -> str:
    text = (REPO / "docs" / "p4est.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- example: " + re.escape(name) + r" -->\s*```\w+\n(.*?)```", text, re.S)
    assert m, f"docs/p4est.md has no example block {name}"
    return m.group(1)


@pytest.mark.skipif(REASON is not None, reason=f"the real libp4est is not available: {REASON}")
def test_the_c_p4est_code_of_the_docs_restarts_bit_for_bit(tmp_path: Path) -> None:
    (tmp_path / "heat.c").write_text(example("heat.c"), encoding="utf-8")
    (tmp_path / "heat.py").write_text(example("heat.py"), encoding="utf-8")
    env = build.tool_env()  # Open MPI of the system in this process, not the venv's MPICH (the driver is serial)
    res = subprocess.run(
        [sys.executable, "heat.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "bit-identical at step 80" in res.stdout
    assert (tmp_path / "heat-40.scda").exists() and (tmp_path / "heat-80.scda").exists()


def test_the_example_blocks_are_there() -> None:
    """The blocks the test above runs exist on the page (checked even without libp4est)."""
    assert "p4est_inflate" in example("heat.c") and "Forest.from_p4est" in example("heat.py")
