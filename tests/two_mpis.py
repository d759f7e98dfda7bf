#!/usr/bin/env python3
"""Write one fixed set of files under mpiexec and list their sha256: run it with MPICH and with Open MPI, compare.

Usage (``tests/run_openmpi.py`` runs it with both MPI implementations)::

    mpiexec -n 3 python tests/two_mpis.py OUTDIR DIGESTS.json

Written on every rank of ``MPI.COMM_WORLD`` through MPI-IO (ROMIO under
MPICH, OMPIO under Open MPI):

* raw scda files (``scda-*.scda``): inline, block, array and varray
  sections, raw and encoded, in both padding styles, under an even and a
  skewed partition (one rank with no elements);
* checkpoints of the manager (``manager/ckpt-*.scda``) and of ``amrckpt.save``
  (``save.scda``): whole files, which hold nothing of the run (format 2), so
  they must be the same under both MPIs, as they are on any number of ranks.

``DIGESTS.json`` maps each file to its sha256.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/

from checkpoint_cases import Advection, global_state
from mpi4py import MPI

import amrckpt as ac
from amrckpt import scda
from amrckpt.manager import EveryNSteps, KeepLast


def _counts(N: int, P: int, skewed: bool) -> list[int]:
    if not skewed:
        return [N * (p + 1) // P - N * p // P for p in range(P)]
    w = [0, *range(1, P)] if P > 1 else [1]  # rank 0 holds nothing
    cum = np.concatenate([[0], np.cumsum(w)])
    return [N * int(cum[p + 1]) // int(cum[-1]) - N * int(cum[p]) // int(cum[-1]) for p in range(P)]


def write_scda(path: Path, comm: MPI.Comm, style: str, skewed: bool) -> None:
    P, r = comm.size, comm.rank
    rng = np.random.default_rng(5)
    N = 1000
    arr = rng.integers(0, 256, N * 24, dtype=np.uint8)  # N elements of 24 bytes
    sizes = rng.integers(0, 40, N).astype(np.uint64)
    var = rng.integers(0, 4, int(sizes.sum()), dtype=np.uint8)  # compressible
    offs = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))])
    counts = _counts(N, P, skewed)
    C = np.concatenate([[0], np.cumsum(counts)])
    lo, hi = int(C[r]), int(C[r + 1])
    proc = [int(offs[C[p + 1]] - offs[C[p]]) for p in range(P)]
    with scda.fopen_write(path, b"two MPIs", comm=comm, style=style) as f:  # type: ignore[arg-type]
        f.fwrite_inline(b"x" * 32 if r == 0 else None, b"inline")
        f.fwrite_block(b"block of bytes\n" * 50 if r == 0 else None, b"block raw")
        f.fwrite_block(b"block of bytes\n" * 50 if r == P - 1 else None, b"block encoded", root=P - 1, encode=True)
        f.fwrite_array(arr[lo * 24 : hi * 24], counts, 24, b"array raw")
        f.fwrite_array(arr[lo * 24 : hi * 24], counts, 24, b"array encoded", encode=True)
        f.fwrite_varray(var[offs[lo] : offs[hi]], counts, sizes[lo:hi], proc, b"varray raw")
        f.fwrite_varray(var[offs[lo] : offs[hi]], counts, sizes[lo:hi], proc, b"varray encoded", encode=True)


def main() -> int:
    out, digests_path = Path(sys.argv[1]), Path(sys.argv[2])
    w = MPI.COMM_WORLD
    if w.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    w.Barrier()
    for style in ("unix", "mime"):
        for skewed in (False, True):
            write_scda(out / f"scda-{style}-{'skewed' if skewed else 'even'}.scda", w, style, skewed)

    G = {s: global_state(seed=s // 10, max_level=5) for s in (0, 10, 20)}
    ac.save(G[0].for_rank(w), out / "save.scda", comm=w)
    with ac.CheckpointManager(out / "manager", Advection, comm=w, save_policy=EveryNSteps(10), keep_policy=KeepLast(9)) as mgr:
        for s in (0, 10, 20):
            st = G[s].for_rank(w)
            st.step = s
            mgr.save(s, st)
    w.Barrier()
    if w.rank == 0:
        files = sorted(out.glob("*.scda")) + sorted((out / "manager").glob("ckpt-*.scda"))
        digests = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
        digests_path.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
