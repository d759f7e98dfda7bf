"""The ``amrckpt`` command-line tool: look into, check, rewrite, draw and list checkpoints.

Subcommands (``amrckpt COMMAND --help`` for each)::

    amrckpt inspect FILE [--json] [--sections]      header, sections, manifest of any scda file
    amrckpt verify FILE...                          structure and CRC32s; exit 1 if any file is damaged
    amrckpt convert IN OUT [--encode | --decode]    rewrite with or without compression, unix or mime
    amrckpt convert IN OUT --from p4est | --to p4est   a p4est save file to a checkpoint, or back
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
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import scda
from .._version import __version__
from ..errors import AmrckptError
from ._common import EXIT_BAD, EXIT_PIPE, EXIT_USAGE, _describe, _err, _UsageError, safe_text
from ._convert import _cmd_convert
from ._export import _cmd_export
from ._inspect import _cmd_inspect
from ._ls import _cmd_ls
from ._plot import _cmd_plot
from ._verify import _cmd_verify

__all__ = ["build_parser", "main", "safe_text"]


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
    for add in (
        _add_inspect,
        _add_verify,
        _add_convert,
        _add_plot,
        _add_export,
        _add_ls,
    ):
        add(sub)
    return parser


def _add_inspect(sub: Any) -> None:
    """Add the ``inspect`` subcommand to ``sub``."""
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


def _add_verify(sub: Any) -> None:
    """Add the ``verify`` subcommand to ``sub``."""
    p = _subparser(
        sub,
        "verify",
        "check files completely: structure, CRC32s; exit 1 if any is damaged",
        "Check that every file is complete and intact. A checkpoint is checked byte for byte\n"
        "against the CRC32s in its index (and its scda structure against the index); any\n"
        "other scda file is walked section by section, reading every byte and decoding every\n"
        "compressed section. A damaged file gets one line naming the section and byte range.\n"
        "The forest of a p4est or p8est checkpoint (convert --from p4est) must be complete, as\n"
        "p4est's are: a hole is reported as INVALID, naming its quadrant and tree.\n"
        "Runs in parallel under mpiexec -n P.\n\n"
        "example:\n  amrckpt verify run/ckpt-*.scda && echo all intact",
        _cmd_verify,
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="scda files or checkpoints")
    p.add_argument("--strict", action="store_true", help="also check the data padding of plain scda files (the paper ignores it)")
    p.add_argument(
        "--complete",
        action="store_true",
        help="check that every mesh is a complete forest, as p4est's are (default: the meshes of p4est and p8est checkpoints)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON list of results instead of text")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (shown only when stderr is a terminal)")


def _add_convert(sub: Any) -> None:
    """Add the ``convert`` subcommand to ``sub``."""
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
        "With --from p4est, IN is a file of p4est_save_ext (p8est_save_ext) and OUT a checkpoint\n"
        "(schema p4est or p8est: the connectivity as the mesh's geometry, the quadrant data as\n"
        "the cells field 'data'; a saved partition goes to OUT.run.json); with --to p4est, IN\n"
        "is a checkpoint and OUT the p4est file of its first mesh, which p4est_load_ext loads, with\n"
        "the cells field --data FIELD (default 'data') as quadrant data.\n"
        "Runs in parallel under mpiexec -n P.\n\n"
        "example:\n  amrckpt convert --encode big.scda small.scda\n  amrckpt convert --decode --style mime in.scda out.scda\n"
        "  amrckpt convert forest.p4est forest.scda --from p4est\n  amrckpt convert forest.scda forest.p4est --to p4est\n"
        "  amrckpt convert heat.scda heat.p4est --to p4est --data u",
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
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from", dest="from_format", choices=["scda", "p4est"], default="scda", help="the format of IN (default scda)")
    g.add_argument("--to", dest="to_format", choices=["scda", "p4est"], default="scda", help="the format of OUT (default scda)")
    p.add_argument("--save-partition", action="store_true", help="--to p4est: save the partition in OUT (p4est_save_ext)")
    p.add_argument(
        "--partition",
        choices=["uniform", "writer"],
        default="uniform",
        help="--to p4est: the ranks' shares: uniform, or the checkpoint's writing partition (from its run record)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--data",
        "--data-field",
        dest="data_field",
        default="data",
        metavar="FIELD",
        help="--to p4est: the cells field written as p4est's quadrant data, its bytes per leaf (default: data; "
        "without one, the fields that could serve are named)",
    )
    g.add_argument("--no-data", action="store_true", help="--to p4est: write no quadrant data (p4est loads it with data_size 0)")


def _add_plot(sub: Any) -> None:
    """Add the ``plot`` subcommand to ``sub``."""
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


def _add_export(sub: Any) -> None:
    """Add the ``export`` subcommand to ``sub``."""
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
        "MPI; otherwise rank 0 writes). Needs h5py (pip install 'amrckpt[export]').\n\n"
        "--format htg writes a VTKHDF HyperTreeGrid instead (VTK 9.5+, ParaView 6): VTK's own\n"
        "octrees, one per tree, the cell arrays on every node (a coarse node holds the mean of\n"
        "its children), for a forest whose trees are boxes on a grid (bricks, the unit square\n"
        "and cube); one checkpoint, written by rank 0. Other geometries (star, shell, ...) allow\n"
        "the default, --format unstructured, only: the error says why.\n\n"
        "example:\n  amrckpt export run/ckpt-000000000100.scda step100.vtkhdf --brick 2,1\n"
        "  amrckpt export run/ckpt-000000000100.scda step100-htg.vtkhdf --format htg\n"
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
    p.add_argument(
        "--format",
        choices=["unstructured", "htg"],
        default="unstructured",
        help="unstructured (default: any geometry, a series) or htg: a HyperTreeGrid of a brick (one checkpoint)",
    )


def _add_ls(sub: Any) -> None:
    """Add the ``ls`` subcommand to ``sub``."""
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
        "Each line says which. With --cache, also the steps in the node caches under CACHE\n"
        "(a manager's NodeCache directory, with {node} expanded over the node directories\n"
        "that exist, or the directory above the nodes' directories): their nodes, whether\n"
        "every rank's pieces are there, whether they were flushed, and what a restart does\n"
        "with those newer than the directory's newest (read in place by the job shape that\n"
        "wrote them, flushed then loaded on another, or passed over if some rank's pieces\n"
        "are on no node).\n"
        "Read-only: no lock is taken and nothing is removed. Exit status 1 if any checkpoint\n"
        "is invalid.\n\n"
        "example:\n  amrckpt ls run-checkpoints --cache '/dev/shm/run-cache/{node}'",
        _cmd_ls,
    )
    p.add_argument("directory", metavar="DIRECTORY", help="the manager's directory")
    p.add_argument("--prefix", default="ckpt", help="the manager's file prefix (default ckpt)")
    p.add_argument("--verify", action="store_true", help="check every byte of every checkpoint against its CRC32")
    p.add_argument("--quick", action="store_true", help="check only metadata, even of the restart target (for large checkpoints)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.add_argument(
        "--cache",
        default=None,
        metavar="CACHE",
        help="also list the node caches under CACHE (two-level checkpoints; {node} expanded)",
    )


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
