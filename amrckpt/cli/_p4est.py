"""``amrckpt convert --from p4est`` and ``--to p4est``: one library call each (:mod:`amrckpt.p4est`)."""

from __future__ import annotations

import argparse
import os

from .._files import replacing
from ..comm import collective
from ..errors import AmrckptError
from ._common import EXIT_BAD, EXIT_OK, _describe, _err, _out, _UsageError, _world_comm


def convert_p4est(args: argparse.Namespace, src: str, dst: str) -> int:
    """Convert a p4est save file ``src`` into a checkpoint ``dst``, or a checkpoint into a p4est save file. Collective.

    Raises
    ------
    _UsageError
        On this rank, before anything collective, if ``--encode``, ``--decode`` or ``--style`` is given.
    """
    if args.encode or args.decode or args.style is not None:
        raise _UsageError("--encode, --decode and --style rewrite scda files; with --from/--to p4est there are none to rewrite")
    with collective(_world_comm(), "amrckpt convert") as call:
        from ..p4est import checkpoint_to_p4est, p4est_to_checkpoint

        try:
            with replacing(dst, call, companions=(".run.json",)) as tmp:
                if args.from_format == "p4est":
                    res = p4est_to_checkpoint(src, tmp, comm=call.comm)
                    what = f"{res.num_leaves} quadrants, schema {res.manifest.schema_name}, {res.nbytes} bytes"
                    saved = res.partition.size if os.path.exists(f"{tmp}.run.json") and res.partition is not None else 0
                    what += f"; the saved partition of {saved} processes in {dst}.run.json" if saved else ""
                else:
                    nbytes = checkpoint_to_p4est(
                        src,
                        tmp,
                        comm=call.comm,
                        partition=args.partition,
                        save_partition=args.save_partition,
                        data_field=None if args.no_data else args.data_field,
                    )
                    what = f"a p4est file of {nbytes} bytes"
        except AmrckptError as exc:
            _err(f"amrckpt convert: {src}: {_describe(exc)}")
            return EXIT_BAD
        if call.rank == 0:
            _out(f"{src} -> {dst}: {what}")
        return EXIT_OK
