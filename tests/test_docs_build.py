"""The documentation site builds with ``mkdocs build --strict`` and without a single warning.

The API reference is generated from the numpydoc docstrings (mkdocstrings,
griffe), so this also checks them: a parameter documented under a name the
signature does not have, a cross-reference to nothing, a page missing from
the nav all fail here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

import amrckpt
from _support import REPO


def test_mkdocs_build_strict_has_no_warning(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # mkdocs-material's banner about MkDocs 2.0
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "api" / "restart" / "index.html").is_file()


def test_api_index_names_every_public_name() -> None:
    page = (REPO / "docs" / "api" / "index.md").read_text(encoding="utf-8")
    missing = [name for name in amrckpt.__all__ if f"`{name}`" not in page]
    assert not missing, f"docs/api/index.md does not list {missing}"


def nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in nav_pages(v)]
    if isinstance(nav, list):
        return [p for v in nav for p in nav_pages(v)]
    return []


def test_every_public_module_has_an_api_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = nav_pages(config["nav"])
    for name in ("restart", "schema", "manager", "scda", "sfc", "partition", "comm", "errors"):
        assert f"api/{name}.md" in pages
        assert re.search(rf"^::: amrckpt\.{name}$", (REPO / "docs" / "api" / f"{name}.md").read_text(), re.M)
