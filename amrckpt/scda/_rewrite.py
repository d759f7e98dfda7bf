"""Rewriting a plain scda file section by section: with or without compression, in either line-break style."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from .._files import same_file
from ..comm import collective
from ..errors import ScdaArgumentError
from ._copy import read_section_data, write_section_data
from ._format import Style
from ._reader import fopen_read
from ._writer import fopen_write

__all__ = ["RewriteResult", "rewrite"]


@dataclass(frozen=True)
class RewriteResult:
    """What :func:`rewrite` did.

    Attributes
    ----------
    sections : int
        Logical sections copied.
    encoded, decoded : int
        Sections compressed, and decompressed, by the rewrite.
    file_size : int
        The new file's size in bytes.
    """

    sections: int
    encoded: int
    decoded: int
    file_size: int


def rewrite(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    comm: Any = None,
    compress: Literal["keep", "encode", "decode"] = "keep",
    style: Style = "unix",
    level: int = 9,
    progress: Any = None,
) -> RewriteResult:
    """Copy scda file ``src`` into ``dst`` section by section; the data read back from ``dst`` equal those of ``src``.

    Collective.  Inline sections are copied as they are; blocks and arrays
    keep their form (``"keep"``), are all compressed by the convention of
    the paper's section 3 (``"encode"``) or none is (``"decode"``).

    Parameters
    ----------
    src, dst : str or os.PathLike
        The file, and the new one (created, or overwritten: ``FileAccess.truncate``).
    comm : None, mpi4py.MPI.Comm or Comm, optional
    compress : {"keep", "encode", "decode"}, optional
    style : {"unix", "mime"}, optional
        Line breaks of ``dst``.
    level : int, optional
        zlib level of new compression.
    progress : object with ``update(nbytes)``, optional
        Told the bytes of ``src`` read.

    Returns
    -------
    RewriteResult

    Raises
    ------
    ScdaArgumentError
        On every rank, if ``dst`` is ``src`` itself (it would be overwritten while it is read); nothing is written.
    ScdaError
        On every rank, if ``src`` is damaged or ``dst`` cannot be written.
    """
    with collective(comm, "scda.rewrite") as call:
        same = call.on_root(lambda: same_file(src, dst), what="rewrite: the same file")
    if same:
        raise ScdaArgumentError(f"rewrite: {os.fspath(dst)!r} is {os.fspath(src)!r} itself; write to another name")
    sections = encoded = decoded = 0
    with fopen_read(src, comm=comm) as f, fopen_write(dst, f.user_string, comm=comm, style=style, vendor=f.vendor) as w:
        done = 0
        while (h := f.fread_section_header(decode=True)) is not None:
            sections += 1
            enc = h.type != "I" and {"keep": h.decoded, "encode": True, "decode": False}[compress]
            write_section_data(w, read_section_data(f, h), encode=enc, level=level)
            encoded += int(enc and not h.decoded)
            decoded += int(h.decoded and not enc)
            if progress is not None:
                progress.update(f.offset - done)
            done = f.offset
        size = w.offset
    return RewriteResult(sections, encoded, decoded, size)
