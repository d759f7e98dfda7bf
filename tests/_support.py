"""Shared helpers for the tests: the interop folder, payload generators, partitions."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

from amrckpt import scda

REPO = Path(__file__).resolve().parents[1]


def interop_dir() -> Path | None:
    """``../shared/interop`` beside the clone (or $AMRCKPT_INTEROP_DIR), if present."""
    env = os.environ.get("AMRCKPT_INTEROP_DIR")
    path = Path(env) if env else REPO.parent / "shared" / "interop"
    return path if path.is_dir() else None


INTEROP_ABSENT = "the interop files are absent: ../shared/interop is not beside this clone (set AMRCKPT_INTEROP_DIR)"


def require_interop() -> Path:
    """The interop folder; skip the calling test, with the reason, when it is absent."""
    path = interop_dir()
    if path is None:
        pytest.skip(INTEROP_ABSENT)
    return path


def interop_params(entries: list[dict[str, Any]]) -> list[Any]:
    """The entries as parameters, or one skipped parameter that says why there are none (not pytest's empty-set skip)."""
    if entries or interop_dir() is not None:
        return entries
    return [pytest.param({"name": "absent"}, marks=pytest.mark.skip(reason=INTEROP_ABSENT))]


@cache
def manifest(kind: str) -> dict[str, Any]:
    """The manifest of ``libsc`` or ``reference`` files."""
    base = require_interop()
    return json.loads((base / kind / "manifest.json").read_text())


def file_entries(kind: str) -> list[dict[str, Any]]:
    base = interop_dir()
    if base is None:
        return []
    return json.loads((base / kind / "manifest.json").read_text())["files"]


def sha256(data: Any) -> str:
    return hashlib.sha256(memoryview(data).cast("B") if not isinstance(data, bytes) else data).hexdigest()


def element_sizes(sec: dict[str, Any]) -> np.ndarray:
    """E_i of a V section entry of the reference manifest."""
    rule = sec.get("sizes_rule") or {"rule": "explicit"}
    if rule["rule"] == "explicit":
        return np.asarray(sec["sizes"], dtype=np.uint64).reshape(-1)
    i = np.arange(sec["N"], dtype=np.int64)
    return ((rule["a"] * i * i + rule["b"] * i + rule["c"]) % rule["m"]).astype(np.uint64)


def generate(s: int, seed: int, sizes: np.ndarray) -> np.ndarray:
    """Payload of the manifests: byte j of element i is (s*131 + i*31 + j*7 + seed) mod 256."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if sizes.size else np.zeros(0, np.int64)
    i = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    j = np.arange(total, dtype=np.int64) - np.repeat(starts, sizes)
    return ((s * 131 + i * 31 + j * 7 + seed) % 256).astype(np.uint8)


def payload_of(sec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(payload bytes, element sizes) of a manifest section (raw or logical)."""
    if "payload_hex" in sec:
        data = np.frombuffer(bytes.fromhex(sec["payload_hex"]), dtype=np.uint8)
        n = sec.get("N", 1)
        return data, np.full(n, data.size // max(n, 1), dtype=np.uint64)
    g = sec["generator"]
    if sec["type"] in ("I", "B"):
        sizes = np.array([g["bytes_per_element"]], dtype=np.uint64)
    elif sec["type"] == "A":
        sizes = np.full(g["elements"], g["bytes_per_element"], dtype=np.uint64)
    else:
        sizes = element_sizes(sec)
    return generate(g["s"], g["seed"], sizes), sizes


def partition_counts(N: int, P: int, mode: int) -> list[int]:
    """The write partitions of the libsc manifest (its ``partition_modes``)."""
    if P == 1:
        return [N]
    if mode == 0:
        counts = [N // P] * P
        counts[-1] += N - sum(counts)
        return counts
    weights = {
        1: [r for r in range(P)],
        2: [r + 1 for r in range(P - 1)] + [0],
        3: [1 if r == P // 2 else 0 for r in range(P)],
        4: [2 * r + 1 if r % 2 == 0 else 0 for r in range(P)],
        5: [1] + [0] * (P - 1),
    }[mode]
    W = sum(weights)
    cum = np.concatenate([[0], np.cumsum(weights)]).tolist()
    counts = [N * cum[r + 1] // W - N * cum[r] // W for r in range(P)]
    counts[-1] += N - sum(counts)
    return counts


def user_string(sec: dict[str, Any]) -> bytes:
    return bytes.fromhex(sec["user_string"]["hex"])


def local_slice(data: np.ndarray, sizes: np.ndarray, counts: list[int], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's (bytes, element sizes) under the partition ``counts``."""
    C = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    offs = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))]).astype(np.int64)
    lo, hi = int(C[rank]), int(C[rank + 1])
    return data[offs[lo] : offs[hi]], sizes[lo:hi]


def write_section(f: scda.ScdaWriter, sec: dict[str, Any], P: int, rank: int, mode: int, *, encode: bool = False) -> None:
    """Write one manifest section (raw, or logical with ``encode``) on this rank."""
    data, sizes = payload_of(sec)
    ustr = user_string(sec)
    t = sec["type"]
    wp = sec.get("write_params") or {}
    if t in ("I", "B"):
        root = int(wp.get("root_index", "0 mod P").split()[0]) % P
        mine = data if rank == root else None
        if t == "I":
            f.fwrite_inline(mine, ustr, root=root)
        else:
            f.fwrite_block(mine, ustr, root=root, encode=encode)
        return
    N = int(sizes.size)
    counts = partition_counts(N, P, int(wp.get("write_partition_mode", mode)))
    local, lsizes = local_slice(data, sizes, counts, rank)
    if t == "A":
        E = int(sec["generator"]["bytes_per_element"]) if "generator" in sec else int(sec["E"])
        f.fwrite_array(local if local.size else None, counts, E, ustr, encode=encode)
    else:
        C = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        offs = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))])
        proc = [int(offs[C[p + 1]] - offs[C[p]]) for p in range(P)]
        f.fwrite_varray(local, counts, lsizes, proc, ustr, encode=encode)


def read_section(f: scda.ScdaReader, hdr: scda.SectionHeader, counts: list[int] | None) -> bytes:
    """Read the current section's data on this rank under ``counts`` (uniform if None); return local bytes."""
    P = f.comm.size
    if counts is None and hdr.type in "AV":
        N = hdr.elem_count
        counts = [N * (p + 1) // P - N * p // P for p in range(P)]
    if hdr.type == "I":
        return f.fread_inline_data(root=0) or b""
    if hdr.type == "B":
        return f.fread_block_data(root=None).tobytes()
    if hdr.type == "A":
        return f.fread_array_data(counts).tobytes()
    s = f.fread_varray_sizes(counts)
    return f.fread_varray_data(counts, s, f.proc_sizes()).tobytes()


def read_every_section(path: Path, *, decode: bool, strict: bool = False, checksum: bool = False) -> None:
    """Read every section of an scda file serially, all its data (the readers' fuzz and damage tests)."""
    with scda.fopen_read(path, strict=strict, checksum=checksum) as f:
        while (h := f.fread_section_header(decode=decode)) is not None:
            if h.type == "I":
                f.fread_inline_data()
            elif h.type == "B":
                f.fread_block_data()
            elif h.type == "A":
                f.fread_array_data([h.elem_count], h.elem_size)
            else:
                s = f.fread_varray_sizes([h.elem_count])
                f.fread_varray_data([h.elem_count], s, f.proc_sizes())
        if checksum:
            f.section_crcs()


def random_forest(seed: int, num_trees: int = 2, dim: int = 2, max_level: int = 5, refine: float = 0.35) -> Any:
    """A random complete linear forest (adaptive): refine random leaves, level by level, in Morton order."""
    from amrckpt import sfc

    rng = np.random.default_rng(seed)
    L = sfc.MAXLEVEL[dim]
    leaves = sfc.uniform_leaves(1, num_trees, dim)
    tree, level = leaves.tree.astype(np.int32), leaves.level.astype(np.int8)
    coords = [np.asarray(c, dtype=np.int32) for c in (leaves.x, leaves.y, leaves.z) if c is not None]
    for _ in range(max_level - 1):
        split = (rng.random(tree.size) < refine) & (level < max_level)
        if not split.any():
            continue
        k = 1 << dim
        reps = np.where(split, k, 1)
        child = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
        par = np.repeat(np.arange(tree.size), reps)
        sp = split[par]
        newlevel = level[par] + sp
        h = np.int32(1) << (L - newlevel.astype(np.int32))
        newc = []
        for d, c in enumerate(coords):
            bit = (child >> d) & 1
            newc.append((c[par] + np.where(sp, bit * h, 0)).astype(np.int32))
        tree, level, coords = tree[par], newlevel.astype(np.int8), newc
    order = sfc.sfc_order(tree, level, *coords)
    return sfc.Leaves(tree[order], level[order], *[c[order] for c in coords], *([None] if dim == 2 else []))


# ------------------------------------------------------------------ MPI tests


def world() -> Any:
    """MPI.COMM_WORLD (mpi4py imported only when an MPI test asks)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


def sub_comm(n: int) -> Any:
    """The first n ranks of the world (None on the others). Collective on the world."""
    from mpi4py import MPI

    w = world()
    sub = w.Split(0 if w.rank < n else MPI.UNDEFINED, w.rank)
    return None if sub == MPI.COMM_NULL else sub


def all_true(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on every rank (an allreduce), so a failure fails all ranks."""
    from mpi4py import MPI

    return bool(world().allreduce(bool(flag), op=MPI.LAND))


def collectives(P: int, fn: Any, *args: Any) -> list[int]:
    """Run ``fn(comm, *args)`` on P thread ranks with a counting communicator; return each rank's collective calls."""
    from amrckpt.comm import run_threads
    from amrckpt.testing import CountingComm

    def body(comm: Any) -> int:
        cc = CountingComm(comm)
        fn(cc, *args)
        return cc.total

    return run_threads(P, body)


def count_crc_bytes(monkeypatch: pytest.MonkeyPatch, *targets: tuple[Any, str]) -> list[int]:
    """Count the bytes CRC'd through each ``(module, name)`` CRC32 function (patched); return the one-item counter."""
    counted = [0]
    for module, name in targets:
        real = getattr(module, name)

        def counting(data: Any, value: int = 0, real: Any = real) -> int:
            counted[0] += memoryview(data).nbytes
            return int(real(data, value))

        monkeypatch.setattr(module, name, counting)
    return counted


# ------------------------------------------------------------------ reads under faults


@contextlib.contextmanager
def short_reads(k: int) -> Iterator[list[int]]:
    """Make every ``os.pread``/``os.preadv`` of this process move at most ``k`` bytes (legal POSIX); yield the calls made."""
    calls = [0]
    real_pread, real_preadv = os.pread, os.preadv

    def pread(fd: int, n: int, offset: int) -> bytes:
        calls[0] += 1
        return real_pread(fd, min(n, k), offset)

    def preadv(fd: int, bufs: Any, offset: int) -> int:
        calls[0] += 1
        out, left = [], k
        for b in bufs:
            if left <= 0:
                break
            mv = memoryview(b).cast("B")
            out.append(mv[:left])
            left -= min(left, mv.nbytes)
        return real_preadv(fd, out, offset)

    with mock.patch.object(os, "pread", pread), mock.patch.object(os, "preadv", preadv):
        yield calls


def run_bounded(code: str, *args: str, timeout: float = 120, memory: int = 2 << 30) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code args`` from the repository (``tests`` importable), its address space limited to ``memory`` bytes.

    A child that runs past ``timeout`` seconds is killed and the test fails
    saying it hung (a read that blocks on a FIFO), instead of hanging.
    """
    prelude = f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory})); sys.path.insert(0, 'tests')\n"
    try:
        return subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hung: the child did not end within {timeout} s\n{exc.stderr!r}")
