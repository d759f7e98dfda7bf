"""Every Python block in README.md and docs/*.md runs, so the documentation cannot lie."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _support import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCKS = [
    pytest.param(block, id=f"{path.name}:{text[: m.start()].count(chr(10)) + 1}")
    for path in DOCS
    for text in [path.read_text(encoding="utf-8")]
    for m in re.finditer(r"```python\n(.*?)```", text, re.S)
    for block in [m.group(1)]
]


@pytest.mark.parametrize("block", BLOCKS)
def test_doc_block_runs(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "<doc>", "exec"), {"__name__": "__doc_block__"})
