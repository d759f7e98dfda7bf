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
from typing import Any

from .._logging import RankLogger
from ..comm import Comm, collective
from ..schema import CheckpointSchema, save
from ._directory import CheckpointDirectory
from ._records import step_records
from ._retention import KeepPolicy

__all__ = ["commit_step"]


def commit_step(
    comm: Comm,
    directory: CheckpointDirectory,
    step: int,
    state: CheckpointSchema,
    *,
    save_kwargs: dict[str, Any],
    facts: dict[str, Any],
    keep_policy: KeepPolicy,
    log: RankLogger,
) -> float:
    """Save ``state`` as the checkpoint of ``step`` in ``directory``, with its records; then retention. Collective on ``comm``.

    Parameters
    ----------
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
    with collective(comm, "CheckpointManager.commit") as call:
        token = call.on_root(lambda: directory.begin(step), what="commit: check the directory")
        commit = directory.new_commit(step, token)
        t0 = time.time()
        try:
            result = save(state, commit.tmp, comm=comm, sync=directory.sync, **save_kwargs)
        except BaseException:
            if comm.rank == 0:
                commit.discard()
            raise
        seconds = time.time() - t0
        facts = {**facts, "keep_policy": repr(keep_policy)}
        call.run(lambda: commit.publish(step_records(step, commit.name, result, comm.size, t0, seconds, facts)), on=0)
        try:
            call.agree("commit")
        except BaseException:
            if comm.rank == 0:
                commit.roll_back()
                log.warning("the commit of %s failed; the directory is as before the save", commit.name)
            raise
        log.info("checkpoint %s committed (%d bytes, %.3f s): %s", commit.name, result.nbytes, seconds, facts.get("reason"))
        if comm.rank == 0:
            commit.finish()
            for what, fn in (("retention", lambda: directory.retain(keep_policy, protect=step)), ("index", directory.write_index)):
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - committed already; the other ranks have returned
                    log.warning("checkpoint %s committed, but its %s failed: %s: %s", commit.name, what, type(exc).__name__, exc)
    return seconds
