"""A step's record: what the manager knows of one checkpoint besides its bytes, committed with it.

The step record ``<checkpoint>.step.json`` holds why the checkpoint was
written, when, how long it took, by how many processes, the ``metrics`` and
``metadata`` of the save, and the size and a fingerprint of the file it
belongs to.  It is written beside the checkpoint before the checkpoint's
rename (:mod:`amrckpt.manager._commit`), so a committed checkpoint has its
record; a record that does not parse, or that describes another file, makes
the step's facts unknown (``CheckpointDirectory.read_record`` says why), which a retention
policy that judges by them respects (it keeps the step).

Records are read defensively: a record is small (at most
:data:`RECORD_LIMIT` bytes), and whatever is in the file (invalid UTF-8,
numbers out of range, JSON nested beyond Python's recursion limit) makes
the record unreadable, never an exception.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..comm import Call, digest_of
from ..container import RUN_RECORD_SUFFIX, CheckpointInfo, Index, run_record_json
from ..errors import ManagerError
from ._names import STEP_RECORD

__all__ = [
    "RECORD_FORMAT",
    "RECORD_LIMIT",
    "CheckpointRecord",
    "RecordError",
    "StepMetadata",
    "agreed_facts",
    "encode_record",
    "fingerprint",
    "json_facts",
    "parse_json",
    "parse_record",
    "step_records",
]

RECORD_FORMAT = "amrckpt step"
RECORD_LIMIT = 1 << 20
"""The largest step record read, in bytes."""


class RecordError(ValueError):
    """A step record that cannot be used (its message says why)."""


def fingerprint(index: Index) -> str:
    """Return a fingerprint of a checkpoint: the CRC32 of its index's (offset, end, CRC32) triples, in hex."""
    text = ";".join(f"{e.offset}:{e.end}:{e.crc32}" for e in index.sections)
    return f"{zlib.crc32(text.encode()):08x}"


def parse_json(data: bytes | str, what: str) -> Any:
    """Parse JSON from a file, turning whatever it holds into :class:`RecordError` (never another exception).

    Raises
    ------
    RecordError
        For invalid UTF-8, invalid JSON, numbers out of range, nesting deeper than the interpreter can follow.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise RecordError(f"{what} is not UTF-8 (byte {exc.start})") from exc
    except RecursionError as exc:
        raise RecordError(f"{what} is nested too deeply") from exc
    except (ValueError, OverflowError, TypeError, MemoryError) as exc:
        raise RecordError(f"{what} is not valid JSON: {exc}") from exc


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def parse_record(data: bytes, step: int, what: str) -> dict[str, Any]:
    """Return the step record in ``data`` (a dict), checked to be of ``step``; raise RecordError otherwise. Not collective.

    The keys that the manager and its policies read are checked for their
    types (``step``, ``nbytes``: int; ``metrics``, ``metadata``: dict or
    absent; ``time``, ``save_seconds``, ``saved_at_unix``: finite numbers
    or absent); unknown keys are kept (a later version's).

    Raises
    ------
    RecordError
        On this rank, if ``data`` is not JSON, not a JSON object, the record of another step, or a key's value is not
        of its type.
    """
    record = parse_json(data, what)
    if not isinstance(record, dict):
        raise RecordError(f"{what} is not a JSON object")
    if _int(record.get("step")) != step:
        raise RecordError(f"{what} is not the record of step {step} (its step: {str(record.get('step'))[:40]})")
    for key in ("metrics", "metadata"):
        if record.get(key) is not None and not isinstance(record[key], dict):
            raise RecordError(f"{what}: {key} is not a JSON object")
    for key in ("time", "save_seconds", "saved_at_unix"):
        if record.get(key) is not None and _number(record[key]) is None:
            raise RecordError(f"{what}: {key} is not a finite number")
    for key in ("nbytes", "writer_size"):
        if record.get(key) is not None and _int(record[key]) is None:
            raise RecordError(f"{what}: {key} is not an integer")
    return record


def step_records(
    step: int, name: str, result: Any, writer_size: int, t0: float, seconds: float, facts: dict[str, Any]
) -> dict[str, bytes]:
    """Return the record files of a step by suffix: its run record (if ``result`` has one) and its step record.

    What depends on the run goes beside the checkpoint, never in it (the
    file is a function of the state).  ``result`` is the save's
    :class:`~amrckpt.SaveResult`; ``facts`` holds ``reason``, ``time``,
    ``keep_policy``, and the save's ``metrics`` and ``metadata``.  Not collective.
    """
    run = getattr(result, "run", None)
    run = run.model_copy(update={"save_seconds": seconds}) if run is not None else None
    t = facts.get("time")
    record: dict[str, Any] = {"format": RECORD_FORMAT, "step": step, "path": name, "nbytes": result.nbytes}
    record |= {"fingerprint": fingerprint(result.index), "writer_size": writer_size, "save_seconds": seconds}
    record |= {"saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)), "saved_at_unix": t0}
    if run is not None:
        record |= {"hostname": run.hostname, "mpi_library": run.mpi_library, "amrckpt_version": run.amrckpt_version}
    record |= {**facts, "time": None if t is None else float(t)}
    out = {STEP_RECORD: encode_record(record)}
    if run is not None:
        out = {RUN_RECORD_SUFFIX: run_record_json(run), **out}
    return out


def json_facts(metrics: Any, metadata: Any) -> tuple[dict[str, Any], str]:
    """Return a save's ``metrics`` and ``metadata`` as JSON values (for the step record) and their JSON text. Not collective.

    Raises
    ------
    ManagerError
        If they are not dicts with str keys, or not JSON.
    """
    extra: dict[str, Any] = {}
    try:
        for name, value in (("metrics", metrics), ("metadata", metadata)):
            if value is None:
                continue
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ManagerError(f"save: {name} must be a dict with str keys, not {type(value).__name__}")
            extra[name] = json.loads(json.dumps(value))
        return extra, json.dumps(extra, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ManagerError(f"save: metrics and metadata must be JSON: {exc}") from exc


def encode_record(record: dict[str, Any]) -> bytes:
    """Return the bytes of a step record file (one JSON object, sorted keys, a line break)."""
    return (json.dumps(record, sort_keys=True, allow_nan=True) + "\n").encode()


@dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint in a manager's directory (what :meth:`CheckpointManager.history` lists).

    Attributes
    ----------
    step : int
        The simulation step.
    path : str
        The file.
    valid : bool
        Whether its footer, index and metadata verify (CRC32).
    problem : str or None
        Why it is not valid.
    time : float or None
        The simulation time (the schema's inline field ``time``, if any).
    saved_at : str or None
        UTC time the save started (ISO 8601).
    save_seconds : float or None
        Wall-clock seconds the save took, from the start of writing until the file was synced.
    nbytes : int
        The file's size.
    writer_size : int or None
        The number of processes that wrote it.
    reason : str or None
        Why it was written (the policy's reason, or ``"forced"``).
    metrics : dict or None
        The ``metrics`` passed to :meth:`CheckpointManager.save` (JSON), from the step record.
    metadata : dict or None
        The ``metadata`` passed to :meth:`CheckpointManager.save` (JSON), from the step record.
    record_problem : str or None
        Why the step's record is missing or cannot be used (its facts are
        then unknown: retention by metrics or save times keeps the step);
        None when the record is there and describes this file.
    unreadable : bool
        For an invalid checkpoint: whether it could not be read at all
        (``EIO``, ``EACCES``) rather than read and found damaged.
    schema : str or None
        The schema's name and version (``"advection2d v2"``), for a valid checkpoint.
    """

    step: int
    path: str
    valid: bool
    problem: str | None = None
    time: float | None = None
    saved_at: str | None = None
    save_seconds: float | None = None
    nbytes: int = 0
    writer_size: int | None = None
    reason: str | None = None
    metrics: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    record_problem: str | None = None
    unreadable: bool = False
    schema: str | None = None


@dataclass(frozen=True)
class StepMetadata:
    """What :meth:`CheckpointManager.metadata` returns for one step (orbax's ``StepMetadata``).

    Attributes
    ----------
    step : int
        The simulation step.
    path : str
        The checkpoint file.
    info : CheckpointInfo
        What :func:`amrckpt.read_info` reads: the file's manifest (schema,
        fields, dtypes, leaves, inline values such as ``time``) and index,
        checked against their CRC32s, and the run record beside the file
        (writers, save time); the data are not read.
    metrics : dict or None
        The ``metrics`` of the save (JSON), from the step record.
    metadata : dict or None
        The user ``metadata`` of the save (orbax's ``custom_metadata``), from the step record.
    record : dict
        The whole step record (``saved_at``, ``save_seconds``, ``reason``,
        ``writer_size``... and any key later versions add); empty if the
        step has none that can be used (see ``record_problem``).
    record_problem : str or None
        Why the step record is missing or cannot be used, or None.
    """

    step: int
    path: str
    info: CheckpointInfo
    metrics: dict[str, Any] | None
    metadata: dict[str, Any] | None
    record: dict[str, Any]
    record_problem: str | None = None


def agreed_facts(call: Call, metrics: Any, metadata: Any, on_root: Callable[[], Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Check a save's ``metrics`` and ``metadata`` (JSON, equal on every rank); return them for the step record. Collective.

    One allreduce (and, only when they differ, an allgather naming the
    ranks).  ``on_root``, if given, runs on rank 0 and its result comes back
    on every rank with the same allreduce, its errors agreed on there.

    Returns
    -------
    (dict, object)
        The keys to add to the step record, and ``on_root()``'s result (None without it).

    Raises
    ------
    ManagerError
        On every rank, if they are not JSON or differ between ranks (naming the ranks).
    AmrckptError
        On every rank, what ``on_root`` raised.
    """
    extra, text = call.run(json_facts, metrics, metadata) or ({}, "")
    root = call.run(lambda: (on_root() if on_root is not None else None,), on=0)
    got = call.reduction("save: metrics").equal("facts", digest_of(text)).root(root, 0).run()
    if not got.equal("facts"):
        texts = call.allgather(text, what="save: metrics")  # only when they differ: name the ranks
        ranks = [r for r, t in enumerate(texts) if t != texts[0]]
        raise call.agreed(
            ManagerError(
                f"save: metrics or metadata differ between ranks ({ranks} differ from rank 0): pass values reduced over the ranks"
            )
        )
    return extra, got.value[0]
