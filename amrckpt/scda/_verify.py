"""Checking a plain scda file: every section read and decoded; problems as structured values.

:class:`Problem` is what a check reports about a file, by kind (the
structure the command-line tool prints, and a program tests): ``incomplete``
(the file is cut short), ``damaged`` (its bytes are not what its structure
or checksums say), ``unreadable`` (the file system refused to read it:
``EACCES``, ``EIO``), ``not-scda`` (it is no scda file at all) and
``invalid`` (its bytes are intact, but what they hold breaks a rule of its
content: a p4est forest with a hole).
:func:`verify` walks any scda file, section by section, through the
collective reader; a checkpoint is checked by :func:`amrckpt.verify`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from ..comm import Call, collective
from ..errors import AmrckptError, ScdaCountError, ScdaFormatError, ScdaIOError
from ._copy import read_section_data
from ._format import MAGIC
from ._reader import fopen_read
from ._scan import FileInfo, scan

__all__ = ["FileReport", "Problem", "ProblemKind", "is_scda", "line_style", "problem_of", "safe_text", "verify"]

ProblemKind = Literal["incomplete", "damaged", "unreadable", "not-scda", "invalid"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a file.

    Attributes
    ----------
    kind : {"incomplete", "damaged", "unreadable", "not-scda", "invalid"}
        What is wrong: the file is cut short, its bytes are wrong, it
        cannot be read, it is not an scda file, or its intact bytes hold
        something invalid (a forest that is not complete).
    message : str
        A sentence naming the section and bytes where known (text from the
        file in it is escaped: ``repr``).
    section : str or None
        The section's name (an index entry's or user string), where known.
    offset, end : int or None
        The byte range concerned, where known.
    """

    kind: ProblemKind
    message: str
    section: str | None = None
    offset: int | None = None
    end: int | None = None

    def __str__(self) -> str:
        return self.message


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


def is_scda(path: str | os.PathLike[str]) -> bool:
    """Return whether the file starts with the scda magic (``scdata0``). Not collective.

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    with open(path, "rb") as fh:
        return fh.read(len(MAGIC)) == MAGIC


def line_style(path: str | os.PathLike[str]) -> Literal["unix", "mime"]:
    """Return the line-break style of an scda file, from its header's first line. Not collective."""
    with open(path, "rb") as fh:
        head = fh.read(32)
    return "mime" if head[30:32] == b"\r\n" else "unix"


def problem_of(exc: BaseException, *, not_scda: bool = False, section: str | None = None, **where: int | None) -> Problem:
    """Return the problem an error of reading a file stands for (by its class). Not collective.

    Parameters
    ----------
    exc : BaseException
        The error.
    not_scda : bool, optional
        The file does not start with the scda magic (:func:`is_scda`).
    section : str, optional
        The section concerned.
    **where
        ``offset`` and ``end``, the bytes concerned.
    """
    kind: ProblemKind
    if not_scda:
        kind = "not-scda"
    elif isinstance(exc, ScdaCountError) or type(exc).__name__ == "IncompleteCheckpointError":
        kind = "incomplete"
    elif isinstance(exc, ScdaIOError) or (isinstance(exc, OSError) and not isinstance(exc, AmrckptError)):
        kind = "unreadable"
    else:
        kind = "damaged"
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, OSError) and not isinstance(exc, AmrckptError):
        text = f"{type(exc).__name__}: cannot read {exc.filename!r}: {exc.strerror or exc}"
    return Problem(kind, text, section, where.get("offset"), where.get("end"))


@dataclass(frozen=True)
class FileReport:
    """What :func:`verify` found in a plain scda file.

    Attributes
    ----------
    path : str
    ok : bool
        Whether every section was read and decoded.
    problems : list of Problem
    sections : int or None
        The number of (logical) sections, if the file could be scanned.
    compressed : int
        How many of them are compressed (and were decoded).
    file_size : int or None
    """

    path: str
    ok: bool
    problems: list[Problem]
    sections: int | None = None
    compressed: int = 0
    file_size: int | None = None


def _scanned(path: str) -> FileInfo | Problem:
    try:
        return scan(path, decode=True)
    except (AmrckptError, OSError) as exc:
        try:
            magic_ok = is_scda(path)
        except OSError:
            magic_ok = True
        return problem_of(exc, not_scda=not magic_ok)


def verify(path: str | os.PathLike[str], *, comm: Any = None, strict: bool = False, progress: Any = None) -> FileReport:
    """Read every section of an scda file, decoding compressed ones, to check that it is complete and intact.

    Collective: rank 0 scans the headers, then every rank reads each
    section through the collective reader.  Never raises for a damaged file.

    Parameters
    ----------
    path : str or os.PathLike
    comm : None, mpi4py.MPI.Comm or Comm, optional
    strict : bool, optional
        Also check data padding (the paper ignores it).
    progress : object with ``update(nbytes)``, optional
        Told the bytes read.

    Returns
    -------
    FileReport
        The same on every rank.
    """
    with collective(comm, "scda.verify") as call:
        return _verify(call, os.fspath(path), strict, progress)


def _verify(call: Call, path: str, strict: bool, progress: Any) -> FileReport:
    got = call.on_root(lambda: _scanned(path), what="verify: scan")
    if isinstance(got, Problem):
        return FileReport(path, False, [got])
    info = got
    problems: list[Problem] = []
    done = 0
    try:
        with fopen_read(path, comm=call.comm, strict=strict) as f:
            for s in info.sections:
                name = f'"{safe_text(s.user_string)}"'
                try:
                    h = f.fread_section_header(decode=True)
                    if h is None or h.offset != s.offset:
                        raise ScdaFormatError(f"the file changed while it was read: no section at byte {s.offset}")
                    read_section_data(f, h)
                except AmrckptError as exc:
                    kind = problem_of(exc).kind
                    text = f"{type(exc).__name__}: section {s.index} ({s.type} {name}, bytes {s.offset}..{s.end}): {exc}"
                    problems.append(Problem(kind, text, name, s.offset, s.end))
                    break
                if progress is not None:
                    progress.update(s.end - done)
                done = s.end
            else:
                try:
                    if f.fread_section_header() is not None:
                        problems.append(
                            Problem("damaged", f"a section at byte {f.offset} that the scan did not list", None, f.offset)
                        )
                except AmrckptError as exc:
                    problems.append(problem_of(exc))
    except AmrckptError as exc:  # opening or closing failed (agreed: the same on every rank)
        if not problems:
            problems.append(problem_of(exc))
    if progress is not None:
        progress.update(info.file_size - done)
    compressed = sum(1 for s in info.sections if s.compressed)
    return FileReport(path, not problems, problems, len(info.sections), compressed, info.file_size)
