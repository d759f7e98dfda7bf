"""A griffe extension: Sphinx roles in amrckpt's docstrings become mkdocstrings cross-references.

The docstrings use Sphinx roles (``:func:`load```, ``:class:`~amrckpt.partition.Partition```),
which Markdown would show verbatim.  This extension rewrites each role into
an autorefs link (``[`load`][amrckpt.restart.load]``) when its target is
rendered on one of the API pages (a public name of a documented module, or a
documented member of one), and into inline code otherwise (private helpers,
numpy), so that ``mkdocs build --strict`` never meets a dangling reference.
A paragraph that ends in the reST literal marker ``::`` ends in ``:``
(Markdown already shows the indented block after it as code).

Two numpydoc habits that the renderer gets wrong are also straightened out:

* a role in the *type* of a parameter, return value or attribute (``into :
  class decorated with :func:`checkpointable```) becomes plain text: types
  are shown as code, where a cross-reference would stay raw;
* a ``:mod:`` role to a private module of amrckpt names and links its
  public package (``amrckpt.manager._scheduler`` -> ``amrckpt.manager``):
  the pages never send a reader into a private module;
* parameters documented together (``x, y, z : (N,) array_like of int``)
  become one entry each, with the same type and description: griffe would
  give all of them the default of the first (``z`` shown as required when
  it defaults to None).

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
# numpydoc sections whose entries start with a "name : type" (or a type) line.
TYPED_SECTIONS = {"Parameters", "Other Parameters", "Returns", "Yields", "Receives", "Attributes", "Raises", "Warns"}
GROUPED = re.compile(r"^(\s*)(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)+)\s*:\s*(.*)$")
UNDERLINE = re.compile(r"\s*-{3,}\s*")


def _plain(m: re.Match[str]) -> str:
    target = m.group(3)
    return target.rsplit(".", 1)[-1] if m.group(2) == "~" else target


def straighten(text: str, link: Any) -> str:
    """Rewrite one docstring: roles (``link`` in prose, plain text in types) and grouped parameters split."""
    lines = text.split("\n")
    out: list[str] = []
    section: str | None = None
    base: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped and i + 1 < len(lines) and UNDERLINE.fullmatch(lines[i + 1]) and not UNDERLINE.fullmatch(line):
            section, base = stripped, None
            out += [line, lines[i + 1]]
            i += 2
            continue
        indent = len(line) - len(line.lstrip())
        if section in TYPED_SECTIONS and stripped:
            if base is None:
                base = indent
            if indent == base:
                grouped = GROUPED.match(line) if section in ("Parameters", "Other Parameters", "Attributes") else None
                body: list[str] = []
                j = i + 1
                while grouped and j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base):
                    body.append(lines[j])
                    j += 1
                if grouped:
                    while body and not body[-1].strip():
                        body.pop()
                    kind = ROLE.sub(_plain, grouped.group(3))
                    for name in re.split(r"\s*,\s*", grouped.group(2)):
                        out.append(f"{grouped.group(1)}{name} : {kind}")
                        out += [ROLE.sub(link, b) for b in body]
                    i = j
                    continue
                out.append(ROLE.sub(_plain, line))
                i += 1
                continue
        out.append(ROLE.sub(link, line))
        i += 1
    return "\n".join(out)


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
                    parts = target.split(".")
                    private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
                    if private is not None and parts[0] == "amrckpt" and m.group(1) == "mod":
                        # A private module: the pages name and link its public package instead.
                        target, short = ".".join(parts[:private]), False
                    text = target.rsplit(".", 1)[-1] if short else target
                    path = canonical(obj, target)
                    if path is not None and path in paths:
                        return f"[`{text}`][{paths[path]}]"
                    return f"`{text}`"

                value = straighten(obj.docstring.value, link)
                obj.docstring.value = LITERAL_MARKER.sub(r"\1:\n\2", value)
            for member in obj.members.values():
                if not member.is_alias:
                    rewrite(member)  # type: ignore[arg-type]

        rewrite(pkg)
