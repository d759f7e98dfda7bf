"""Checkpoint management (layer 6): policies, atomic commits, retention, discovery, the decorator.

Learned from orbax-checkpoint's ``CheckpointManager`` (policies as small
objects), SCR (``SCR_Need_checkpoint``, halt before the wall-time limit,
falling back to the previous checkpoint) and GSD (a frame is valid only once
it is committed).
"""

from __future__ import annotations

from .._files import FileSystem, LocalFileSystem
from ..errors import ManagerError, StepAlreadyExistsError, StepNotFoundError
from ._decorator import checkpointable
from ._directory import CheckpointDirectory, read_history
from ._handle import SaveHandle
from ._history import HISTORY
from ._lock import LOCK
from ._manager import CheckpointManager
from ._names import StepNames
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
from ._records import CheckpointRecord, StepMetadata
from ._restore import Restored, Skipped
from ._retention import KeepAll, KeepAny, KeepBest, KeepEvery, KeepEveryNSeconds, KeepLast, KeepPolicy
from ._scheduler import job_end_time
from .cache import CachedStep, NodeCache, list_cache

__all__ = [
    "HISTORY",
    "AnyOf",
    "CachedStep",
    "BeforeWallTime",
    "LOCK",
    "CheckpointDirectory",
    "CheckpointManager",
    "CheckpointRecord",
    "Decision",
    "EveryNSeconds",
    "EveryNSteps",
    "FileSystem",
    "KeepAll",
    "KeepAny",
    "KeepBest",
    "KeepEvery",
    "KeepEveryNSeconds",
    "KeepLast",
    "KeepPolicy",
    "LocalFileSystem",
    "ManagerError",
    "Moment",
    "Never",
    "NodeCache",
    "OnFileTrigger",
    "OnSignal",
    "Restored",
    "SaveHandle",
    "SavePolicy",
    "Skipped",
    "StepAlreadyExistsError",
    "StepMetadata",
    "StepNames",
    "StepNotFoundError",
    "checkpointable",
    "job_end_time",
    "list_cache",
    "read_history",
    "slurm_end_time",
]
