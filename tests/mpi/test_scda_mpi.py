"""scda over MPI-IO at the world size (run at 1, 2, 3 and 4 processes).

Every assertion is made on every rank with collectively agreed values, so a
failure fails all ranks instead of leaving some waiting.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import shared_tmpdir
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import (
    file_entries,
    interop_params,
    partition_counts,
    read_section,
    require_interop,
    sha256,
    user_string,
    world,
    write_section,
)
from amrckpt import scda
from amrckpt.comm import SerialComm
from amrckpt.errors import ScdaArgumentError, ScdaFileNotFoundError
from amrckpt.testing.strategies import partitions, read_specs, section_specs, write_specs

pytestmark = pytest.mark.mpi

LIBSC = [e for e in file_entries("libsc") if e["libsc_quirk"] is None]
PLAIN_REFERENCE = [
    e for e in file_entries("reference") if not e["file_bytes_zlib_dependent"] and e["expect"]["decode_true"] == "ok"
]


def file_hash(path: Path) -> str:
    comm = world()
    return comm.bcast(hashlib.sha256(path.read_bytes()).hexdigest() if comm.rank == 0 else None, root=0)


def rewrite(path: Path, entry: dict[str, Any], vendor: bytes, style: str) -> None:
    comm = world()
    with scda.fopen_write(
        path, user_string({"user_string": entry["file_user_string"]}), comm=comm, vendor=vendor, style=style
    ) as f:
        for k, sec in enumerate(entry["sections"]):
            write_section(f, sec, comm.size, comm.rank, mode=k % 6)


@pytest.mark.parametrize("entry", interop_params(LIBSC), ids=lambda e: e["name"])
def test_rewrite_libsc_files_over_mpiio(entry: dict[str, Any], mpi_tmp: Path) -> None:
    require_interop()
    out = mpi_tmp / entry["name"]
    rewrite(out, entry, b"libsc", "unix")
    assert file_hash(out) == entry["sha256"]


@pytest.mark.parametrize("entry", interop_params(PLAIN_REFERENCE), ids=lambda e: e["name"])
def test_rewrite_reference_files_over_mpiio(entry: dict[str, Any], mpi_tmp: Path) -> None:
    require_interop()
    out = mpi_tmp / entry["name"]
    rewrite(out, entry, b"refscda", entry["style"])
    assert file_hash(out) == entry["sha256"]


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("kind", ["libsc", "reference"])
def test_read_interop_files_over_mpiio(kind: str, mode: int) -> None:
    base = require_interop() / kind
    comm = world()
    for entry in file_entries(kind):
        decode = kind == "reference" and entry["expect"]["decode_true"] == "ok"
        expected = entry["logical_sections"] if decode else entry["sections"]
        got = []
        with scda.fopen_read(base / entry["name"], comm=comm) as f:
            while (h := f.fread_section_header(decode=decode)) is not None:
                counts = partition_counts(h.elem_count, comm.size, mode) if h.type in "AV" else None
                local = read_section(f, h, counts)
                got.append(sha256(b"".join(comm.allgather(local)) if h.type in "AV" else comm.bcast(local, root=0)))
        assert got == [m["payload_sha256"] for m in expected], entry["name"]


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(st.lists(section_specs(), min_size=1, max_size=5), st.sampled_from(["unix", "mime"]), st.data())
def test_serial_equivalence_over_mpiio(specs: Any, style: str, data: Any) -> None:
    """Files written over MPI-IO at the world size equal the serial file, byte for byte."""
    comm = world()
    with shared_tmpdir() as d:
        _serial_equivalence(comm, d, specs, style, data)


def _serial_equivalence(comm: Any, d: Path, specs: Any, style: str, data: Any) -> None:
    parts = [data.draw(partitions(len(s.sizes), comm.size)) for s in specs]
    rparts = [data.draw(partitions(len(s.sizes), comm.size)) for s in specs]
    # Each rank's hypothesis engine draws its own example, and the engines can drift apart (their state depends on
    # what ran before in the process): every rank takes rank 0's, so the collective arguments agree.
    specs, style, parts, rparts = comm.bcast((specs, style, parts, rparts), root=0)
    serial = [[len(s.sizes)] for s in specs]
    write_specs(comm, d / "par.scda", specs, parts, style)
    if comm.rank == 0:
        write_specs(SerialComm(), d / "ser.scda", specs, serial, style)
    comm.Barrier()
    assert file_hash(d / "par.scda") == file_hash(d / "ser.scda")
    got = read_specs(comm, d / "ser.scda", rparts)
    assert got == [(s.type, s.user_string, s.data) for s in specs]


def test_errors_are_raised_on_every_rank(mpi_tmp: Path) -> None:
    comm = world()
    P, r = comm.size, comm.rank
    path = mpi_tmp / "err.scda"
    bad_rank = P - 1
    with scda.fopen_write(path, comm=comm) as f:
        counts = [3] * P
        with pytest.raises(ScdaArgumentError) as info:
            f.fwrite_array(np.zeros(3 * 8 + (r == bad_rank), np.uint8), counts, 8, b"a")
        assert set(info.value.rank_errors) == {bad_rank}
        with pytest.raises(ScdaArgumentError, match="differ between ranks" if P > 1 else "58"):
            f.fwrite_inline(b"x" * 32, b"u" * (58 + (r == 0 and P == 1)) if P == 1 else b"rank %d" % r)
        f.fwrite_array(np.full(3 * 8, r, np.uint8), counts, 8, b"good")
    info2 = comm.bcast(scda.scan(path) if r == 0 else None)
    assert [s.user_string for s in info2.sections] == [b"good"]
    with pytest.raises(ScdaFileNotFoundError):
        scda.fopen_write(mpi_tmp / "missing" / "f.scda", comm=comm)
    with pytest.raises(ScdaFileNotFoundError):
        scda.fopen_read(mpi_tmp / "missing.scda", comm=comm)


@pytest.mark.parametrize("defer", [False, True])
def test_collective_calls_in_rounds(mpi_tmp: Path, monkeypatch: pytest.MonkeyPatch, defer: bool) -> None:
    """Bulk runs larger than one MPI call are moved in rounds; ranks with less data join every round.

    Deferred (one write for the whole file): the rounds cut each rank's file view at MAX_CALL_NBYTES.
    """
    from amrckpt.scda import _backend

    monkeypatch.setattr(_backend, "MAX_CALL_NBYTES", 1000)
    comm = world()
    P, r = comm.size, comm.rank
    N = 5000
    counts = partition_counts(N, P, 4)
    C = np.concatenate([[0], np.cumsum(counts)])
    glob = (np.arange(N * 3) % 251).astype(np.uint8)
    sizes = (np.arange(N) % 17).astype(np.uint64)
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    vdata = (np.arange(int(offs[-1])) % 249).astype(np.uint8)
    proc = [int(offs[C[p + 1]] - offs[C[p]]) for p in range(P)]
    path = mpi_tmp / "rounds.scda"
    with scda.fopen_write(path, comm=comm, defer=defer, checksum=defer) as f:
        f.fwrite_array(glob[C[r] * 3 : C[r + 1] * 3], counts, 3, b"A")
        f.fwrite_varray(vdata[offs[C[r]] : offs[C[r + 1]]], counts, sizes[C[r] : C[r + 1]], proc, b"V")
        f.fwrite_varray(vdata[offs[C[r]] : offs[C[r + 1]]], counts, sizes[C[r] : C[r + 1]], proc, b"V", encode=True)
        if defer:
            f.settle()
    if r == 0:
        with scda.fopen_write(mpi_tmp / "rounds1.scda", comm=SerialComm()) as f:
            f.fwrite_array(glob, [N], 3, b"A")
            f.fwrite_varray(vdata, [N], sizes, [int(offs[-1])], b"V")
            f.fwrite_varray(vdata, [N], sizes, [int(offs[-1])], b"V", encode=True)
    comm.Barrier()
    assert file_hash(path) == file_hash(mpi_tmp / "rounds1.scda")
    rc = partition_counts(N, P, 1)
    RC = np.concatenate([[0], np.cumsum(rc)])
    with scda.fopen_read(path, comm=comm) as f:
        f.fread_section_header()
        assert np.array_equal(f.fread_array_data(rc), glob[RC[r] * 3 : RC[r + 1] * 3])
        for _ in range(2):
            f.fread_section_header(decode=True)
            s = f.fread_varray_sizes(rc)
            assert np.array_equal(f.fread_varray_data(rc, s, f.proc_sizes()), vdata[offs[RC[r]] : offs[RC[r + 1]]])
    # Checksummed reads of large sections go in rounds of _CRC_CHUNK bytes: the same data and CRCs.
    from amrckpt import _crc

    monkeypatch.setattr(_crc, "CHUNK_NBYTES", 700)
    blob = path.read_bytes()
    with scda.fopen_read(path, comm=comm, checksum=True) as f:
        f.fread_section_header()
        assert np.array_equal(f.fread_array_data(rc), glob[RC[r] * 3 : RC[r + 1] * 3])
        f.fread_section_header()
        s = f.fread_varray_sizes(rc)
        assert np.array_equal(f.fread_varray_data(rc, s, f.proc_sizes()), vdata[offs[RC[r]] : offs[RC[r + 1]]])
        crcs = f.section_crcs()
    assert [c for _, _, c in crcs] == [zlib.crc32(blob[a:b]) for a, b, _ in crcs]


@pytest.mark.slow
def test_section_over_2_gib_on_one_rank() -> None:
    """A rank writes and reads more than 2**31 bytes in one section (counts beyond a C int).

    Ranks 0 and 1 of the world take part (memory: ~2 GiB on rank 0), the
    others wait; at one process, rank 0 holds everything.
    """
    world_comm = world()
    comm = world_comm.Split(0 if world_comm.rank < 2 else 1, world_comm.rank)
    try:
        if world_comm.rank < 2:
            _big_section(comm)
    finally:
        comm.Free()
        world_comm.Barrier()


def _big_section(comm: Any) -> None:
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() else Path(__import__("tempfile").gettempdir())
    path = Path(comm.bcast(str(base / f"amrckpt-big-{__import__('os').getpid()}.scda") if comm.rank == 0 else None))
    n0 = (2**31 + 4096) // 8  # elements of 8 bytes on rank 0
    counts = [n0, 3][: comm.size]
    start = 0 if comm.rank == 0 else n0
    local = np.arange(start, start + counts[comm.rank], dtype=np.uint64)
    try:
        with scda.fopen_write(path, comm=comm) as f:
            f.fwrite_array(local, counts, 8, b"big")
        del local
        with scda.fopen_read(path, comm=comm) as f:
            h = f.fread_section_header()
            assert h.elem_count == sum(counts)
            mine = f.fread_array_data(counts).view(np.uint64)
        assert mine[0] == start and mine[-1] == start + mine.size - 1
        assert bool(np.all(np.diff(mine[:: 1 << 20]) == 1 << 20))
    finally:
        comm.Barrier()
        if comm.rank == 0:
            path.unlink(missing_ok=True)


def test_a_rank_skips_its_data(mpi_tmp: Path) -> None:
    """``skip=True`` on one rank (libsc's NULL) while the others read, over MPI-IO, with and without checksums."""
    from amrckpt import _crc

    comm = world()
    P, r = comm.size, comm.rank
    N = 3000
    glob = (np.arange(N * 5) % 253).astype(np.uint8)
    sizes = (np.arange(N) % 7).astype(np.uint64)
    offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    vdata = (np.arange(int(offs[-1])) % 241).astype(np.uint8)
    counts = partition_counts(N, P, 0)
    C = np.concatenate([[0], np.cumsum(counts)])
    proc = [int(offs[C[p + 1]] - offs[C[p]]) for p in range(P)]
    path = mpi_tmp / "skip.scda"
    with scda.fopen_write(path, comm=comm) as f:
        f.fwrite_array(glob[C[r] * 5 : C[r + 1] * 5], counts, 5, b"A")
        f.fwrite_varray(vdata[offs[C[r]] : offs[C[r + 1]]], counts, sizes[C[r] : C[r + 1]], proc, b"V")
    with pytest.MonkeyPatch.context() as mp:  # written with checksums in rounds of 1000 bytes: the same file
        mp.setattr(_crc, "CHUNK_NBYTES", 1000)
        with scda.fopen_write(mpi_tmp / "rounds.scda", comm=comm, checksum=True) as f:
            f.fwrite_array(glob[C[r] * 5 : C[r + 1] * 5], counts, 5, b"A")
            f.fwrite_varray(vdata[offs[C[r]] : offs[C[r + 1]]], counts, sizes[C[r] : C[r + 1]], proc, b"V")
            crcs = f.section_crcs()
    comm.Barrier()
    blob = path.read_bytes()
    assert (mpi_tmp / "rounds.scda").read_bytes() == blob
    assert crcs == [zlib.crc32(blob[rec.offset : rec.end]) for rec in f.records]
    for chunk in (_crc.CHUNK_NBYTES, 1000):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_crc, "CHUNK_NBYTES", chunk)
            for checksum in (False, True):
                with scda.fopen_read(path, comm=comm, checksum=checksum) as f:
                    f.fread_section_header()
                    got = f.fread_array_data(counts, skip=r == P - 1)
                    assert got is None if r == P - 1 else np.array_equal(got, glob[C[r] * 5 : C[r + 1] * 5])
                    f.fread_section_header()
                    s = f.fread_varray_sizes(counts)
                    got = f.fread_varray_data(counts, s, f.proc_sizes(), skip=r == P - 1)
                    assert got is None if r == P - 1 else np.array_equal(got, vdata[offs[C[r]] : offs[C[r + 1]]])


@pytest.mark.parametrize("shape", ["small", "empty", "uniform"])
def test_chunked_bytes_over_mpi_equal_the_serial_ones(mpi_tmp: Path, shape: str) -> None:
    """Issue 17: layout chunks relays the heads from neighbour to neighbour; the bytes are one rank's, for any P."""
    import amrckpt as ac
    from amrckpt.comm import MPIComm
    from amrckpt.container._chunks import write_chunks
    from amrckpt.scda import Share

    w = world()
    comm = MPIComm(w)
    P, r, K, E, N = comm.size, comm.rank, 7, 8, 40
    if shape == "small":  # every rank but the last holds fewer than K leaves: a chunk spans several ranks
        counts = [2] * (P - 1) + [N - 2 * (P - 1)]
    elif shape == "empty":  # every other rank is empty
        counts = [0 if q % 2 else 1 for q in range(P)]
        counts[-1] += N - sum(counts)
    else:
        counts = [N * (q + 1) // P - N * q // P for q in range(P)]
    data = np.arange(N, dtype="<f8") ** 1.5
    lo, hi = sum(counts[:r]), sum(counts[: r + 1])
    last = max((q for q, c in enumerate(counts) if c), default=0)
    digests = set()
    for ec in (Share.of(counts, r), Share(hi - lo, lo, N, max(counts), last)):
        path = mpi_tmp / "chunks.scda"
        with ac.scda.fopen_write(path, b"x", comm=comm) as f:
            write_chunks(f, data[lo:hi], ec, E, K, b"rho")
        if r == 0:
            digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
        w.Barrier()
    if r == 0:
        ref = mpi_tmp / "ref.scda"
        with ac.scda.fopen_write(ref, b"x", comm=SerialComm()) as f:
            write_chunks(f, data, Share.of([N], 0), E, K, b"rho")
        digests.add(hashlib.sha256(ref.read_bytes()).hexdigest())
        assert len(digests) == 1
