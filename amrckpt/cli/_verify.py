"""``amrckpt verify``: structure and CRC32s of checkpoints and plain scda files."""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any

from .. import scda
from ..comm import Call, collective
from ..container import verify as verify_checkpoint
from ..errors import AmrckptError, ScdaFormatError
from ._common import EXIT_BAD, EXIT_OK, _describe, _dump_json, _is_checkpoint_file, _out, _progress, _q, _world_comm


def _status_of(problem: str) -> str:
    if "not an scda file" in problem:
        return "NOT-SCDA"
    if problem.startswith(("IncompleteCheckpointError", "ScdaCountError")):
        return "INCOMPLETE"
    if problem.startswith(("ScdaIOError", "ScdaFileNotFoundError", "ScdaPermissionError", "FileNotFoundError", "PermissionError")):
        return "UNREADABLE"
    return "DAMAGED"


def _verify_plain(path: str, call: Call, strict: bool, bar: Any) -> dict[str, Any]:
    comm = call.comm
    try:
        info: scda.FileInfo = call.on_root(lambda: scda.scan(path, decode=True), what="verify: scan")
    except (AmrckptError, OSError) as exc:
        return {"kind": "scda", "problems": [f"{_describe(exc)}"], "sections": None}
    problems: list[str] = []
    done = 0
    with scda.fopen_read(path, comm=comm, strict=strict) as f:
        for s in info.sections:
            try:
                h = f.fread_section_header(decode=True)
                if h is None or h.offset != s.offset:
                    raise ScdaFormatError(f"the file changed while it was read: no section at byte {s.offset}")
                scda.read_section_data(f, h)
            except AmrckptError as exc:
                problems.append(
                    f"{type(exc).__name__}: section {s.index} ({s.type} {_q(s.user_string)}, bytes {s.offset}..{s.end}): {exc}"
                )
                break
            bar.update(s.end - done)
            done = s.end
        else:
            try:
                if f.fread_section_header() is not None:
                    problems.append(f"a section at byte {f.offset} that the scan did not list")
            except AmrckptError as exc:
                problems.append(f"{_describe(exc)}")
    bar.update(info.file_size - done)
    compressed = sum(1 for s in info.sections if s.compressed)
    return {
        "kind": "scda",
        "problems": problems,
        "sections": len(info.sections),
        "compressed": compressed,
        "file_size": info.file_size,
    }


def _verify_one(path: str, call: Call, strict: bool, bar: Any) -> dict[str, Any]:
    comm = call.comm

    def detect() -> bool | str:
        try:
            return _is_checkpoint_file(path)
        except OSError as exc:
            return f"{type(exc).__name__}: cannot read {path!r}: {exc.strerror or exc}"

    is_ckpt = call.on_root(detect, what="verify: sniff")
    if isinstance(is_ckpt, str):
        return {"path": path, "kind": None, "status": "UNREADABLE", "ok": False, "problems": [is_ckpt]}
    if is_ckpt:
        rep = verify_checkpoint(path, comm=comm)
        doc: dict[str, Any] = {"kind": "checkpoint", "problems": list(rep.problems)}
        if rep.info is not None:
            m = rep.info.manifest
            doc.update(
                schema=f"{m.schema_name} v{m.schema_version}",
                step=m.values.get("step"),
                num_leaves=m.num_leaves,
                sections=len(rep.info.index.sections) + 1,
            )
        with contextlib.suppress(OSError):
            doc["file_size"] = os.stat(path).st_size
            bar.update(doc["file_size"])
    else:
        doc = _verify_plain(path, call, strict, bar)
    doc["path"] = path
    doc["ok"] = not doc["problems"]
    doc["status"] = "OK" if doc["ok"] else _status_of(doc["problems"][0])
    return doc


def _print_verify(doc: dict[str, Any]) -> None:
    path = doc["path"]
    if doc["ok"]:
        if doc["kind"] == "checkpoint":
            what = f"checkpoint {doc.get('schema')}, step {doc.get('step')}, {doc.get('num_leaves')} leaves, "
            what += f"{doc.get('file_size')} bytes: every section matches its CRC32"
        else:
            n = doc["sections"]
            what = f"scda file, {n} section{'s' if n != 1 else ''}, {doc['file_size']} bytes: every section read"
            what += f" ({doc['compressed']} compressed: decoded)" if doc.get("compressed") else ""
        _out(f"{'OK':<11} {path}: {what}")
        return
    first, *rest = doc["problems"]
    _out(f"{doc['status']:<11} {path}: {first}")
    for p in rest:
        _out(f"{'':<11} {path}: {p}")


def _cmd_verify(args: argparse.Namespace) -> int:
    with collective(_world_comm(), "amrckpt verify") as call:
        return _verify_cmd(call, args)


def _verify_cmd(call: Call, args: argparse.Namespace) -> int:
    c = call.comm
    paths = [os.fspath(p) for p in args.files]
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += os.stat(p).st_size
    bar = _progress(total, "verify", c, not args.no_progress)
    docs = []
    try:
        for p in paths:
            try:
                doc = _verify_one(p, call, args.strict, bar)
            except (AmrckptError, OSError) as exc:  # the same on every rank: the library agrees on errors
                doc = {"path": p, "kind": None, "ok": False, "problems": [_describe(exc)], "status": "UNREADABLE"}
            docs.append(doc)
            if c.rank == 0 and not args.json:
                _print_verify(doc)
    finally:
        bar.close()
    if c.rank == 0 and args.json:
        _dump_json(docs)
    return EXIT_OK if all(d["ok"] for d in docs) else EXIT_BAD


# -- convert ------------------------------------------------------------------
