"""Section CRC32s combined across ranks equal zlib's CRC of the file's bytes, on writing and on reading."""

from __future__ import annotations

import itertools
import zlib
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from amrckpt import _crc, scda
from amrckpt.comm import run_threads
from amrckpt.testing.strategies import partitions, section_specs, write_into


@given(st.binary(max_size=2000), st.binary(max_size=2000))
def test_crc32_combine_matches_zlib(a: bytes, b: bytes) -> None:
    assert _crc.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@given(st.binary(max_size=5000), st.integers(0, 2**32 - 1), st.integers(0, 64))
def test_crc32_of_every_library_matches_zlib(data: bytes, value: int, skip: int) -> None:
    """_crc.crc32 (ISA-L's where isal is installed, as with the test extra) and zlib-ng's fallback are zlib's CRC-32,
    continued from any value, on bytes, numpy arrays and memoryview slices alike."""
    import numpy as np
    from zlib_ng import zlib_ng

    a = np.frombuffer(data, np.uint8)
    mv = memoryview(data)[skip:]
    want = zlib.crc32(data[skip:], value)
    for crc in (_crc.crc32, lambda d, v=0: zlib_ng.crc32(d, v) & 0xFFFFFFFF):
        assert crc(mv, value) == want
        assert crc(a, value) == zlib.crc32(data, value)
        assert crc(data) == zlib.crc32(data)


def test_crc32_library_is_isal_where_installed() -> None:
    """The test extra installs the fast extra: CI checks ISA-L's CRC32 (zlib-ng's is checked above either way)."""
    try:
        import isal.isal_zlib  # noqa: F401
    except ImportError:
        assert _crc.CRC32_LIBRARY == "zlib-ng"
    else:
        assert _crc.CRC32_LIBRARY == "isal"


@given(st.data())
def test_crc32_of_pieces_reuses_known_crcs_and_equals_zlib(data: st.DataObject) -> None:
    """A pieces file's CRC32 from the save's known CRC32s (combined) equals zlib's CRC of the bytes."""
    blob = data.draw(st.binary(min_size=1, max_size=3000))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(blob)), max_size=6)) | {len(blob)})
    edges = [0, *cuts]
    bufs = [(a + 64, blob[a:b]) for a, b in itertools.pairwise(edges) if b > a]
    marks = sorted(data.draw(st.sets(st.integers(0, len(blob)), max_size=8)))
    ranges = [(a, b) for a, b in zip(marks[::2], marks[1::2], strict=False) if b > a]  # disjoint ranges
    known = [(a + 64, b - a, zlib.crc32(blob[a:b])) for a, b in ranges]
    start = data.draw(st.integers(0, 2**32 - 1))
    assert _crc.crc32_of_pieces(bufs, known, start) == zlib.crc32(blob, start)


def _gf2_shift(crc: int, nbytes: int) -> int:
    """The hand-written GF(2) arithmetic that _crc used before zlib-ng's crc32_combine (zlib's multmodp, x2nmodp)."""
    poly = 0xEDB88320

    def multmodp(a: int, b: int) -> int:
        m, p = 1 << 31, 0
        while True:
            if a & m:
                p ^= b
                if (a & (m - 1)) == 0:
                    return p
            m >>= 1
            b = (b >> 1) ^ poly if b & 1 else b >> 1

    x2n, p = [], 1 << 30
    for _ in range(32):
        x2n.append(p)
        p = multmodp(p, p)
    xp, k, n = 1 << 31, 3, nbytes
    while n:
        if n & 1:
            xp = multmodp(x2n[k & 31], xp)
        n >>= 1
        k += 1
    return multmodp(xp, crc) if nbytes and crc else crc


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**50))
def test_crc32_combine_matches_the_gf2_arithmetic(crc1: int, crc2: int, len2: int) -> None:
    assert _crc.shift(crc1, len2) == _gf2_shift(crc1, len2)
    assert _crc.crc32_combine(crc1, crc2, len2) == _gf2_shift(crc1, len2) ^ crc2


@given(st.binary(min_size=1, max_size=5000), st.lists(st.integers(0, 5000), max_size=8), st.integers(0, 10**6))
def test_pieces_in_any_split(data: bytes, cuts: list[int], offset: int) -> None:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    s = _crc.SectionCrc()
    for lo, hi in itertools.pairwise(bounds):
        s.add(offset + lo, data[lo:hi])
    assert s.term(offset + len(data)) == zlib.crc32(data)


def _write_with_crcs(comm: Any, path: Path, specs: Any, parts: Any, style: str) -> list[tuple[int, int, int]]:
    with scda.fopen_write(path, b"property", comm=comm, style=style, checksum=True) as f:
        write_into(f, comm, specs, parts)
        crcs = f.section_crcs()
        return [(r.offset, r.end, c) for r, c in zip(f.records, crcs, strict=True)]


def _read_crcs(comm: Any, path: Path, parts: Any, decode: bool) -> list[tuple[int, int, int | None]]:
    with scda.fopen_read(path, comm=comm, checksum=True) as f:
        k = 0
        while (h := f.fread_section_header(decode=decode)) is not None:
            if h.type == "I":
                f.fread_inline_data(root=comm.size - 1)
            elif h.type == "B":
                f.fread_block_data(root=None)
            else:
                N, P = h.elem_count, comm.size
                counts = parts[k] if decode and k < len(parts) else [N * (p + 1) // P - N * p // P for p in range(P)]
                if h.type == "A":
                    f.fread_array_data(counts)
                else:
                    s = f.fread_varray_sizes(counts)
                    f.fread_varray_data(counts, s, f.proc_sizes())
            k += 1
        return f.section_crcs()


@settings(max_examples=60)
@given(st.lists(section_specs(), min_size=1, max_size=5), st.integers(1, 4), st.integers(1, 4), st.data())
def test_section_crcs_on_write_and_read(tmp_path_factory: Any, specs: Any, P: int, Q: int, data: Any) -> None:
    path = tmp_path_factory.mktemp("crc") / "f.scda"
    wparts = [data.draw(partitions(len(s.sizes), P)) for s in specs]
    written = run_threads(P, _write_with_crcs, path, specs, wparts, "unix")[0]
    blob = path.read_bytes()
    assert written[-1][1] == len(blob)
    assert [c for _, _, c in written] == [zlib.crc32(blob[a:b]) for a, b, _ in written]
    rparts = [data.draw(partitions(len(s.sizes), Q)) for s in specs]
    for decode in (True, False):
        read = run_threads(Q, _read_crcs, path, rparts, decode)[0]
        assert read[-1][1] == len(blob)
        assert [c for _, _, c in read] == [zlib.crc32(blob[a:b]) for a, b, _ in read]
    # The logical sections read with decode are the written records.
    assert [(a, b) for a, b, _ in run_threads(1, _read_crcs, path, [], True)[0]] == [(a, b) for a, b, _ in written]


@settings(max_examples=30)
@given(st.lists(section_specs(), min_size=1, max_size=4), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.data())
def test_section_crcs_in_rounds(tmp_path_factory: Any, specs: Any, P: int, Q: int, chunk: int, data: Any) -> None:
    """Large sections are written and read with checksums in rounds (here of 1 to 3 bytes): the same bytes and CRCs."""
    d = tmp_path_factory.mktemp("crc")
    wparts = [data.draw(partitions(len(s.sizes), P)) for s in specs]
    run_threads(1, _write_with_crcs, d / "one.scda", specs, [[len(s.sizes)] for s in specs], "unix")
    blob = (d / "one.scda").read_bytes()
    rparts = [data.draw(partitions(len(s.sizes), Q)) for s in specs]
    with mock.patch.object(_crc, "CHUNK_NBYTES", chunk):
        written = run_threads(P, _write_with_crcs, d / "f.scda", specs, wparts, "unix")[0]
        assert (d / "f.scda").read_bytes() == blob
        assert [c for _, _, c in written] == [zlib.crc32(blob[a:b]) for a, b, _ in written]
        for decode in (True, False):
            read = run_threads(Q, _read_crcs, d / "f.scda", rparts, decode)[0]
            assert [c for _, _, c in read] == [zlib.crc32(blob[a:b]) for a, b, _ in read]


def test_checksummed_data_brings_its_crc_and_the_writer_takes_it(tmp_path: Path) -> None:
    """Checksummed.start gives the CRC32 of exactly the buffer's bytes (large: in the helper thread; small: at once); a
    deferred writer takes it for an array's data instead of CRCing the bytes (a planted wrong value shows up in
    section_crcs), and CRCs every other piece itself."""
    import numpy as np

    data = np.arange(100_000, dtype="<f8")  # above INLINE_NBYTES: CRC'd in the helper thread
    known = scda.Checksummed.start(data)
    assert known.data is data and isinstance(known.crc, _crc.LaterCrc) and known.crc.result() == zlib.crc32(data.tobytes())
    small = np.arange(10, dtype="<i4")
    known_small = scda.Checksummed.start(memoryview(small))
    assert known_small.crc == zlib.crc32(small.tobytes())  # the CRC32 of a view of the same bytes, at once

    def crcs_of(big: Any, little: Any, checked: bool) -> list[int]:
        path = tmp_path / "k.scda"
        with scda.fopen_write(path, b"k", checksum=True, defer=True) as f:
            f.fwrite_array(big, [data.size], 8, b"data")
            f.fwrite_array(little, [small.size], 4, b"small")
            out = f.settle()
        whole = path.read_bytes()
        assert out == [zlib.crc32(whole[r.offset : r.end]) for r in f.records] or not checked
        return out

    honest = crcs_of(data, small, True)
    assert crcs_of(known, known_small, True) == honest
    lied = crcs_of(scda.Checksummed(data, zlib.crc32(b"not the data")), small, False)
    assert lied[1] != honest[1] and lied[0] == honest[0] and lied[2] == honest[2]


def test_a_compressed_section_does_not_take_the_crc_of_its_uncompressed_data(tmp_path: Path) -> None:
    """With encode, the bytes written are not a Checksummed's data: the deferred writer CRCs the encoded bytes."""
    import numpy as np

    data = np.arange(50_000, dtype="<f8")
    planted = scda.Checksummed(data, zlib.crc32(b"not the data"))
    path = tmp_path / "e.scda"
    with scda.fopen_write(path, b"e", checksum=True, defer=True) as f:
        f.fwrite_array(planted, [data.size], 8, b"array", encode=True)
        f.fwrite_varray(planted, [1], [data.nbytes], [data.nbytes], b"varray", encode=True)
        out = f.settle()
    whole = path.read_bytes()
    assert out == [zlib.crc32(whole[r.offset : r.end]) for r in f.records]
