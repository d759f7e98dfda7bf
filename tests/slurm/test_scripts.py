"""The job scripts of examples/slurm/ parse, and docs/manager.md shows the one it shows as it is (no Slurm needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "examples" / "slurm").glob("*.sbatch"))


def test_there_are_scripts() -> None:
    assert {p.name for p in SCRIPTS} >= {"srun.sbatch", "mpiexec.sbatch", "chain.sbatch"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    r = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert script.read_text().startswith("#!/bin/bash\n")


def test_docs_copy_is_the_file() -> None:
    text = (REPO / "docs" / "manager.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- slurm-script: (\S+)[^>]*-->\s*```sh\n(.*?)```", text, re.S)
    assert blocks, "docs/manager.md shows no job script"
    for path, body in blocks:
        assert body == (REPO / path).read_text(encoding="utf-8"), f"docs/manager.md's copy of {path} differs from the file"
    for script in SCRIPTS:
        assert f"examples/slurm/{script.name}" in text, f"docs/manager.md does not mention {script.name}"
