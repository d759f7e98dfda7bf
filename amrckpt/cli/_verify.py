"""``amrckpt verify``: structure and CRC32s of checkpoints and any scda file (:func:`amrckpt.container.verify_file`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..comm import collective
from ..container import VerifyReport, verify_file
from ._common import EXIT_BAD, EXIT_OK, _dump_json, _out, _progress, _world_comm, safe_str

STATUS = {
    "incomplete": "INCOMPLETE",
    "damaged": "DAMAGED",
    "unreadable": "UNREADABLE",
    "not-scda": "NOT-SCDA",
    "invalid": "INVALID",
}
"""The status printed for a file, by the kind of its first problem."""


def _doc(rep: VerifyReport) -> dict[str, Any]:
    """Return the JSON document of one file's report."""
    doc: dict[str, Any] = {"path": rep.path, "kind": rep.kind, "ok": rep.ok}
    doc["status"] = "OK" if rep.ok else STATUS[rep.problems[0].kind]
    doc["problems"] = [p.message for p in rep.problems]
    doc["problem_details"] = [
        {"kind": p.kind, "section": p.section, "offset": p.offset, "end": p.end, "message": p.message} for p in rep.problems
    ]
    if rep.info is not None:
        m = rep.info.manifest
        doc.update(schema=f"{m.schema_name} v{m.schema_version}", step=m.values.get("step"), num_leaves=m.num_leaves)
    doc.update(sections=rep.sections, file_size=rep.file_size)
    if rep.kind == "scda":
        doc["compressed"] = rep.compressed
    return doc


def _print(doc: dict[str, Any]) -> None:
    path = safe_str(doc["path"])
    if doc["ok"]:
        if doc["kind"] == "checkpoint":
            what = f"checkpoint {safe_str(str(doc.get('schema')))}, step {safe_str(str(doc.get('step')))}, "
            what += f"{doc.get('num_leaves')} leaves, {doc.get('file_size')} bytes: every section matches its CRC32"
        else:
            n = doc["sections"]
            what = f"scda file, {n} section{'s' if n != 1 else ''}, {doc['file_size']} bytes: every section read"
            what += f" ({doc['compressed']} compressed: decoded)" if doc.get("compressed") else ""
        _out(f"{'OK':<11} {path}: {what}")
        return
    first, *rest = doc["problems"]
    _out(f"{doc['status']:<11} {path}: {safe_str(first)}")
    for p in rest:
        _out(f"{'':<11} {path}: {safe_str(p)}")


def _cmd_verify(args: argparse.Namespace) -> int:
    paths = [os.fspath(p) for p in args.files]
    with collective(_world_comm(), "amrckpt verify") as call:
        total = sum(os.stat(p).st_size for p in paths if os.path.isfile(p))
        bar = _progress(total, "verify", call.comm, not args.no_progress)
        docs = []
        try:
            for p in paths:
                docs.append(_doc(verify_file(p, comm=call.comm, strict=args.strict, progress=bar, complete=args.complete or None)))
                if call.rank == 0 and not args.json:
                    _print(docs[-1])
        finally:
            bar.close()
    if call.rank == 0 and args.json:
        _dump_json(docs)
    return EXIT_OK if all(d["ok"] for d in docs) else EXIT_BAD
