"""``amrckpt ls``: the checkpoints a CheckpointManager wrote in a directory."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ..comm import SerialComm
from ..container import (
    CheckpointInfo,
    read_info,
)
from ..container import verify as verify_checkpoint
from ..errors import AmrckptError
from ..manager import read_history
from ._common import EXIT_BAD, EXIT_OK, _describe, _dump_json, _human, _out, _UsageError


def _ls_records(directory: Path, prefix: str, full: bool, quick: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """List the checkpoints in ``directory`` as CheckpointManager.history finds them, read-only.

    Each record says how far it was checked (``checked``): ``"every byte"``
    (:func:`amrckpt.verify`) or ``"metadata"`` (footer, index and metadata
    CRCs, :func:`amrckpt.read_info`).  Without ``full``, the restart target
    is still checked byte for byte, newest first, as a restart reads it
    (every byte against its CRC32): a damaged newest checkpoint is marked
    invalid and the previous one is checked in turn, so that the one marked
    ``restart`` is the one a restart takes.  With ``quick``, nothing is
    checked beyond the metadata.
    """
    pattern = re.compile(re.escape(prefix) + r"-(\d{12,})\.scda")
    files: dict[int, Path] = {}
    partial = []
    for p in directory.iterdir():
        mt = pattern.fullmatch(p.name)
        if mt:
            files[int(mt.group(1))] = p
        elif p.name.startswith(f".{prefix}-") and ".partial-" in p.name:
            partial.append(p.name)
    logged = read_history(directory)
    records = []
    for step, p in sorted(files.items()):
        e = logged.get(step, {})
        rec: dict[str, Any] = {"step": step, "path": str(p), "name": p.name, "valid": True, "problem": None}
        rec["checked"] = "every byte" if full else "metadata"
        try:
            rec["nbytes"] = p.stat().st_size
        except OSError:
            rec["nbytes"] = 0
        info: CheckpointInfo | None = None
        if full:
            rep = verify_checkpoint(p)
            info = rep.info
            if not rep.ok:
                rec.update(valid=False, problem=rep.problems[0])
        else:
            try:
                info = read_info(p, comm=SerialComm())
            except (AmrckptError, OSError) as exc:
                rec.update(valid=False, problem=_describe(exc))
        t = info.manifest.values.get("time") if info is not None else None
        rec["time"] = t if isinstance(t, (int, float)) else e.get("time")
        rec["writer_size"] = (info.writer_size if info is not None else None) or e.get("writer_size")
        rec["saved_at"] = (info.saved_at if info is not None else None) or e.get("saved_at")
        rec["save_seconds"] = e.get("save_seconds")
        rec["reason"] = e.get("reason")
        rec["metrics"] = e.get("metrics")
        rec["metadata"] = e.get("metadata")
        rec["schema"] = f"{info.manifest.schema_name} v{info.manifest.schema_version}" if info is not None else None
        records.append(rec)
    if not full and not quick:  # the restart target: checked byte for byte, as a restart reads it
        for r in reversed(records):
            if not r["valid"]:
                continue
            rep = verify_checkpoint(r["path"])
            r["checked"] = "every byte"
            if rep.ok:
                break
            r.update(valid=False, problem=rep.problems[0])
    newest = next((r for r in reversed(records) if r["valid"]), None)
    for r in records:
        r["restart"] = r is newest
    return records, sorted(partial)


def _cmd_ls(args: argparse.Namespace) -> int:
    d = Path(args.directory)
    if not d.is_dir():
        raise _UsageError(f"{d} is not a directory")
    if args.verify and args.quick:
        raise _UsageError("--verify and --quick exclude each other")
    records, partial = _ls_records(d, args.prefix, args.verify, args.quick)
    newest = next((r for r in records if r["restart"]), None)
    if args.json:
        _dump_json({"directory": str(d), "checkpoints": records, "partial": partial, "restart": newest["name"] if newest else None})
        return EXIT_OK if all(r["valid"] for r in records) else EXIT_BAD
    if not records:
        _out(f"{d}: no checkpoints named {args.prefix}-<step>.scda")
    else:
        rows = [("", "FILE", "STEP", "TIME", "SIZE", "WRITERS", "SAVED AT (UTC)", "STATUS")]
        for r in records:
            t = r["time"]
            if r["valid"]:
                status = "valid (every byte)" if r["checked"] == "every byte" else "valid (metadata only)"
            else:
                status = f"INVALID: {r['problem']}"
            rows.append(
                (
                    "*" if r["restart"] else "",
                    r["name"],
                    str(r["step"]),
                    f"{t:g}" if isinstance(t, (int, float)) else "-",
                    _human(r["nbytes"]),
                    str(r["writer_size"]) if r["writer_size"] is not None else "-",
                    r["saved_at"] or "-",
                    status,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        right = {2, 3, 4, 5}
        for row in rows:
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row[:-1], widths, strict=True))]
            _out(" ".join(cells) + " " + row[-1])
    for name in partial:
        _out(f"  {name}: a save that did not finish (the next manager removes it)")
    if newest is not None and newest["checked"] == "metadata":
        _out(
            f"* a restart would try {newest['name']} (step {newest['step']}) first: the newest whose metadata verify "
            "(--quick: its data were not checked; a restart falls back if they are damaged)"
        )
    elif newest is not None:
        _out(
            f"* a restart takes {newest['name']} (step {newest['step']}): the newest checkpoint whose every byte matches its CRC32s"
        )
        if not args.verify and any(r["checked"] == "metadata" for r in records):
            _out(
                "  (the others: footer, index and metadata checked, not their data; --verify checks every byte of every checkpoint)"
            )
    elif records:
        _out("no valid checkpoint: a restart would start from the beginning")
    return EXIT_OK if all(r["valid"] for r in records) else EXIT_BAD


# -- the parser ---------------------------------------------------------------
