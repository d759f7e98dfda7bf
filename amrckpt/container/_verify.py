"""Checking a checkpoint file: completeness and the CRC32 of every section, spread over the ranks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .. import scda
from .._crc import SectionCrc
from ..comm import Call, collective
from ..errors import AmrckptError, IncompleteCheckpointError, ScdaError
from ..scda import exact_reader, os_error
from ._convention import Index
from ._reader import CheckpointInfo, read_index_on_root, read_info

__all__ = ["VerifyReport", "locate_index", "verify"]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes
    ----------
    path : str
    ok : bool
        True only if the file is complete and every section matches its CRC32.
    problems : list of str
        One sentence per problem, naming the section and its byte range.
    info : CheckpointInfo or None
        The metadata, if the footer, index and manifest could be read.
    """

    path: str
    ok: bool
    problems: list[str]
    info: CheckpointInfo | None


def verify(path: str | os.PathLike[str], *, comm: Any = None, info: Any = None, structure: bool = True) -> VerifyReport:
    """Check that a checkpoint is complete and intact.

    Collective; the bytes of every section in the index are read, spread
    evenly over the ranks, and their CRC32s combined (one allreduce) and
    compared with the index.  With ``structure``, rank 0 also walks the scda
    sections (:func:`amrckpt.scda.scan`) and compares them with the index.

    Returns
    -------
    VerifyReport
        Never raises for a damaged file: the report says what is wrong.
    """
    with collective(comm, "verify") as call:
        return _verify(call, os.fspath(path), info, structure)


def _verify(call: Call, spath: str, info: Any, structure: bool) -> VerifyReport:
    try:
        index = call.on_root(lambda: locate_index(spath), what="verify: index")
    except (AmrckptError, OSError) as exc:
        return VerifyReport(spath, False, [f"{type(exc).__name__}: {exc}"], None)
    problems: list[str] = []
    try:
        crcs = _crc_ranges(spath, [(e.offset, e.end) for e in index.sections], call, info)
    except AmrckptError as exc:
        return VerifyReport(spath, False, [f"{type(exc).__name__}: {exc}"], None)
    for e, crc in zip(index.sections, crcs, strict=True):
        if crc is None:
            problems.append(f"section {e.name!r} (bytes {e.offset}..{e.end}) is not inside the file")
        elif crc != e.crc32:
            problems.append(f"section {e.name!r} (bytes {e.offset}..{e.end}) does not match its CRC32")
    ck = None
    try:
        ck = read_info(spath, comm=call.comm, verify=True, info=info)
    except (AmrckptError, OSError) as exc:
        if not problems:
            problems.append(f"{type(exc).__name__}: {exc}")
    if structure:
        problems += call.on_root(lambda: _structure_problems(spath, index), what="verify: structure")
    return VerifyReport(spath, not problems, problems, ck)


def locate_index(path: str) -> Index:
    """Find and check the index through the footer with plain reads (not collective).

    Unlike :func:`read_info` this does not need a valid file header, so that
    :func:`verify` can report damage anywhere by section.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise os_error(exc, path, "cannot open for reading") from exc
    try:
        size = os.fstat(fd).st_size
        return read_index_on_root(exact_reader(fd, path, IncompleteCheckpointError), size, path)[1]
    finally:
        os.close(fd)


def _structure_problems(path: str, index: Index) -> list[str]:
    try:
        found = scda.scan(path, decode=True).sections
    except (AmrckptError, OSError) as exc:
        return [f"the scda structure is broken: {exc}"]
    have = {(s.offset, s.end, s.type) for s in found}
    out = []
    for e in index.sections:
        if e.type != "F" and (e.offset, e.end, e.type) not in have:
            out.append(f"section {e.name!r}: no {e.type} section spans bytes {e.offset}..{e.end}")
    return out


_VERIFY_CHUNK = 64 << 20


def _crc_ranges(path: str, ranges: list[tuple[int, int]], call: Call, info: Any) -> list[int | None]:
    """CRC32 of each byte range (None if it is not inside the file), the reading spread evenly over the ranks. Collective."""
    comm = call.comm
    backend = scda.open_backend(path, "r", comm, info=info)
    terms = []
    try:
        size = backend.file_size()  # collective; a damaged index may name bytes that the file does not have
        outside = [not 0 <= start <= end <= size for start, end in ranges]
        for (start, end), out in zip(ranges, outside, strict=True):
            if out:
                start = end = 0  # read nothing: no buffer sized by the index
            n = end - start
            lo = start + n * comm.rank // comm.size
            hi = start + n * (comm.rank + 1) // comm.size
            s = SectionCrc()
            pos = lo
            while pos < hi and not call.failed:
                k = min(_VERIFY_CHUNK, hi - pos)
                buf = bytearray(k)
                try:
                    backend.read([(pos, memoryview(buf))], None, 0)
                except ScdaError as exc:
                    call.fail(exc)
                    break
                s.add(pos, buf)
                pos += k
            terms.append(s.term(end))
        crcs = call.allreduce(xors=terms, what="verify: CRC32s").xors
        return [None if out else crc for crc, out in zip(crcs, outside, strict=True)]
    finally:
        backend.close()
