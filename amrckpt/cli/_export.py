"""``amrckpt export``: a checkpoint or a manager's directory as VTKHDF for ParaView."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import _RANK, EXIT_BAD, EXIT_OK, _err, _out, _UsageError, _world_comm
from ._plot import _parse_brick_nd


def _cmd_export(args: argparse.Namespace) -> int:
    """``amrckpt export SOURCE OUT``: a checkpoint or a manager's directory as VTKHDF (collective under mpiexec).

    Raises
    ------
    _UsageError
        On this rank, before anything collective, if ``--ranks`` or ``--chunk`` is below 1 or SOURCE does not exist;
        on every rank, if the export refuses ``--format`` or an argument (the agreed UnsupportedFormatError,
        ValueError or FileNotFoundError).
    """
    from ..errors import UnsupportedFormatError
    from ..export import ExportResult, to_vtkhdf

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
            format=args.format,
        )
    except ImportError as exc:
        _err(f"amrckpt export: {exc}")
        return EXIT_BAD
    except UnsupportedFormatError as exc:
        raise _UsageError(f"--format {args.format}: {exc}") from exc
    except (ValueError, FileNotFoundError) as exc:
        raise _UsageError(str(exc)) from exc
    if _RANK[0] == 0:
        st, t = res.steps[0], res.times[0]
        when = (f", step {st}" if st is not None else "") + (f", time {t:g}" if t is not None else "")
        if res.format == "htg":
            _out(
                f"wrote {res.path}: a HyperTreeGrid of {res.num_cells[0]} leaves ({res.num_nodes[0]} nodes) from {src}{when}, "
                f"arrays {', '.join(res.arrays)}"
            )
        elif res.series:
            _out(
                f"wrote {res.path}: a time series of {len(res.sources)} step(s) from {src}, {sum(res.num_cells)} cells in all, "
                f"arrays {', '.join(res.arrays)}"
            )
        else:
            _out(f"wrote {res.path}: {res.num_cells[0]} cells from {src}{when}, arrays {', '.join(res.arrays)}")
    return EXIT_OK
