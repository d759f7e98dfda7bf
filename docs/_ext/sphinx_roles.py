"""A griffe extension: Sphinx roles in amrckpt's docstrings become mkdocstrings cross-references.

The docstrings use Sphinx roles (``:func:`load```, ``:class:`~amrckpt.partition.Partition```),
which Markdown would show verbatim.  This extension rewrites each role into
an autorefs link (``[`load`][amrckpt.restart.load]``) when its target is
rendered on one of the API pages (a public name of a documented module, or a
documented member of one), and into inline code otherwise (private helpers,
numpy), so that ``mkdocs build --strict`` never meets a dangling reference.
A paragraph that ends in the reST literal marker ``::`` ends in ``:``
(Markdown already shows the indented block after it as code).

Loaded by mkdocs.yml (``extensions: [docs/_ext/sphinx_roles.py]``); the
docstrings themselves are not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

# The modules rendered on the API pages (docs/api/*.md).
PUBLIC_MODULES = (
    "amrckpt.restart",
    "amrckpt.schema",
    "amrckpt.manager",
    "amrckpt.scda",
    "amrckpt.sfc",
    "amrckpt.partition",
    "amrckpt.comm",
    "amrckpt.errors",
)

ROLE = re.compile(r":(?:py:)?(func|class|meth|attr|mod|data|exc|obj|const):`(~?)([\w.]+)(?:\(\))?`")
LITERAL_MARKER = re.compile(r"(\S)::\n(\n[ \t]+\S)")


def _documented(obj: griffe.Object | griffe.Alias) -> bool:
    return obj.docstring is not None


def _final(obj: griffe.Object | griffe.Alias) -> griffe.Object:
    return obj.final_target if isinstance(obj, griffe.Alias) else obj


def public_paths(pkg: griffe.Module) -> dict[str, str]:
    """Map the canonical path of every object rendered on the API pages to the path it is rendered under."""
    paths: dict[str, str] = {}
    for module_path in PUBLIC_MODULES:
        module = pkg[module_path.split(".", 1)[1]]
        paths[module.path] = module.path
        for name in module.exports or ():
            try:
                target = _final(module[name])
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                continue
            if not _documented(target):
                continue
            public = f"{module_path}.{name}"
            paths.setdefault(target.path, public)
            paths[public] = public
            if target.is_class:
                for member_name, member in target.all_members.items():
                    if member_name.startswith("_"):
                        continue
                    try:
                        member_target = _final(member)
                    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                        continue
                    if _documented(member_target):
                        paths.setdefault(f"{target.path}.{member_name}", f"{public}.{member_name}")
                        paths[f"{public}.{member_name}"] = f"{public}.{member_name}"
    return paths


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles into cross-references once the whole package is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the docstrings of every object of ``pkg``."""
        if pkg.name != "amrckpt":
            return
        paths = public_paths(pkg)

        def canonical(obj: griffe.Object, target: str) -> str | None:
            try:
                if target.startswith("amrckpt."):
                    found = pkg[target.split(".", 1)[1]]
                else:
                    found = pkg[obj.resolve(target).split(".", 1)[1]]
                return str(_final(found).path)
            except (KeyError, ValueError, griffe.NameResolutionError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                return None

        def rewrite(obj: griffe.Object) -> None:
            if obj.docstring is not None:

                def link(m: re.Match[str]) -> str:
                    short, target = m.group(2) == "~", m.group(3)
                    text = target.rsplit(".", 1)[-1] if short else target
                    path = canonical(obj, target)
                    if path is not None and path in paths:
                        return f"[`{text}`][{paths[path]}]"
                    return f"`{text}`"

                value = ROLE.sub(link, obj.docstring.value)
                obj.docstring.value = LITERAL_MARKER.sub(r"\1:\n\2", value)
            for member in obj.members.values():
                if not member.is_alias:
                    rewrite(member)  # type: ignore[arg-type]

        rewrite(pkg)
