"""One step saved into a checkpoint directory: written under its temporary name by every rank, committed by rank 0, agreed.

The collective half of the commit (:mod:`amrckpt.manager._commit` is rank
0's file-system half): every rank writes and syncs the checkpoint under its
temporary name (a direct save's :func:`amrckpt.save`, a flush's pieces), rank 0 publishes it with its records,
and the ranks agree.  The agreement after the rename is the commit point:
if it fails (an error of rank 0's, a communication error), rank 0 undoes the
commit, so that a save that raises never leaves a new checkpoint behind.
After it, rank 0's retention and index rewrite are advisory: logged, never
raised (the other ranks have returned).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._logging import RankLogger
from ..comm import Comm, collective
from ._directory import CheckpointDirectory
from ._retention import KeepPolicy

__all__ = ["commit_file"]


def commit_file(
    comm: Comm,
    directory: CheckpointDirectory,
    step: int,
    write: Callable[[Path], Any],
    records: Callable[[str, Any, float, float], Mapping[str, bytes]],
    *,
    keep_policy: KeepPolicy,
    log: RankLogger,
    reason: Any = None,
) -> float:
    """Write the checkpoint of ``step`` by ``write(tmp)`` (collective) and commit it with ``records``; then retention.

    Collective on ``comm``.  ``write`` writes and syncs the file under its
    temporary name on every rank and returns what it wrote (with an
    ``nbytes``); ``records(name, result, t0, seconds)`` gives the record
    files by suffix (rank 0).  A direct save and a flush of a node cache
    both commit through here.

    Returns
    -------
    float
        The seconds ``write`` took.
    """
    with collective(comm, "CheckpointManager.commit") as call:
        token = call.on_root(lambda: directory.begin(step), what="commit: check the directory")
        commit = directory.new_commit(step, token)
        t0 = time.time()
        try:
            result = write(commit.tmp)
        except BaseException:
            if comm.rank == 0:
                commit.discard()
            raise
        seconds = time.time() - t0
        call.run(lambda: commit.publish(records(commit.name, result, t0, seconds)), on=0)
        try:
            call.agree("commit")
        except BaseException:
            if comm.rank == 0:
                commit.roll_back()
                log.warning("the commit of %s failed; the directory is as before the save", commit.name)
            raise
        log.info("checkpoint %s committed (%d bytes, %.3f s): %s", commit.name, result.nbytes, seconds, reason)
        if comm.rank == 0:
            commit.finish()
            for what, fn in (("retention", lambda: directory.retain(keep_policy, protect=step)), ("index", directory.write_index)):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - committed already; the other ranks have returned
                    log.warning("checkpoint %s committed, but its %s failed: %s: %s", commit.name, what, type(exc).__name__, exc)
    return seconds
