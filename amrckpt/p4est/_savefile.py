"""p4est's save files (``p4est_save_ext``, ``p8est_save_ext``), read and written in parallel, byte for byte.

The layout, from ``p4est.c`` (p4est 2.x; little-endian, 64-bit)::

    connectivity        p4est_connectivity_sink: magic, package version, 10 uint64, the arrays
    zeros               to the next multiple of 32 bytes
    6 uint64            P4EST_ONDISK_FORMAT, sizeof (p4est_qcoord_t) = 4, sizeof (p4est_quadrant_t) = 24,
                        data_size, save_data, save_num_procs
    save_num_procs u64  global_first_quadrant[1 .. P] (P = 1: just N, "saved without a partition")
    num_trees uint64    pertree[1 .. num_trees]
    zeros               to the next multiple of 32 bytes
    N records           x, y[, z], level (int32 each), then data_size bytes of quadrant data
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .. import scda
from ..comm import Call, Comm, collective
from ..errors import P4estFormatError, ScdaFileNotFoundError, ScdaIOError, SchemaError
from ..partition import Partition
from ..scda import FileAccess
from ..sfc import P4EST_ONDISK_FORMAT, QMAXLEVEL, Connectivity, Forest, ForestGap, forest_gap

__all__ = ["P4estFile", "P4estHeader", "read_p4est", "read_p4est_header", "write_p4est"]

_ALIGN = 32
_QUADRANT_NBYTES = 24  # sizeof (p4est_quadrant_t) on 64-bit machines, in 2D and 3D
DEFAULT_PACKAGE_VERSION = "2.2"
"""The package version written where none is given: p4est's own (Debian's libp4est), which p4est does not read back."""


def _pad(n: int) -> int:
    return (_ALIGN - n % _ALIGN) % _ALIGN


def _error(message: str, section: str, offset: int) -> P4estFormatError:
    err = P4estFormatError(f"{message} ({section}, byte {offset})")
    err.section, err.offset = section, offset
    return err


@dataclass(frozen=True)
class P4estHeader:
    """What a p4est save file holds besides its quadrants (read on the root, the same on every rank).

    Attributes
    ----------
    connectivity : amrckpt.sfc.Connectivity
    package_version : str
        The writer's ``P4EST_PACKAGE_VERSION`` (stored in the connectivity's header).
    data_size : int
        Bytes of quadrant data per quadrant (0: saved without data).
    global_first_quadrant : (save_num_procs + 1,) numpy.ndarray of numpy.int64
        The saved partition (``[0, N]`` when saved without one).
    pertree : (num_trees + 1,) numpy.ndarray of numpy.int64
        The global index of each tree's first quadrant, then N.
    data_offset : int
        The first byte of the quadrant records.
    """

    connectivity: Connectivity
    package_version: str
    data_size: int
    global_first_quadrant: np.ndarray
    pertree: np.ndarray
    data_offset: int

    @property
    def dim(self) -> int:
        """2 (p4est) or 3 (p8est)."""
        return self.connectivity.dim

    @property
    def num_quadrants(self) -> int:
        """N, the global number of quadrants."""
        return int(self.pertree[-1])

    @property
    def record_nbytes(self) -> int:
        """Bytes per quadrant record: ``4 * (dim + 1) + data_size``."""
        return 4 * (self.dim + 1) + self.data_size

    @property
    def saved_partition(self) -> Partition | None:
        """The partition the file was saved with, or None when saved without one (on one process, or ``save_partition`` off)."""
        if self.global_first_quadrant.shape[0] <= 2:
            return None
        return Partition.from_offsets(self.global_first_quadrant)

    def header_bytes(self) -> bytes:
        """Return everything before the quadrant records, as ``p4est_save_ext`` writes it."""
        conn = self.connectivity.to_p4est_bytes(self.package_version)
        P = self.global_first_quadrant.shape[0] - 1
        head = [P4EST_ONDISK_FORMAT[self.dim], 4, _QUADRANT_NBYTES, self.data_size, int(self.data_size > 0), P]
        words = struct.pack(f"<{6 + P + self.connectivity.num_trees}Q", *head, *self.global_first_quadrant[1:], *self.pertree[1:])
        out = conn + b"\0" * _pad(len(conn)) + words
        return out + b"\0" * _pad(len(out))


def _parse_header(path: str, check: bool) -> P4estHeader:
    """Read and check everything before the quadrant records (on one rank, a few small reads).

    Raises
    ------
    ScdaFileNotFoundError
        On this rank, if there is no file ``path``.
    ScdaIOError
        On this rank, if the file cannot be opened or read (with the errno).
    P4estFormatError
        On this rank, if it is not a p4est file, or its connectivity or header is damaged or does not fit its size.
    """
    try:
        return _parse_open(path, check)
    except FileNotFoundError as exc:
        raise ScdaFileNotFoundError(exc.errno, f"{path!r}: no such file") from exc
    except OSError as exc:
        raise ScdaIOError(exc.errno, f"cannot read {path!r}: {exc.strerror or exc}") from exc


def _parse_open(path: str, check: bool) -> P4estHeader:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size

        def read(at: int, n: int, what: str) -> bytes:
            if at + n > size:
                raise _error(f"the file ends inside the {what}: it has {size} bytes, {at + n} are needed", what, at)
            f.seek(at)
            return f.read(n)

        magic = f.read(8)
        if magic not in (b"p4est\0\0\0", b"p8est\0\0\0"):
            raise _error(f"{path!r} is not a p4est file: it starts with {magic!r}, not p4est's magic", "connectivity header", 0)
        head = read(0, 112, "connectivity header")
        V, K, E, nett, NC, nctt, attr = struct.unpack("<7Q", head[48:104])
        if K < 1 or any(x >= 2**31 for x in (V, K, E, nett, NC, nctt, attr)):
            raise _error(f"impossible counts in the connectivity header ({K} trees, {V} vertices)", "connectivity header", 48)
        dim = 2 if head[:5] == b"p4est" else 3
        C, F = 1 << dim, 2 * dim
        total = 112 + 24 * V + 4 * C * K * (bool(V) + bool(NC)) + 5 * F * K + attr * K + 4 * (NC + 1) + 5 * nctt * bool(NC)
        if dim == 3:
            total += 4 * 12 * K * bool(E) + 4 * (E + 1) + 5 * nett * bool(E)
        blob = read(0, total, "connectivity")
        try:
            conn, version, nbytes = Connectivity.from_p4est_bytes(blob, check=check)
        except P4estFormatError as exc:
            raise _error(f"{path!r}: {exc}", exc.section, exc.offset) from exc
        at = nbytes + _pad(nbytes)
        pad = read(nbytes, at - nbytes, "padding after the connectivity")
        if pad.strip(b"\0"):
            raise _error("the padding after the connectivity is not zeros", "padding after the connectivity", nbytes)
        words = struct.unpack("<6Q", read(at, 48, "forest header"))
        if words[0] != P4EST_ONDISK_FORMAT[dim] or words[1] != 4:
            raise _error(
                f"forest header: on-disk format {words[0]:#x} and p4est_qcoord_t of {words[1]} bytes; "
                f"p4est 2.x writes {P4EST_ONDISK_FORMAT[dim]:#x} and 4",
                "forest header",
                at,
            )
        if words[2] != _QUADRANT_NBYTES:
            raise _error(
                f"saved where sizeof (p4est_quadrant_t) is {words[2]}; amrckpt reads the files of 64-bit machines (24)",
                "forest header",
                at + 16,
            )
        data_size, save_data, P = words[3], words[4], words[5]
        if save_data not in (0, 1) or (data_size > 0) != bool(save_data) or data_size >= 2**31:
            raise _error(
                f"data size {data_size} with save_data {save_data}: p4est_save_ext writes both or neither", "forest header", at + 24
            )
        if not 1 <= P < 2**31:
            raise _error(f"{P} saving processes", "forest header", at + 40)
        at += 48
        if at + 8 * (P + K) > size:
            raise _error(f"the file ends inside the partition and pertree ({P} + {K} entries)", "partition", at)
        words_gfq = np.frombuffer(read(at, 8 * P, "partition"), dtype="<u8")
        words_pertree = np.frombuffer(read(at + 8 * P, 8 * K, "pertree"), dtype="<u8")
        if (words_gfq >= 2**62).any():  # no file holds 2^62 quadrants; as int64 such a count would turn negative
            raise _error("the saved partition holds an impossible count of quadrants", "partition", at)
        if (words_pertree >= 2**62).any():
            raise _error("pertree holds an impossible count of quadrants", "pertree", at + 8 * P)
        gfq = np.concatenate([[0], words_gfq]).astype(np.int64)
        pertree = np.concatenate([[0], words_pertree]).astype(np.int64)
        if (gfq < 0).any() or (np.diff(gfq) < 0).any():
            raise _error("the saved partition decreases", "partition", at)
        if (pertree < 0).any() or (np.diff(pertree) < 1).any():
            raise _error("pertree does not increase: a p4est forest has quadrants in every tree", "pertree", at + 8 * P)
        if gfq[-1] != pertree[-1]:
            raise _error(f"the partition counts {gfq[-1]} quadrants, pertree {pertree[-1]}", "pertree", at + 8 * P)
        at += 8 * (P + K)
        pad = read(at, _pad(at), "padding after the header")
        if pad.strip(b"\0"):
            raise _error("the padding after the forest header is not zeros", "padding after the header", at)
        at += len(pad)
        N = int(pertree[-1])
        rec = 4 * (dim + 1) + data_size
        if size != at + N * rec:
            what = "ends inside the quadrants" if size < at + N * rec else "has bytes after the quadrants"
            raise _error(
                f"the file {what}: {N} quadrants of {rec} bytes from byte {at} end at byte {at + N * rec}, the file at {size}",
                "quadrants",
                at,
            )
        return P4estHeader(conn, version, int(data_size), gfq, pertree, at)


def read_p4est_header(path: str | os.PathLike[str], *, comm: Any = None, check: bool = True) -> P4estHeader:
    """Read the connectivity and forest header of a p4est save file (on the root; broadcast). Collective.

    Raises
    ------
    P4estFormatError
        On every rank, naming the damaged part (``section``, ``offset``).
    """
    where = os.fspath(path)
    with collective(comm, "read_p4est_header") as call:
        return call.on_root(lambda: _parse_header(where, check), what="p4est header")


@dataclass(frozen=True)
class P4estFile:
    """A p4est save file as one rank reads it (:func:`read_p4est`).

    Attributes
    ----------
    header : P4estHeader
        Connectivity, package version, data size, saved partition, pertree.
    forest : amrckpt.Forest
        This rank's quadrants as leaves.
    data : (n, data_size) numpy.ndarray of numpy.uint8 or None
        This rank's quadrant data (None when the file has none, or it was not read).
    partition : Partition
        The partition read with (``global_first_quadrant``).
    """

    header: P4estHeader
    forest: Forest
    data: np.ndarray | None
    partition: Partition

    @property
    def connectivity(self) -> Connectivity:
        """The forest's connectivity."""
        return self.header.connectivity


def _nrounds(max_nbytes: int) -> int:
    return max(1, -(-max_nbytes // scda.MAX_CALL_NBYTES))


def read_p4est(
    path: str | os.PathLike[str],
    *,
    comm: Any = None,
    partition: Literal["uniform", "saved"] | Partition = "uniform",
    data: bool = True,
    check: bool = True,
    access: FileAccess | None = None,
) -> P4estFile:
    """Read a file of ``p4est_save_ext`` (``p8est_save_ext``): each rank its own quadrants. Collective.

    The root reads the connectivity and the header (checked against the
    file's size before anything is allocated) and broadcasts them; then
    every rank reads its own slice of the quadrant records in one
    collective read (MPI-IO under MPI), as ``p4est_load_ext`` does.

    Parameters
    ----------
    path : str or os.PathLike
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
        Default serial.
    partition : {"uniform", "saved"} or Partition, optional
        ``"uniform"``: rank p starts at ``floor(N p / P)`` (``p4est_load_ext``
        with ``autopartition``); ``"saved"``: the partition the file was
        saved with (on as many ranks); or an explicit partition.
    data : bool, optional
        Read the quadrant data too.
    check : bool, optional
        Check the connectivity (``p4est_connectivity_is_valid``) and the
        quadrants (ranges, alignment, curve order within the rank).
    access : amrckpt.FileAccess, optional
        MPI-IO hints and backend, as for :func:`amrckpt.load`.

    Returns
    -------
    P4estFile

    Raises
    ------
    P4estFormatError
        On every rank: not a p4est file, a damaged header or quadrant
        record (naming it and its byte), a size that does not fit.
    SchemaError
        On every rank, for a partition that does not fit.
    ScdaIOError
        On every rank, if the file cannot be read.
    """
    with collective(comm, "read_p4est") as call:
        return _read(call, os.fspath(path), partition, data, check, FileAccess.of(access))


def _read(call: Call, where: str, partition: Any, data: bool, check: bool, access: FileAccess) -> P4estFile:
    """Read the file: the body of :func:`read_p4est`, inside its collective call.

    Raises
    ------
    SchemaError
        On every rank, if ``partition`` is not ``"uniform"``, ``"saved"`` or a Partition, or does not fit the file
        and the job.
    P4estFormatError
        On every rank, as :func:`read_p4est` says.
    ScdaIOError
        On every rank, if the file cannot be read.
    """
    c = call.comm
    header = read_p4est_header(where, comm=c, check=check)
    N = header.num_quadrants
    if isinstance(partition, Partition):
        part = partition
    elif partition == "saved":
        part = header.saved_partition or Partition.from_offsets([0, N])
    elif partition == "uniform":
        part = Partition.uniform(N, c.size)
    else:
        raise SchemaError(f"partition must be 'uniform', 'saved' or a Partition, not {partition!r}")
    if part.N != N or part.size != c.size:  # the same on every rank
        raise call.agreed(
            SchemaError(f"the partition has {part.N} quadrants on {part.size} ranks; {where!r} has {N}, the job {c.size} ranks")
        )
    rec = header.record_nbytes
    a, b = part.local_range(c.rank)
    before = int(check and 0 < a < b)  # the quadrant before this rank's: the completeness across ranks, checked here
    buf = np.empty((b - a + before) * rec, dtype=np.uint8)
    f = scda.open_backend(where, "r", c, access=access)
    rounds = _nrounds((int(part.elem_counts.max()) + 1) * rec)
    call.run(f.read_gathered, [(header.data_offset + (a - before) * rec, memoryview(buf))], rounds, always=True)
    f.close()  # on every rank; its errors are kept by the call
    got = call.run(_records, buf, before, header, part, c, data, check, where)
    call.agree("read_p4est")
    assert got is not None
    return P4estFile(header, got[0], got[1], part)


def _records(
    buf: np.ndarray, before: int, header: P4estHeader, part: Partition, c: Comm, data: bool, check: bool, where: str
) -> tuple[Forest, Any]:
    """Return this rank's forest and data from its records (after ``before`` records of the quadrant before them).

    With ``check``: ranges and alignment (:meth:`Forest.from_p4est`), then
    completeness (:func:`amrckpt.sfc.forest_gap`, ``p4est_tree_is_complete``:
    it implies the curve order), the quadrant before this rank's included.

    Raises
    ------
    P4estFormatError
        On this rank (a step of the collective call, which agrees on it), if its quadrants are damaged, or (with
        ``check``) not a complete forest.
    """  # noqa: DOC501 (_error() returns the P4estFormatError)
    dim, ds = header.dim, header.data_size
    rec = header.record_nbytes
    rows = buf.reshape(buf.shape[0] // rec, rec)
    prior, rows = rows[:before], rows[before:]
    quads = rows[:, : 4 * (dim + 1)].copy().view("<i4")
    first = part.local_range(c.rank)[0]
    try:
        forest = Forest.from_p4est(
            quads,
            pertree=header.pertree,
            global_first_quadrant=part.global_first_quadrant,
            rank=c.rank,
            connectivity=header.connectivity,
            check=check,
        )
        gap = _gap(forest, prior, header, first) if check else None
        if gap is not None:
            forest.check_order()  # an overlap or a quadrant out of order is named as such
    except SchemaError as exc:
        raise _error(
            f"{where!r}: the quadrants of rank {c.rank} are damaged: {exc}", "quadrants", header.data_offset + first * rec
        ) from exc
    if gap is not None:
        raise _error(
            f"{where!r}: the quadrants are not a complete forest, which p4est_load_ext refuses ('invalid forest'): {gap}",
            "quadrants",
            header.data_offset + gap.index * rec,
        )
    quad_data = np.ascontiguousarray(rows[:, 4 * (dim + 1) :]) if data and ds else None
    return forest, quad_data


def _gap(forest: Forest, prior: np.ndarray, header: P4estHeader, first: int) -> ForestGap | None:
    """Return the first hole in this rank's quadrants, or between the quadrant before them (``prior``: 0 or 1 record) and them."""
    before = None
    if prior.shape[0]:
        dim = header.dim
        q = prior[0, : 4 * (dim + 1)].copy().view("<i4")
        if not 0 <= int(q[dim]) <= QMAXLEVEL[dim]:
            return None  # damaged: the rank that holds it names it
        tree = int(np.searchsorted(header.pertree, first - 1, side="right")) - 1
        before = (tree, int(q[dim]), int(q[0]), int(q[1]), int(q[2]) if dim == 3 else None)
    return forest_gap(
        forest.tree,
        forest.level,
        forest.x,
        forest.y,
        forest.z,
        first_index=first,
        num_leaves=header.num_quadrants,
        num_trees=header.connectivity.num_trees,
        before=before,
    )


def write_p4est(
    path: str | os.PathLike[str],
    forest: Forest,
    connectivity: Connectivity,
    data: Any = None,
    *,
    comm: Any = None,
    save_partition: bool = False,
    package_version: str = DEFAULT_PACKAGE_VERSION,
    access: FileAccess | None = None,
) -> int:
    """Write a forest as ``p4est_save_ext`` (``p8est_save_ext``) does; each rank its own quadrants. Collective.

    The bytes are p4est's: ``p4est_load_ext`` loads the file, and a file
    that p4est saved reads back (:func:`read_p4est`) and writes again byte
    for byte.  Without ``save_partition`` the file does not depend on the
    number of ranks (p4est's "as if 1 core was used").

    Parameters
    ----------
    path : str or os.PathLike
    forest : amrckpt.Forest
        This rank's leaves: a complete forest in Morton order over the ranks
        (:meth:`~amrckpt.Forest.to_p4est`).
    connectivity : amrckpt.sfc.Connectivity
        Of the forest's dimension and number of trees.
    data : (n, data_size) array_like of numpy.uint8, or (n, ...) numpy.ndarray, optional
        Each local quadrant's data (any array of n rows: its bytes per
        row); None: saved without data (``save_data`` 0).
    comm : None, mpi4py.MPI.Comm or amrckpt.comm.Comm, optional
    save_partition : bool, optional
        Save the writing partition (``global_first_quadrant``) in the header.
    package_version : str, optional
        ``P4EST_PACKAGE_VERSION`` recorded in the connectivity header (at
        most 24 bytes; p4est does not read it).
    access : amrckpt.FileAccess, optional
        MPI-IO hints and backend, as for :func:`amrckpt.save`.

    Returns
    -------
    int
        The file's size in bytes.

    Raises
    ------
    SchemaError
        On every rank: leaves that are not a complete Morton forest, data
        whose rows do not match the leaves or differ in size between ranks.
    ScdaIOError
        On every rank, if the file cannot be written.
    """
    with collective(comm, "write_p4est") as call:
        return _write(call, os.fspath(path), forest, connectivity, data, save_partition, package_version, FileAccess.of(access))


def _write(
    call: Call,
    where: str,
    forest: Forest,
    connectivity: Connectivity,
    data: Any,
    save_partition: bool,
    package_version: str,
    access: FileAccess,
) -> int:
    """Write the file: the body of :func:`write_p4est`, inside its collective call."""
    c = call.comm
    n = len(forest)

    def data_rows() -> np.ndarray:
        if data is None:
            return np.zeros((n, 0), dtype=np.uint8)
        try:
            arr = np.asarray(data)
            if arr.ndim == 0 or arr.shape[0] != n:
                raise SchemaError(f"write_p4est: data has {arr.shape[0] if arr.ndim else 0} rows, the forest {n} leaves")
            per = arr.dtype.itemsize * math.prod(arr.shape[1:])
            return np.ascontiguousarray(arr).view(np.uint8).reshape(n, per)
        except (ValueError, TypeError) as exc:
            raise SchemaError(f"write_p4est: data: {exc}") from exc

    rows = call.run(data_rows)
    mine = int(rows.shape[1]) if rows is not None else 0
    # A rank without quadrants has no say in the data size (the maxima of size and -size over the others).
    got = call.reduction("write_p4est").max("data size", mine if n else -1).min("data size", mine if n else 2**61).run()
    largest, smallest = int(got.max("data size")), int(got.min("data size"))
    if largest >= 0 and largest != smallest:
        raise call.agreed(SchemaError("write_p4est: the ranks' data have different sizes per quadrant"))
    assert rows is not None
    ds = max(largest, 0)
    if not n:
        rows = np.zeros((0, ds), dtype=np.uint8)
    q = forest.to_p4est(comm=c, connectivity=connectivity)
    part = Partition.from_offsets(q.global_first_quadrant)
    header = P4estHeader(
        connectivity,
        package_version,
        ds,
        q.global_first_quadrant if save_partition else np.array([0, part.N], dtype=np.int64),
        q.pertree,
        0,
    )
    head = header.header_bytes()  # the same on every rank; the root writes it
    start = len(head)
    rec = 4 * (forest.dim + 1) + ds
    out = np.empty((n, rec), dtype=np.uint8)
    out[:, : 4 * (forest.dim + 1)] = q.quadrants.astype("<i4", copy=False).view(np.uint8).reshape(n, -1)
    if ds:
        out[:, 4 * (forest.dim + 1) :] = rows
    a = int(q.global_first_quadrant[c.rank])
    pieces = [(start + a * rec, memoryview(out.reshape(-1)))]
    if c.rank == 0:
        pieces.insert(0, (0, memoryview(head)))
    total = start + part.N * rec
    f = scda.open_backend(where, "w", c, access=access)
    call.run(f.write_gathered, pieces, _nrounds(int(part.elem_counts.max()) * rec + start), always=True)
    f.close(size=total)  # on every rank; its errors are kept by the call
    call.agree("write_p4est")
    return total
