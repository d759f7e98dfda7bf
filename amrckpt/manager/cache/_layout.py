"""The node caches of a job: where each node's cache directory is, which node each rank is on, and its partners."""

from __future__ import annotations

import contextlib
import glob
import os
import platform
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..._logging import get_logger
from ...comm import Call, digest_of
from ...errors import ManagerError

__all__ = ["NodeCache", "NodeLayout", "node_directories", "ranks_of", "shape_of"]

_log = get_logger("amrckpt.manager")


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
