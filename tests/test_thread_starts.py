"""A rule a test checks: every thread of amrckpt starts through amrckpt._threads (a bounded wait, never ``Thread.start``).

``Thread.start`` waits without a bound for the new thread to run; a thread
that dies first (memory pressure) left one rank of a collective save waiting
forever, and the job with it (issue 33).  Threads start through
:func:`amrckpt._threads.start_thread` (and the pools built on it); inside a
collective call through :meth:`amrckpt.comm.Call.start_thread`, agreed.
This test fails on any other way of starting a thread in the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import amrckpt

PACKAGE = Path(amrckpt.__file__).parent
ALLOWED = {
    "_threads.py": "the one place threads start (start_thread, Pool)",
    "comm/_thread.py": "run_threads: ranks as threads, for tests and tools (not a collective step)",
}
FORBIDDEN = {"Thread", "ThreadPoolExecutor", "ProcessPoolExecutor", "start_new_thread", "Timer"}


def _calls(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in FORBIDDEN:
                out.append((node.lineno, name))
    return sorted(out)


def test_threads_start_only_through_amrckpt_threads() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ALLOWED:
            continue
        bad += [f"{rel}:{line}: {name}(...)" for line, name in _calls(ast.parse(path.read_text(encoding="utf-8")))]
    assert not bad, "threads started outside amrckpt._threads (use start_thread, Pool or Call.start_thread): " + ", ".join(bad)


def test_the_rule_sees_a_thread() -> None:
    assert _calls(ast.parse("import threading\nthreading.Thread(target=f).start()\nThreadPoolExecutor(2)")) == [
        (2, "Thread"),
        (3, "ThreadPoolExecutor"),
    ]
