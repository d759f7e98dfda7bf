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
