#!/usr/bin/env python3
"""How long a save into a node cache blocks, against raw POSIX writes of the same bytes there and a direct save.

Run::

    mpiexec -n 2 python -m mpi4py benchmarks/bench_cache.py                  # 2.1 million leaves
    mpiexec -n 4 python -m mpi4py benchmarks/bench_cache.py --reps 5
    python benchmarks/bench_cache.py --quick                                   # small, as CI runs it

The state: :class:`Bench` of ``--leaves`` leaves (about 157 bytes per leaf).
Timed from a barrier to a barrier (the slowest rank counts), ``--reps``
times each, interleaved in two groups of one run: the node group (every op
below but ``direct``) and the shared group (``cached`` and ``direct``,
giving ``cached, between direct saves``).  ``cached / raw`` compares ops of
the node group, ``cached / direct`` ops of the shared group.  Why two: on
the machine of docs/performance.md (a VM whose root file system is ext4
with online discard) a cached save right after a direct save to the disk
blocked 15 to 25 ms longer (at P = 2), while a raw write did not, nor did a
cached save after a direct save to a tmpfs or after plain ``write`` and
``fsync`` of the same bytes to the disk; both are printed.

* ``cached``: :meth:`CheckpointManager.save` with ``cache=NodeCache(--cache)``
  and no flush: every rank writes its pieces of the file into its own
  pieces file in the cache, fsyncs it, and the node's first rank commits
  the step (all of the save's checks and its one agreement included).
  After the first saves each save recycles the pieces file of the step
  its retention removes (``NodeCache(recycle=True)``, the default; on a
  tmpfs through the mapping kept from that file's last write);
* ``cached+partner``: the same with two simulated nodes (``node_size = P/2``)
  and ``partners=1``: each rank also sends its pieces to its partner rank,
  which writes them (P >= 2);
* ``raw``: each rank writes a buffer of its pieces file's size into a new
  file in the cache directory with ``os.write``, ``fsync`` and ``close``:
  what the node-local storage alone costs (the file two writes back is
  unlinked in a thread, as the cache's retention frees the pages of the
  steps beyond ``keep`` in a thread);
* ``raw, overwriting``: the same bytes written with ``os.pwrite`` over the
  file of the same size written three times before (its pages allocated),
  as a recycling cache writes: what the bytes cost without allocating;
* ``direct``: :meth:`CheckpointManager.save` without a cache into
  ``--shared`` (default: a directory on the machine's disk);
* ``cached, no CRC32 (ablation)``: ``cached`` with every CRC32 computed
  as a constant (``amrckpt._crc`` patched around the save; not a mode of
  amrckpt, its steps cannot be restored): what the CRC32s cost;
* ``restart from cache``: a new manager's ``restore_latest`` of the newest
  cached step (never flushed), read in place from the pieces; ``restart
  from directory``: the same state from the direct saves' directory.

Before each timed op, untimed, every op's background work ends (the
managers' retention threads, raw's unlinking threads), as the simulation's
steps between two saves let it end in a run: no op pays for another's.

Printed: ``cached / raw`` (the cache's overhead over the bytes' own cost)
and ``cached / direct`` (what a save blocks for with the cache, against
without).  The cache is ``/dev/shm`` by default.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _warm

_warm.ensure(_warm.requested(sys.argv))

from _common import Bench, P, build, comm, interleaved, rank, say, stats, write_json

import amrckpt as ac
from amrckpt import _crc
from amrckpt.manager import EveryNSteps, KeepLast


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leaves", type=int, default=2_100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cache", default="/dev/shm", help="the node-local directory (default /dev/shm)")
    ap.add_argument(
        "--shared", default=None, help="the shared directory's parent (default: a directory on the disk, beside the repo)"
    )
    ap.add_argument("--dir", default=None, help="with --quick: both under this directory")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.quick:
        a.leaves, a.reps = 40_000, 2
        if a.dir:
            a.cache = a.shared = a.dir
    shared_parent = a.shared or str(Path(__file__).resolve().parent.parent / ".bench-shared")
    names = comm.bcast(
        (
            tempfile.mkdtemp(prefix="bench-cache-", dir=_mk(a.cache)),
            tempfile.mkdtemp(prefix="bench-shared-", dir=_mk(shared_parent)),
        )
        if rank == 0
        else None
    )
    cache_root, shared_root = Path(names[0]), Path(names[1])
    st, _, _ = build(a.leaves)
    say(f"amrckpt {ac.__version__} cache benchmark: P={P}, N={a.leaves} leaves, {a.reps} repetitions")
    say(f"cache {cache_root}, shared {shared_root}")
    try:
        result = run(st, cache_root, shared_root, a)
    finally:
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(cache_root, ignore_errors=True)
            shutil.rmtree(shared_root, ignore_errors=True)
    write_json(a.json, "benchmarks/results/cache.json", result)
    return 0


def _restart(directory: Path, cache: ac.manager.NodeCache | None) -> None:
    """Open a manager and restore its newest step (from the caches, in place, when they hold a newer one)."""
    with ac.CheckpointManager(directory, Bench, comm=comm, cache=cache) as m:
        got = m.restore_latest()
        assert got is not None and m.restored_from == ("cache" if cache is not None else "directory")
        m.close(flush=False)


def _mk(path: str) -> str:
    Path(path).mkdir(parents=True, exist_ok=True)
    return path


def run(st: Bench, cache_root: Path, shared_root: Path, a: argparse.Namespace) -> dict[str, Any]:
    policy = {"save_policy": EveryNSteps(1), "keep_policy": KeepLast(2)}
    mgrs: dict[str, ac.CheckpointManager[Bench]] = {
        "cached": ac.CheckpointManager(
            shared_root / "c", Bench, comm=comm, cache=ac.manager.NodeCache(str(cache_root / "c" / "{node}"), partners=0), **policy
        ),
        "direct": ac.CheckpointManager(shared_root / "d", Bench, comm=comm, **policy),
    }
    if P >= 2:
        cache = ac.manager.NodeCache(str(cache_root / "p" / "{node}"), partners=1, keep=2, node_size=P // 2 if P % 2 == 0 else 1)
        mgrs["cached+partner"] = ac.CheckpointManager(shared_root / "p", Bench, comm=comm, cache=cache, **policy)
    ablation = "cached, no CRC32 (ablation)"
    mgrs[ablation] = ac.CheckpointManager(
        shared_root / "a", Bench, comm=comm, cache=ac.manager.NodeCache(str(cache_root / "a" / "{node}"), partners=0), **policy
    )
    steps = {k: 0 for k in mgrs}

    def saver(name: str) -> Any:
        def save() -> None:
            steps[name] += 1
            st.step = steps[name]
            mgrs[name].save(steps[name], st)

        if name != ablation:
            return save

        def without_crc32() -> None:  # what the CRC32s cost: computed as a constant (the steps cannot be restored)
            real, _crc._crc32 = _crc._crc32, lambda data, value=0: 0
            try:
                save()
            finally:
                _crc._crc32 = real

        return without_crc32

    mgrs["cached"].save(0, st)  # the pieces file's size: what the raw write writes
    mine = next((cache_root / "c").glob(f"*/ckpt-{0:012d}.cache/rank-{rank:06d}.pieces"))
    nbytes = mine.stat().st_size
    buf = os.urandom(1 << 20) * (nbytes >> 20) + os.urandom(nbytes & ((1 << 20) - 1))
    raw_dir = cache_root / "raw"
    raw_dir.mkdir(exist_ok=True)
    count = [0]
    unlinking: list[threading.Thread] = []

    def raw() -> None:
        for t in unlinking:  # as the cache waits for its last retention
            t.join()
        unlinking.clear()
        count[0] += 1
        path = raw_dir / f"r{rank}-{count[0]}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        view = memoryview(buf)
        while view.nbytes:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        old = raw_dir / f"r{rank}-{count[0] - 2}"  # two kept, as KeepLast(2) and keep=2 keep; unlinked in a thread, as the cache's
        if old.exists():
            unlinking.append(threading.Thread(target=old.unlink))
            unlinking[-1].start()

    def quiet(name: str) -> None:
        """Untimed, before each op: the other ops' background work done (the managers' retentions, raw's unlinks).

        As in a run, where the simulation's steps between two saves leave the retention time to end.
        """
        for m in mgrs.values():
            m.wait()
        for t in unlinking:
            t.join()
        unlinking.clear()

    overwrites = [0]

    def overwrite() -> None:
        overwrites[0] += 1
        path = raw_dir / f"o{rank}-{overwrites[0] % 3}"  # three files in turn: each written over the one of three writes back
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        view, at = memoryview(buf), 0
        while at < view.nbytes:
            at += os.pwrite(fd, view[at:], at)
        os.fsync(fd)
        os.close(fd)

    saves = {name: saver(name) for name in mgrs}
    node = {k: v for k, v in saves.items() if k != "direct"} | {"raw": raw, "raw, overwriting": overwrite}
    between = "cached, between direct saves"
    try:
        t = interleaved(node, a.reps, before=quiet)
        got = interleaved({between: saves["cached"], "direct": saves["direct"]}, a.reps, before=quiet)
        t |= got
    finally:
        for m in mgrs.values():
            m.close(flush=False)
    ops = node | {between: saves["cached"], "direct": saves["direct"]}
    # Restarts: the newest step from the caches, in place (no flush), against the same state from the directory.
    restarts = {
        "restart from cache": lambda: _restart(
            shared_root / "c", ac.manager.NodeCache(str(cache_root / "c" / "{node}"), partners=0)
        ),
        "restart from directory": lambda: _restart(shared_root / "d", None),
    }
    t |= interleaved(restarts, a.reps)
    ops |= restarts
    s = {k: stats(v) for k, v in t.items()}
    med = {k: statistics.median(v) for k, v in t.items()}
    total = int(comm.allreduce(nbytes))
    say(f"\n{'mode':22s} {'median s':>9s} {'min s':>8s} {'max s':>8s}   GB/s (of {total / 1e9:.3f} GB)")
    for k in ops:
        say(f"{k:22s} {s[k]['median']:9.4f} {s[k]['min']:8.4f} {s[k]['max']:8.4f}   {total / med[k] / 1e9:.2f}")
    ratios = {"cached_over_raw": med["cached"] / med["raw"], "cached_over_direct": med[between] / med["direct"]}
    ratios["cached_over_raw_overwriting"] = med["cached"] / med["raw, overwriting"]
    ratios["cached_between_direct_saves_over_raw"] = med[between] / med["raw"]
    ratios["restart_cache_over_directory"] = med["restart from cache"] / med["restart from directory"]
    if "cached+partner" in med:
        ratios["cached_partner_over_raw"] = med["cached+partner"] / med["raw"]
    ratios["ablation_cached_without_crc32_over_raw"] = med[ablation] / med["raw"]
    say(
        f"\ncached / raw = {ratios['cached_over_raw']:.2f} (target <= 1.2);  cached / direct = {ratios['cached_over_direct']:.3f} "
        "(target <= 0.25 when the shared directory is slower than the cache)"
    )
    say(
        f"cached / raw overwriting = {ratios['cached_over_raw_overwriting']:.2f} (raw writing over allocated pages, as a "
        f"recycled pieces file is);  cached between direct saves / raw = {ratios['cached_between_direct_saves_over_raw']:.2f}"
    )
    if "cached_partner_over_raw" in ratios:
        say(f"cached with a partner copy / raw = {ratios['cached_partner_over_raw']:.2f} (the partner's bytes are written too)")
    say(
        f"ablation: cached with every CRC32 computed as a constant / raw = {ratios['ablation_cached_without_crc32_over_raw']:.2f}"
        " (what the rest of the save costs)"
    )
    say(f"restart from the cache (in place) / from the directory = {ratios['restart_cache_over_directory']:.2f}")
    return {"P": P, "leaves": a.leaves, "reps": a.reps, "bytes": total, "seconds": s, "ratios": ratios}


if __name__ == "__main__":
    sys.exit(main())
