"""Moving leaves and their fields between ranks, point-to-point: to a new partition, and to keep families whole.

Collective; every exchange goes through the load's :class:`~amrckpt.comm.Call`.
Nothing of size N is gathered, and no rank loops over the ranks: the
exchanges run in rounds of one ``sendrecv`` each over the offsets between
the ranks that exchange (one allreduce finds them).
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from ..comm import Call
from ..container import HpData
from ..errors import AdaptError
from ..partition import Partition, family_window, keep_families, transfer_counts
from ..sfc import MAXLEVEL, Forest, mesh_record_dtype

__all__ = ["alltoall", "keep", "moved", "weights"]


def _take(item: Any, a: int, b: int) -> Any:
    """Leaves ``a:b`` of a per-leaf item: records, an array, or (values, counts, offsets) of an hp field."""
    if isinstance(item, HpData):
        off = item.offsets
        return HpData(item.values[int(off[a]) : int(off[b])], item.counts[a:b])
    return item[a:b]


def _concat(parts: list[Any], like: Any) -> Any:
    if isinstance(like, HpData):
        return HpData(np.concatenate([p.values for p in parts]), np.concatenate([p.counts for p in parts]))
    return np.concatenate(parts)


def _move(call: Call, items: dict[str, Any], cur: Partition, new: Partition) -> dict[str, Any]:
    """Move the leaves of ``items`` (records, arrays, HpData, each over this rank's leaves) from ``cur`` to ``new``.

    Collective, point-to-point: contiguous ranges move between the ranks
    whose ranges overlap (:func:`~amrckpt.partition.transfer_counts`), in
    rounds of one ``sendrecv`` each: in round k rank p sends to p + k and
    receives from p - k; the rounds span the offsets that occur (one
    allreduce finds them; one or two rounds after a uniform refinement).
    """
    comm = call.comm
    r, P = comm.rank, comm.size
    send, recv = transfer_counts(cur, new, r)
    targets = np.flatnonzero(send)
    sources = np.flatnonzero(recv)
    lo = min([int(t) - r for t in targets] + [r - int(s) for s in sources] + [0])
    hi = max([int(t) - r for t in targets] + [r - int(s) for s in sources] + [0])
    got = call.reduction("adapt: move leaves").min("distance", lo).max("distance", hi).run()
    lo, hi = int(got.min("distance")), int(got.max("distance"))
    start = np.concatenate([[0], np.cumsum(send)])
    pieces: dict[int, dict[str, Any]] = {}
    for k in range(lo, hi + 1):
        dest, src = r + k, r - k
        out = None
        if 0 <= dest < P and send[dest] > 0:
            a, b = int(start[dest]), int(start[dest + 1])
            out = {n: _take(v, a, b) for n, v in items.items()}
        if k == 0:
            if out is not None:
                pieces[r] = out
            continue
        payload = None if out is None else pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        source = src if 0 <= src < P and recv[src] > 0 else None
        data = call.sendrecv(payload, dest if out is not None else None, source)
        if source is not None and data is not None:
            pieces[source] = pickle.loads(data)  # the bytes of this job's own ranks
    order = sorted(pieces)
    result: dict[str, Any] = {}
    for n, v in items.items():
        parts = [pieces[s][n] for s in order]
        result[n] = _concat(parts, v) if parts else _take(v, 0, 0)
    return result


def keep(call: Call, forest: Forest, cur: Partition, target: Partition) -> Partition:
    """:func:`~amrckpt.partition.keep_families` of ``target`` for leaves distributed as ``cur`` (this rank's: ``forest``).

    Collective.  Each rank needs the leaves of its window around its cut of
    ``target`` (:func:`~amrckpt.partition.family_window`, at most
    ``2 * 2**dim - 2``); the ranks that hold them under ``cur`` send them,
    point-to-point (:func:`alltoall`: a holder sends to the ranks whose cuts
    lie within ``2**dim - 1`` leaves of its range, found by a binary search
    of the cuts); then keep_families' one allgather of the new cuts.
    """
    r = call.comm.rank
    d = forest.dim
    F = 1 << d
    a, b = cur.local_range(r)
    outgoing: dict[int, bytes] = {}
    if b > a:
        cuts = target.global_first_quadrant[:-1]
        q0 = max(1, int(np.searchsorted(cuts, a - F + 1, side="right")))
        q1 = int(np.searchsorted(cuts, b + F - 1, side="left"))
        for q in range(q0, q1):  # a loop over the ranks whose windows hold some of this rank's leaves
            s, k = family_window(target, q, d)
            lo, hi = max(s, a), min(s + k, b)
            if hi > lo:
                outgoing[q] = _window_rows(forest, lo - a, hi - a, lo).tobytes()
    got = alltoall(call, outgoing)
    start, count = family_window(target, r, d)
    w = call.run(_window_of, got, start, count, d)
    if w is None:
        return keep_families(target, [], [], [[]] * d, maxlevel=MAXLEVEL[d], comm=call.comm)
    return keep_families(target, w[:, 1], w[:, 2], [w[:, 3 + i] for i in range(d)], maxlevel=MAXLEVEL[d], comm=call.comm)


def _window_rows(forest: Forest, i: int, j: int, first: int) -> np.ndarray:
    """Leaves ``i:j`` of ``forest`` as (j - i, 3 + dim) little-endian int64 rows: global index, tree, level, coordinates."""
    out = np.empty((j - i, 3 + forest.dim), dtype="<i8")
    out[:, 0] = np.arange(first, first + j - i)
    out[:, 1] = forest.tree[i:j]
    out[:, 2] = forest.level[i:j]
    for k, c in enumerate(forest.coords()):
        out[:, 3 + k] = c[i:j]
    return out


def _window_of(got: dict[int, bytes], start: int, count: int, d: int) -> np.ndarray:
    """Return the window from the rows its holders sent, in order; AdaptError unless they are leaves ``start .. start + count``.

    Raises
    ------
    AdaptError
        On this rank, if the rows received are not the leaves ``start .. start + count - 1`` in order.
    """
    parts = [np.frombuffer(v, dtype="<i8").reshape(-1, 3 + d) for _, v in sorted(got.items()) if v]
    w = np.concatenate(parts) if parts else np.zeros((0, 3 + d), dtype="<i8")
    if not np.array_equal(w[:, 0], np.arange(start, start + count)):
        raise AdaptError(f"adapt: the leaves around this rank's cut are {w[:, 0].tolist()}, not {count} from {start}")
    return w


def alltoall(call: Call, outgoing: dict[int, bytes]) -> dict[int, bytes]:
    """Send ``outgoing[q]`` to rank q, receive what each rank sends here. Collective.

    Rounds of one ``sendrecv`` each (round k: to rank + k, from rank - k),
    over the offsets that occur (one allreduce finds them): few rounds when
    the ranks exchange with their neighbours along the curve.
    """
    r, P = call.comm.rank, call.comm.size
    ks = [q - r for q in outgoing if q != r]
    got = call.reduction("adapt: exchange").min("distance", min([*ks, 0])).max("distance", max([*ks, 0])).run()
    lo, hi = int(got.min("distance")), int(got.max("distance"))
    received: dict[int, bytes] = {}
    if r in outgoing:
        received[r] = outgoing[r]
    for k in range(lo, hi + 1):
        if k == 0:
            continue
        dest, src = r + k, r - k
        data = call.sendrecv(outgoing.get(dest, b""), dest if 0 <= dest < P else None, src if 0 <= src < P else None)
        if data:
            received[src] = data
    return received


def weights(state: dict[str, Any], names: list[str], dim: int) -> np.ndarray:
    """Bytes of each leaf: its mesh record, cells values and hp payloads (the weighted partition's weights)."""
    n = len(state["forest"])
    w = np.full(n, mesh_record_dtype(dim).itemsize, dtype=np.int64)
    for name in names:
        v = state[name]
        if isinstance(v, HpData):
            w += v.counts * (v.values.dtype.itemsize * int(np.prod(v.values.shape[1:], dtype=np.int64)))
        else:
            w += v.dtype.itemsize * int(np.prod(v.shape[1:], dtype=np.int64))
    return w


def moved(call: Call, state: dict[str, Any], cur: Partition, new: Partition) -> dict[str, Any]:
    """Move the whole state (leaves, fields, marks) from ``cur`` to ``new``. Collective."""
    forest = state["forest"]
    items = {k: (forest.to_records() if k == "forest" else v) for k, v in state.items()}
    got = _move(call, items, cur, new)
    got["forest"] = Forest.from_records(got["forest"], num_trees=forest.num_trees, curve=forest.curve)
    return got
