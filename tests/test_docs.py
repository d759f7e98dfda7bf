"""Every Python block in README.md and docs/**/*.md runs, so the documentation cannot lie.

The blocks of one page run in order, in one temporary directory and one
namespace, as a reader would run them one after the other.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from _support import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p)], ids=lambda p: p.relative_to(REPO).as_posix())
def test_doc_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO / "examples"))  # docs/example.md imports the example solver
    namespace: dict[str, object] = {"__name__": "__doc__"}
    for line, block in blocks(path):
        exec(compile(block, f"{path.relative_to(REPO)}:{line}", "exec", dont_inherit=True), namespace)


def hexview_module() -> ModuleType:
    """docs/_gen_hexview.py, which writes the annotated hex view of docs/checkpoints.md."""
    spec = importlib.util.spec_from_file_location("_gen_hexview", REPO / "docs" / "_gen_hexview.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hexview_in_docs_is_current() -> None:
    """The hex view is regenerated from the page's own block, with the amrckpt version the page names."""
    gen = hexview_module()
    m = gen.BLOCK.search((REPO / "docs" / "checkpoints.md").read_text(encoding="utf-8"))
    assert m, "docs/checkpoints.md has no hexview block"
    assert m.group("view") == gen.view(m.group("version")), "regenerate it: python docs/_gen_hexview.py --write"
