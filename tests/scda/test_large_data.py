"""Large data: sections beyond 2**31 and 2**32 bytes, arrays beyond 2**31 elements, 26-digit counts.

What exists elsewhere: more than 2**31 bytes in one section and one call,
serial (``test_scda_api.py::test_section_over_2_gib_serial``) and on one MPI
rank (``tests/mpi/test_scda_mpi.py::test_section_over_2_gib_on_one_rank``);
N and E of 10**26 - 1 written and read (``test_scda_api.py::test_counts_of_26_digits``).

Here:

- a file of more than 2**32 bytes written for real by two ranks with more
  than 2**31 bytes each (one A section of more than 2**32 elements), with
  sections after it (slow: about 4.3 GB on disk);
- sparse files (holes cost no disk or memory): an A section of 2**41 bytes,
  a V section with an element of more than 2**32 bytes, and V sections with
  more than 2**31 elements, read at offsets beyond 2**32 and 2**41;
- a V section's size table of more than 2**31 entries cannot be held (64 GiB
  of entries): its header, layout and error positions are tested at that N,
  and the entry parser on chunks whose global index and offset are beyond
  2**31 and 2**36;
- counts of up to 26 digits parsed exactly as Python ints, and rejected
  with an error of ours when the file cannot hold them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amrckpt import scda
from amrckpt.comm import run_threads
from amrckpt.errors import ScdaArgumentError, ScdaCountError, ScdaDecodeError, ScdaFormatError
from amrckpt.scda._layout import partition_offsets, read_raw_section
from amrckpt.scda._reader import _uniform

U = "unix"


def _sparse(path: Path, size: int, pieces: list[tuple[int, bytes]]) -> None:
    """A sparse file of ``size`` bytes holding ``pieces`` (offset, bytes); the rest are holes (zeros)."""
    with open(path, "wb") as fh:
        fh.truncate(size)
        for off, b in pieces:
            fh.seek(off)
            fh.write(b)


def _header(vendor: bytes = b"amrckpt", user: bytes = b"large") -> bytes:
    from amrckpt.scda._format import file_header

    return file_header(vendor, user, U)


def _a_section(user: bytes, N: int, E: int) -> bytes:
    from amrckpt.scda._format import section_header

    return section_header(b"A", user, U) + scda.count_entry(b"N", N, U) + scda.count_entry(b"E", E, U)


def _v_head(user: bytes, N: int) -> bytes:
    from amrckpt.scda._format import section_header

    return section_header(b"V", user, U) + scda.count_entry(b"N", N, U)


def _block(user: bytes, data: bytes) -> bytes:
    from amrckpt.scda._format import section_header

    return (
        section_header(b"B", user, U)
        + scda.count_entry(b"E", len(data), U)
        + data
        + scda.data_padding(len(data), data[-1] if data else None, U)
    )


def _sparse_supported(tmp: Path) -> bool:
    p = tmp / "probe"
    with open(p, "wb") as fh:
        fh.truncate(1 << 41)
    used = os.stat(p).st_blocks * 512
    p.unlink()
    return used < 1 << 20


# -- a file of more than 2**32 bytes, written for real -------------------------------


@pytest.mark.slow
def test_file_over_4_gib_two_ranks_over_2_gib_each(tmp_path: Path) -> None:
    """Two ranks write 2**31 + 4096 bytes each into one A section (N > 2**32 elements of 1 byte);
    a compressed V section and a block follow beyond byte 2**32; read back on two ranks."""
    path = tmp_path / "big.scda"
    n = 2**31 + 4096
    N = 2 * n
    sizes = np.array([3, 0, 70, 5], dtype=np.uint64)
    vdata = np.arange(78, dtype=np.uint8)

    def write(comm: Any) -> None:
        local = np.zeros(n, dtype=np.uint8)  # untouched pages: no memory until written
        local[0], local[-1] = 10 + comm.rank, 20 + comm.rank
        local[n // 2] = 30 + comm.rank
        with scda.fopen_write(path, b"over 4 GiB", comm=comm) as f:
            f.fwrite_array(local, [n, n], 1, b"big")
            lo = [0, 2][comm.rank]
            f.fwrite_varray(
                vdata[[0, 3][comm.rank] : [3, 78][comm.rank]], [2, 2], sizes[lo : lo + 2], [3, 75], b"after", encode=True
            )
            f.fwrite_block(b"the end\n" if comm.rank == 0 else None, b"last")

    run_threads(2, write, timeout=600)
    size = path.stat().st_size
    assert size > 2**32 + 2**12
    info = scda.scan(path)
    big, after, last = info.sections
    assert (big.elem_count, big.elem_size, big.nbytes) == (N, 1, N)
    assert after.offset > 2**32 and after.compressed and after.nbytes == 78 and last.end == size

    def read(comm: Any) -> tuple[bytes, bytes, bytes]:
        with scda.fopen_read(path, comm=comm) as f:
            h = f.fread_section_header()
            assert h is not None and h.elem_count == N
            # Rank 0 skips 2**32 + 8128 elements; rank 1 reads the last 64, beyond byte 2**32.
            tail = f.fread_array_data([N - 64, 64], skip=comm.rank == 0)
            h = f.fread_section_header(decode=True)
            assert h is not None and h.offset > 2**32
            s = f.fread_varray_sizes([2, 2])
            v = f.fread_varray_data([2, 2], s, f.proc_sizes())
            f.fread_section_header()
            b = f.fread_block_data(root=None)
        return (b"" if tail is None else tail.tobytes()), v.tobytes(), b.tobytes()  # type: ignore[union-attr]

    (t0, v0, b0), (t1, v1, b1) = run_threads(2, read, timeout=600)
    assert t0 == b"" and t1 == bytes(63) + bytes([21])
    assert v0 + v1 == vdata.tobytes() and b0 == b1 == b"the end\n"
    # The middle byte of rank 1's part, at file offset > 2**32: read with fseek-free random access.
    with open(path, "rb") as fh:
        fh.seek(big.raw[0].data_offset + n + n // 2)
        assert fh.read(1) == bytes([31])


# -- sparse files: offsets beyond 2**32 and 2**41 -------------------------------------


def test_sparse_array_of_2_tib_read_beyond_byte_2_41(tmp_path: Path) -> None:
    """An A section of 2**38 elements of 8 bytes (2 TiB, a hole), then a V and a B section."""
    if not _sparse_supported(tmp_path):
        pytest.skip("the temporary file system has no sparse files")
    N, E = 2**38, 8
    head = _header() + _a_section(b"huge", N, E)
    data0 = len(head)
    end_a = data0 + N * E + scda.data_padding_nbytes(N * E)
    v = _v_head(b"after", 3) + b"".join(scda.count_entry(b"E", e, U) for e in (2, 0, 3)) + b"abcde"
    v += scda.data_padding(5, ord("e"), U)
    tail = v + _block(b"last", b"x" * 40)
    marker = np.arange(3, dtype="<u8").tobytes()
    path = tmp_path / "sparse.scda"
    _sparse(
        path,
        end_a + len(tail),
        [(0, head), (data0 + N * E - 24, marker), (end_a - 32, scda.data_padding(N * E, 0, U)[-32:]), (end_a, tail)],
    )
    assert path.stat().st_size > 2**41 and path.stat().st_blocks * 512 < 1 << 24
    info = scda.scan(path)
    assert [s.offset for s in info.sections] == [128, end_a, end_a + len(v)]
    assert info.sections[0].nbytes == N * E

    def read(comm: Any) -> tuple[Any, ...]:
        with scda.fopen_read(path, comm=comm) as f:
            h = f.fread_section_header()
            assert h is not None and (h.elem_count, h.elem_size) == (N, E)
            mine = f.fread_array_data([N - 3, 3], E, skip=comm.rank == 0)
            h = f.fread_section_header()
            assert h is not None and h.offset == end_a
            s = f.fread_varray_sizes([1, 2])
            vd = f.fread_varray_data([1, 2], s, f.proc_sizes())
            f.fread_section_header()
            b = f.fread_block_data()
        return mine, vd, b

    r0, r1 = run_threads(2, read)
    assert r0[0] is None and r1[0].view("<u8").tolist() == [0, 1, 2]
    assert r0[1].tobytes() == b"ab" and r1[1].tobytes() == b"cde" and r0[2].tobytes() == b"x" * 40


def test_sparse_varray_element_over_4_gib(tmp_path: Path) -> None:
    """E_i of 10 digits (an element of 2**32 + 5 bytes, one of 2**31 + 3): the sizes, their sums and the
    data offsets are exact; the third rank reads its 16 bytes beyond byte 6 * 2**30."""
    if not _sparse_supported(tmp_path):
        pytest.skip("the temporary file system has no sparse files")
    sizes = [2**32 + 5, 2**31 + 3, 16]
    head = _header() + _v_head(b"big elements", 3) + b"".join(scda.count_entry(b"E", e, U) for e in sizes)
    data0 = len(head)
    S = sum(sizes)
    path = tmp_path / "v.scda"
    last = b"0123456789abcdef"
    _sparse(path, data0 + S + scda.data_padding_nbytes(S), [(0, head), (data0 + S - 16, last + scda.data_padding(S, last[-1], U))])
    (sec,) = scda.scan(path).sections
    assert sec.nbytes == S and sec.end == path.stat().st_size

    def read(comm: Any) -> tuple[Any, list[int], Any]:
        with scda.fopen_read(path, comm=comm) as f:
            f.fread_section_header()
            s = f.fread_varray_sizes([1, 1, 1])
            ps = f.proc_sizes()
            d = f.fread_varray_data([1, 1, 1], s, ps, skip=comm.rank < 2)
        return s, ps, d

    out = run_threads(3, read)
    assert [int(o[0][0]) for o in out] == sizes and out[0][1] == sizes
    assert out[0][2] is None and out[2][2].tobytes() == last


@pytest.mark.parametrize("N", [2**31 + 5, 2**32 + 1, 3 * 2**31])
def test_varray_of_more_than_2_31_elements_layout(tmp_path: Path, N: int) -> None:
    """A V section with N > 2**31: its size table (32 N bytes, > 64 GiB) is laid out exactly; the sizes of a
    sparse file whose table is a hole are refused at entry 0 (parsed in bounded chunks, not all at once),
    and a file too short for the table is refused before anything is allocated."""
    if not _sparse_supported(tmp_path):
        pytest.skip("the temporary file system has no sparse files")
    head = _header() + _v_head(b"many", N)
    entries = len(head)
    data = entries + 32 * N
    path = tmp_path / "many.scda"
    _sparse(path, data + 64, [(0, head)])

    def read(offset: int, nbytes: int) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(nbytes)

    raw = read_raw_section(read, 128, path.stat().st_size)
    assert (raw.elem_count, raw.entries_offset, raw.data_offset, raw.end) == (N, entries, data, None)
    with scda.fopen_read(path) as f:
        h = f.fread_section_header()
        assert h is not None and h.elem_count == N
    with pytest.raises(ScdaFormatError, match=r"entry 0 at byte 224"):
        scda.scan(path)
    # A file that ends inside the table: refused from the header alone.
    _sparse(path, data - 32, [(0, head)])
    with scda.fopen_read(path) as f, pytest.raises(ScdaCountError, match=f"{N} element size entries end at byte {data}"):
        f.fread_section_header()


def test_entry_parser_positions_beyond_2_31_entries() -> None:
    """The reader parses a rank's entries with their global index and file offset (Python ints): an error
    names entry 2**31 + k and its byte beyond 2**36 exactly; values of 10 to 20 digits parse exactly."""
    vals = np.array([0, 7, 2**31, 2**32 + 5, 10**12, 2**63, 2**64 - 1], dtype=np.uint64)
    rows = scda.format_entries(b"E", vals, U)
    assert scda.parse_entries(b"E", rows, first_index=2**31 + 3, offset=2**37).tolist() == vals.tolist()
    bad = rows.copy()
    bad[5, 2] = ord("x")
    first, off = 2**31 + 3, 224 + 32 * (2**31 + 3)
    with pytest.raises(ScdaFormatError, match=f"entry {first + 5} at byte {off + 5 * 32}"):
        scda.parse_entries(b"E", bad, first_index=first, offset=off)
    big = np.frombuffer(scda.count_entry(b"E", 2**64, U), np.uint8)
    with pytest.raises(ScdaFormatError, match="exceeds any file size"):
        scda.parse_entries(b"E", big)


def test_partitions_of_more_than_2_31_elements_are_exact() -> None:
    """Offsets C_p of partitions with counts beyond 2**31 and 2**63 (Python ints, no int32/int64 wrap)."""
    counts, C = partition_offsets([2**31 + 5, 2**33, 0, 10**25], 4)
    assert counts == [2**31 + 5, 2**33, 0, 10**25] and all(type(c) is int for c in counts)
    assert C == [0, 2**31 + 5, 2**31 + 5 + 2**33, 2**31 + 5 + 2**33, 2**31 + 5 + 2**33 + 10**25]
    N = 10**26 - 1
    u = _uniform(N, 7)
    assert sum(u) == N and max(u) - min(u) <= 1
    assert _uniform(3 * 2**31 + 1, 3) == [2**31, 2**31, 2**31 + 1]


# -- 26-digit counts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "error", "match"),
    [
        ("B E=10**26-1", ScdaCountError, "after the end of the file"),
        ("A N=10**26-1", ScdaCountError, "after the end of the file"),
        ("A N=10**13 E=10**13", ScdaCountError, "after the end of the file"),
        ("V N=10**26-1", ScdaCountError, "leaves no room"),
        ("A N of 27 digits", ScdaFormatError, "padding"),  # 27 digits leave no room for legal padding
        ("A N with leading zeros", ScdaFormatError, "leading zeros"),
        ("U=10**26-1", ScdaDecodeError, "cannot come from a file"),
        ("U of 27 digits", ScdaDecodeError, "not a valid U entry"),
    ],
)
def test_26_digit_counts_rejected_when_the_file_cannot_hold_them(tmp_path: Path, damage: str, error: type, match: str) -> None:
    """Counts of up to 26 digits are parsed exactly; the reader refuses them with our error, before
    allocating, when the file is too small to hold what they announce."""
    from amrckpt.scda._format import section_header

    def entry(letter: bytes, digits: bytes) -> bytes:
        return (
            letter + b" " + digits + b" " + b"-" * (30 - len(digits) - 3) + b"-\n"
            if len(digits) <= 26
            else (letter + b" " + digits + b" -\n")[:32]
        )

    big = b"9" * 26
    body = {
        "B E=10**26-1": section_header(b"B", b"b", U) + entry(b"E", big),
        "A N=10**26-1": section_header(b"A", b"a", U) + entry(b"N", big) + entry(b"E", b"1"),
        "A N=10**13 E=10**13": section_header(b"A", b"a", U) + entry(b"N", b"1" + b"0" * 13) + entry(b"E", b"1" + b"0" * 13),
        "V N=10**26-1": section_header(b"V", b"v", U) + entry(b"N", big),
        "A N of 27 digits": section_header(b"A", b"a", U) + (b"N " + b"9" * 27 + b" -\n") + entry(b"E", b"1"),
        "A N with leading zeros": section_header(b"A", b"a", U) + entry(b"N", b"007") + entry(b"E", b"1"),
        "U=10**26-1": section_header(b"I", scda.MAGIC_B, U) + entry(b"U", big) + _block(b"b", b"A" * 30),
        "U of 27 digits": section_header(b"I", scda.MAGIC_B, U) + (b"U " + b"9" * 27 + b" -\n") + _block(b"b", b"A" * 30),
    }[damage]
    path = tmp_path / "c.scda"
    path.write_bytes(_header() + body + b"=" * 64)
    with scda.fopen_read(path) as f, pytest.raises(error, match=match):
        f.fread_section_header(decode=True)
    with pytest.raises(error, match=match):
        scda.scan(path)


def test_26_digit_counts_written_and_read_exactly(tmp_path: Path) -> None:
    """N of every digit count 1..26 round-trips (A sections of empty elements); 10**26 is refused on write."""
    path = tmp_path / "n.scda"
    Ns = [10**k - 1 for k in range(1, 27)] + [10**25, 2**64, 2**83]
    with scda.fopen_write(path) as f:
        for N in Ns:
            f.fwrite_array(None, [N], 0, b"n")
        with pytest.raises(ScdaArgumentError, match="26 digits"):
            f.fwrite_array(None, [10**26], 0, b"n")
        with pytest.raises(ScdaArgumentError):
            f.fwrite_array(None, [1], 10**26, b"n")
    assert [s.elem_count for s in scda.scan(path).sections] == Ns
    with scda.fopen_read(path) as f:
        for N in Ns:
            h = f.fread_section_header()
            assert h is not None and h.elem_count == N and isinstance(h.elem_count, int)
