"""The cached steps of every node directory under a cache's root, as ``amrckpt ls --cache`` shows them."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ManagerError
from .._names import StepNames
from ._layout import node_directories, ranks_of, shape_of
from ._level import EXTENSION, CacheLevel
from ._pieces import read_pieces

__all__ = ["CachedStep", "list_cache"]


@dataclass(frozen=True)
class CachedStep:
    """A step as the node caches under one directory hold it (what ``amrckpt ls --cache`` shows).

    Attributes
    ----------
    step : int
    size : int or None
        The process count that cached it (from ``step.json``).
    nbytes : int or None
        The bytes of its file once flushed.
    nodes : tuple of str
        The node directories that hold it.
    ranks : int
        The ranks whose pieces are there (own or partner copies), on some node.
    complete : bool
        Whether every rank's pieces are there, on some node (headers checked, not the data's CRC32s).
    layout : int or None
        The digest of the node layout that cached it (:attr:`NodeLayout.digest`, from ``step.json``).
    missing : tuple of int
        The ranks whose pieces are on no node (empty when ``complete``).
    """

    step: int
    size: int | None
    nbytes: int | None
    nodes: tuple[str, ...]
    ranks: int
    complete: bool
    layout: int | None = None
    missing: tuple[int, ...] = ()

    @property
    def shape(self) -> str:
        """The job shape that cached it: ``"4 ranks on 2 nodes"`` (:func:`shape_of`)."""
        return shape_of(self.size, self.layout) if self.size else "an unknown number of ranks"

    @property
    def missing_ranks(self) -> str:
        """The ranks whose pieces are on no node, with their nodes where known: ``"ranks 2, 3 (node 1)"`` (:func:`ranks_of`)."""
        return ranks_of(self.size or 0, self.layout, self.missing)


def list_cache(root: str | os.PathLike[str], prefix: str = "ckpt") -> list[CachedStep]:
    """List the cached steps of every node directory under ``root``. Not collective.

    ``root`` is a :class:`NodeCache` directory with ``{node}`` (expanded over
    the node directories that exist: :func:`node_directories`), or a
    directory whose node directories are ``root`` itself or one level below.
    Read-only: no lock, nothing removed; pieces files are checked by their
    headers (their sizes and the CRC32 of the header), not their data.
    """
    names = StepNames(prefix, extension=EXTENSION)
    found: dict[int, dict[str, Any]] = {}
    if "{node}" in os.fspath(root):
        dirs = [(str(n), d) for n, d in node_directories(root).items()]
    else:
        base = Path(root)
        dirs = [(".", base)]
        with contextlib.suppress(OSError):
            dirs += [(p.name, p) for p in sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())]
    for label, d in dirs:
        with contextlib.suppress(OSError):
            for step, name in names.listing(os.listdir(d)).checkpoints.items():
                entry = found.setdefault(step, {"nodes": [], "ranks": set(), "size": None, "nbytes": None, "layout": None})
                entry["nodes"].append(label)
                level = CacheLevel(d, prefix)
                info = level.info(step) or {}
                for key in ("size", "nbytes", "layout"):
                    entry[key] = entry[key] or info.get(key)
                for f in (d / name).glob("rank-*.pieces"):
                    try:
                        p = read_pieces(f, verify=False)
                    except ManagerError:
                        continue
                    entry["ranks"].add(p.rank)
                    p.close()
    out = []
    for step, e in sorted(found.items()):
        P = e["size"]
        missing = tuple(sorted(set(range(P)) - e["ranks"])) if isinstance(P, int) else ()
        complete = P is not None and e["ranks"] == set(range(P))
        out.append(CachedStep(step, P, e["nbytes"], tuple(e["nodes"]), len(e["ranks"]), complete, e["layout"], missing))
    return out
