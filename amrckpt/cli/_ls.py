"""``amrckpt ls``: the checkpoints a CheckpointManager wrote in a directory (:class:`amrckpt.manager.CheckpointDirectory`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from ..container import verify
from ..manager import CheckpointDirectory, list_cache
from ._common import EXIT_BAD, EXIT_OK, _dump_json, _human, _out, _UsageError, safe_str


def _ls_records(directory: Path, prefix: str, full: bool, quick: bool = False) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """List the checkpoints in ``directory`` as CheckpointManager.history finds them, read-only (no lock, nothing removed).

    Each record says how far it was checked (``checked``): ``"every byte"``
    (:func:`amrckpt.verify`) or ``"metadata"`` (footer, index and metadata
    CRCs).  Without ``full``, the restart target is still checked byte for
    byte, newest first, as a restart reads it: a damaged newest checkpoint
    is marked invalid and the previous one is checked in turn, so that the
    one marked ``restart`` is the one a restart takes.  With ``quick``,
    nothing is checked beyond the metadata.  Returns the records, the
    temporary files of saves that did not finish, and the files kept aside.
    """
    d = CheckpointDirectory(directory, prefix=prefix)
    listing = d.listing()
    records = []
    for r in d.history():
        rec: dict[str, Any] = dataclasses.asdict(r)
        rec["name"] = Path(r.path).name
        rec["checked"] = "metadata"
        if full and r.valid:
            rep = verify(r.path)
            rec["checked"] = "every byte"
            if not rep.ok:
                rec.update(valid=False, problem=rep.problems[0].message)
        records.append(rec)
    if not full and not quick:  # the restart target: checked byte for byte, as a restart reads it
        for rec in reversed(records):
            if not rec["valid"]:
                continue
            rep = verify(rec["path"])
            rec["checked"] = "every byte"
            if rep.ok:
                break
            rec.update(valid=False, problem=rep.problems[0].message)
    newest = next((r for r in reversed(records) if r["valid"]), None)
    for rec in records:
        rec["restart"] = rec is newest
    aside = [name for name, _ in listing.aside]
    return records, listing.partial(), aside


def _cmd_ls(args: argparse.Namespace) -> int:
    d = Path(args.directory)
    if not d.is_dir():
        raise _UsageError(f"{d} is not a directory")
    if args.verify and args.quick:
        raise _UsageError("--verify and --quick exclude each other")
    records, partial, aside = _ls_records(d, args.prefix, args.verify, args.quick)
    newest = next((r for r in records if r["restart"]), None)
    steps = list_cache(args.cache, args.prefix) if args.cache else []
    cached = [dataclasses.asdict(c) | {"shape": c.shape, "missing_ranks": c.missing_ranks} for c in steps]
    flushed = {r["step"] for r in records if r["valid"]}
    for c in cached:
        c["flushed"] = c["step"] in flushed
    if args.json:
        doc: dict[str, Any] = {"directory": str(d), "checkpoints": records, "partial": partial, "kept_aside": aside}
        plan = restart_plan(cached, newest)
        doc |= {"cache": {"directory": str(args.cache), "steps": cached, "restart": plan}} if args.cache else {}
        _dump_json(doc | {"restart": newest["name"] if newest else None})
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
            _out(safe_str(" ".join(cells) + " " + row[-1]))
    for name in partial:
        _out(f"  {safe_str(name)}: a save that did not finish (the next manager removes it)")
    for name in aside:
        _out(f"  {safe_str(name)}: kept aside by a restart that found it damaged or unreadable (never removed by a manager)")
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
    if args.cache:
        _ls_cache(args.cache, cached, newest)
    return EXIT_OK if all(r["valid"] for r in records) else EXIT_BAD


def _ls_cache(root: str, cached: list[dict[str, Any]], newest: dict[str, Any] | None) -> None:
    """Print the node caches' level: each cached step, its nodes, whether every rank's pieces are there, whether flushed.

    Then what a restart does with the cached steps newer than the
    directory's newest (:meth:`~amrckpt.CheckpointManager.restore_latest`):
    read in place (the shape that wrote it), flush then load (another
    process count or node layout), or pass over a step that cannot be
    reached (some rank's pieces on no node), and why.
    """
    if not cached:
        _out(f"node caches under {safe_str(root)}: no cached steps")
        return
    _out(f"node caches under {safe_str(root)} (the first level: each rank's pieces of the file, on its node and its partners):")
    rows = [("STEP", "WRITERS", "SIZE", "NODES", "PIECES", "STATUS")]
    for c in cached:
        status = ("complete" if c["complete"] else "INCOMPLETE") + (", flushed" if c["flushed"] else ", not flushed")
        size = _human(c["nbytes"]) if c["nbytes"] is not None else "-"
        P = str(c["size"]) if c["size"] is not None else "-"
        rows.append((str(c["step"]), P, size, ",".join(c["nodes"]), f"{c['ranks']}/{P}", status))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        _out(safe_str("  " + " ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + " " + row[-1]))
    for line in restart_plan(cached, newest):
        _out(safe_str("  " + line))


def restart_plan(cached: list[dict[str, Any]], newest: dict[str, Any] | None) -> list[str]:
    """Say what a restart does with the cached steps newer than the directory's ``newest`` (lines of text). Not collective."""
    floor = newest["step"] if newest is not None else None
    there = f"takes the directory's newest, {newest['name']} (step {floor})" if newest is not None else "starts from the beginning"
    out: list[str] = []
    for c in reversed(cached):  # newest first, as a restart tries them
        if floor is not None and c["step"] <= floor:
            break
        if not c["complete"]:
            out.append(
                f"the cached step {c['step']} (written by {c['shape']}) cannot be reached from here: the pieces of "
                f"{c['missing_ranks']} are in no node directory under this cache; a restart passes over it (warning "
                "if it has another process count or node layout) and the cache's retention keeps it"
            )
            continue
        out.append(
            f"a restart takes the cached step {c['step']} (written by {c['shape']}): a restart of that shape (the same "
            "process count and node layout) reads it in place from the pieces and flushes it at close(); a restart on "
            "another process count or node layout first flushes it from the pieces into the directory (the same bytes "
            "as a direct save) and then loads that file"
        )
        return out
    if out:
        out.append(f"so a restart {there}")
    return out
