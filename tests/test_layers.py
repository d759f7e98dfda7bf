"""The layering of the package: no module imports another subpackage's private module (``amrckpt.x._y`` from outside ``amrckpt.x``).

The layers themselves (which package may import which) are import-linter's
contract in ``pyproject.toml``, checked by ``tests/run_all.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from _support import REPO

PACKAGE = REPO / "amrckpt"


def _imports(path: Path, root: Path = REPO) -> list[str]:
    """The absolute names of the amrckpt modules that ``path`` (in a tree at ``root``) imports, relative imports resolved."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1]  # a module's package; an __init__'s is its own folder
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = [*base, *(node.module.split(".") if node.module else [])]
            if mod[:1] != ["amrckpt"]:
                continue
            out.append(".".join(mod))
            out += [".".join([*mod, a.name]) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("amrckpt")]
    return out


def _violations(path: Path, root: Path = REPO) -> list[str]:
    rel = path.relative_to(root)
    own = rel.parts[1] if len(rel.parts) > 2 else None  # its subpackage
    bad = []
    for name in _imports(path, root):
        parts = name.split(".")
        # amrckpt.<package>._<private>...: private to <package>; amrckpt._x are the package's shared utilities
        if len(parts) >= 3 and parts[2].startswith("_") and not parts[2].startswith("__") and parts[1] != own:
            bad.append(name)
    return bad


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_no_private_imports_across_packages(path: Path) -> None:
    assert not _violations(path), f"{path.relative_to(REPO)} imports private modules of other packages: {_violations(path)}"


def test_the_walk_finds_what_it_must(tmp_path: Path) -> None:
    """The check itself: a private import across packages is seen, relative or absolute; one inside a package is not."""
    cli = PACKAGE / "cli" / "_common.py"
    assert "amrckpt.container" in _imports(cli) and "amrckpt.scda" in _imports(cli)
    pkg = tmp_path / "amrckpt" / "container"
    pkg.mkdir(parents=True)
    bad = pkg / "_bad.py"
    bad.write_text("from ..scda._layout import RawSection\nimport amrckpt.scda._backend\nfrom ._handlers import Payload\n")
    assert _violations(bad, tmp_path) == ["amrckpt.scda._layout", "amrckpt.scda._layout.RawSection", "amrckpt.scda._backend"]
    good = pkg / "_good.py"
    good.write_text("from ..scda import RawSection\nfrom .. import _crc\nfrom ._handlers import Payload\n")
    assert _violations(good, tmp_path) == []


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph(root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the amrckpt modules it imports, at any depth of the code: lazy imports and those under TYPE_CHECKING too."""
    mods = {_module(p, root): p for p in (root / "amrckpt").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        out: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for a in node.names:
                    target = f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod
                    if target in mods:
                        out.add(target)
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in mods}
        graph[name] = out - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_lazy_ones_included() -> None:
    """No two modules of amrckpt import each other, even inside a function or for the type checker only.

    A lazy import is still a cycle, and so is one under ``TYPE_CHECKING``:
    the two modules cannot be read, typed or moved apart.
    """
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "amrckpt" / "sfc"
    pkg.mkdir(parents=True)
    (tmp_path / "amrckpt" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from ._a import A\n")
    (pkg / "_a.py").write_text("def f():\n    from ._b import B\n")
    (pkg / "_b.py").write_text("from typing import TYPE_CHECKING\nfrom ._a import A\nif TYPE_CHECKING:\n    from ._c import C\n")
    (pkg / "_c.py").write_text("from ._b import B\n")
    assert _cycles(_graph(tmp_path)) == [["amrckpt.sfc._a", "amrckpt.sfc._b", "amrckpt.sfc._c"]]
