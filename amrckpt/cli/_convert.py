"""``amrckpt convert``: rewrite a file with or without compression, in either line-break style (``convert_file``)."""

from __future__ import annotations

import argparse
import os
from typing import Literal, cast

from .. import scda
from ..comm import collective
from ..container import convert_file
from ..errors import CheckpointError
from ._common import EXIT_BAD, EXIT_OK, _describe, _err, _out, _progress, _UsageError, _world_comm, safe_str


def _cmd_convert(args: argparse.Namespace) -> int:
    src, dst = os.fspath(args.input), os.fspath(args.output)
    if not os.path.isfile(src):
        raise _UsageError(f"{src}: no such file")
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise _UsageError("IN and OUT are the same file; write to another name")
    if args.from_format == "p4est" or args.to_format == "p4est":
        from ._p4est import convert_p4est

        return convert_p4est(args, src, dst)
    if os.path.isdir(dst):
        raise _UsageError(f"{dst} is a directory")
    mode: Literal["keep", "encode", "decode"] = "encode" if args.encode else "decode" if args.decode else "keep"
    with collective(_world_comm(), "amrckpt convert") as call:
        bar = _progress(os.stat(src).st_size, "convert", call.comm, not args.no_progress)
        try:
            res = convert_file(
                src, dst, comm=call.comm, compress=mode, style=cast("scda.Style | None", args.style), level=args.level, progress=bar
            )
        except CheckpointError as exc:
            _err(f"amrckpt convert: {safe_str(src)}: {safe_str(_describe(exc))}")
            _err("amrckpt convert: a checkpoint is converted only when its footer, index and metadata verify (amrckpt verify)")
            return EXIT_BAD
        finally:
            bar.close()
    if call.rank == 0:
        what = "checkpoint" if res.kind == "checkpoint" else "scda file"
        changes = [f"{res.encoded} compressed"] * bool(res.encoded) + [f"{res.decoded} decompressed"] * bool(res.decoded)
        _out(
            f"{src} -> {dst}: {what} of {res.sections} section{'s' if res.sections != 1 else ''}, {res.style} line breaks, "
            f"{', '.join(changes) or 'compression unchanged'}; {os.stat(src).st_size} -> {res.file_size} bytes"
        )
    return EXIT_OK
