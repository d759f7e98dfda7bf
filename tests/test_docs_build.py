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

import pytest
import yaml

import amrckpt
from _support import REPO


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The site built once for this module: the build's outcome and the site directory."""
    out = tmp_path_factory.mktemp("site") / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # mkdocs-material's banner about MkDocs 2.0
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc, out


def test_mkdocs_build_strict_has_no_warning(site: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, out = site
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert not warnings, "\n".join(warnings)
    assert (out / "api" / "restart" / "index.html").is_file()


# What the rendered pages must not show: a cross-reference left as Markdown source ([`load`][amrckpt.restart.load],
# as in a parameter's type), 2**30 turned into bold, a link or a name of a private module, a role left as reST.
UNRENDERED = {
    "an unrendered cross-reference": re.compile(r"\[`?[\w.]+`?\]\[[\w.]*\]"),
    "a power rendered as bold": re.compile(r"\d<strong>"),
    "a link into a private module": re.compile(r'href="[^"]*#amrckpt(?:\.\w+)*\._\w'),
    "a private module named in the text": re.compile(r"<code>amrckpt(?:\.[a-z]\w*)*\._[a-z]\w*</code>"),
    "a Sphinx role": re.compile(r":(?:func|class|meth|mod|attr|exc):`"),
}


def test_site_pages_render_every_reference(site: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, out = site
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = []
    for page in sorted(out.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"<pre\b.*?</pre>", "", text, flags=re.S)  # code blocks may show anything
        for what, pattern in UNRENDERED.items():
            for m in pattern.finditer(text):
                found.append(f"{page.relative_to(out)}: {what}: {m.group(0)}")
    assert not found, "\n".join(found[:40])


def test_parameters_documented_together_keep_their_own_defaults(site: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """``x, y, z : ...`` in a docstring: each parameter shows its own default (griffe gave all of them the first's)."""
    _, out = site

    def default_of(page: str, anchor: str, name: str) -> str:
        text = (out / "api" / page / "index.html").read_text(encoding="utf-8")
        start = text.index(f'id="{anchor}"')
        end = text.find('<div class="doc doc-object', start)
        section = text[start : end if end >= 0 else None]
        for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', section, re.S):
            cells = [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
            if cells and cells[0] == name:
                return cells[-1]
        raise AssertionError(f"{anchor}: no parameter {name}")

    assert default_of("sfc", "amrckpt.sfc.sfc_order", "z") == "None"
    assert default_of("sfc", "amrckpt.sfc.sfc_order", "x") == "required"
    assert default_of("schema", "amrckpt.schema.HpCells", "compress") == "False"
    assert default_of("manager", "amrckpt.manager.CheckpointManager.restore_latest", "fields") == "None"
    assert default_of("manager", "amrckpt.manager.CheckpointManager.restore_latest", "partition") == "&#34;uniform&#34;"


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
