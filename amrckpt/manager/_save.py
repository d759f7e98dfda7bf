"""One step saved into a checkpoint directory: written under its temporary name by every rank, committed by rank 0, agreed.

The collective half of the commit (:mod:`amrckpt.manager._commit` is rank
0's file-system half): every rank writes and syncs the checkpoint under its
temporary name (:func:`amrckpt.save`), rank 0 publishes it with its records,
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
from ..scda import FileAccess
from ..schema import CheckpointSchema, save
from ._directory import CheckpointDirectory
from ._records import step_records
from ._retention import KeepPolicy

__all__ = ["commit_file", "commit_step"]


def commit_step(
    comm: Comm,
    directory: CheckpointDirectory,
    step: int,
    state: CheckpointSchema,
    *,
    access: FileAccess,
    check_mesh: bool,
    facts: dict[str, Any],
    keep_policy: KeepPolicy,
    log: RankLogger,
) -> float:
    """Save ``state`` as the checkpoint of ``step`` in ``directory``, with its records; then retention. Collective on ``comm``.

    Parameters
    ----------
    access : FileAccess
        How the file is written (its ``sync`` is the directory's).
    check_mesh : bool
        As for :func:`amrckpt.save`.
    facts : dict
        What the step record holds besides the save's own facts: ``reason``,
        ``time``, ``metrics``, ``metadata``...

    Returns
    -------
    float
        The seconds the save took, from the start of writing until the file was synced.

    Raises
    ------
    AmrckptError
        On every rank, what any rank's write or rank 0's commit raised;
        the directory is then as before.
    """
    facts = {**facts, "keep_policy": repr(keep_policy)}

    def write(tmp: Path) -> Any:
        return save(state, tmp, comm=comm, sync=directory.sync, check_mesh=check_mesh, access=access)

    def records(name: str, result: Any, t0: float, seconds: float) -> Mapping[str, bytes]:
        return step_records(step, name, result, comm.size, t0, seconds, facts)

    return commit_file(comm, directory, step, write, records, keep_policy=keep_policy, log=log, reason=facts.get("reason"))


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
