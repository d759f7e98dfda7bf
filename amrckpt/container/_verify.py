"""Checking a checkpoint file: completeness and the CRC32 of every section, spread over the ranks."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from typing import Any, Literal

from .. import scda
from .._crc import SectionCrc
from ..comm import Call, collective
from ..errors import AmrckptError, IncompleteCheckpointError, ScdaError
from ..scda import Problem, exact_reader, open_read
from ..sfc import forest_gap
from ._convention import FOOTER_NBYTES, FOOTER_USER_STRING, Index, MeshSpec
from ._reader import CheckpointInfo, CheckpointReader, read_index_on_root, read_info

__all__ = ["Problem", "VerifyReport", "is_checkpoint", "locate_index", "verify", "verify_file"]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` (or :func:`verify_file`) found.

    Attributes
    ----------
    path : str
    ok : bool
        True only if the file is complete and every section matches its
        CRC32 (a plain scda file: every section was read and decoded).
    problems : list of Problem
        One per problem: its kind (``incomplete``, ``damaged``,
        ``unreadable``, ``not-scda``), the section and byte range where
        known, and a sentence.
    info : CheckpointInfo or None
        The metadata, if the footer, index and manifest could be read.
    kind : {"checkpoint", "scda"} or None
        What the file was checked as (None: it could not be told).
    sections : int or None
        The number of sections (a checkpoint's index entries and footer; a
        plain file's logical sections), where known.
    compressed : int
        A plain file's compressed sections (decoded).
    file_size : int or None
    """

    path: str
    ok: bool
    problems: list[Problem]
    info: CheckpointInfo | None
    kind: Literal["checkpoint", "scda"] | None = "checkpoint"
    sections: int | None = None
    compressed: int = 0
    file_size: int | None = None


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Return whether a file claims to be an amrckpt checkpoint: its header, or a footer at its end. Not collective.

    Raises
    ------
    OSError
        If the file cannot be read.
    """
    with open(path, "rb") as fh:
        head = fh.read(scda.FILE_HEADER_NBYTES)
        size = os.fstat(fh.fileno()).st_size
        tail = b""
        if size >= scda.FILE_HEADER_NBYTES + FOOTER_NBYTES:
            fh.seek(size - FOOTER_NBYTES)
            tail = fh.read(FOOTER_NBYTES)
    return head[32:42] == b"F amrckpt " or tail.startswith(b"I " + FOOTER_USER_STRING + b" ")


P4EST_SCHEMAS = ("p4est", "p8est")
"""The schemas of p4est's forests (:func:`amrckpt.p4est.p4est_schema`): their meshes must be complete."""


def verify(
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    structure: bool = True,
    complete: bool | None = None,
    access: scda.FileAccess | None = None,
) -> VerifyReport:
    """Check that a checkpoint is complete and intact, and that a p4est forest in it covers its trees.

    Collective; the bytes of every section in the index are read, spread
    evenly over the ranks, and their CRC32s combined (one allreduce) and
    compared with the index.  With ``structure``, rank 0 also walks the scda
    sections (:func:`amrckpt.scda.scan`) and compares them with the index.
    Where the bytes are intact and ``complete`` asks for it, each Morton
    mesh is checked to be a complete forest, as p4est's ``p4est_is_valid``
    checks its forests (``p4est_tree_is_complete``): each rank reads its
    uniform share of the leaves and the one before it
    (:func:`amrckpt.sfc.forest_gap`; O(N / P) reading and work per rank,
    three small collectives per mesh).

    Parameters
    ----------
    path : str or os.PathLike
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
    structure : bool, optional
        Also compare the scda structure with the index (rank 0).
    complete : bool or None, optional
        Check that the meshes are complete forests: None (default) for the
        checkpoints of p4est forests (schemas ``p4est`` and ``p8est``, what
        ``amrckpt convert --from p4est`` writes), True for every Morton
        mesh, False never (amrckpt's own meshes may hold any linear set of
        leaves).
    access : amrckpt.FileAccess, optional
        How the file is opened: MPI-IO hints, byte backend
        (:class:`~amrckpt.scda.FileAccess`); None: the defaults.

    Returns
    -------
    VerifyReport
        Never raises for a damaged file: the report says what is wrong, the
        same on every rank; a forest with a hole is a problem of kind
        ``invalid`` naming its quadrant and tree.
    """
    a = scda.FileAccess.of(access)
    with collective(comm, "verify") as call:
        return _verify(call, os.fspath(path), a, structure, complete)


def verify_file(
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    strict: bool = False,
    progress: Any = None,
    complete: bool | None = None,
    access: scda.FileAccess | None = None,
) -> VerifyReport:
    """Check any file: a checkpoint by :func:`verify`, any other scda file by :func:`amrckpt.scda.verify`. Collective.

    Rank 0 tells the kinds apart (a checkpoint's header, or its footer at
    the end).  ``strict`` checks a plain file's data padding; ``progress``
    (``update(nbytes)``) is told the bytes read; ``complete``, ``access``
    and the loose ``info`` are :func:`verify`'s.

    Returns
    -------
    VerifyReport
        Never raises for a damaged or unreadable file; the same on every rank.
    """
    a = scda.FileAccess.of(access)
    with collective(comm, "verify_file") as call:
        spath = os.fspath(path)

        def sniff() -> bool | Problem:
            try:
                return is_checkpoint(spath)
            except OSError as exc:
                return scda.problem_of(exc)

        got = call.on_root(sniff, what="verify: sniff")
        if isinstance(got, Problem):
            return VerifyReport(spath, False, [got], None, None)
        if got:
            rep = _verify(call, spath, a, True, complete)
            size = call.on_root(lambda: _size(spath), what="verify: size")
            nsec = len(rep.info.index.sections) + 1 if rep.info is not None else None
            if progress is not None and size is not None:
                progress.update(size)
            return dataclasses.replace(rep, sections=nsec, file_size=size)
        plain = scda.verify(spath, comm=call.comm, strict=strict, progress=progress)
        return VerifyReport(spath, plain.ok, plain.problems, None, "scda", plain.sections, plain.compressed, plain.file_size)


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _located(path: str) -> Index | Problem:
    """Return the index, or the problem of finding it (rank 0)."""
    try:
        return locate_index(path)
    except (AmrckptError, OSError) as exc:
        try:
            magic_ok = scda.is_scda(path)
        except OSError:
            magic_ok = True
        return scda.problem_of(exc, not_scda=not magic_ok)


def _verify(call: Call, spath: str, access: scda.FileAccess, structure: bool, complete: bool | None = None) -> VerifyReport:
    got = call.on_root(lambda: _located(spath), what="verify: index")
    if isinstance(got, Problem):
        return VerifyReport(spath, False, [got], None)
    index = got
    problems: list[Problem] = []
    try:
        crcs = _crc_ranges(spath, [(e.offset, e.end) for e in index.sections], call, access)
    except AmrckptError as exc:
        return VerifyReport(spath, False, [scda.problem_of(exc)], None)
    for e, crc in zip(index.sections, crcs, strict=True):
        if crc != e.crc32:
            why = "is not inside the file" if crc is None else "does not match its CRC32"
            problems.append(Problem("damaged", f"section {e.name!r} (bytes {e.offset}..{e.end}) {why}", e.name, e.offset, e.end))
    ck = None
    try:
        ck = read_info(spath, comm=call.comm, verify=True, access=access)
    except (AmrckptError, OSError) as exc:
        if not problems:
            problems.append(scda.problem_of(exc))
    if structure:
        problems += call.on_root(lambda: _structure_problems(spath, index), what="verify: structure")
    if ck is not None and not problems and complete is not False:
        meshes = [ms for ms in ck.manifest.meshes if ms.curve == "morton" and ms.num_leaves]
        if complete or ck.manifest.schema_name in P4EST_SCHEMAS:
            problems += _forest_problems(call, spath, meshes, access)
    return VerifyReport(spath, not problems, problems, ck)


def _forest_problems(call: Call, spath: str, meshes: list[MeshSpec], access: scda.FileAccess) -> list[Problem]:
    """Return the first hole of each mesh that is not a complete forest (``invalid``), or why it was not read. Collective."""
    if not meshes:
        return []
    out: list[Problem] = []
    rank, size = call.rank, call.size
    try:
        with CheckpointReader(spath, comm=call.comm, verify=True, access=access) as r:
            for ms in meshes:
                N = ms.num_leaves
                a, b = N * rank // size, N * (rank + 1) // size
                before = int(0 < a < b)

                def local(ms: MeshSpec = ms, a: int = a, b: int = b, before: int = before, N: int = N) -> Any:
                    rec = r.read_mesh(a - before, b - a + before, ms.field)
                    mine = rec[before:]
                    prior = None
                    if before:
                        p = rec[0]
                        prior = (int(p["tree"]), int(p["level"]), int(p["x"]), int(p["y"]), int(p["z"]) if ms.dim == 3 else None)
                    z = mine["z"] if ms.dim == 3 else None
                    return forest_gap(
                        mine["tree"],
                        mine["level"],
                        mine["x"],
                        mine["y"],
                        z,
                        first_index=a,
                        num_leaves=N,
                        num_trees=ms.num_trees,
                        before=prior,
                    )

                gap = call.run(local)
                # The lowest index of a gap, and the lowest rank that found it: (index * P + rank), least over the ranks.
                key = (gap.index if gap is not None else N) * size + rank
                first = int(call.reduction("verify: forest").min("first gap", key).run().min("first gap"))
                if first // size < N:
                    said = "" if gap is None else gap.message
                    message: str = call.on_root(functools.partial(str, said), root=first % size, what="verify: forest gap")
                    text = f"mesh {ms.field!r} is not a complete forest, as p4est's forests are: {message}"
                    out.append(Problem("invalid", text, ms.field))
    except (AmrckptError, OSError) as exc:
        out.append(scda.problem_of(exc))
    return out


def locate_index(path: str) -> Index:
    """Find and check the index through the footer with plain reads (not collective).

    Unlike :func:`read_info` this does not need a valid file header, so that
    :func:`verify` can report damage anywhere by section.
    """
    fd = open_read(path)
    try:
        size = os.fstat(fd).st_size
        return read_index_on_root(exact_reader(fd, path, IncompleteCheckpointError), size, path)[1]
    finally:
        os.close(fd)


def _structure_problems(path: str, index: Index) -> list[Problem]:
    try:
        found = scda.scan(path, decode=True).sections
    except (AmrckptError, OSError) as exc:
        p = scda.problem_of(exc)
        return [Problem(p.kind, f"the scda structure is broken: {exc}")]
    have = {(s.offset, s.end, s.type) for s in found}
    out = []
    for e in index.sections:
        if e.type != "F" and (e.offset, e.end, e.type) not in have:
            out.append(
                Problem(
                    "damaged", f"section {e.name!r}: no {e.type} section spans bytes {e.offset}..{e.end}", e.name, e.offset, e.end
                )
            )
    return out


_VERIFY_CHUNK = 64 << 20


def _crc_ranges(path: str, ranges: list[tuple[int, int]], call: Call, access: scda.FileAccess) -> list[int | None]:
    """CRC32 of each byte range (None if it is not inside the file), the reading spread evenly over the ranks. Collective."""
    comm = call.comm
    backend = scda.open_backend(path, "r", comm, access=access)
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
        crcs = call.reduction("verify: CRC32s").xor("crc terms", terms).run().xor("crc terms")
        return [None if out else crc for crc, out in zip(crcs, outside, strict=True)]
    finally:
        backend.close()
