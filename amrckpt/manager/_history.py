"""The history index ``amrckpt-history.jsonl``: the step records of a directory, one JSON line each.

The index is derived: the truth is each committed checkpoint and its step
record (:mod:`amrckpt.manager._records`).  The manager rewrites the index
atomically from the records after each commit, retention and delete, so a
reader (a person, ``jq``, a script) finds every step's facts in one file;
nothing the manager decides reads it.  Damaged or deleted, it is rebuilt at
the next commit; a line that does not parse is skipped.  A directory written
before step records existed has only the index: a manager adopts its lines
as the steps' records when it opens the directory (a line is adopted only
if it describes a checkpoint there, by step and size).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._files import LOCAL, FileSystem, write_atomic
from ._records import RecordError, encode_record, parse_json

__all__ = ["HISTORY", "INDEX_LIMIT", "read_index", "write_index"]

HISTORY = "amrckpt-history.jsonl"
"""The name of the history index in a checkpoint directory."""

INDEX_LIMIT = 256 << 20
"""The largest index read, in bytes."""


def read_index(directory: Path, fs: FileSystem = LOCAL) -> dict[int, dict[str, Any]]:
    """Return the index's newest line of each step (step to its record). Not collective.

    Never raises: a missing or unreadable index (a link, not a regular
    file, too large) gives ``{}``, and a line that is not a JSON object
    with an integer ``step`` is skipped.
    """
    try:
        data = fs.read_regular(directory / HISTORY, INDEX_LIMIT)
    except OSError:
        return {}
    out: dict[int, dict[str, Any]] = {}
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            entry = parse_json(line, "a line of the history")
        except RecordError:
            continue
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            out[step] = entry
    return out


def write_index(directory: Path, records: Mapping[int, Mapping[str, Any]], *, fs: FileSystem = LOCAL, sync: bool = False) -> None:
    """Write the index of ``records`` atomically (a link planted under its name is replaced, not followed). Not collective.

    Raises
    ------
    OSError
        If it cannot be written; the previous index is then as it was.
    """
    data = b"".join(encode_record(dict(records[s])) for s in sorted(records))  # one line per step, by step
    write_atomic(directory / HISTORY, data, sync=sync, fs=fs)
