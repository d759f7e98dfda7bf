"""The ``amrckpt`` command-line tool: look into, check, rewrite, draw and list checkpoints.

Subcommands (``amrckpt COMMAND --help`` for each)::

    amrckpt inspect FILE [--json] [--sections]      header, sections, manifest of any scda file
    amrckpt verify FILE...                          structure and CRC32s; exit 1 if any file is damaged
    amrckpt convert IN OUT [--encode | --decode]    rewrite with or without compression, unix or mime
    amrckpt plot FILE --field NAME|level|rank       a PNG of a 2D checkpoint's mesh, or a slice of a 3D one
    amrckpt export SOURCE OUT.vtkhdf                a checkpoint or a manager's directory as VTKHDF (ParaView)
    amrckpt ls DIRECTORY                            the checkpoints a CheckpointManager wrote there

Exit status: 0 on success, 1 when a file is damaged, incomplete or invalid
(or cannot be read), 2 for usage errors; 141 and no message when the reader
of the output goes away (``amrckpt ls DIR | head``).  ``verify`` and ``convert`` run in
parallel when started with ``mpiexec -n P`` (mpi4py is imported only then);
the other subcommands are serial.  Nothing here imports mpi4py, matplotlib or
tqdm at module level.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from . import scda
from ._version import __version__
from .comm import Comm, agree, as_comm, run_on_root
from .container import (
    FOOTER_NBYTES,
    FOOTER_USER_STRING,
    CheckpointInfo,
    CheckpointReader,
    convert,
    dtype_from_json,
    read_info,
    read_raw_metadata,
    read_run_record,
)
from .container import verify as verify_checkpoint
from .errors import AmrckptError, ScdaDecodeError, ScdaFormatError
from .manager import read_history

__all__ = ["build_parser", "main", "safe_text"]

EXIT_OK = 0
EXIT_BAD = 1
EXIT_USAGE = 2
EXIT_PIPE = 141  # 128 + SIGPIPE: the standard output's reader went away
_RANK = [0]  # this process's rank in the communicator of the running command (for error messages)

_INSTALL_MATPLOTLIB = "plot needs matplotlib: pip install matplotlib (or pip install 'amrckpt[examples]')"


class _UsageError(Exception):
    """A usage error found after parsing (exit status 2)."""


# -- small helpers ------------------------------------------------------------


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    if _RANK[0] == 0:
        sys.stderr.write(text + "\n")


def safe_text(b: bytes) -> str:
    r"""Return bytes as printable ASCII: ``\\``, ``\n``, ``\r``, ``\t`` and ``\xNN`` escapes, and ``\"``.

    User strings of scda sections may hold any byte; this shows them on a
    terminal without control characters, and reversibly.

    Parameters
    ----------
    b : bytes
        The bytes to show.

    Returns
    -------
    str
        ASCII text.

    Examples
    --------
    >>> print(safe_text(b'rho <f8\x00\xff"\n'))
    rho <f8\x00\xff\"\n
    """
    named = {0x5C: "\\\\", 0x22: '\\"', 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
    return "".join(named.get(c) or (chr(c) if 0x20 <= c < 0x7F else f"\\x{c:02x}") for c in b)


def _q(b: bytes) -> str:
    return f'"{safe_text(b)}"'


def _human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    x = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        x /= 1024.0
        if x < 1024.0 or unit == "TiB":
            break
    return f"{x:.1f} {unit}"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _jsonable(v: Any) -> Any:
    """JSON-compatible copy of ``v`` (non-finite floats become strings)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _dump_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(doc), indent=1) + "\n")


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, comm: Comm, enabled: bool) -> Any:
    """Return a tqdm byte counter on rank 0 when stderr is a terminal (else a no-op)."""
    if not enabled or comm.rank != 0 or not sys.stderr.isatty():
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)


def _world_comm() -> Any:
    """Return MPI.COMM_WORLD when started by mpiexec/srun on more than one process; None otherwise."""
    size = 1
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
        with contextlib.suppress(ValueError):
            size = max(size, int(os.environ.get(var, "1")))
    if size <= 1:
        return None
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() <= 1:
        return None
    _RANK[0] = MPI.COMM_WORLD.Get_rank()
    return MPI.COMM_WORLD


def _file_style(path: str) -> str:
    """Return the line-break style of a file, from its header's first line."""
    with open(path, "rb") as fh:
        head = fh.read(32)
    return "mime" if head[30:32] == b"\r\n" else "unix"


def _is_checkpoint_file(path: str) -> bool:
    """Whether a file claims to be an amrckpt checkpoint (its header, or a footer at the end)."""
    with open(path, "rb") as fh:
        head = fh.read(scda.FILE_HEADER_NBYTES)
        size = os.fstat(fh.fileno()).st_size
        tail = b""
        if size >= scda.FILE_HEADER_NBYTES + FOOTER_NBYTES:
            fh.seek(size - FOOTER_NBYTES)
            tail = fh.read(FOOTER_NBYTES)
    return head[32:42] == b"F amrckpt " or tail.startswith(b"I " + FOOTER_USER_STRING + b" ")


# -- inspect ------------------------------------------------------------------


def _scan(path: str, check_padding: bool) -> tuple[scda.FileInfo, str | None, str | None]:
    """Scan with the compression convention, without it if the file breaks it, or as far as it goes.

    Returns the sections found, the reason they are listed raw (or None)
    and the error that stopped the scan (or None).
    """
    decode = True
    decode_error = None
    try:
        return scda.scan(path, decode=True, check_padding=check_padding), None, None
    except ScdaDecodeError as exc:
        decode, decode_error = False, _describe(exc)
    except AmrckptError:
        pass
    if not decode:
        try:
            return scda.scan(path, decode=False, check_padding=check_padding), decode_error, None
        except AmrckptError:
            pass
    info, error = scda.scan_partial(path, decode=decode, check_padding=check_padding)
    return info, decode_error, _describe(error) if error is not None else "the scan failed, then succeeded"


def _section_doc(s: scda.SectionInfo) -> dict[str, Any]:
    stored = s.raw[-1].data_nbytes
    return {
        "index": s.index,
        "type": s.type,
        "user_string": safe_text(s.user_string),
        "user_string_hex": s.user_string.hex(),
        "elem_count": s.elem_count,
        "elem_size": s.elem_size,
        "offset": s.offset,
        "end": s.end,
        "nbytes": s.end - s.offset,
        "data_nbytes": s.nbytes,
        "stored_nbytes": stored,
        "compressed": s.compressed,
        "raw": [
            {
                "type": r.type,
                "user_string": safe_text(r.user_string),
                "user_string_hex": r.user_string.hex(),
                "elem_count": r.elem_count,
                "elem_size": r.elem_size,
                "offset": r.offset,
                "end": r.end,
                "data_offset": r.data_offset,
                "data_nbytes": r.data_nbytes,
                "padding": r.padding_form,
            }
            for r in s.raw
        ],
    }


def _dtype_text(fs_dtype: Any) -> str:
    if fs_dtype is None:
        return "-"
    try:
        dt = dtype_from_json(fs_dtype, "dtype")
    except AmrckptError:
        return str(fs_dtype)
    return dt.str if dt.names is None else str(dt.descr)


def _checkpoint_doc(path: str, info: scda.FileInfo) -> dict[str, Any] | None:
    """Return the manifest as a summary, if the file holds one."""
    raw = read_raw_metadata(path, info)
    if raw is None:
        return None
    doc: dict[str, Any] = {}
    if raw.manifest is None:
        return {"error": raw.manifest_error}
    m = raw.manifest
    doc.update(
        schema_name=m.schema_name,
        schema_version=m.schema_version,
        format_version=m.format_version,
        amrckpt_version=m.amrckpt_version,
        num_leaves=m.num_leaves,
        mesh=None if m.mesh is None else {"dim": m.mesh.dim, "num_trees": m.mesh.num_trees, "curve": m.mesh.curve},
        step=m.values.get("step"),
        time=m.values.get("time"),
        values=m.values,
        fields=[
            {
                "name": fs.name,
                "kind": fs.kind,
                "section": fs.section,
                "dtype": _dtype_text(fs.dtype),
                "shape": list(fs.shape),
                "units": fs.units,
                "compressed": fs.compressed,
                **({"layout": fs.layout} if fs.layout else {}),
                **({"chunk": fs.chunk} if fs.chunk else {}),
            }
            for fs in m.fields
        ],
    )
    doc["writer_size"] = None
    run = read_run_record(path)
    prov = run if run is not None else raw.provenance
    if prov is not None:
        doc.update(writer_size=prov.writer_size, saved_at=prov.saved_at, hostname=prov.hostname, mpi_library=prov.mpi_library)
    part = raw.writer_counts
    if part is not None and len(part):
        doc["writer_partition"] = {"processes": len(part), "min_leaves": int(part.min()), "max_leaves": int(part.max())}
        if doc["writer_size"] is None:
            doc["writer_size"] = len(part)
    elif run is not None and run.global_first_quadrant is not None:
        counts = np.diff(np.asarray(run.global_first_quadrant, dtype=np.int64))
        if len(counts):
            doc["writer_partition"] = {"processes": len(counts), "min_leaves": int(counts.min()), "max_leaves": int(counts.max())}
    doc["complete"] = raw.complete
    doc["manifest"] = m.model_dump(mode="json")
    return doc


def _inspect_doc(path: str, sections: bool) -> dict[str, Any]:
    info, decode_error, scan_error = _scan(path, check_padding=sections)
    return {
        "path": path,
        "file_size": info.file_size,
        "magic": "scdata0",
        "format_version": 0,
        "line_breaks": _file_style(path),
        "vendor": safe_text(info.vendor),
        "vendor_hex": info.vendor.hex(),
        "user_string": safe_text(info.user_string),
        "user_string_hex": info.user_string.hex(),
        "decoded": decode_error is None,
        "decode_error": decode_error,
        "sections": [_section_doc(s) for s in info.sections],
        "checkpoint": _checkpoint_doc(path, info),
        "error": scan_error,
    }


def _print_inspect(doc: dict[str, Any], sections: bool) -> None:
    secs = doc["sections"]
    ncomp = sum(1 for s in secs if s["compressed"])
    _out(f"file         {doc['path']}")
    _out(f"size         {doc['file_size']} bytes ({_human(doc['file_size'])}), {doc['line_breaks']} line breaks")
    _out(f"magic        {doc['magic']} (scda format version {doc['format_version']})")
    _out(f'vendor       "{doc["vendor"]}"')
    _out(f'user string  "{doc["user_string"]}"')
    _out(f"sections     {len(secs)}" + (f" ({ncomp} compressed)" if ncomp else ""))
    if doc["decode_error"]:
        _out(f"note         listed raw: the file breaks the compression convention: {doc['decode_error']}")
    if secs:
        _out()
        _out(
            f"{'#':>4}  type {'N':>10} {'E':>10} {'offset':>12} {'end':>12} {'bytes':>12} {'data':>12}  "
            + f"{'compressed':<11} user string"
        )
    for s in secs:
        t = s["type"]
        n = str(s["elem_count"]) if t in "AV" else "-"
        e = str(s["elem_size"]) if t in "AB" else ("var" if t == "V" else "-")
        comp = "no"
        if s["compressed"]:
            comp = f"yes ({100.0 * s['stored_nbytes'] / s['data_nbytes']:.0f}%)" if s["data_nbytes"] else "yes"
        _out(
            f"{s['index']:>4}  {t:<4} {n:>10} {e:>10} {s['offset']:>12} {s['end']:>12} {s['nbytes']:>12} "
            f'{s["data_nbytes"]:>12}  {comp:<11} "{s["user_string"]}"'
        )
        if sections:
            for r in s["raw"]:
                _out(
                    f"{'':>6}raw {r['type']} N={r['elem_count']} E={r['elem_size']} bytes {r['offset']}..{r['end']}, "
                    f'data at {r["data_offset"]} ({r["data_nbytes"]} bytes), padding {r["padding"]}: "{r["user_string"]}"'
                )
    if doc["error"]:
        _out(f"ERROR        damaged or cut short after {len(secs)} section{'s' if len(secs) != 1 else ''}: {doc['error']}")
    ck = doc["checkpoint"]
    if ck is None:
        return
    _out()
    if "error" in ck:
        _out(f"amrckpt checkpoint: {ck['error']}")
        return
    _out("amrckpt checkpoint")
    _out(f"  schema       {ck['schema_name']} v{ck['schema_version']}")
    who = f"amrckpt {ck['amrckpt_version']} (format {ck['format_version']})"
    if ck.get("writer_size") is not None:
        who += f" on {ck['writer_size']} process" + ("es" if ck["writer_size"] != 1 else "")
    if ck.get("saved_at"):
        who += f", {ck['saved_at']}"
    if ck.get("hostname"):
        who += f", host {ck['hostname']}"
    _out(f"  written by   {who}")
    mesh = ck["mesh"]
    leaves = f"{ck['num_leaves']}"
    if mesh is not None:
        leaves += f" ({mesh['dim']}D mesh, {mesh['num_trees']} tree{'s' if mesh['num_trees'] != 1 else ''}, {mesh['curve']} curve)"
    wp = ck.get("writer_partition")
    if wp:
        leaves += f"; {wp['min_leaves']}..{wp['max_leaves']} leaves per writing process"
    _out(f"  leaves       {leaves}")
    _out(f"  step         {ck['step'] if ck['step'] is not None else '-'}")
    _out(f"  time         {ck['time'] if ck['time'] is not None else '-'}")
    _out(
        f"  complete     {'yes (ends in its footer)' if ck['complete'] else 'NO: no footer at the end (the save did not finish?)'}"
    )
    others = {k: v for k, v in ck["values"].items() if k not in ("step", "time")}
    if others:
        _out("  values       " + ", ".join(f"{k}={json.dumps(_jsonable(v))}" for k, v in others.items()))
    rows = [("name", "kind", "section", "dtype", "shape", "units", "compressed")]
    for f in ck["fields"]:
        shape = "(" + ", ".join(str(d) for d in f["shape"]) + ("," if len(f["shape"]) == 1 else "") + ")" if f["shape"] else "-"
        comp = "yes" if f["compressed"] else f"chunks of {f['chunk']}" if f.get("layout") == "chunks" else "no"
        section = f["section"] + "+A" if f.get("layout") == "counts" else f["section"]
        rows.append((f["name"], f["kind"], section, f["dtype"], shape, f["units"] or "-", comp))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    _out("  fields")
    for r in rows:
        _out("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _cmd_inspect(args: argparse.Namespace) -> int:
    path = os.fspath(args.file)
    doc = _inspect_doc(path, args.sections)
    if args.json:
        _dump_json(doc)
    else:
        _print_inspect(doc, args.sections)
    return EXIT_OK if doc["error"] is None else EXIT_BAD


# -- verify -------------------------------------------------------------------


def _status_of(problem: str) -> str:
    if "not an scda file" in problem:
        return "NOT-SCDA"
    if problem.startswith(("IncompleteCheckpointError", "ScdaCountError")):
        return "INCOMPLETE"
    if problem.startswith(("ScdaIOError", "ScdaFileNotFoundError", "ScdaPermissionError", "FileNotFoundError", "PermissionError")):
        return "UNREADABLE"
    return "DAMAGED"


def _verify_plain(path: str, comm: Any, strict: bool, bar: Any) -> dict[str, Any]:
    c = as_comm(comm)
    try:
        info: scda.FileInfo = run_on_root(c, lambda: scda.scan(path, decode=True))
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


def _verify_one(path: str, comm: Any, strict: bool, bar: Any) -> dict[str, Any]:
    c = as_comm(comm)

    def detect() -> bool | str:
        try:
            return _is_checkpoint_file(path)
        except OSError as exc:
            return f"{type(exc).__name__}: cannot read {path!r}: {exc.strerror or exc}"

    is_ckpt = run_on_root(c, detect)
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
        doc = _verify_plain(path, comm, strict, bar)
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
    comm = _world_comm()
    c = as_comm(comm)
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
                doc = _verify_one(p, comm, args.strict, bar)
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


def _want_encoded(h: scda.SectionHeader, mode: str) -> bool:
    if h.type == "I":
        return False
    return {"keep": h.decoded, "encode": True, "decode": False}[mode]


def _convert(
    src: str, dst: str, comm: Any, mode: str, style: str, level: int, ck: CheckpointInfo | None, bar: Any
) -> dict[str, Any]:
    """Rewrite ``src`` into ``dst`` section by section. Collective.

    A checkpoint is rewritten field by field by the container
    (:func:`amrckpt.container.convert`: CRC32s checked, manifest, index and
    footer made anew); any other scda file section by section.
    """
    if ck is not None:
        res, changed = convert(
            src,
            dst,
            comm=comm,
            compress=cast("Literal['keep', 'encode', 'decode']", mode),
            level=level,
            style=cast("scda.Style", style),
            progress=bar,
        )
        return {
            "sections": len(res.index.sections) + 1,
            "encoded": changed if mode == "encode" else 0,
            "decoded": changed if mode == "decode" else 0,
            "file_size": res.nbytes,
        }
    stats = {"sections": 0, "encoded": 0, "decoded": 0}
    with (
        scda.fopen_read(src, comm=comm) as f,
        scda.fopen_write(dst, f.user_string, comm=comm, style=cast("scda.Style", style), vendor=f.vendor) as w,
    ):
        done = 0
        while (h := f.fread_section_header(decode=True)) is not None:
            stats["sections"] += 1
            enc = _want_encoded(h, mode)
            scda.write_section_data(w, scda.read_section_data(f, h), encode=enc, level=level)
            stats["encoded"] += int(enc and not h.decoded)
            stats["decoded"] += int(h.decoded and not enc)
            bar.update(f.offset - done)
            done = f.offset
        stats["file_size"] = w.offset
    return stats


def _cmd_convert(args: argparse.Namespace) -> int:
    src, dst = os.fspath(args.input), os.fspath(args.output)
    if not os.path.isfile(src):
        raise _UsageError(f"{src}: no such file")
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise _UsageError("IN and OUT are the same file; write to another name")
    if os.path.isdir(dst):
        raise _UsageError(f"{dst} is a directory")
    mode = "encode" if args.encode else "decode" if args.decode else "keep"
    comm = _world_comm()
    c = as_comm(comm)
    in_style, is_ckpt = run_on_root(c, lambda: (_file_style(src), _is_checkpoint_file(src)))
    style = args.style or in_style
    ck = None
    if is_ckpt:
        try:
            ck = read_info(src, comm=comm, verify=True)
        except AmrckptError as exc:
            if c.rank == 0:
                _err(f"amrckpt convert: {src}: {_describe(exc)}")
                _err("amrckpt convert: a checkpoint is converted only when its footer, index and metadata verify (amrckpt verify)")
            return EXIT_BAD
    token = c.bcast(uuid.uuid4().hex[:12] if c.rank == 0 else None, root=0)
    out = Path(dst)
    tmp = str(out.parent / f".{out.name}.partial-{token}")
    bar = _progress(os.stat(src).st_size, "convert", c, not args.no_progress)
    try:
        stats = _convert(src, tmp, comm, mode, style, args.level, ck, bar)
        err: BaseException | None = None
        if c.rank == 0:
            try:
                os.replace(tmp, dst)
            except OSError as exc:
                err = exc
        agree(c, err, what="convert")
    except BaseException:
        if c.rank == 0:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    finally:
        bar.close()
    if c.rank == 0:
        what = "checkpoint" if ck is not None else "scda file"
        changes = []
        if stats["encoded"]:
            changes.append(f"{stats['encoded']} compressed")
        if stats["decoded"]:
            changes.append(f"{stats['decoded']} decompressed")
        _out(
            f"{src} -> {dst}: {what} of {stats['sections']} section{'s' if stats['sections'] != 1 else ''}, {style} line breaks, "
            f"{', '.join(changes) or 'compression unchanged'}; {os.stat(src).st_size} -> {stats['file_size']} bytes"
        )
    return EXIT_OK


# -- plot ---------------------------------------------------------------------


def _parse_brick_nd(text: str | None, dim: int) -> tuple[int, ...] | None:
    """``--brick NX,NY[,NZ]`` as a tuple, or None without it (the geometry stored in the file places the trees)."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*[x,]\s*(\d+)\s*(?:[x,]\s*(\d+)\s*)?", text)
    if not m or (m.group(3) is not None) != (dim == 3) or any(int(g) < 1 for g in m.groups() if g is not None):
        raise _UsageError(
            f"--brick {text!r}: give NX,NY" + (",NZ" if dim == 3 else "") + " (trees along each axis), e.g. --brick 2,1"
        )
    return tuple(int(g) for g in m.groups() if g is not None)


def _parse_slice(text: str | None) -> tuple[int, float | None]:
    """``--slice AXIS[=VALUE]`` as (axis index, value or None for the middle of the domain)."""
    m = re.fullmatch(r"\s*([xyz])\s*(?:=\s*(\S+)\s*)?", text or "z")
    try:
        if m is None:
            raise ValueError
        return "xyz".index(m.group(1)), None if m.group(2) is None else float(m.group(2))
    except ValueError:
        raise _UsageError(f"--slice {text!r}: give x, y or z, and optionally =VALUE (e.g. --slice z=0.5)") from None


def _plot_leaves(
    path: str, ck: CheckpointInfo, what: str, ranks: int | None, brick: tuple[int, ...] | None, axis: int | None, at: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float | None, str, str]:
    """Return the leaves to draw: 2D boxes (lo, hi), a value each, the plane (3D), a label and the kind of colouring.

    Streams the leaves in chunks through :mod:`amrckpt.export` (the same
    geometry and per-leaf values as ``amrckpt export``), CRC32s checked.  A
    2D mesh is drawn whole; of a 3D mesh, the leaves cut by the plane
    ``axis = at`` (default: through the middle of the domain).
    """
    from .export import DEFAULT_CHUNK_LEAVES, leaf_boxes, leaf_values, plan_arrays, tree_boxes

    m = ck.manifest
    assert m.mesh is not None
    cells = [fs.name for fs in m.fields if fs.kind in ("cells", "hp")]
    P = ranks if ranks is not None else ck.writer_size or 1
    arrays = plan_arrays(m, ranks=P)
    if what in ("level", "rank"):
        arr, kind = next(a for a in arrays if a.name == what), what
        label = "refinement level" if what == "level" else f"owning rank (uniform partition on {P} rank{'s' if P != 1 else ''})"
        kind = f"rank:{P}" if what == "rank" else kind
    else:
        try:
            fs = m.field(what)
        except KeyError:
            choices = ", ".join(cells) or "none"
            raise _UsageError(f"{path} has no field {what!r}; choose level, rank or a cell field: {choices}") from None
        if fs.kind not in ("cells", "hp"):
            choices = ", ".join(cells) or "none"
            raise _UsageError(f"field {what!r} is a {fs.kind} field; leaves are coloured by a cell field: {choices}")
        name = f"{what}.count" if fs.kind == "hp" else what
        found = [a for a in arrays if a.name == name or (fs.kind == "cells" and a.field == what)]
        if not found:
            raise _UsageError(f"field {what!r} has dtype {_dtype_text(fs.dtype)}, which has no colour")
        arr, kind = found[0], "field"
        dt = dtype_from_json(fs.dtype, what)
        many = arr.ncomp > 1 or len(found) > 1
        label = f"{what}: values per leaf" if fs.kind == "hp" else ("|" + what + "|" if dt.kind == "c" else what)
        label += " (first component)" if fs.kind != "hp" and many else ""
        label += f" [{fs.units}]" if fs.units and fs.kind != "hp" else ""
    keep_lo, keep_hi, keep_v = [], [], []
    with CheckpointReader(path, verify=True) as r:
        lower, upper = tree_boxes(r, brick)
        plane = None
        if axis is not None:
            plane = float(at) if at is not None else 0.5 * (float(lower[:, axis].min()) + float(upper[:, axis].max()))
        N = m.num_leaves
        for s in range(0, N, DEFAULT_CHUNK_LEAVES):
            mesh = r.read_mesh(s, min(DEFAULT_CHUNK_LEAVES, N - s))
            lo, hi = leaf_boxes(mesh, lower, upper, m.mesh.maxlevel)
            v = leaf_values([arr], r, mesh, s, N)[0]  # the chunk's values (rank: global indices)
            v = v.reshape(len(v), -1)[:, 0]
            if axis is not None and plane is not None:
                cut = (lo[:, axis] <= plane) & (plane < hi[:, axis])
                lo, hi, v = np.delete(lo[cut], axis, axis=1), np.delete(hi[cut], axis, axis=1), v[cut]
            keep_lo.append(lo)
            keep_hi.append(hi)
            keep_v.append(np.abs(v) if np.iscomplexobj(v) else v.astype(np.float64))
        r.check_crcs()
    n = sum(len(v) for v in keep_v)
    if axis is not None and not n:
        raise _UsageError(f"the plane {'xyz'[axis]} = {plane:g} cuts no leaf of {path}")

    def cat(xs: list[np.ndarray], k: int) -> np.ndarray:
        return np.concatenate(xs) if xs else np.zeros((0, k))

    return cat(keep_lo, 2), cat(keep_hi, 2), cat(keep_v, 1).reshape(-1), plane, label, kind


def _cmd_plot(args: argparse.Namespace) -> int:
    path = os.fspath(args.file)
    if args.ranks is not None and args.ranks < 1:
        raise _UsageError("--ranks must be at least 1")
    ck = read_info(path, verify=True)
    m = ck.manifest
    if m.mesh is None:
        raise _UsageError(f"{path} holds no mesh (schema {m.schema_name}): nothing to draw")
    dim = m.mesh.dim
    brick = _parse_brick_nd(args.brick, dim)
    if brick is not None and math.prod(brick) < m.mesh.num_trees:
        raise _UsageError(f"--brick {args.brick} has {math.prod(brick)} trees; the checkpoint has {m.mesh.num_trees}")
    axis, at = _parse_slice(args.slice) if dim == 3 else (None, None)
    if dim == 2 and args.slice is not None:
        raise _UsageError(f"--slice cuts a 3D mesh; {path} holds a 2D one")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import PolyCollection
    except ImportError:
        _err(f"amrckpt plot: {_INSTALL_MATPLOTLIB}")
        return EXIT_BAD
    try:
        lo, hi, values, plane, label, kind = _plot_leaves(path, ck, args.field, args.ranks, brick, axis, at)
    except ValueError as exc:
        if isinstance(exc, AmrckptError):  # a damaged file (ChecksumError is a ValueError too): not a usage error
            raise
        raise _UsageError(str(exc)) from exc
    units = ck.manifest.mesh.geometry.units if ck.manifest.mesh.geometry is not None else None  # type: ignore[union-attr]
    u, v = [a for a in "xyz"[:dim] if axis is None or a != "xyz"[axis]]
    verts = np.stack([lo, np.stack([hi[:, 0], lo[:, 1]], 1), hi, np.stack([lo[:, 0], hi[:, 1]], 1)], 1)
    n = len(values)
    x0, y0 = lo.min(axis=0) if n else (0.0, 0.0)
    x1, y1 = hi.max(axis=0) if n else (1.0, 1.0)
    width = 8.0
    fig, ax = plt.subplots(figsize=(width + 1.6, max(2.5, width * (y1 - y0) / max(x1 - x0, 1e-300) + 0.9)), constrained_layout=True)
    few = n <= 20000
    pc = PolyCollection(cast(Any, verts), array=values, edgecolors="k" if few else "face", linewidths=0.1 if few else 0.0)
    ticks = None
    if kind == "level" and n:
        lo_l, hi_l = int(values.min()), int(values.max())
        pc.set_cmap(plt.get_cmap("viridis", hi_l - lo_l + 1))
        pc.set_clim(lo_l - 0.5, hi_l + 0.5)
        ticks = list(range(lo_l, hi_l + 1))
    elif kind.startswith("rank:"):
        P = int(kind[5:])
        pc.set_cmap(plt.get_cmap("tab10" if P <= 10 else "tab20" if P <= 20 else "turbo", P))
        pc.set_clim(-0.5, P - 0.5)
        ticks = list(range(P)) if P <= 20 else None
    else:
        pc.set_cmap("viridis")
    ax.add_collection(pc)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.set_xlabel(f"{u} [{units}]" if units else u)
    ax.set_ylabel(f"{v} [{units}]" if units else v)
    step, t = m.values.get("step"), m.values.get("time")
    title = f"{Path(path).name}: {m.schema_name} v{m.schema_version}, "
    title += (
        f"slice {'xyz'[axis]} = {plane:g}, {n} of {m.num_leaves} leaves"
        if axis is not None and plane is not None
        else f"{n} leaves"
    )
    title += f", step {step}" if step is not None else ""
    title += f", time {t:g}" if isinstance(t, (int, float)) else ""
    ax.set_title(title, fontsize=9 if axis is not None else None)
    fig.colorbar(pc, ax=ax, label=label, shrink=0.85, ticks=ticks)
    suffix = f"-{'xyz'[axis]}" if axis is not None else ""
    out = args.output or f"{Path(path).stem}-{args.field}{suffix}.png"
    fig.savefig(out, dpi=args.dpi)
    plt.close(fig)
    if axis is not None and plane is not None:
        _out(f"wrote {out}: the {n} leaves of {path} cut by {'xyz'[axis]} = {plane:g}, coloured by {label}")
    else:
        _out(f"wrote {out}: {n} leaves of {path} coloured by {label}")
    return EXIT_OK


# -- export ---------------------------------------------------------------------


def _cmd_export(args: argparse.Namespace) -> int:
    """``amrckpt export SOURCE OUT``: a checkpoint or a manager's directory as VTKHDF (collective under mpiexec)."""
    from .export import ExportResult, to_vtkhdf

    if args.ranks is not None and args.ranks < 1:
        raise _UsageError("--ranks must be at least 1")
    if args.chunk < 1:
        raise _UsageError("--chunk must be at least 1")
    src = Path(args.source)
    if not src.exists():
        raise _UsageError(f"{src}: no such file or directory")
    dim = 3 if args.brick is not None and args.brick.count(",") + args.brick.count("x") == 2 else 2
    brick = _parse_brick_nd(args.brick, dim)
    comm = _world_comm()
    try:
        res: ExportResult = to_vtkhdf(
            src,
            args.output,
            brick=brick,
            ranks=args.ranks,
            hp=args.hp,
            units_in_names=args.units_in_names,
            mesh=args.mesh,
            prefix=args.prefix,
            chunk_leaves=args.chunk,
            comm=comm,
        )
    except ImportError as exc:
        _err(f"amrckpt export: {exc}")
        return EXIT_BAD
    except (ValueError, FileNotFoundError) as exc:
        raise _UsageError(str(exc)) from exc
    if _RANK[0] == 0:
        if res.series:
            _out(
                f"wrote {res.path}: a time series of {len(res.sources)} step(s) from {src}, {sum(res.num_cells)} cells in all, "
                f"arrays {', '.join(res.arrays)}"
            )
        else:
            st, t = res.steps[0], res.times[0]
            when = (f", step {st}" if st is not None else "") + (f", time {t:g}" if t is not None else "")
            _out(f"wrote {res.path}: {res.num_cells[0]} cells from {src}{when}, arrays {', '.join(res.arrays)}")
    return EXIT_OK


# -- ls -----------------------------------------------------------------------


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
                info = read_info(p)
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


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def _subparser(sub: Any, name: str, summary: str, description: str, func: Callable[[argparse.Namespace], int]) -> Any:
    p = sub.add_parser(name, help=summary, description=description, formatter_class=_Formatter)
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``amrckpt`` command.

    Returns
    -------
    argparse.ArgumentParser
        With one subparser per subcommand (``inspect``, ``verify``,
        ``convert``, ``plot``, ``ls``, ``export``), each bound to its function.
    """
    parser = argparse.ArgumentParser(
        prog="amrckpt",
        description="Look into, check, rewrite, draw and list amrckpt checkpoints and any scda file.",
        epilog="exit status: 0 success, 1 a damaged, incomplete or unreadable file, 2 usage error.\n"
        "'amrckpt COMMAND --help' explains each command, with an example.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"amrckpt {__version__}")
    parser.add_argument(
        "--hint",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an MPI-IO hint for every file opened under MPI (repeatable; e.g. --hint striping_factor=16 --hint "
        "cb_nodes=8); added to AMRCKPT_MPIIO_HINTS (docs/scaling.md lists values for Lustre and GPFS)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _subparser(
        sub,
        "inspect",
        "show the header, sections and manifest of an scda file",
        "Show an scda file's header (magic, vendor, user string), every section (type, user string,\n"
        "N, E, offsets, bytes, compressed or not) and, for an amrckpt checkpoint, its manifest\n"
        "(schema, fields, leaves, step, time, writing processes). Works on any scda file; only\n"
        "headers and metadata are read. Binary user strings are shown with \\xNN escapes.\n\n"
        "example:\n  amrckpt inspect run/ckpt-000000000100.scda\n  amrckpt inspect --json data.scda | jq '.sections[].user_string'",
        _cmd_inspect,
    )
    p.add_argument("file", metavar="FILE", help="an scda file")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument("--sections", action="store_true", help="also list the raw sections of each compressed pair, and data padding")

    p = _subparser(
        sub,
        "verify",
        "check files completely: structure, CRC32s; exit 1 if any is damaged",
        "Check that every file is complete and intact. A checkpoint is checked byte for byte\n"
        "against the CRC32s in its index (and its scda structure against the index); any\n"
        "other scda file is walked section by section, reading every byte and decoding every\n"
        "compressed section. A damaged file gets one line naming the section and byte range.\n"
        "Runs in parallel under mpiexec -n P.\n\n"
        "example:\n  amrckpt verify run/ckpt-*.scda && echo all intact",
        _cmd_verify,
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="scda files or checkpoints")
    p.add_argument("--strict", action="store_true", help="also check the data padding of plain scda files (the paper ignores it)")
    p.add_argument("--json", action="store_true", help="print one JSON list of results instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (shown only when stderr is a terminal)")

    p = _subparser(
        sub,
        "convert",
        "rewrite a file with or without compression, in unix or mime line breaks",
        "Rewrite an scda file section by section into a new file: with --encode every block\n"
        "and array is compressed by the scda convention (paper section 3: per-element zlib and\n"
        "base64), with --decode nothing is, and by default each section keeps its form. The\n"
        "data read back from OUT equal those of IN. A checkpoint stays a valid checkpoint: its\n"
        "manifest, index and footer are rebuilt, and its bytes are checked against its CRC32s\n"
        "as they are read. OUT is written under a temporary name and renamed when complete.\n"
        "Runs in parallel under mpiexec -n P.\n\n"
        "example:\n  amrckpt convert --encode big.scda small.scda\n  amrckpt convert --decode --style mime in.scda out.scda",
        _cmd_convert,
    )
    p.add_argument("input", metavar="IN", help="the file to read")
    p.add_argument("output", metavar="OUT", help="the file to write (replaced if it exists)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--encode", action="store_true", help="compress every block and array section")
    g.add_argument("--decode", action="store_true", help="write every section uncompressed")
    p.add_argument("--style", choices=["unix", "mime"], default=None, help="line breaks of OUT (default: those of IN)")
    p.add_argument("--level", type=int, choices=range(10), default=9, metavar="0-9", help="zlib level for compression (default 9)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (shown only when stderr is a terminal)")

    p = _subparser(
        sub,
        "plot",
        "draw a 2D checkpoint's mesh, or a slice of a 3D one, leaves coloured by a field, level or rank",
        "Draw the leaves of a 2D checkpoint as rectangles coloured by a cell field (its first\n"
        "component; for an hp field, the number of values per leaf), by refinement level, or by\n"
        "the rank that would own each leaf under a uniform partition on P ranks. Trees are laid\n"
        "out as a brick, row-major (tree = j * NX + i). Needs matplotlib.\n"
        "A 3D checkpoint is cut by the plane --slice AXIS=VALUE (default z through the middle of\n"
        "the domain): the leaves it cuts, placed as amrckpt export places them (--brick NX,NY,NZ).\n\n"
        "example:\n  amrckpt plot ckpt-000000000100.scda --field rho -o rho.png\n"
        "  amrckpt plot ckpt-000000000100.scda --field rank --ranks 8 --brick 2,1\n"
        "  amrckpt plot model3d.scda --field sigma --slice y=0.25",
        _cmd_plot,
    )
    p.add_argument("file", metavar="FILE", help="a 2D or 3D amrckpt checkpoint")
    p.add_argument("--field", required=True, metavar="NAME|level|rank", help="a cell field's name, 'level' or 'rank'")
    p.add_argument("--ranks", type=int, default=None, metavar="P", help="ranks for --field rank (default: the writing processes)")
    p.add_argument(
        "--brick",
        default=None,
        metavar="NX,NY[,NZ]",
        help="place the trees as a brick of unit trees, row-major (default: the file's geometry)",
    )
    p.add_argument("-o", "--output", default=None, metavar="OUT.png", help="the picture (default: FILE-stem-FIELD.png here)")
    p.add_argument("--dpi", type=int, default=150, help="resolution (default 150)")
    p.add_argument("--slice", default=None, metavar="AXIS[=VALUE]", help="3D: the plane drawn (default z through the middle)")

    p = _subparser(
        sub,
        "export",
        "write a checkpoint, or a manager's directory, as VTKHDF for ParaView",
        "Write a checkpoint as a VTKHDF UnstructuredGrid that ParaView (5.12+), VisIt and VTK open:\n"
        "one quad (2D) or hexahedron (3D) per leaf, in curve order, placed by the forest geometry\n"
        "of the checkpoint (or --brick), with cell data level, tree, every cell field (vector\n"
        "values as components, units in an attribute or --units-in-names), each hp field as\n"
        "NAME.count and NAME.first (or NAME.mean), and rank with --ranks. A manager's directory\n"
        "becomes one file with a time series (VTKHDF Steps: the checkpoints' times). Leaves are\n"
        "converted in chunks. Runs under mpiexec -n P (every rank writes its part when h5py has\n"
        "MPI; otherwise rank 0 writes). Needs h5py (pip install 'amrckpt[viz]').\n\n"
        "example:\n  amrckpt export run/ckpt-000000000100.scda step100.vtkhdf --brick 2,1\n"
        "  amrckpt export run run.vtkhdf --ranks 4 && paraview run.vtkhdf",
        _cmd_export,
    )
    p.add_argument("source", metavar="CHECKPOINT_OR_DIRECTORY", help="a checkpoint, or a manager's directory (a time series)")
    p.add_argument("output", metavar="OUT.vtkhdf", help="the VTKHDF file (replaced if it exists)")
    p.add_argument("--brick", default=None, metavar="NX,NY[,NZ]", help="trees as a brick of unit trees, row-major (old files)")
    p.add_argument("--ranks", type=int, default=None, metavar="Q", help="add the cell array rank: owners on Q ranks")
    p.add_argument("--hp", choices=["first", "mean"], default="first", help="hp fields: first value or mean per leaf")
    p.add_argument("--units-in-names", action="store_true", help="name arrays 'NAME [UNITS]'")
    p.add_argument("--mesh", default=None, metavar="NAME", help="of a checkpoint of several meshes, this one (default the first)")
    p.add_argument("--prefix", default="ckpt", help="the manager's file prefix, for a directory (default ckpt)")
    p.add_argument("--chunk", type=int, default=1 << 17, metavar="LEAVES", help="leaves converted at a time (default 131072)")

    p = _subparser(
        sub,
        "ls",
        "list a manager's checkpoints and say which one a restart takes",
        "List the checkpoints a CheckpointManager wrote into DIRECTORY, oldest first: step,\n"
        "simulation time, size, number of writing processes, save time and validity (with the\n"
        "problem if invalid), and mark (*) the one a restart would take: the newest one that\n"
        "loads, i.e. whose every byte matches its CRC32s (checked here, newest first, as a\n"
        "restart does). The others are checked as the manager lists them (footer, index and\n"
        "metadata); --verify checks every byte of every checkpoint, --quick only metadata.\n"
        "Each line says which.\n"
        "Read-only: no lock is taken and nothing is removed. Exit status 1 if any checkpoint\n"
        "is invalid.\n\n"
        "example:\n  amrckpt ls run-checkpoints",
        _cmd_ls,
    )
    p.add_argument("directory", metavar="DIRECTORY", help="the manager's directory")
    p.add_argument("--prefix", default="ckpt", help="the manager's file prefix (default ckpt)")
    p.add_argument("--verify", action="store_true", help="check every byte of every checkpoint against its CRC32")
    p.add_argument("--quick", action="store_true", help="check only metadata, even of the restart target (for large checkpoints)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``amrckpt`` command.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 success, 1 a damaged, incomplete, invalid or
        unreadable file, 2 a usage error, 141 (128 + SIGPIPE, as the
        coreutils) when the reader of the standard output went away
        (``amrckpt ls DIR | head``): the command ends quietly.

    Examples
    --------
    >>> main(["verify", "state.scda"])  # doctest: +SKIP
    OK          state.scda: scda file, 3 sections, 1024 bytes: every section read and decoded
    0
    """
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit, so that a closed pipe is seen here
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no traceback when Python flushes stdout at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return EXIT_PIPE
    return status


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (argparse printed it)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.hint:
        try:
            given = scda.hints(",".join(args.hint))
        except AmrckptError as exc:
            _err(f"amrckpt: error: {exc}")
            return EXIT_USAGE
        merged = {**scda.hints(), **given}
        os.environ[scda.HINTS_ENV] = ",".join(f"{k}={v}" for k, v in merged.items())
    if args.command is None:
        parser.print_usage(sys.stderr)
        _err("amrckpt: error: a command is required (inspect, verify, convert, plot, export, ls); see amrckpt --help")
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except _UsageError as exc:
        _err(f"amrckpt {args.command}: error: {exc}")
        return EXIT_USAGE
    except BrokenPipeError:  # the standard output's reader went away: not a file error
        raise
    except (AmrckptError, OSError) as exc:
        where = args.__dict__.get("file") or args.__dict__.get("input") or args.__dict__.get("directory")
        _err(f"amrckpt {args.command}: {where + ': ' if where else ''}{_describe(exc)}")
        return EXIT_BAD
    except KeyboardInterrupt:
        _err(f"amrckpt {args.command}: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
