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
    namespace: dict[str, object] = {"__name__": "__doc__"}
    for line, block in blocks(path):
        exec(compile(block, f"{path.name}:{line}", "exec"), namespace)
