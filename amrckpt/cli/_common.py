"""Shared by the subcommands of ``amrckpt``: output, exit codes, progress bars, the communicator of a parallel run."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from .. import scda
from ..comm import Comm, world_comm
from ..container import dtype_from_json
from ..errors import AmrckptError, ScdaDecodeError
from ..scda import safe_text as safe_text

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


def safe_str(text: str) -> str:
    r"""Return ``text`` with every character that is not printable escaped (``\x1b``, ``\u202e``).

    For text that comes from a file (a manifest's names and units, a run
    record's host): a terminal shows it without running escape sequences.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


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
    world = world_comm()
    if world is not None:
        _RANK[0] = world.rank
    return world


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


def _dtype_text(fs_dtype: Any) -> str:
    if fs_dtype is None:
        return "-"
    try:
        dt = dtype_from_json(fs_dtype, "dtype")
    except AmrckptError:
        return str(fs_dtype)
    return dt.str if dt.names is None else str(dt.descr)
