"""``amrckpt convert``: rewrite a file with or without compression, in either line-break style."""

from __future__ import annotations

import argparse
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any, Literal, cast

from .. import scda
from ..comm import Call, collective
from ..container import (
    CheckpointInfo,
    convert,
    read_info,
)
from ..errors import AmrckptError
from ._common import EXIT_BAD, EXIT_OK, _describe, _err, _file_style, _is_checkpoint_file, _out, _progress, _UsageError, _world_comm


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
    if args.from_format == "p4est" or args.to_format == "p4est":
        from ._p4est import convert_p4est

        return convert_p4est(args)
    src, dst = os.fspath(args.input), os.fspath(args.output)
    if not os.path.isfile(src):
        raise _UsageError(f"{src}: no such file")
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise _UsageError("IN and OUT are the same file; write to another name")
    if os.path.isdir(dst):
        raise _UsageError(f"{dst} is a directory")
    mode = "encode" if args.encode else "decode" if args.decode else "keep"
    comm = _world_comm()
    with collective(comm, "amrckpt convert") as call:
        return _convert_cmd(call, args, src, dst, mode)


def _convert_cmd(call: Call, args: argparse.Namespace, src: str, dst: str, mode: str) -> int:
    c = comm = call.comm
    in_style, is_ckpt = call.on_root(lambda: (_file_style(src), _is_checkpoint_file(src)), what="convert: sniff")
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
    token = call.on_root(lambda: uuid.uuid4().hex[:12], what="convert: token")
    out = Path(dst)
    tmp = str(out.parent / f".{out.name}.partial-{token}")
    bar = _progress(os.stat(src).st_size, "convert", c, not args.no_progress)
    try:
        stats = _convert(src, tmp, comm, mode, style, args.level, ck, bar)
        call.run(os.replace, tmp, dst, on=0)
        call.agree("convert")
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
