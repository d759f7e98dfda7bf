"""Checkpoint management (layer 6): policies, atomic commits, retention, discovery, the decorator.

Learned from orbax-checkpoint's ``CheckpointManager`` (policies as small
objects), SCR (``SCR_Need_checkpoint``, halt before the wall-time limit,
falling back to the previous checkpoint) and GSD (a frame is valid only once
it is committed).
"""

from __future__ import annotations

from ._decorator import checkpointable
from ._manager import (
    HISTORY,
    CheckpointManager,
    CheckpointRecord,
    ManagerError,
    SaveHandle,
    StepAlreadyExistsError,
    StepMetadata,
    StepNotFoundError,
    read_history,
)
from ._policies import (
    AnyOf,
    BeforeWallTime,
    Decision,
    EveryNSeconds,
    EveryNSteps,
    Moment,
    Never,
    OnFileTrigger,
    OnSignal,
    SavePolicy,
    slurm_end_time,
)
from ._retention import KeepAll, KeepAny, KeepBest, KeepEvery, KeepEveryNSeconds, KeepLast, KeepPolicy
from ._scheduler import job_end_time

__all__ = [
    "HISTORY",
    "AnyOf",
    "BeforeWallTime",
    "CheckpointManager",
    "CheckpointRecord",
    "Decision",
    "EveryNSeconds",
    "EveryNSteps",
    "KeepAll",
    "KeepAny",
    "KeepBest",
    "KeepEvery",
    "KeepEveryNSeconds",
    "KeepLast",
    "KeepPolicy",
    "ManagerError",
    "Moment",
    "Never",
    "OnFileTrigger",
    "OnSignal",
    "SaveHandle",
    "SavePolicy",
    "StepAlreadyExistsError",
    "StepMetadata",
    "StepNotFoundError",
    "checkpointable",
    "job_end_time",
    "read_history",
    "slurm_end_time",
]
