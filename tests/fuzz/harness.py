"""Fuzzing of every reader of amrckpt: seed files, mutations, reader targets, outcome checks.

Shared by the modest campaign of the test suite
(``tests/property/test_fuzz_readers.py``) and the long one
(``tests/fuzz/campaign.py``).

Seeds are real files: scda files with every section type (I, B, A, V and
their compressed forms) in the Unix and MIME styles, checkpoints with every
field kind (inline, block, compressed block, mesh, cells in both byte orders
and compressed, hp data plain and compressed), and the libsc and reference
files of ``shared/interop`` (read in place).  A mutation is a short list of
edits drawn from a seeded ``random.Random``: bit flips, truncation, inserted
and deleted bytes, count entries rewritten (leading zeros, 27 digits,
N = 10**25, 2**64, ...), padding damage, magic user strings swapped in or
out, MIME/Unix line breaks mixed, 32-byte rows copied elsewhere, section
letters swapped.  For checkpoints, a mutation may be *resealed*: the CRC32s
of the index and footer are recomputed over the damaged bytes so that the
reader gets past its checksums into the manifest, index and field parsers.

A target runs one reader on one file.  The only acceptable outcomes are a
normal return or an exception of amrckpt's tree (:class:`AmrckptError`);
for the command line, an exit status of 0 or 1 with nothing on stderr but
``amrckpt ...`` lines.  Every run is also measured: the peak of Python and
numpy allocations (tracemalloc) must stay below ``MEMORY_FACTOR`` times the
file's size plus ``MEMORY_SLACK``.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import signal
import threading
import tracemalloc
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import amrckpt as ac
from _support import read_every_section
from amrckpt import restart, scda
from amrckpt.cli import main as cli_main
from amrckpt.comm import run_threads
from amrckpt.errors import AmrckptError, ScdaCountError

__all__ = [
    "MEMORY_FACTOR",
    "MEMORY_SLACK",
    "READERS",
    "Crash",
    "Seed",
    "build_seeds",
    "deadline",
    "decoder_case",
    "edit_checkpoint",
    "json_sweep",
    "mutate",
    "run_target",
]

MEMORY_FACTOR = 16
MEMORY_SLACK = 8 << 20


# -- seeds ----------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """A real file to mutate: ``kind`` is ``"scda"`` or ``"checkpoint"``."""

    name: str
    kind: str
    data: bytes


class Fuzzy(ac.CheckpointSchema, name="fuzzy", version=1):
    """Every field kind of amrckpt (compressed and not, both byte orders)."""

    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    label: str = ac.Inline()
    params: dict[str, float] = ac.Block()
    extra: dict[str, list[int]] = ac.Block(compress=True)
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f4", shape=(2,), compress="element")
    tensor: ac.CellData = ac.Cells(">i2", shape=(2, 3))
    flag: ac.CellData = ac.Cells("?")
    modes: ac.HpData = ac.HpCells("<f8", compress="element")
    pairs: ac.HpData = ac.HpCells(">i4", shape=(2,))


class Fuzzy3(ac.CheckpointSchema, name="fuzzy3", version=1):
    """A 3D mesh with one cell field (the other mesh record)."""

    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=3)
    T: ac.CellData = ac.Cells("<f4")


SCHEMAS: dict[str, type[ac.CheckpointSchema]] = {"fuzzy": Fuzzy, "fuzzy3": Fuzzy3}


def _fuzzy_state(seed: int, level: int, lo: int | None = None, hi: int | None = None) -> Fuzzy:
    from amrckpt import sfc

    lv = sfc.uniform_leaves(level, 2, 2)
    N = lv.num_leaves
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 3, N) ** 2
    pcounts = rng.integers(0, 3, N)
    modes = rng.standard_normal(int(counts.sum()))
    pairs = rng.integers(-(2**31), 2**31, (int(pcounts.sum()), 2)).astype(">i4")
    lo, hi = (0, N) if lo is None else (lo, hi)
    off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    poff = np.concatenate([[0], np.cumsum(pcounts)]).astype(np.int64)
    return Fuzzy(
        step=seed,
        time=0.1 * seed,
        label='fuzz "label"\n',
        params={"cfl": 0.4, "nu": 1e-3},
        extra={"k": list(range(12))},
        mesh=ac.Forest(lv.tree[lo:hi], lv.level[lo:hi], lv.x[lo:hi], lv.y[lo:hi], num_trees=2),
        rho=rng.random(N)[lo:hi],
        vel=rng.standard_normal((N, 2)).astype("<f4")[lo:hi],
        tensor=rng.integers(-(2**15), 2**15, (N, 2, 3)).astype(">i2")[lo:hi],
        flag=(rng.random(N) < 0.5)[lo:hi],
        modes=ac.HpData(modes[off[lo] : off[hi]], counts[lo:hi]),
        pairs=ac.HpData(pairs[poff[lo] : poff[hi]], pcounts[lo:hi]),
    )


def _write_scda(path: Path, style: str) -> None:
    rng = np.random.default_rng(7)
    with scda.fopen_write(path, b"fuzz seed", style=style) as f:  # type: ignore[arg-type]
        f.fwrite_inline(b"inline data of exactly 32 bytes\n", b"inline")
        f.fwrite_block(b"a block that ends in a line feed\n", b"block")
        f.fwrite_block(b"", b"empty block")
        f.fwrite_block(rng.bytes(300), b"compressed block", encode=True)
        f.fwrite_array(rng.bytes(12 * 8), [12], 8, b"array")
        f.fwrite_array(None, [0], 5, b"empty array")
        f.fwrite_array(rng.bytes(9 * 6), [9], 6, b"compressed array", encode=True)
        sizes = rng.integers(0, 40, 15)
        f.fwrite_varray(rng.bytes(int(sizes.sum())), [15], sizes, [int(sizes.sum())], b"varray")
        f.fwrite_varray(rng.bytes(int(sizes.sum())), [15], sizes, [int(sizes.sum())], b"compressed varray", encode=True)
        # The magic strings where they do not start a pair must not confuse a reader.
        f.fwrite_block(b"not compressed", scda.MAGIC_A)
        f.fwrite_inline(b"U 12" + b" " * 27 + b"\n", b"not a magic")


def build_seeds(directory: Path, interop: Path | None, max_interop_bytes: int = 300_000) -> list[Seed]:
    """Write the seed files into ``directory`` and return them with the interop files."""
    directory.mkdir(parents=True, exist_ok=True)
    seeds = []
    for style in ("unix", "mime"):
        p = directory / f"sections-{style}.scda"
        _write_scda(p, style)
        seeds.append(Seed(p.name, "scda", p.read_bytes()))
    for style, ranks in (("unix", 1), ("mime", 2)):
        p = directory / f"fuzzy-{style}.ckpt"
        N = 4 * 2  # level-1 leaves of two trees

        def body(comm: Any, p: Path = p, style: str = style, N: int = N) -> None:
            lo, hi = N * comm.rank // comm.size, N * (comm.rank + 1) // comm.size
            ac.save(_fuzzy_state(3, 1, lo, hi), p, comm=comm, access=ac.FileAccess(style=style))  # type: ignore[arg-type]

        run_threads(ranks, body)
        seeds.append(Seed(p.name, "checkpoint", p.read_bytes()))
    from amrckpt import sfc

    lv = sfc.uniform_leaves(1, 1, 3)
    p = directory / "fuzzy3.ckpt"
    ac.save(Fuzzy3(step=1, mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=1), T=np.arange(8, dtype="<f4")), p)
    seeds.append(Seed(p.name, "checkpoint", p.read_bytes()))
    if interop is not None:
        for q in sorted(interop.rglob("*.scda")):
            if q.stat().st_size <= max_interop_bytes:
                seeds.append(Seed(f"{q.parent.name}/{q.name}", "scda", q.read_bytes()))
    return seeds


# -- mutations ------------------------------------------------------------------

_COUNTS = [
    b"0",
    b"00",
    b"01",
    b"1",
    b"9" * 26,
    b"9" * 27,
    b"1" + b"0" * 25,
    b"1" + b"0" * 20,
    b"18446744073709551616",
    b"18446744073709551615",
    b"9223372036854775808",
    b"2147483648",
    b"4294967296",
    b"+1",
    b"-1",
    b" 1",
    b"",
]
_MAGICS = [scda.MAGIC_A, scda.MAGIC_B, scda.MAGIC_V, b"amrckpt footer 1", b"amrckpt index", b"amrckpt manifest"]
_BYTES = b'-=\n\r UENVABIFz\0\xff0{}[]",:'


def _count_rows(b: bytes | bytearray) -> list[int]:
    """Offsets of 32-aligned rows that look like count entries (N, E or U)."""
    return [m.start() for m in re.finditer(rb"[NEU] \d", b) if m.start() % 32 == 0]


def _set_count(b: bytearray, pos: int, digits: bytes, rng: random.Random) -> None:
    """Rewrite the count entry at ``pos`` with ``digits``, padded to 32 bytes if they fit."""
    end = rng.choice([b"-\n", b"\r\n"])
    body = b[pos : pos + 2] + digits
    if len(body) <= 28:
        row = body + b" " + b"-" * (32 - len(body) - 3) + end
    else:
        row = body[:32]
    b[pos : pos + 32] = row.ljust(32, b"-")


_JSON_VALUES: list[Any] = [
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64,
    10**30,
    -(10**30),
    1e308,
    0.5,
    float("nan"),
    float("inf"),
    "",
    "x" * 300,
    "<f8",
    ">i2",
    "|V0",
    "|V1000000",
    "O",
    "<U10",
    "<M8[s]",
    "|b1",
    "S0",
    [["a", "<f8"], ["a", "<f8"]],
    [["a", "O"]],
    None,
    True,
    [],
    {},
    [10**6, 10**6],
    [2**40],
    [-1],
    [0],
    "I",
    "V",
    "A",
    "B",
    "F",
    "mesh",
    "hp",
    "cells",
    "inline",
    "block",
    "hilbert",
    "amrckpt partition",
    "amrckpt manifest",
]


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value inside a JSON document (containers included)."""
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _leaves(v, (*path, i))
    return out


def _mutate_document(doc: Any, rng: random.Random) -> Any:
    """One structural change to a JSON document: a value replaced, a key dropped or added, an item copied."""
    paths = [p for p in _leaves(doc) if p]
    if not paths:
        return rng.choice(_JSON_VALUES)
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    what = rng.random()
    if what < 0.7:
        parent[key] = rng.choice(_JSON_VALUES) if rng.random() < 0.8 else rng.randint(-(2**70), 2**70)
    elif what < 0.8:
        del parent[key]
    elif what < 0.9 and isinstance(parent, list):
        parent.insert(rng.randint(0, len(parent)), json.loads(json.dumps(parent[key])))
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "name", "crc32", "offset"])] = rng.choice(_JSON_VALUES)
    else:
        parent.reverse()
    return doc


def _section(blob: bytes, off: int) -> Any:
    from amrckpt.scda._layout import read_raw_section

    def read(o: int, n: int) -> bytes:
        if o + n > len(blob):
            raise ScdaCountError("short")
        return blob[o : o + n]

    return read_raw_section(read, off, len(blob))


def _block(header: bytes, data: bytes, style: str) -> bytes:
    return (
        header[:64]
        + scda.count_entry(b"E", len(data), style)
        + data
        + scda.data_padding(  # type: ignore[arg-type]
            len(data),
            data[-1] if data else None,
            style,  # type: ignore[arg-type]
        )
    )


def restructure(blob: bytes, rng: random.Random) -> bytes | None:
    """Change one JSON block of a checkpoint (manifest, provenance, index or a block field) structurally.

    The block is rewritten with its new size, the offsets after it are
    shifted, and the index and footer are rewritten with correct CRC32s: the
    result passes every checksum, so the readers meet the change itself.
    Returns None if ``blob`` is not a checkpoint whose layout can be followed.
    """
    try:
        entries = _index_of(blob)["sections"]
        blocks = [e["name"] for e in entries if e.get("type") == "B" and not e.get("compressed")]
        target = None if rng.random() < 0.25 or not blocks else rng.choice(blocks)
        return edit_checkpoint(blob, target, lambda doc: _mutate_document(doc, rng), indent=rng.choice([None, 1]))
    except (AmrckptError, ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return None  # the damage so far left no checkpoint layout to follow


def _index_of(blob: bytes) -> Any:
    foot = _section(blob, len(blob) - 96)
    isec = _section(blob, int(bytes(foot.inline or b"").split()[0], 16))
    return json.loads(blob[isec.data_offset : isec.data_offset + isec.elem_size])


def edit_checkpoint(blob: bytes, name: str | None, edit: Callable[[Any], Any], *, indent: int | None = 1) -> bytes:
    """Rewrite the JSON block ``name`` of a checkpoint (None: the index) by ``edit``, keeping every CRC32 right.

    The block is rewritten with its new size, the offsets after it are
    shifted, and the index and footer are rewritten with correct CRC32s: the
    result passes every checksum, so that a reader meets the change itself.
    ``edit`` returns the new document (it may change the one it is given).
    """
    n = len(blob)
    foot = _section(blob, n - 96)
    ioff = int(bytes(foot.inline or b"").split()[0], 16)
    isec = _section(blob, ioff)
    index = json.loads(blob[isec.data_offset : isec.data_offset + isec.elem_size])
    style = "mime" if blob[isec.offset + 94 : isec.offset + 96] == b"\r\n" else "unix"
    if name is None:
        index = edit(index)
    else:
        entries = index["sections"]
        e = next(x for x in entries if x.get("name") == name)
        sec = _section(blob, int(e["offset"]))
        doc = edit(json.loads(blob[sec.data_offset : sec.data_offset + sec.elem_size]))
        new = _block(blob[sec.offset : sec.offset + 64], json.dumps(doc, indent=indent).encode(), style)
        assert sec.end is not None
        delta = len(new) - (sec.end - sec.offset)
        blob = blob[: sec.offset] + new + blob[sec.end :]
        for x in entries:
            with contextlib.suppress(TypeError, KeyError):
                if x["offset"] > sec.offset:
                    x["offset"] += delta
                if x["end"] > sec.offset:
                    x["end"] += delta
                if 0 <= x["offset"] <= x["end"] <= len(blob):
                    x["crc32"] = zlib.crc32(blob[x["offset"] : x["end"]])
        ioff += delta
    isec_bytes = _block(blob[ioff : ioff + 64], json.dumps(index, indent=1).encode(), style)
    footer_head = blob[len(blob) - 96 : len(blob) - 32]
    foot_data = (b"%016x %08x" % (ioff, zlib.crc32(isec_bytes))).ljust(31) + b"\n"
    return blob[:ioff] + isec_bytes + footer_head + foot_data


def json_sweep(blob: bytes) -> Any:
    """Yield ``(block, path, value, damaged blob)``: every value of every JSON block set to every value of a list.

    The deterministic complement of :func:`restructure`: the index, the
    manifest, the provenance and every uncompressed block field of a
    checkpoint, each value (at any depth) replaced in turn by each of
    ``_JSON_VALUES``, with every CRC32 resealed.
    """
    import copy

    index = _index_of(blob)
    names: list[str | None] = [None]
    names += [e["name"] for e in index["sections"] if e["type"] == "B" and not e["compressed"]]
    for name in names:
        if name is None:
            doc = index
        else:
            e = next(x for x in index["sections"] if x["name"] == name)
            sec = _section(blob, e["offset"])
            doc = json.loads(blob[sec.data_offset : sec.data_offset + sec.elem_size])
        for path in _leaves(doc):
            for value in _JSON_VALUES if path else []:

                def edit(d: Any, path: tuple[Any, ...] = path, value: Any = value) -> Any:
                    parent = d
                    for k in path[:-1]:
                        parent = parent[k]
                    parent[path[-1]] = copy.deepcopy(value)
                    return d

                yield name, path, value, edit_checkpoint(blob, name, edit)


def reseal(blob: bytes) -> bytes:
    """Recompute the CRC32s of a checkpoint's index and footer over its (damaged) bytes.

    The index JSON is rewritten only where the new numbers take no more room
    than the old ones (the difference is filled with spaces, valid JSON);
    otherwise the blob is returned with only the footer resealed.
    """
    b = bytearray(blob)
    n = len(b)
    if n < 128 + 96:
        return blob
    foot = b[n - 96 : n]
    m = re.match(rb"I amrckpt footer 1 .{44}([0-9a-f]{16}) ([0-9a-f]{8})", bytes(foot), re.S)
    if m is None:
        return blob
    ioff = int(m.group(1), 16)
    if not 128 <= ioff < n - 96:
        return blob
    head = bytes(b[ioff : ioff + 96])
    em = re.match(rb"B amrckpt index .{46}E (\d+) ", head, re.S)
    if em is None:
        return blob
    E = int(em.group(1))
    data0 = ioff + 96
    if data0 + E > n - 96:
        return blob
    try:
        index = json.loads(bytes(b[data0 : data0 + E]))
        for e in index["sections"]:
            s, t = int(e["offset"]), int(e["end"])
            if 0 <= s <= t <= n:
                e["crc32"] = zlib.crc32(bytes(b[s:t]))
        new = json.dumps(index, separators=(",", ":")).encode()
    except (ValueError, KeyError, TypeError, AttributeError):
        new = b""
    if new and len(new) <= E:
        b[data0 : data0 + E] = new + b" " * (E - len(new))
    end = data0 + E + scda.data_padding_nbytes(E)
    crc = zlib.crc32(bytes(b[ioff : min(end, n)]))
    b[n - 32 : n] = (b"%016x %08x" % (ioff, crc)).ljust(31) + b"\n"
    return bytes(b)


def mutate(seed: Seed, rng: random.Random) -> tuple[bytes, list[str]]:
    """Return a damaged copy of ``seed`` and the list of edits made (for reproducers)."""
    b = bytearray(seed.data)
    edits: list[str] = []
    kinds = [
        "flip",
        "flip",
        "truncate",
        "insert",
        "delete",
        "byte",
        "count",
        "count",
        "digits",
        "padding",
        "magic",
        "crlf",
        "row",
        "letter",
    ]
    if seed.kind == "checkpoint":
        kinds += ["json"] * 6
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        if not b:
            break
        kind = rng.choice(kinds)
        pos = rng.randrange(len(b))
        if kind == "flip":
            b[pos] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            pos = rng.choice([pos, pos - pos % 32, len(b) - rng.randrange(1, 40)])
            del b[max(pos, 0) :]
        elif kind == "insert":
            ins = rng.choice([rng.randbytes(rng.randint(1, 40)), b"\0" * 32, bytes(seed.data[pos : pos + 32])])
            b[pos:pos] = ins
        elif kind == "delete":
            del b[pos : pos + rng.choice([1, 2, 7, 32, 64, rng.randint(1, 200)])]
        elif kind == "byte":
            b[pos] = rng.choice(_BYTES)
        elif kind in ("count", "digits"):
            rows = _count_rows(b)
            if kind == "count" and rows:
                pos = rng.choice(rows)
                _set_count(b, pos, rng.choice([*_COUNTS, b"%d" % rng.randint(0, 1 << rng.randint(1, 90))]), rng)
            else:
                d = rng.choice(_COUNTS)
                b[pos : pos + len(d)] = d
        elif kind == "padding":
            pads = [m.start() for m in re.finditer(rb"={2,}|-{3,}", b)]
            if pads:
                pos = rng.choice(pads)
            b[pos : pos + 2] = rng.choice([b"xx", b"\n\n", b"--", b"==", b"\r\n", b"- "])
        elif kind == "magic":
            heads = [m.start() for m in re.finditer(rb"[IBAV] ", b) if m.start() % 32 == 0]
            if heads:
                pos = rng.choice(heads)
                us = rng.choice([*_MAGICS, b""])
                b[pos + 2 : pos + 64] = scda.pad_string(us, 62, rng.choice(["unix", "mime"]))
        elif kind == "crlf":
            breaks = [m.start() for m in re.finditer(rb"\r\n|-\n|=\n", b)]
            if breaks:
                pos = rng.choice(breaks)
                b[pos : pos + 2] = {b"\r\n": b"-\n", b"-\n": b"\r\n", b"=\n": b"\r\n"}[bytes(b[pos : pos + 2])]
        elif kind == "row":
            src = rng.randrange(0, max(len(b) // 32, 1)) * 32
            dst = rng.randrange(0, max(len(b) // 32, 1)) * 32
            b[dst : dst + 32] = bytes(b[src : src + 32])
        elif kind == "letter":
            heads = [m.start() for m in re.finditer(rb"[IBAVNEUF] ", b) if m.start() % 32 == 0]
            if heads:
                pos = rng.choice(heads)
                b[pos] = rng.choice(b"IBAVNEUFX")
        else:
            new = restructure(bytes(b), rng)
            if new is not None:
                b = bytearray(new)
        edits.append(f"{kind}@{pos}")
    out = bytes(b)
    if seed.kind == "checkpoint" and rng.random() < 0.5:
        out = reseal(out)
        edits.append("reseal")
    return out, edits


# -- the readers ----------------------------------------------------------------


def _read_two_ranks(path: Path) -> None:
    """Two thread-ranks, an uneven partition, reading every other section's data."""

    def body(comm: Any) -> None:
        with scda.fopen_read(path, comm=comm) as f:
            k = 0
            while (h := f.fread_section_header(decode=True)) is not None:
                k += 1
                if k % 3 == 0:
                    continue  # skipped by the next header call
                N = h.elem_count
                counts = [N // 3, N - N // 3]
                if h.type == "I":
                    f.fread_inline_data(root=1)
                elif h.type == "B":
                    f.fread_block_data(root=None)
                elif h.type == "A":
                    f.fread_array_data(counts, skip=comm.rank == 0 and k % 2 == 0)
                else:
                    s = f.fread_varray_sizes(counts)
                    f.fread_varray_data(counts, s, f.proc_sizes())

    run_threads(2, body, timeout=60)


def _scan(path: Path) -> None:
    scda.scan(path, check_padding=True)
    scda.scan(path, decode=False)


def _load(path: Path) -> None:
    for schema in SCHEMAS.values():
        for verify in (True, False):
            with contextlib.suppress(AmrckptError):
                restart.load(path, schema, verify=verify)
    with contextlib.suppress(AmrckptError):
        restart.load(path, Fuzzy, fields=["rho", "modes"], partition="weighted")


def _load_two_ranks(path: Path) -> None:
    def body(comm: Any) -> None:
        for schema in SCHEMAS.values():
            with contextlib.suppress(AmrckptError):
                restart.load(path, schema, comm=comm, partition="weighted")

    run_threads(2, body, timeout=60)


def _read_info(path: Path) -> None:
    for verify in (True, False):
        with contextlib.suppress(AmrckptError):
            restart.read_info(path, verify=verify)


def _verify(path: Path) -> None:
    rep = restart.verify(path)
    assert isinstance(rep.ok, bool) and (rep.ok or rep.problems)


class CliFailure(AssertionError):
    """The command line let something else than its own messages out."""


def _cli(*argv: str) -> Callable[[Path], None]:
    def run(path: Path) -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main([*argv, str(path)])
        text = err.getvalue()
        if code not in (0, 1):
            raise CliFailure(f"exit status {code}: {text[-400:]}")
        if "Traceback" in out.getvalue() + text:
            raise CliFailure(f"a traceback came out: {text[-400:]}")
        bad = [ln for ln in text.splitlines() if ln and not ln.startswith("amrckpt ")]
        if bad:
            raise CliFailure(f"stderr lines not from amrckpt: {bad[:3]}")

    return run


READERS: dict[str, Callable[[Path], None]] = {
    "scda.read(decode)": lambda p: read_every_section(p, decode=True),
    "scda.read(raw)": lambda p: read_every_section(p, decode=False),
    "scda.read(strict,checksum)": lambda p: read_every_section(p, decode=True, strict=True, checksum=True),
    "scda.read(P=2)": _read_two_ranks,
    "scda.scan": _scan,
    "restart.read_info": _read_info,
    "restart.load": _load,
    "restart.load(P=2)": _load_two_ranks,
    "restart.verify": _verify,
    "cli inspect": _cli("inspect"),
    "cli inspect --json --sections": _cli("inspect", "--json", "--sections"),
    "cli verify": _cli("verify", "--no-progress"),
    "cli verify --strict --json": _cli("verify", "--strict", "--json", "--no-progress"),
}
"""Every reader path, by name: each takes the path of a (damaged) file."""


# -- the decoder on its own ----------------------------------------------------


def decoder_case(rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encoded elements with damage to the text, the E_i and the U sizes (sum(E_i) = len(text))."""
    n = rng.randint(1, 6)
    sizes = [rng.choice([0, 1, 7, 56, 57, 58, 100, 300]) for _ in range(n)]
    raw = rng.randbytes(sum(sizes)) if rng.random() < 0.5 else bytes(sum(sizes))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    enc, esz = scda.encode_elements(memoryview(raw), offsets, style=rng.choice(["unix", "mime"]), level=rng.choice([0, 9]))
    b = bytearray(enc.tobytes())
    es = [int(x) for x in esz]
    us = list(sizes)
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(6)
        if k == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif k == 1 and b:
            b[rng.randrange(len(b))] = rng.choice(b"=\n\r-+/Az\0 ")
        elif k == 2:  # move a boundary between two elements
            i = rng.randrange(n)
            d = rng.randint(-80, 80)
            j = (i + 1) % n
            if n > 1 and es[i] + d >= 0 and es[j] - d >= 0:
                es[i] += d
                es[j] -= d
        elif k == 3:
            us[rng.randrange(n)] = min(rng.choice([0, 1, 10**6, 2**40, 2**63, 2**64 - 1, us[rng.randrange(n)] + 1]), 2**64 - 1)
        elif k == 4 and b:  # delete bytes, shortening the last element
            pos = rng.randrange(len(b))
            cut = min(rng.randint(1, 10), len(b) - pos, es[-1])
            del b[pos : pos + cut]
            es[-1] -= cut
        else:  # insert bytes into the last element
            pos = rng.randrange(len(b) + 1)
            ins = rng.randbytes(rng.randint(1, 10))
            b[pos:pos] = ins
            es[-1] += len(ins)
    return np.frombuffer(bytes(b), np.uint8).copy(), np.array(es, np.uint64), np.array(us, np.uint64)


def _decode(case: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    enc, es, us = case
    scda.decode_elements(enc, es, us)


# -- outcomes -------------------------------------------------------------------


class Hang(BaseException):
    """A reader ran past its deadline (a BaseException, so that no ``except Exception`` swallows it)."""


@contextlib.contextmanager
def deadline(seconds: float) -> Any:
    """Raise :class:`Hang` in the main thread after ``seconds`` (SIGALRM; a no-op in other threads)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no outcome after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class Crash:
    """An unacceptable outcome: an exception of another type, or too much memory."""

    reader: str
    kind: str  # the exception's type name, or "memory"
    message: str


def run_target(name: str, target: Callable[[Any], None], arg: Any, nbytes: int, *, measure: bool = True) -> Crash | None:
    """Run one reader on one input; return the crash, or None for an acceptable outcome.

    The memory measure is the tracemalloc peak above what was allocated
    before.  Keep tracemalloc running across inputs (start it once): CPython
    before 3.12.9 can crash in ``tracemalloc.stop()`` while another thread
    allocates (python/cpython#128679), and amrckpt's CRC helper thread may.
    """
    own = measure and not tracemalloc.is_tracing()
    if own:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if measure else 0
    if measure:
        tracemalloc.reset_peak()
    try:
        target(arg)
    except AmrckptError:
        pass
    except Exception as exc:  # noqa: BLE001 - the point of fuzzing
        return Crash(name, type(exc).__name__, f"{exc}"[:500])
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base if measure else 0
        if own:
            tracemalloc.stop()
    limit = MEMORY_FACTOR * nbytes + MEMORY_SLACK
    if peak > limit:
        return Crash(name, "memory", f"peak {peak} bytes for a {nbytes}-byte input (limit {limit})")
    return None


def decoder_target() -> Callable[[Any], None]:
    """The decoder of compressed elements (``scda.decode_elements``) as a target."""
    return _decode
