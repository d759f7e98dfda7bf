"""Every Python block in README.md and docs/*.md runs, so the documentation cannot lie.

The blocks of one page run in order, in one temporary directory and one
namespace, as a reader would run them one after the other.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _support import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(text[: m.start()].count("\n") + 1, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p)], ids=lambda p: p.name)
def test_doc_blocks_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REPO / "examples"))  # docs/example.md imports the example solver
    namespace: dict[str, object] = {"__name__": "__doc__"}
    for line, block in blocks(path):
        exec(compile(block, f"{path.name}:{line}", "exec", dont_inherit=True), namespace)


def small_checkpoint_view(tmp: Path) -> str:
    """The start of a one-leaf checkpoint as a text editor shows it (docs/checkpoints.md)."""
    import amrckpt as ac

    class Demo(ac.CheckpointSchema, name="demo", version=1):
        step: int = ac.Inline()
        mesh: ac.Forest = ac.Mesh(dim=2)

    path = tmp / "demo.scda"
    ac.save(Demo(step=7, mesh=ac.Forest([0], [0], [0], [0], num_trees=1)), path)
    stop = ac.read_info(path).index.entry("amrckpt provenance").offset + 64
    text = "".join(chr(b) if 32 <= b < 127 or b == 10 else "." for b in path.read_bytes()[:stop])
    return text


def test_golden_file_view_in_docs(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "checkpoints.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- golden: small-checkpoint[^>]*-->\s*```text\n(.*?)```", doc, re.S)
    assert m, "docs/checkpoints.md has no golden small-checkpoint block"
    assert m.group(1) == small_checkpoint_view(tmp_path), "regenerate the block with tests/test_docs.py::small_checkpoint_view"
