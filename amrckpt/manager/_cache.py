"""The node-local level of a checkpoint directory (SCR's cache): each rank's exact pieces of the final file.

A save into the cache writes, on every rank, the pieces of the scda file
that the save's one agreement assigned to it (``(offset, bytes)`` runs:
exactly what the rank would write into the shared file) into one file of
its own, ``rank-<r, 6 digits>.pieces``, in its node's cache directory::

    <node directory>/ckpt-000000000040.cache/           a cached step (committed)
        step.json                                       what the step is: P, node layout, ranks held, records
        rank-000003.pieces                              rank 3's pieces (a rank of this node)
        rank-000001.pieces                              rank 1's pieces (a partner copy: rank 1 is on another node)
    <node directory>/.ckpt-000000000040.cache.partial-<token>/   a cached save in progress
    <node directory>/amrckpt.lock                       the node's lock (flock, held by the node's first rank)

The step is committed as the shared directory's steps are (temporary
name, write, fsync, rename, directory fsync, agreed by every rank): a
directory with its final name is complete.  :mod:`amrckpt.manager._flush`
writes the pieces back into the shared file.

A pieces file is a header (magic, rank, the save's number of collective
rounds, number of pieces, data bytes, CRC32 of the table and the data, CRC32
of the header), the table of ``(offset, nbytes)`` pairs (little-endian
uint64), and the pieces' bytes one after the other.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import json
import mmap
import os
import platform
import re
import shutil
import stat
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._crc import crc32, crc32_of_pieces, pool
from .._files import LOCAL, FileSystem, is_evidence, open_regular, pwrite_exact, read_regular
from .._logging import RankLogger, get_logger
from ..comm import Call, Comm, current_call, digest_of
from ..container import RUN_RECORD_LIMIT
from ..errors import ManagerError, ManagerIOError, ScdaIOError, ScdaUsageError
from ..scda import Backend, FileAccess, os_error
from ._lock import DirectoryLock
from ._names import StepNames
from ._records import RECORD_LIMIT

__all__ = [
    "CacheLevel",
    "CachedStep",
    "NodeCache",
    "NodeLayout",
    "Pieces",
    "list_cache",
    "node_directories",
    "ranks_of",
    "read_pieces",
    "shape_of",
]

_log = get_logger("amrckpt.manager")

EXTENSION = ".cache"
STEP_JSON = "step.json"

STEP_JSON_LIMIT = RECORD_LIMIT + 2 * RUN_RECORD_LIMIT
"""The largest ``step.json`` read, in bytes: a step record (at most 1 MiB) and a run record, escaped as a JSON string."""
MAGIC = b"amrckpt pieces 1"
_HEAD = struct.Struct("<16sQQQQII")  # magic, rank, nrounds, npieces, data nbytes, crc32(table + data), crc32(head)
_IOV = 512  # buffers per writev (below every system's IOV_MAX)
_TMPFS_MAGIC = 0x01021994  # linux/magic.h


@dataclass(frozen=True)
class NodeCache:
    """A node-local level for :class:`~amrckpt.CheckpointManager`: saves go to the node first, then are flushed.

    Pass it as ``CheckpointManager(..., cache=NodeCache(...), flush_policy=...)``.
    SCR's terms: the cache (``SCR_CACHE_BASE``), its size in steps
    (``SCR_CACHE_SIZE``), ``PARTNER`` redundancy.  A value object: not collective.

    Parameters
    ----------
    directory : str or os.PathLike
        The cache directory of each node (``/dev/shm/...``, a burst buffer,
        ``$TMPDIR``); ``{node}`` is replaced by the node's number and
        ``{job}`` by the job's id (``SLURM_JOB_ID``, else ``"job"``).  Without
        ``{node}``, each node's files go into ``<directory>/node-<node>``.
    partners : int, optional
        How many other nodes keep a copy of each node's pieces (SCR's
        ``PARTNER`` scheme: node n's on nodes n+1 .. n+partners, cyclically;
        default 1).  With one node there is no partner.  The ranks of one
        position on their nodes form a set (SCR's partner sets): a rank's
        copies go to the next members of its set, so nodes of different
        sizes work too, a rank whose position only its node has having
        fewer copies (a warning names them).
    keep : int, optional
        Cached steps kept on each node (SCR's ``SCR_CACHE_SIZE``, default 2);
        older ones are removed after a cached save commits.
    node_size : int, optional
        Ranks per node, ``rank // node_size`` being a rank's node: simulates
        several nodes on one machine (tests).  Default None: the nodes are
        the hosts (ranks with the same host name share a node, as
        ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` would group them).
    recycle : bool, optional
        Write a save's pieces into the pieces file of the oldest cached
        step that the save's retention removes anyway (default True): its
        memory pages are allocated already, which a new file's are not (on a
        tmpfs such as ``/dev/shm`` the file is overwritten through a shared
        mapping, else with ``pwritev``).  As SCR's cache deletes its oldest
        checkpoint before it writes a new one, that step is then incomplete
        while the save runs: ``keep - 1`` complete steps and the new one in
        progress, at most ``keep`` steps' pages in the cache instead of
        ``keep + 1``.  The newest cached step is never recycled (with
        ``keep=1`` nothing is).  False: always a new file.

    Raises
    ------
    ManagerError
        For ``partners < 0``, ``keep < 1`` or ``node_size < 1``.
    """

    directory: str | os.PathLike[str]
    partners: int = 1
    keep: int = 2
    node_size: int | None = None
    recycle: bool = True

    def __post_init__(self) -> None:
        for name, value, low in (("partners", self.partners, 0), ("keep", self.keep, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ManagerError(f"NodeCache: {name} is an int >= {low}, not {value!r}")
        ns = self.node_size
        if ns is not None and (isinstance(ns, bool) or not isinstance(ns, int) or ns < 1):
            raise ManagerError(f"NodeCache: node_size is None or an int >= 1, not {ns!r}")
        if not isinstance(self.recycle, bool):
            raise ManagerError(f"NodeCache: recycle is a bool, not {self.recycle!r}")

    def path_of(self, node: int, job: str | None = None) -> Path:
        """Return the cache directory of ``node``. Not collective."""
        text = os.fspath(self.directory)
        job = job if job is not None else os.environ.get("SLURM_JOB_ID", "job")
        if "{node}" in text:
            return Path(text.replace("{node}", str(node)).replace("{job}", job))
        return Path(text.replace("{job}", job)) / f"node-{node}"

    def existing(self, job: str | None = None) -> dict[int, Path]:
        """Return the existing cache directories of the nodes that this process sees, by node. Not collective."""
        return node_directories(self.directory, job)


def node_directories(directory: str | os.PathLike[str], job: str | None = None) -> dict[int, Path]:
    """Return the node cache directories that exist under a :class:`NodeCache` directory, by node number. Not collective.

    ``{node}`` in ``directory`` is expanded over the directories that exist
    (``{job}`` is filled in as :meth:`NodeCache.path_of` fills it:
    ``job``, else ``SLURM_JOB_ID``, else ``"job"``); without ``{node}``,
    the ``node-<n>`` directories below ``directory``.  Only what this
    process sees: on a cluster with node-local storage, its own node's.
    Links are not followed (a link is not a node's directory).

    Parameters
    ----------
    directory : str or os.PathLike
        The ``directory`` of a :class:`NodeCache` (a template).
    job : str, optional
        The job id for ``{job}``.

    Returns
    -------
    dict of int to pathlib.Path
        Sorted by node.
    """
    text = os.fspath(directory)
    text = text.replace("{job}", job if job is not None else os.environ.get("SLURM_JOB_ID", "job"))
    if "{node}" not in text:
        text = os.path.join(text, "node-{node}")
    parts = text.split("{node}")
    pattern = re.compile(r"(\d+)".join(re.escape(p) for p in parts))
    out: dict[int, Path] = {}
    for hit in glob.glob("*".join(glob.escape(p) for p in parts)):
        m = pattern.fullmatch(hit)
        if m is None or len(set(m.groups())) != 1 or str(int(m.group(1))) != m.group(1):
            continue
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(hit).st_mode):
                out[int(m.group(1))] = Path(hit)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class NodeLayout:
    """Which node each rank is on, and where its partner copies go. Not collective once built.

    Attributes
    ----------
    node_of : (P,) numpy.ndarray of numpy.int64
        The node of each rank (nodes numbered 0.. in the order of their first rank).
    partners : int
        Partner copies per node (at most the number of nodes less one).
    """

    node_of: np.ndarray
    partners: int

    @classmethod
    def of(cls, call: Call, cache: NodeCache) -> NodeLayout:
        """Find the nodes (``node_size``, or the host names: one allgather of P ints). Collective.

        Partner copies follow SCR's PARTNER sets: the ranks of the same
        position on their nodes form a set, ordered by node, and a rank's
        k-th copy goes to the k-th next member of its set.  With the same
        number of ranks on every node that is the rank of the same position
        on node + k.  A rank whose set is too small (its node has more
        ranks than the others) has fewer copies; a warning says which.
        """
        P = call.size
        if cache.node_size is not None:
            node_of = np.arange(P, dtype=np.int64) // cache.node_size
        else:
            keys = call.allgather_ints([digest_of(platform.node())], what="cache: nodes").reshape(-1)
            _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            node_of = np.argsort(np.argsort(first))[inverse].astype(np.int64)  # numbered by their first rank
        nodes = int(node_of.max()) + 1
        out = cls(node_of, min(cache.partners, nodes - 1))
        sizes = np.sort(np.bincount(node_of))  # a set's size: the nodes with more ranks than its position
        set_size = nodes - np.searchsorted(sizes, _local_of(node_of), side="right")
        short = np.flatnonzero(set_size <= out.partners).tolist() if out.partners else []
        if short and call.comm.rank == 0:
            _log.warning(
                "NodeCache(partners=%d): the nodes have different numbers of ranks (%s): ranks %s have fewer partner copies",
                cache.partners,
                np.bincount(node_of).tolist(),
                short[:8],
            )
        return out

    @classmethod
    def guess(cls, size: int, digest: int, max_partners: int = 4) -> NodeLayout | None:
        """Return the usual layout of ``size`` ranks whose :attr:`digest` is ``digest``, or None. Not collective.

        The layouts tried: ``k`` consecutive ranks per node, for every ``k``
        (what ``node_size``, or ranks placed on the hosts in blocks, give),
        with 0 to ``max_partners`` partner copies; none above 1024 ranks.
        For reports (which nodes a cached step's writers were on), never for
        reading: a cached step is read in place by its own layout only.
        """
        if size < 1 or size > 1024:
            return None
        for k in range(1, size + 1):
            node_of = np.arange(size, dtype=np.int64) // k
            for partners in range(min(max_partners, int(node_of[-1])) + 1):
                if digest_of(node_of, partners) == digest:
                    return cls(node_of, partners)
        return None

    @property
    def nodes(self) -> int:
        """The number of nodes."""
        return int(self.node_of.max()) + 1

    def node(self, rank: int) -> int:
        """Return the node of ``rank``."""
        return int(self.node_of[rank])

    def local(self, rank: int) -> int:
        """Return the position of ``rank`` among the ranks of its node."""
        return int(np.count_nonzero(self.node_of[:rank] == self.node_of[rank]))

    def first(self, rank: int) -> bool:
        """Whether ``rank`` is its node's first rank (the one that commits the node's steps)."""
        return self.local(rank) == 0

    def _set(self, rank: int) -> np.ndarray:
        """Return the ranks of ``rank``'s position on their nodes, ordered by node (SCR's partner set): one per node."""
        local = _local_of(self.node_of)
        members = np.flatnonzero(local == local[rank])
        return members[np.argsort(self.node_of[members], kind="stable")]

    def holder(self, rank: int, k: int) -> int | None:
        """Return the rank that keeps ``rank``'s ``k``-th partner copy (k = 1..partners), or None: the k-th next of its set."""
        members = self._set(rank)
        if members.shape[0] <= k:
            return None
        return int(members[(int(np.flatnonzero(members == rank)[0]) + k) % members.shape[0]])

    def held(self, rank: int, k: int) -> int | None:
        """Return the rank whose ``k``-th partner copy ``rank`` keeps (the inverse of :meth:`holder`), or None."""
        members = self._set(rank)
        if members.shape[0] <= k:
            return None
        return int(members[(int(np.flatnonzero(members == rank)[0]) - k) % members.shape[0]])

    @property
    def digest(self) -> int:
        """A digest of the layout (P and each rank's node): a cached step is read back by the same layout only."""
        return digest_of(self.node_of, self.partners)


def shape_of(size: int, layout: int | None) -> str:
    """Describe the job shape that cached a step: ``"4 ranks on 2 nodes"`` (nodes if the layout is a usual one). Not collective."""
    guess = NodeLayout.guess(size, layout) if isinstance(layout, int) else None
    if guess is None:
        return f"{size} ranks (nodes unknown)"
    return f"{size} rank{'s' if size > 1 else ''} on {guess.nodes} node{'s' if guess.nodes > 1 else ''}"


def ranks_of(size: int, layout: int | None, ranks: tuple[int, ...]) -> str:
    """Name ``ranks`` of a job of that shape, with their nodes where the layout is a usual one: ``"ranks 2, 3 (node 1)"``."""
    guess = NodeLayout.guess(size, layout) if isinstance(layout, int) and ranks else None
    shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
    text = f"rank{'s' if len(ranks) > 1 else ''} {shown}"
    if guess is not None:
        nodes = sorted({guess.node(q) for q in ranks})
        text += f" (node{'s' if len(nodes) > 1 else ''} {', '.join(map(str, nodes))})"
    return text


def _local_of(node_of: np.ndarray) -> np.ndarray:
    """Return each rank's position among the ranks of its node (vectorized)."""
    P = node_of.shape[0]
    order = np.argsort(node_of, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(node_of))])
    local = np.empty(P, dtype=np.int64)
    local[order] = np.arange(P) - starts[node_of[order]]
    return local


def _write_all(fd: int, bufs: Sequence[memoryview | bytes], path: Path) -> None:
    """Write ``bufs`` one after the other at the descriptor's position (``writev``, resumed after short writes)."""
    views = [memoryview(b).cast("B") for b in bufs if len(b)]
    i = 0
    try:
        while i < len(views):
            batch = views[i : i + _IOV]
            n = os.writev(fd, batch)
            for v in batch:
                if n >= v.nbytes:
                    n -= v.nbytes
                    i += 1
                else:
                    views[i] = v[n:]
                    break
    except OSError as exc:
        raise os_error(exc, str(path), "cannot write") from exc


def _allocate(fd: int, nbytes: int) -> bool:
    """Allocate every page of a file's first ``nbytes`` (before it is mapped: a full tmpfs fails here, not by SIGBUS).

    False where the file system cannot (then the file is written with pwritev).

    Raises
    ------
    OSError
        ENOSPC and the like.
    """
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return False
        raise
    return True


def _map(fd: int, nbytes: int) -> mmap.mmap | None:
    """Map a pieces file shared and writable, its pages populated; None if it cannot be (then it is written with pwritev)."""
    try:
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        return mmap.mmap(fd, nbytes, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None


def _copy_mapped(mapping: mmap.mmap, bufs: Sequence[memoryview]) -> None:
    """Copy ``bufs`` one after the other from byte ``_HEAD.size`` on, through a shared mapping of a pieces file.

    All the file's pages are allocated (a full tmpfs cannot fail the copy with SIGBUS).

    The header is zeroed first (a recycled pieces file never has a valid
    header over new data); the caller writes it last.
    """
    dst = np.frombuffer(mapping, dtype=np.uint8)
    try:
        dst[: _HEAD.size] = 0
        pos = _HEAD.size
        for v in bufs:
            dst[pos : pos + v.nbytes] = np.frombuffer(v, dtype=np.uint8)
            pos += v.nbytes
    finally:
        del dst


class Mappings:
    """A rank's shared writable mappings of its own pieces files, by inode. Not collective; not thread-safe (one save at a time).

    A pieces file written through a mapping keeps it: when the file is
    recycled (renamed into a later step) it is written again without
    mapping its pages anew, and no ``munmap`` of 100 MB (milliseconds, and
    it holds the process's memory map, so that a rank's MPI progress waits)
    happens inside a save.  Each mapping keeps a descriptor of its file (so
    that its inode cannot be reused by another file while it is kept).  A
    mapping holds its pages even once its file is unlinked: :meth:`sweep`
    (the cache's retention) closes those whose file has no link left,
    :meth:`close` all of them.
    """

    def __init__(self) -> None:
        self._by_inode: dict[tuple[int, int], tuple[mmap.mmap, int]] = {}

    def take(self, st: os.stat_result, nbytes: int) -> mmap.mmap | None:
        """Return the mapping kept of the file ``st`` (device, inode) if it is ``nbytes`` long, else None (stale: closed)."""
        got = self._by_inode.pop((st.st_dev, st.st_ino), None)
        if got is None:
            return None
        mapping, fd = got
        os.close(fd)
        if len(mapping) == nbytes:
            return mapping
        _close_mapping(mapping)
        return None

    def keep(self, fd: int, st: os.stat_result, mapping: mmap.mmap) -> None:
        """Keep ``mapping`` of the file ``st``, open as ``fd`` (duplicated: the caller closes its own)."""
        try:
            mine = os.dup(fd)
        except OSError:
            _close_mapping(mapping)
            return
        old = self._by_inode.pop((st.st_dev, st.st_ino), None)
        if old is not None:
            self._drop(old)
        self._by_inode[(st.st_dev, st.st_ino)] = (mapping, mine)

    def sweep(self) -> None:
        """Close the mappings of files that have no link left (unlinked by the retention, or removed with a step)."""
        for key, (_, fd) in list(self._by_inode.items()):
            try:
                if os.fstat(fd).st_nlink > 0:
                    continue
            except OSError:
                pass
            self._drop(self._by_inode.pop(key))

    def close(self) -> None:
        """Close every mapping."""
        maps, self._by_inode = self._by_inode, {}
        for got in maps.values():
            self._drop(got)

    @staticmethod
    def _drop(got: tuple[mmap.mmap, int]) -> None:
        _close_mapping(got[0])
        with contextlib.suppress(OSError):
            os.close(got[1])

    def __len__(self) -> int:
        return len(self._by_inode)


def _close_mapping(mapping: mmap.mmap) -> None:
    with contextlib.suppress(BufferError, ValueError):
        mapping.close()


def on_tmpfs(path: Path) -> bool:
    """Whether ``path`` is on a tmpfs (``statfs(2)``'s ``f_type``, Linux); False where that cannot be told. Not collective."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct statfs (120 bytes on 64-bit Linux), f_type first
        if libc.statfs(os.fsencode(path), buf) != 0:
            return False
        return ctypes.c_long.from_buffer(buf).value == _TMPFS_MAGIC
    except (OSError, AttributeError, ValueError):
        return False


def pieces_table(pieces: Sequence[tuple[int, memoryview]]) -> bytes:
    """Return the table of a pieces file: ``(offset, nbytes)`` of each piece, little-endian uint64."""
    return np.array([(off, memoryview(b).nbytes) for off, b in pieces], dtype="<u8").reshape(-1, 2).tobytes()


def pieces_head(rank: int, nrounds: int, table: bytes, crc: int) -> bytes:
    """Return the header of a pieces file (its last 4 bytes: the CRC32 of the rest)."""
    t = np.frombuffer(table, dtype="<u8").reshape(-1, 2)
    body = _HEAD.pack(MAGIC, rank, nrounds, len(t), int(t[:, 1].sum()), crc, 0)[:-4]
    return body + struct.pack("<I", crc32(body))


def _crc_of(table: bytes, pieces: Sequence[tuple[int, memoryview]]) -> int:
    crc = crc32(table)
    for _, b in pieces:
        crc = crc32(b, crc)
    return crc


@dataclass
class Pieces:
    """One rank's pieces of a checkpoint file, read back from a pieces file (or received from a partner).

    Attributes
    ----------
    rank : int
        The rank that wrote them.
    nrounds : int
        The collective rounds of the save's write (the same on every rank).
    pieces : list of (int, memoryview)
        ``(file offset, bytes)``.
    """

    rank: int
    nrounds: int
    pieces: list[tuple[int, memoryview]]
    raw: Any = None  # what the views point into (an mmap or bytes), kept alive with them

    @property
    def nbytes(self) -> int:
        """The bytes of the pieces."""
        return sum(b.nbytes for _, b in self.pieces)

    @property
    def end(self) -> int:
        """The end of the last piece in the file (0 if none)."""
        return max((off + b.nbytes for off, b in self.pieces), default=0)

    def close(self) -> None:
        """Release the mapping (the views must be gone)."""
        self.pieces = []
        if isinstance(self.raw, mmap.mmap):
            with contextlib.suppress(BufferError):
                self.raw.close()
        self.raw = None


def parse_pieces(raw: Any, what: str, verify: bool = True) -> Pieces:
    """Parse a pieces file's bytes (``raw``: bytes or an mmap); check its CRC32s. Not collective.

    The header's CRC32 is always checked, and that the table describes the
    data (pieces that do not overlap in the file, adding up to it).  ``verify=False``
    skips the CRC32 of the table and the data (one pass over every byte):
    for a reader that checks every byte it uses by other CRC32s, as a load
    in place does by the file's own (the sections' CRC32s in its index).

    Raises
    ------
    ManagerError
        If it is not a pieces file, is cut short, its table is damaged, or
        (``verify``) the CRC32 of its table and data differs.
    """
    view = memoryview(raw)
    if view.nbytes < _HEAD.size:
        raise ManagerError(f"{what}: cut short ({view.nbytes} bytes)")
    magic, rank, nrounds, n, nbytes, crc, hcrc = _HEAD.unpack_from(view)
    if magic != MAGIC or crc32(view[: _HEAD.size - 4]) != hcrc:
        raise ManagerError(f"{what}: not a pieces file, or its header is damaged")
    tend = _HEAD.size + 16 * n
    if view.nbytes != tend + nbytes:
        raise ManagerError(f"{what}: {view.nbytes} bytes, not the {tend + nbytes} its header says")
    table = np.frombuffer(view[_HEAD.size : tend], dtype="<u8").reshape(-1, 2)
    if verify and crc32(view[_HEAD.size :]) != crc:
        raise ManagerError(f"{what}: the CRC32 of its pieces differs: damaged")
    # Unverified, the table must still describe the data (pieces not overlapping in the file, adding up
    # to the data): what is read through it is then checked by the load's CRC32s of the sections.
    by_offset = table[np.argsort(table[:, 0], kind="stable")].astype(np.int64) if n and int(table.max()) < 1 << 62 else None
    if (
        int(table[:, 1].sum(dtype=np.uint64)) != nbytes
        or (n and by_offset is None)
        or (by_offset is not None and bool(np.any(by_offset[1:, 0] < by_offset[:-1, 0] + by_offset[:-1, 1])))
    ):
        raise ManagerError(f"{what}: its table of pieces is damaged")
    ends = tend + np.cumsum(table[:, 1], dtype=np.int64)
    starts = ends - table[:, 1].astype(np.int64)
    pieces = [(int(o), view[int(s) : int(e)]) for o, s, e in zip(table[:, 0].tolist(), starts.tolist(), ends.tolist(), strict=True)]
    return Pieces(int(rank), int(nrounds), pieces, raw)


def read_pieces(path: Path, verify: bool = True) -> Pieces:
    """Map a pieces file and parse it (:func:`parse_pieces`; ``verify``: CRC32 its table and data). Not collective.

    Raises
    ------
    ManagerError
        If it is missing, not a regular file (a link), cut short or damaged.
    """
    try:
        fd = open_regular(path)  # never a link followed, never a FIFO waited on
    except OSError as exc:
        raise ManagerIOError.of(path.name, exc) from exc
    raw = None
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            raise ManagerError(f"{path.name}: not a pieces file")
        raw = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ManagerIOError.of(path.name, exc) from exc
    finally:
        try:
            os.close(fd)
        except OSError as exc:  # an I/O error like any other: never a raw OSError out of one rank's step
            if raw is not None:
                raw.close()
            raise ManagerIOError.of(f"{path.name}: cannot close", exc) from exc
    return parse_pieces(raw, path.name, verify)


class PiecesBackend:
    """A :class:`~amrckpt.scda.Backend` that writes this rank's pieces of the file into its own pieces file.

    Opened by the deferred writer of a save (``defer=True``) through
    :meth:`CacheLevel.opener`: the save's one collective write
    (``write_gathered``) becomes one ``writev`` of a file on the node, or,
    with ``recycle``, a copy into a retired step's pieces file of this rank
    (its pages allocated already).  Only writes; nothing collective happens in it.
    """

    def __init__(self, path: Path, comm: Comm, recycle: Path | None = None, maps: Mappings | None = None) -> None:
        self.comm = comm
        self.path = str(path)
        self._file = path
        self._fd = -1
        self._known: list[tuple[int, int, int]] | None = None
        self._recycle = recycle
        self._maps = maps  # None: never through a mapping (not a tmpfs)
        self._mapping: mmap.mmap | None = None
        self._stat: os.stat_result | None = None
        self.written: Path | None = None
        self.recycled = False

    def take_piece_crcs(self, known: list[tuple[int, int, int]]) -> None:
        """Take the ``(offset, nbytes, crc32)`` of file ranges that the save CRC'd already (see :class:`~amrckpt.scda.Backend`)."""
        self._known = known

    def write(self, pieces: Sequence[tuple[int, memoryview]], bulk: Any, max_bulk_nbytes: int) -> None:
        """Not used: a save writes through :meth:`write_gathered`."""
        raise ScdaUsageError("a node cache takes the pieces of a deferred writer only (write_gathered)")

    def write_gathered(self, pieces: Sequence[tuple[int, memoryview]], nrounds: int, ncontiguous: int = 0) -> None:
        """Write this rank's pieces, with their offsets, into its pieces file (never through a link).

        The file is new (``O_CREAT | O_EXCL``), or the recycled one (renamed
        here, then opened with ``O_NOFOLLOW`` and used only if it is a
        regular file of this user with one link).  ``nrounds`` and
        ``ncontiguous`` (the shared file's collective calls) do not apply to
        a file of one rank.
        """
        # The CRC32 in a helper thread while the table and data are written (zlib-ng and writev release the GIL);
        # the header, which holds it, last.
        table = pieces_table(pieces)
        bufs = [memoryview(table), *(memoryview(b).cast("B") for _, b in pieces if len(b))]
        total = _HEAD.size + sum(v.nbytes for v in bufs)
        self._open(total)
        mapping, self._mapping = self._mapping, None
        known, self._known = self._known, None
        if known is not None:  # the save's CRC32s of its data, combined: no second pass over the bytes
            crc = pool().submit(crc32_of_pieces, pieces, known, crc32(table))
        else:
            crc = pool().submit(_crc_of, table, pieces)
        try:
            try:
                if mapping is not None:
                    _copy_mapped(mapping, bufs)
                else:
                    os.lseek(self._fd, _HEAD.size, os.SEEK_SET)
                    _write_all(self._fd, bufs, self._file)
            finally:
                value = crc.result()
            try:
                pwrite_exact(self._fd, pieces_head(self.comm.rank, nrounds, table, value), 0)
            except OSError as exc:
                raise os_error(exc, self.path, "cannot write") from exc
        except BaseException:
            if mapping is not None:
                _close_mapping(mapping)
            raise
        self.written = self._file
        if mapping is not None and self._maps is not None and self._stat is not None:
            self._maps.keep(self._fd, self._stat, mapping)  # for the next time this file is recycled

    def _open(self, total: int) -> None:
        """Open the pieces file, recycled if possible (and then mapped on a tmpfs), sized ``total``."""
        src, self._recycle = self._recycle, None
        if src is not None:
            try:
                if not stat.S_ISREG(os.lstat(src).st_mode):  # a link or a directory planted there: left where it is
                    raise FileNotFoundError(src)
                os.rename(src, self._file)
            except OSError:
                src = None  # removed meanwhile, or not a file: a new file
        if src is not None and self._reopen(total):
            self.recycled = True
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self._fd = os.open(self._file, flags, 0o600)
        except OSError as exc:
            raise os_error(exc, self.path, "cannot create") from exc

    def _reopen(self, total: int) -> bool:
        """Open the recycled file, size it ``total``, and map it on a tmpfs (its mapping kept from its last write, if any).

        False (and it is unlinked) if it is a link, not a regular file of ours, or linked twice.
        """
        flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self._file, flags)
        except OSError:
            fd = -1
        try:
            st = os.fstat(fd) if fd >= 0 else None
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise os_error(exc, str(self._file), "cannot check") from exc
        if st is None or not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()):
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(self._file)
            except OSError:  # a directory swapped in since the check: moved aside, removed with the step
                with contextlib.suppress(OSError):
                    os.rename(self._file, self._file.with_name(f".refused-{self._file.name}"))
            return False
        self._fd = fd
        kept = self._maps.take(st, total) if self._maps is not None else None
        try:
            allocated = st.st_size >= total and st.st_blocks * 512 >= st.st_size
            if st.st_size != total:
                os.ftruncate(fd, total)
            if self._maps is not None and (allocated or _allocate(fd, total)):
                self._mapping, kept = kept or _map(fd, total), None
                self._stat = st
            if self._mapping is None:  # written with pwritev: the old header made invalid first, as the mapping's copy does
                pwrite_exact(fd, bytes(_HEAD.size), 0)
        except OSError as exc:
            raise os_error(exc, self.path, "cannot write") from exc
        finally:
            if kept is not None:
                _close_mapping(kept)
        return True

    def read(self, pieces: Any, bulk: Any, max_bulk_nbytes: int) -> None:
        """Not supported."""
        raise ScdaUsageError("a node cache's pieces are read back by the flush only")

    def read_gathered(self, pieces: Any, nrounds: int, ncontiguous: int = 0) -> None:
        """Not supported."""
        raise ScdaUsageError("a node cache's pieces are read back by the flush only")

    def file_size(self) -> int:
        """Not supported."""
        raise ScdaUsageError("a node cache has no shared file")

    def sync(self, size: int | None = None) -> None:
        """``fsync`` the pieces file; an error is kept by the open call."""

        def fsync() -> None:
            if self._fd >= 0:
                try:
                    os.fsync(self._fd)
                except OSError as exc:
                    raise os_error(exc, self.path, "cannot fsync") from exc

        self._run(fsync)

    def close(self, size: int | None = None) -> None:
        """Close the pieces file; an error is kept by the open call."""

        def close() -> None:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError as exc:
                    raise os_error(exc, self.path, "cannot close") from exc

        self._run(close)

    def _run(self, fn: Any) -> None:
        call = current_call(self.comm)
        if call is None:
            fn()
        else:
            call.run(fn, always=True)


class CacheLevel:
    """One node's cache directory: its cached steps, lock, commits and retention. Not collective.

    Parameters
    ----------
    path : pathlib.Path
        The node's cache directory.
    prefix : str
        The checkpoints' prefix (the steps are ``<prefix>-<step:012d>.cache``).
    fs : FileSystem, optional
        The file operations of commits (rename, directory fsync).
    sync : bool, optional
        Fsync the pieces files and the directory.
    recycle : bool, optional
        Write a save's pieces into a retired step's pieces file (:class:`NodeCache`'s ``recycle``).
    """

    def __init__(
        self,
        path: Path,
        prefix: str,
        fs: FileSystem = LOCAL,
        sync: bool = True,
        log: RankLogger | None = None,
        recycle: bool = False,
    ) -> None:
        self.path = path
        self.names = StepNames(prefix, extension=EXTENSION)
        self.fs = fs
        self.sync = sync
        self.log = log
        self.recycle = recycle
        self.tmpfs = False  # found by open(): a recycled file is then copied into through a mapping
        self.mappings = Mappings()
        self._lock: DirectoryLock | None = None

    def __repr__(self) -> str:
        return f"CacheLevel({str(self.path)!r})"

    def open(self, lock: bool) -> None:
        """Make the directory, take its lock (``lock``: the node's first rank), remove saves cut short.

        Raises
        ------
        ManagerError
            If it cannot be made or used, or another manager holds it.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if not stat.S_ISDIR(os.lstat(self.path).st_mode):
                raise ManagerError(f"the node cache {str(self.path)!r} is not a directory")
        except OSError as exc:
            raise ManagerIOError.of(f"cannot use the node cache {str(self.path)!r}", exc) from exc
        self.tmpfs = on_tmpfs(self.path)
        if lock:
            self._lock = DirectoryLock.acquire(self.path, self.fs, self.log)
            for name in self.names.listing(os.listdir(self.path)).partial():  # a cached save cut short by a kill
                self.remove(name)

    def close(self) -> None:
        """Close this rank's mappings of its pieces files; release the lock, if held."""
        self.mappings.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def steps(self) -> dict[int, Path]:
        """Return the committed cached steps of this node, by step (empty if the directory is gone)."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return {}
        return {s: self.path / n for s, n in self.names.listing(names).checkpoints.items()}

    def step_path(self, step: int) -> Path:
        """Return the directory of the cached ``step``."""
        return self.path / self.names.build_name(step)

    def partial_path(self, step: int, token: str) -> Path:
        """Return the temporary name of the cached ``step`` in the save ``token``."""
        return self.path / self.names.partial_name(self.names.build_name(step), token)

    def make_partial(self, step: int, token: str) -> Path:
        """Make the temporary directory of a cached save (every rank of the node may call it; a link there is refused)."""
        tmp = self.partial_path(step, token)
        try:
            tmp.mkdir()
        except FileExistsError:
            pass
        except OSError as exc:
            raise os_error(exc, str(tmp), "cannot make") from exc
        try:
            st = os.lstat(tmp)
        except OSError as exc:
            raise os_error(exc, str(tmp), "cannot check") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise ScdaIOError(17, f"{tmp}: not a directory (a link?)")
        return tmp

    def opener(self, tmp: Path, recycle: Path | None = None) -> Any:
        """Return a :class:`~amrckpt.scda.BackendOpener` writing each rank's pieces into ``tmp/rank-<r>.pieces``.

        ``recycle``: the pieces file to write into instead of a new one
        (:meth:`recyclable`), renamed when the save writes (after its checks
        and its agreement): a save that fails before leaves it where it was.
        """

        def open_pieces(path: str, mode: str, comm: Comm, access: FileAccess, defer: bool) -> Backend:
            if mode != "w" or not defer:
                raise ScdaUsageError("a node cache takes the pieces of a deferred writer only")
            return PiecesBackend(tmp / pieces_name(comm.rank), comm, recycle, self.mappings if self.tmpfs else None)

        return open_pieces

    def recyclable(self, step: int, keep: int, protect: set[int], rank: int) -> Path | None:
        """Return ``rank``'s pieces file in a cached step that the retention after committing ``step`` removes, or None.

        The newest such step not in ``protect`` (a step being flushed), and
        never the newest cached step: one complete step stays while the save
        runs.  None without ``recycle``.  Not collective (this node's listing).
        """
        if not self.recycle:
            return None
        steps = sorted(s for s in self.steps() if s != step)
        gone = [s for s in steps[: max(0, len(steps) + 1 - keep)] if s not in protect and s != steps[-1]]
        return self.step_path(gone[-1]) / pieces_name(rank) if gone else None

    def publish(self, step: int, tmp: Path, info: dict[str, Any]) -> None:
        """Write ``step.json``, sync, rename the step to its final name, sync the directory (the node's commit point).

        A cached step of the same number is removed first (a cache holds one copy of a step).

        Raises
        ------
        ScdaIOError
            With the file system's errno.
        """
        try:
            self.fs.write_new(tmp / STEP_JSON, json.dumps(info, indent=1).encode() + b"\n", sync=self.sync)
            if self.sync:
                self.fs.fsync_directory(tmp)
            final = self.step_path(step)
            if os.path.lexists(final):
                self.remove(final.name)
            self.fs.replace(tmp, final)
            if self.sync:
                self.fs.fsync_directory(self.path)
        except OSError as exc:
            raise ScdaIOError(exc.errno or 5, f"cannot commit the cached step {step}: {exc.strerror or exc}") from exc

    def info(self, step: int) -> dict[str, Any] | None:
        """Return the ``step.json`` of the cached ``step``; None if missing, unusable or unreadable. Not collective."""
        return self.read_info(step)[0]

    def read_info(self, step: int) -> tuple[dict[str, Any] | None, ManagerIOError | None]:
        """Return the ``step.json`` of the cached ``step`` (None: missing, not regular, not parsing), and the I/O error met.

        Read by :func:`amrckpt._files.read_regular` (never following a link,
        never waiting on a FIFO), at most :data:`STEP_JSON_LIMIT` bytes.  An
        error of the file system that is not evidence of what the file is
        (``EIO``, ``ENOMEM``, a failed ``close``...) is returned, not taken
        for a missing record: the flush or the restart fails with it. Not collective.
        """
        try:
            raw = read_regular(self.step_path(step) / STEP_JSON, STEP_JSON_LIMIT)
        except OSError as exc:
            if is_evidence(exc, self.step_path(step) / STEP_JSON):  # missing, a link, not regular, too big
                return None, None
            return None, ManagerIOError.of(f"cannot read {STEP_JSON} of the cached step {step}", exc)
        try:
            out = json.loads(raw)
        except (ValueError, RecursionError):
            return None, None
        return (out if isinstance(out, dict) and out.get("step") == step else None), None

    def remove(self, name: str) -> None:
        """Remove a step directory (or a file) of this level; a link is unlinked, never followed. Never raises.

        The node's other ranks may be unlinking their own files in it at
        the same time (:meth:`retire_own`): a file gone already is no error.
        """
        p = self.path / name

        def gone_already(fn: Any, path: str, exc: Any) -> None:
            if not isinstance(exc[1] if isinstance(exc, tuple) else exc, FileNotFoundError):
                raise exc[1] if isinstance(exc, tuple) else exc

        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(p).st_mode):
                shutil.rmtree(p, onerror=gone_already)
            else:
                os.unlink(p)

    def retired(self, keep: int, protect: set[int]) -> list[int]:
        """Return the cached steps that retention removes: all but the ``keep`` newest, never those in ``protect``."""
        steps = sorted(self.steps())
        return [s for s in steps[: max(0, len(steps) - keep)] if s not in protect]

    def retire_own(self, steps: Sequence[int], names: Sequence[str]) -> None:
        """Unlink this rank's files ``names`` in the retired ``steps`` (each rank its own, at once). Never raises.

        The node's first rank then removes the rest (:meth:`retain`): the
        cost of freeing the pieces is shared as their writing was.
        """
        for s in steps:
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(self.step_path(s) / name)
        self.mappings.sweep()

    def retain(self, keep: int, protect: set[int]) -> list[int]:
        """Remove all but the ``keep`` newest cached steps (never those in ``protect``); return the steps removed."""
        gone = self.retired(keep, protect)
        for s in gone:
            self.remove(self.names.build_name(s))
        return gone


def pieces_name(rank: int) -> str:
    """Return the name of rank ``rank``'s pieces file in a cached step."""
    return f"rank-{rank:06d}.pieces"


@dataclass(frozen=True)
class CachedStep:
    """A step as the node caches under one directory hold it (what ``amrckpt ls --cache`` shows).

    Attributes
    ----------
    step : int
    size : int or None
        The process count that cached it (from ``step.json``).
    nbytes : int or None
        The bytes of its file once flushed.
    nodes : tuple of str
        The node directories that hold it.
    ranks : int
        The ranks whose pieces are there (own or partner copies), on some node.
    complete : bool
        Whether every rank's pieces are there, on some node (headers checked, not the data's CRC32s).
    layout : int or None
        The digest of the node layout that cached it (:attr:`NodeLayout.digest`, from ``step.json``).
    missing : tuple of int
        The ranks whose pieces are on no node (empty when ``complete``).
    """

    step: int
    size: int | None
    nbytes: int | None
    nodes: tuple[str, ...]
    ranks: int
    complete: bool
    layout: int | None = None
    missing: tuple[int, ...] = ()

    @property
    def shape(self) -> str:
        """The job shape that cached it: ``"4 ranks on 2 nodes"`` (:func:`shape_of`)."""
        return shape_of(self.size, self.layout) if self.size else "an unknown number of ranks"

    @property
    def missing_ranks(self) -> str:
        """The ranks whose pieces are on no node, with their nodes where known: ``"ranks 2, 3 (node 1)"`` (:func:`ranks_of`)."""
        return ranks_of(self.size or 0, self.layout, self.missing)


def list_cache(root: str | os.PathLike[str], prefix: str = "ckpt") -> list[CachedStep]:
    """List the cached steps of every node directory under ``root``. Not collective.

    ``root`` is a :class:`NodeCache` directory with ``{node}`` (expanded over
    the node directories that exist: :func:`node_directories`), or a
    directory whose node directories are ``root`` itself or one level below.
    Read-only: no lock, nothing removed; pieces files are checked by their
    headers (their sizes and the CRC32 of the header), not their data.
    """
    names = StepNames(prefix, extension=EXTENSION)
    found: dict[int, dict[str, Any]] = {}
    if "{node}" in os.fspath(root):
        dirs = [(str(n), d) for n, d in node_directories(root).items()]
    else:
        base = Path(root)
        dirs = [(".", base)]
        with contextlib.suppress(OSError):
            dirs += [(p.name, p) for p in sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())]
    for label, d in dirs:
        with contextlib.suppress(OSError):
            for step, name in names.listing(os.listdir(d)).checkpoints.items():
                entry = found.setdefault(step, {"nodes": [], "ranks": set(), "size": None, "nbytes": None, "layout": None})
                entry["nodes"].append(label)
                level = CacheLevel(d, prefix)
                info = level.info(step) or {}
                for key in ("size", "nbytes", "layout"):
                    entry[key] = entry[key] or info.get(key)
                for f in (d / name).glob("rank-*.pieces"):
                    try:
                        p = read_pieces(f, verify=False)
                    except ManagerError:
                        continue
                    entry["ranks"].add(p.rank)
                    p.close()
    out = []
    for step, e in sorted(found.items()):
        P = e["size"]
        missing = tuple(sorted(set(range(P)) - e["ranks"])) if isinstance(P, int) else ()
        complete = P is not None and e["ranks"] == set(range(P))
        out.append(CachedStep(step, P, e["nbytes"], tuple(e["nodes"]), len(e["ranks"]), complete, e["layout"], missing))
    return out
