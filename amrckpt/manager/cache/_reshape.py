"""Cached steps of another job shape: flushed into the shared file by the ranks of this job, or reported unreachable.

A cached step holds each old rank's exact ``(offset, bytes)`` runs of the
final file (:mod:`amrckpt.manager.cache`), so any set of ranks can write
them.  A restart on another process count or node layout than the one that
cached a step newer than the directory's newest:

- finds the step in every node cache directory that its ranks see
  (:func:`~amrckpt.manager.cache._layout.node_directories`: with ``{node}`` in the
  cache's path each node sees its own directory; on one machine, all);
- hands old rank ``q``'s pieces to new rank ``q % Q`` if that rank sees a
  copy (its own or a partner's), else to the next rank after it, cyclically,
  that sees one (one allreduce of ``P_old`` ints: the smallest such distance);
- flushes the step with those pieces
  (:func:`~amrckpt.manager.cache._flush.commit_pieces`: the flush's write and
  commit, the file byte for byte a direct save's, with the cached step's
  records), and the restart loads that file on the new process count;
- or, if some old rank's pieces are in no directory that a rank sees,
  returns what is missing (:class:`Unreachable`): the restart warns and
  takes an older step.

Every decision is taken from agreed values, the same on every rank.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..._logging import RankLogger
from ...comm import Call
from ...errors import ManagerError
from ...scda import FileAccess
from .._directory import CheckpointDirectory
from .._retention import KeepPolicy
from ._flush import commit_pieces
from ._layout import NodeCache, NodeLayout, shape_of
from ._level import CacheLevel
from ._pieces import Pieces, read_pieces

__all__ = ["Unreachable", "flush_other_shape", "newest_other_shape"]

_LOW = -(1 << 62)  # what a rank that sees no copy sends for the negated maxima
_MAX_RANKS = 1 << 24  # a step.json that says more ranks is not believed


@dataclass(frozen=True)
class Unreachable:
    """A cached step of another job shape that the ranks of this job cannot all reach (the same on every rank).

    Attributes
    ----------
    step : int
    size : int
        The process count that cached it.
    layout : int
        The digest of the node layout that cached it (:attr:`~amrckpt.manager.cache._layout.NodeLayout.digest`).
    missing : tuple of int
        The old ranks whose pieces are in no node directory that a rank of this job sees.
    """

    step: int
    size: int
    layout: int
    missing: tuple[int, ...]


def _other_shape(
    cache: NodeCache, prefix: str, layout: NodeLayout, step: int | None, below: int | None
) -> dict[int, list[tuple[Path, dict[str, Any]]]]:
    """Return the committed cached steps of another shape than this job's in every node directory this rank sees, by step.

    Each with its directories and their ``step.json``; only ``step`` if
    given, else those below ``below``.  Not collective.
    """
    size, digest = layout.node_of.shape[0], layout.digest
    out: dict[int, list[tuple[Path, dict[str, Any]]]] = {}
    for d in cache.existing().values():
        level = CacheLevel(d, prefix)
        for s, path in level.steps().items():
            if (step is not None and s != step) or (below is not None and s >= below):
                continue
            info = level.info(s)
            if info is None or not isinstance(info.get("size"), int) or info["size"] < 1:
                continue
            if info.get("size") != size or info.get("layout") != digest:
                out.setdefault(s, []).append((path, info))
    return out


def newest_other_shape(call: Call, cache: NodeCache, prefix: str, layout: NodeLayout, below: int | None = None) -> int | None:
    """Return the newest step below ``below`` that a node directory seen by some rank holds, cached by another shape.

    Collective, agreeing (one allreduce).  Another shape: another process
    count or node layout than ``layout`` (this job's).
    """
    got = call.run(lambda: max(_other_shape(cache, prefix, layout, None, below), default=-1))
    red = call.reduction("cache: newest step of another shape").max("step", got if got is not None else -1)
    top = int(red.run().max("step"))
    return None if top < 0 else top


def _files(paths: list[Path]) -> dict[int, list[Path]]:
    """Return the pieces files in the cached step directories ``paths``, by the old rank in their name (own and partner copies)."""
    out: dict[int, list[Path]] = {}
    for p in paths:
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(p)):
                if name.startswith("rank-") and name.endswith(".pieces") and name[5:-7].isdigit():
                    out.setdefault(int(name[5:-7]), []).append(p / name)
    return out


def flush_other_shape(
    call: Call,
    cache: NodeCache,
    prefix: str,
    layout: NodeLayout,
    directory: CheckpointDirectory,
    step: int,
    *,
    access: FileAccess,
    keep_policy: KeepPolicy,
    log: RankLogger,
) -> Unreachable | int:
    """Flush the cached ``step`` of another job shape into ``directory`` with this job's ranks. Collective, agreeing.

    Every rank looks for the step in the node directories it sees; the
    ranks agree on the old shape (process count, layout and size of the
    file, the same in every copy) and on who writes which old rank's
    pieces (one allreduce of ``P_old`` ints); each rank reads those it
    writes, checking their CRC32s (a copy that fails is replaced by
    another that the rank sees), and the step is committed as a flush
    commits it (:func:`~amrckpt.manager.cache._flush.commit_pieces`).

    Returns
    -------
    Unreachable or int
        What is missing if some old rank's pieces are in no directory that
        a rank sees (nothing is written); else the bytes of the file flushed.

    Raises
    ------
    ManagerError
        On every rank, if the copies disagree on the step's shape, or a
        rank finds every copy it sees of some pieces damaged; nothing is
        written.
    AmrckptError
        On every rank, what the write or the commit raised; the shared
        directory is then as before, the cached step untouched.
    """
    rank, Q = call.comm.rank, call.comm.size
    seen = call.run(lambda: _other_shape(cache, prefix, layout, step, None).get(step, [])) or []
    facts = {(i.get("size"), i.get("layout"), i.get("nbytes")) for _, i in seen}  # one, unless the copies disagree
    one = next(iter(facts)) if len(facts) == 1 else None
    bad = len(facts) > 1 or (one is not None and not all(isinstance(v, int) and 0 <= v < 1 << 62 for v in one))
    vals = [int(v) for v in one] if one is not None and not bad else [-1, -1, -1]  # type: ignore[arg-type]
    low = vals if one is not None and not bad else [-_LOW] * 3  # a rank that saw no copy has no say in the minimum
    red = call.reduction("cache: the shape of a cached step").max("disagree", int(bad))
    top = red.max("shape", vals).min("shape", low).run()
    high, least = top.max("shape"), top.min("shape")
    if top.max("disagree") or not 1 <= high[0] <= _MAX_RANKS or high != least:
        raise call.agreed(ManagerError(f"the copies of the cached step {step} disagree on its shape (ranks, layout, bytes)"))
    P_old, old_layout, file_nbytes = int(high[0]), int(high[1]), int(high[2])
    files = _files([p for p, _ in seen])
    qs = np.fromiter((q for q in files if q < P_old), dtype=np.int64)
    key = np.full(P_old, Q, dtype=np.int64)
    key[qs] = (rank - qs) % Q  # the distance from q's preferred rank (q % Q) to this rank
    dist = call.allreduce_array(key, "min")
    call.agree("cache: who writes which pieces")
    missing = np.flatnonzero(dist >= Q)
    if missing.shape[0]:
        return Unreachable(step, P_old, old_layout, tuple(int(q) for q in missing))
    mine = np.flatnonzero((np.arange(P_old) + dist) % Q == rank).tolist()
    held: list[Pieces] = []

    def read() -> None:
        for q in mine:  # the old ranks this rank writes: about P_old / Q pieces files
            problem = ""
            for f in files[q]:
                try:
                    p = read_pieces(f)
                except ManagerError as exc:
                    problem = str(exc)
                    continue
                if p.rank == q and p.end <= file_nbytes:
                    held.append(p)
                    break
                p.close()
                problem = f"{f.name} holds the pieces of rank {p.rank} or reaches beyond the file's {file_nbytes} bytes"
            else:
                raise ManagerError(
                    f"the cached step {step}: every copy of the pieces of rank {q} that rank {rank} sees is damaged ({problem})"
                )

    try:
        call.run(read)
        call.agree("cache: read the pieces")
        log.info("flushing the cached step %d of %s with %d ranks", step, shape_of(P_old, old_layout), Q)
        info = seen[0][1] if seen else None
        pieces = [piece for p in held for piece in p.pieces]
        nrounds = max((p.nrounds for p in held), default=1)
        return commit_pieces(call, directory, step, pieces, nrounds, info, access=access, keep_policy=keep_policy, log=log)
    finally:
        for p in held:
            p.close()
