"""``amrckpt inspect``: the header, sections and manifest of any scda file."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

from .. import scda
from ..container import (
    read_raw_metadata,
    read_run_record,
)
from ._common import EXIT_BAD, EXIT_OK, _dtype_text, _dump_json, _human, _jsonable, _out, _scan, safe_str, safe_text


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
        "line_breaks": scda.line_style(path),
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


def _say(text: str = "") -> None:
    """Print a line of the text report, escaping what is not printable (text from the file: names, units, hosts)."""
    _out(safe_str(text))


def _print_inspect(doc: dict[str, Any], sections: bool) -> None:
    secs = doc["sections"]
    ncomp = sum(1 for s in secs if s["compressed"])
    _say(f"file         {doc['path']}")
    _say(f"size         {doc['file_size']} bytes ({_human(doc['file_size'])}), {doc['line_breaks']} line breaks")
    _say(f"magic        {doc['magic']} (scda format version {doc['format_version']})")
    _say(f'vendor       "{doc["vendor"]}"')
    _say(f'user string  "{doc["user_string"]}"')
    _say(f"sections     {len(secs)}" + (f" ({ncomp} compressed)" if ncomp else ""))
    if doc["decode_error"]:
        _say(f"note         listed raw: the file breaks the compression convention: {doc['decode_error']}")
    if secs:
        _say()
        _say(
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
        _say(
            f"{s['index']:>4}  {t:<4} {n:>10} {e:>10} {s['offset']:>12} {s['end']:>12} {s['nbytes']:>12} "
            f'{s["data_nbytes"]:>12}  {comp:<11} "{s["user_string"]}"'
        )
        if sections:
            for r in s["raw"]:
                _say(
                    f"{'':>6}raw {r['type']} N={r['elem_count']} E={r['elem_size']} bytes {r['offset']}..{r['end']}, "
                    f'data at {r["data_offset"]} ({r["data_nbytes"]} bytes), padding {r["padding"]}: "{r["user_string"]}"'
                )
    if doc["error"]:
        _say(f"ERROR        damaged or cut short after {len(secs)} section{'s' if len(secs) != 1 else ''}: {doc['error']}")
    ck = doc["checkpoint"]
    if ck is None:
        return
    _say()
    if "error" in ck:
        _say(f"amrckpt checkpoint: {ck['error']}")
        return
    _say("amrckpt checkpoint")
    _say(f"  schema       {ck['schema_name']} v{ck['schema_version']}")
    who = f"amrckpt {ck['amrckpt_version']} (format {ck['format_version']})"
    if ck.get("writer_size") is not None:
        who += f" on {ck['writer_size']} process" + ("es" if ck["writer_size"] != 1 else "")
    if ck.get("saved_at"):
        who += f", {ck['saved_at']}"
    if ck.get("hostname"):
        who += f", host {ck['hostname']}"
    _say(f"  written by   {who}")
    mesh = ck["mesh"]
    leaves = f"{ck['num_leaves']}"
    if mesh is not None:
        leaves += f" ({mesh['dim']}D mesh, {mesh['num_trees']} tree{'s' if mesh['num_trees'] != 1 else ''}, {mesh['curve']} curve)"
    wp = ck.get("writer_partition")
    if wp:
        leaves += f"; {wp['min_leaves']}..{wp['max_leaves']} leaves per writing process"
    _say(f"  leaves       {leaves}")
    _say(f"  step         {ck['step'] if ck['step'] is not None else '-'}")
    _say(f"  time         {ck['time'] if ck['time'] is not None else '-'}")
    _say(
        f"  complete     {'yes (ends in its footer)' if ck['complete'] else 'NO: no footer at the end (the save did not finish?)'}"
    )
    others = {k: v for k, v in ck["values"].items() if k not in ("step", "time")}
    if others:
        _say("  values       " + ", ".join(f"{k}={json.dumps(_jsonable(v))}" for k, v in others.items()))
    rows = [("name", "kind", "section", "dtype", "shape", "units", "compressed")]
    for f in ck["fields"]:
        shape = "(" + ", ".join(str(d) for d in f["shape"]) + ("," if len(f["shape"]) == 1 else "") + ")" if f["shape"] else "-"
        comp = "yes" if f["compressed"] else f"chunks of {f['chunk']}" if f.get("layout") == "chunks" else "no"
        section = f["section"] + {"counts": "+A", "chunks": "+V" if f["kind"] == "hp" else ""}.get(f.get("layout") or "", "")
        rows.append((f["name"], f["kind"], section, f["dtype"], shape, f["units"] or "-", comp))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    _say("  fields")
    for r in rows:
        _say("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _cmd_inspect(args: argparse.Namespace) -> int:
    path = os.fspath(args.file)
    doc = _inspect_doc(path, args.sections)
    if args.json:
        _dump_json(doc)
    else:
        _print_inspect(doc, args.sections)
    return EXIT_OK if doc["error"] is None else EXIT_BAD
