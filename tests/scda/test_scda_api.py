"""The scda file API: workflow, arguments, errors on every rank, buffers."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amrckpt import scda
from amrckpt.comm import run_threads
from amrckpt.errors import (
    AmrckptError,
    ScdaArgumentError,
    ScdaCountError,
    ScdaFileNotFoundError,
    ScdaFormatError,
    ScdaUsageError,
)


def small_file(path: Path, style: str = "unix") -> None:
    with scda.fopen_write(path, b"api", style=style) as f:  # type: ignore[arg-type]
        f.fwrite_inline(b"0123456789abcdef" * 2, b"inline")
        f.fwrite_block(b"block data\n", b"block")
        f.fwrite_array(np.arange(10, dtype="<f8"), [10], 8, b"array")
        f.fwrite_varray(b"abcdefghij", [4], [1, 2, 3, 4], [10], b"varray")
        f.fwrite_block(b"z" * 1000, b"cblock", encode=True)


def test_roundtrip_and_typed_out_buffer(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    small_file(p)
    with scda.fopen_read(p) as f:
        assert (f.vendor, f.user_string) == (b"amrckpt", b"api")
        h = f.fread_section_header()
        assert h == scda.SectionHeader("I", b"inline", 0, 0, False, 128)
        assert f.fread_inline_data() == b"0123456789abcdef" * 2
        assert f.fread_section_header().elem_size == 11  # type: ignore[union-attr]
        assert f.fread_block_data().tobytes() == b"block data\n"  # type: ignore[union-attr]
        h = f.fread_section_header()
        assert (h.type, h.elem_count, h.elem_size) == ("A", 10, 8)  # type: ignore[union-attr]
        out = np.zeros(10, dtype="<f8")
        view = f.fread_array_data([10], 8, out=out)
        assert np.array_equal(out, np.arange(10)) and np.shares_memory(view, out)
        f.fread_section_header()
        sizes = f.fread_varray_sizes([4])
        assert sizes.tolist() == [1, 2, 3, 4] and f.proc_sizes() == [10]  # type: ignore[union-attr]
        assert f.fread_varray_data([4], sizes, [10]).tobytes() == b"abcdefghij"  # type: ignore[union-attr]
        h = f.fread_section_header(decode=True)
        assert h.decoded and h.elem_size == 1000  # type: ignore[union-attr]
        assert f.fread_block_data().tobytes() == b"z" * 1000  # type: ignore[union-attr]
        assert f.fread_section_header() is None
        assert f.fread_section_header() is None


def test_unread_sections_are_skipped(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    small_file(p)
    with scda.fopen_read(p) as f:
        types = []
        while (h := f.fread_section_header(decode=False)) is not None:
            types.append(h.type)
    assert types == ["I", "B", "A", "V", "I", "B"]
    with scda.fopen_read(p) as f:
        for _ in range(4):
            f.fread_section_header()
        f.fread_varray_sizes([4], skip=True)  # sizes read, data skipped
        assert f.fread_section_header(decode=True).decoded  # type: ignore[union-attr]


def test_usage_errors(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    small_file(p)
    with scda.fopen_read(p) as f:
        with pytest.raises(ScdaUsageError, match="fread_section_header first"):
            f.fread_array_data([1])
        f.fread_section_header()
        with pytest.raises(ScdaUsageError, match="type 'I'"):
            f.fread_block_data()
        assert f.fread_inline_data(skip=True) is None
        for _ in range(3):
            f.fread_section_header()
        with pytest.raises(ScdaUsageError, match="fread_varray_sizes first"):
            f.fread_varray_data([4], [1, 2, 3, 4], [10])
        with pytest.raises(ScdaArgumentError, match="sum to 3"):
            f.fread_varray_sizes([3])
        s = f.fread_varray_sizes([4])
        with pytest.raises(ScdaArgumentError, match="proc_sizes"):
            f.fread_varray_data([4], s, [11])
        with pytest.raises(ScdaArgumentError, match="4 bytes; 10"):
            f.fread_varray_data([4], s, [10], out=bytearray(4))
    with pytest.raises(ScdaUsageError, match="closed"):
        f.fread_section_header()


def test_out_buffer_checks(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    small_file(p)
    with scda.fopen_read(p) as f:
        for _ in range(3):
            f.fread_section_header()
        with pytest.raises(ScdaArgumentError, match="read-only"):
            f.fread_array_data([10], out=bytes(80))
        with pytest.raises(ScdaArgumentError, match="elem_size 4"):
            f.fread_array_data([10], 4)
        with pytest.raises(ScdaArgumentError, match="C-contiguous"):
            f.fread_array_data([10], out=np.zeros(20)[::2])
        assert f.fread_array_data([10], skip=True) is None


def test_writer_argument_errors_leave_file_usable(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    with scda.fopen_write(p) as f:
        with pytest.raises(ScdaArgumentError, match="58"):
            f.fwrite_inline(b"x" * 32, b"u" * 59)
        with pytest.raises(ScdaArgumentError, match="32"):
            f.fwrite_inline(b"x" * 31, b"")
        with pytest.raises(ScdaArgumentError, match="1 ranks"):
            f.fwrite_array(b"", [0, 0], 8, b"")
        with pytest.raises(ScdaArgumentError, match="16 bytes; this rank must write 24"):
            f.fwrite_array(b"x" * 16, [3], 8, b"")
        with pytest.raises(ScdaArgumentError, match="sum to 6"):
            f.fwrite_varray(b"x" * 7, [3], [1, 2, 3], [7], b"")
        with pytest.raises(ScdaArgumentError, match="level"):
            f.fwrite_block(b"", b"", encode=True, level=10)
        with pytest.raises(ScdaArgumentError, match="non-negative"):
            f.fwrite_array(None, [-1], 8, b"")
        f.fwrite_inline(b"y" * 32, b"ok")
    info = scda.scan(p)
    assert [(s.type, s.user_string) for s in info.sections] == [("I", b"ok")]


def test_reserved_magic_user_strings(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    with scda.fopen_write(p) as f:
        with pytest.raises(ScdaArgumentError, match="reserved"):
            f.fwrite_inline(b"x" * 32, scda.MAGIC_A)
        with pytest.raises(ScdaArgumentError, match="reserved"):
            f.fwrite_array(None, [0], 32, scda.MAGIC_V)
        f.fwrite_block(b"", scda.MAGIC_B)  # not a pair start on a block
        # A tool may write a raw pair itself: I(magic B, U entry) + B(encoded).
        f.fwrite_inline(scda.count_entry(b"U", 0, "unix"), scda.MAGIC_B, allow_magic=True)
        f.fwrite_block(b"AAAAAAAAAAB6eNoDAAAAAAE==\n", b"empty, compressed")
    with scda.fopen_read(p) as f:
        assert f.fread_section_header(decode=True).type == "B"  # type: ignore[union-attr]
        h = f.fread_section_header(decode=True)
        assert (h.type, h.decoded, h.user_string) == ("B", True, b"empty, compressed")  # type: ignore[union-attr]
        assert f.fread_block_data().size == 0  # type: ignore[union-attr]


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(ScdaFileNotFoundError) as info:
        scda.fopen_read(tmp_path / "missing.scda")
    assert isinstance(info.value, FileNotFoundError) and info.value.errno == errno.ENOENT
    with pytest.raises(ScdaFileNotFoundError):
        scda.fopen_write(tmp_path / "no" / "dir.scda")
    with pytest.raises(ScdaArgumentError, match="vendor"):
        scda.fopen_write(tmp_path / "v.scda", vendor=b"v" * 21)
    (tmp_path / "short").write_bytes(b"scdata0 abc")
    with pytest.raises(ScdaCountError, match="fewer than the 128-byte"):
        scda.fopen_read(tmp_path / "short")
    (tmp_path / "zip").write_bytes(b"PK\x03\x04" + b"\0" * 200)
    with pytest.raises(ScdaFormatError, match="not an scda file"):
        scda.fopen_read(tmp_path / "zip")


PLANTED_WRITE = """
    import os, sys
    import numpy as np
    import amrckpt as ac
    from amrckpt import scda
    from amrckpt.errors import ScdaIOError
    path, kind = sys.argv[1], sys.argv[2]
    os.mkfifo(path) if kind == "fifo" else os.mkdir(path)


    class S(ac.CheckpointSchema, name="planted", version=1):
        u: ac.CellData = ac.Cells("<f8")
        mesh: ac.Forest = ac.Mesh(dim=2)


    lv = ac.sfc.uniform_leaves(1, num_trees=1, dim=2)
    state = S(mesh=ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=1), u=np.zeros(lv.num_leaves))
    for what, fn in [
        ("fopen_write", lambda: scda.fopen_write(path, b"x").fclose()),
        ("save", lambda: ac.save(state, path)),
    ]:
        try:
            fn()
        except ScdaIOError as exc:
            print(what, exc.errno, str(exc))
        else:
            print(what, "written")
"""


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_write_over_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    """``open(O_WRONLY | O_CREAT)`` of a FIFO waits for a reader: the writer refuses it at once, in a bounded process."""
    from _support import run_bounded

    path = tmp_path / "planted.scda"
    out = run_bounded(PLANTED_WRITE, str(path), kind, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["fopen_write", "save"], lines
    code, words = (errno.EINVAL, "a FIFO") if kind == "fifo" else (errno.EISDIR, "a directory")
    for line in lines:
        assert line.split()[1] == str(code) and words in line and "regular files only" in line and str(path) in line, line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root bypasses file permissions")
def test_permission_denied(tmp_path: Path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(PermissionError):
            scda.fopen_write(d / "f.scda")
    finally:
        d.chmod(0o700)


def test_os_errors_map_to_the_tree() -> None:
    """errno decides the class (also where root cannot provoke EACCES for real)."""
    from amrckpt.errors import ScdaIOError, ScdaPermissionError
    from amrckpt.scda._backend import os_error

    e = os_error(OSError(errno.EACCES, "Permission denied"), "/x", "cannot create")
    assert isinstance(e, ScdaPermissionError) and isinstance(e, PermissionError) and e.errno == errno.EACCES
    e = os_error(OSError(errno.ENOSPC, "No space left on device"), "/x", "cannot write")
    assert type(e) is ScdaIOError and e.errno == errno.ENOSPC and "No space" in str(e)


@pytest.mark.parametrize("extra", [1, 31, 63])
def test_trailing_bytes_are_a_count_error(tmp_path: Path, extra: int) -> None:
    p = tmp_path / "f.scda"
    small_file(p)
    with open(p, "ab") as fh:
        fh.write(b"=" * extra)
    with scda.fopen_read(p) as f:
        for _ in range(6):
            f.fread_section_header()
        with pytest.raises(ScdaCountError, match="too few for a section header"):
            f.fread_section_header()


def test_counts_of_26_digits(tmp_path: Path) -> None:
    """N and E of up to 26 digits are Python ints, written and read exactly."""
    p = tmp_path / "big.scda"
    N = 10**26 - 1
    with scda.fopen_write(p) as f:
        f.fwrite_array(None, [N], 0, b"many empty elements")
        f.fwrite_array(None, [0], N, b"no huge elements")
    with scda.fopen_read(p) as f:
        h = f.fread_section_header()
        assert (h.elem_count, h.elem_size) == (N, 0)  # type: ignore[union-attr]
        assert f.fread_array_data([N]).size == 0  # type: ignore[union-attr]
        h = f.fread_section_header()
        assert (h.elem_count, h.elem_size) == (0, N)  # type: ignore[union-attr]
    with scda.fopen_write(tmp_path / "x.scda") as f, pytest.raises(ScdaArgumentError, match="26 digits"):
        f.fwrite_array(None, [10**26], 0, b"")


def test_counts_beyond_the_file_are_refused_before_allocation(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    with scda.fopen_write(p) as f:
        f.fwrite_array(np.zeros(4, np.uint8), [4], 1, b"a")
    blob = bytearray(p.read_bytes())
    blob[128 + 64 : 128 + 96] = scda.count_entry(b"N", 10**25, "unix")
    p.write_bytes(bytes(blob))
    with scda.fopen_read(p) as f, pytest.raises(ScdaCountError, match="after the end of the file"):
        f.fread_section_header()


def test_mime_style_and_strict_padding(tmp_path: Path) -> None:
    p = tmp_path / "m.scda"
    small_file(p, "mime")
    blob = p.read_bytes()
    assert b"\r\n" in blob and blob.count(b"\n") == blob.count(b"\r\n") + blob.count(b"block data\n")
    info = scda.scan(p, decode=False, check_padding=True)
    assert {r.padding_form for s in info.sections for r in s.raw} == {"mime", "none"}
    # Damage one padding byte: ignored by default (paper 2.1.2), caught in strict mode.
    sec = info.sections[2]
    bad = bytearray(blob)
    bad[sec.end - 3] = ord("x")
    p.write_bytes(bytes(bad))
    with scda.fopen_read(p) as f:
        for _ in range(3):
            f.fread_section_header()
        f.fread_array_data([10])
    with scda.fopen_read(p, strict=True) as f:
        for _ in range(3):
            f.fread_section_header()
        with pytest.raises(ScdaFormatError, match="padding"):
            f.fread_array_data([10])


def test_fseek_section_random_access(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"
    small_file(p)
    info = scda.scan(p)
    with scda.fopen_read(p) as f:
        f.fseek_section(info.sections[3].offset)
        h = f.fread_section_header()
        assert h.type == "V"  # type: ignore[union-attr]
        f.fseek_section(info.sections[0].offset)
        assert f.fread_section_header().type == "I"  # type: ignore[union-attr]
        with pytest.raises(ScdaArgumentError):
            f.fseek_section(130)


# -- several ranks (threads): errors are raised on every rank -----------------


def test_error_on_one_rank_is_raised_on_all(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"

    def body(comm: Any) -> str:
        with scda.fopen_write(p, comm=comm) as f:
            counts = [2, 2, 2]
            data = np.zeros(2 * 8 if comm.rank != 1 else 3 * 8, np.uint8)
            try:
                f.fwrite_array(data, counts, 8, b"x")
            except ScdaArgumentError as exc:
                msg = str(exc)
                assert exc.rank_errors.keys() == {1}
            # Still usable: a correct call succeeds on every rank.
            f.fwrite_array(np.zeros(16, np.uint8), counts, 8, b"y")
            return msg

    msgs = run_threads(3, body)
    assert len(set(msgs)) == 1 and "[rank 1]" in msgs[0]
    assert [s.user_string for s in scda.scan(p).sections] == [b"y"]


def test_collective_argument_mismatch(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"

    def body(comm: Any) -> None:
        with scda.fopen_write(p, comm=comm) as f:
            f.fwrite_inline(b"x" * 32, b"rank %d" % comm.rank)

    with pytest.raises(ScdaArgumentError, match="differ between ranks"):
        run_threads(2, body)


def test_deferred_writer_agrees_once_and_writes_nothing_on_error(tmp_path: Path) -> None:
    """defer=True: an error of one rank's call is raised on every rank by settle, and no byte is written."""
    p = tmp_path / "f.scda"
    p.write_bytes(b"old")

    def body(comm: Any) -> str:
        f = scda.fopen_write(p, comm=comm, defer=True, checksum=True, truncate=False)
        try:
            counts = [2, 2, 2]
            f.fwrite_block(b"block", b"b")
            data = np.zeros(2 * 8 if comm.rank != 1 else 3 * 8, np.uint8)
            f.fwrite_array(data, counts, 8, b"x")  # no error here: deferred
            with pytest.raises(ScdaArgumentError) as info:
                f.settle()
            assert info.value.rank_errors.keys() == {1}
            return str(info.value)
        finally:
            f.fclose()

    msgs = run_threads(3, body)
    assert len(set(msgs)) == 1 and "[rank 1]" in msgs[0]
    assert p.read_bytes() == b"old"


def test_deferred_writer_same_bytes_and_crcs(tmp_path: Path) -> None:
    """defer=True writes the same bytes as immediate calls, and settle returns the same CRC32s."""
    import zlib

    counts = [3, 0, 2]
    sizes = [[1, 2, 3], [], [4, 5]]
    out = {}
    for defer in (False, True):
        p = tmp_path / f"f{defer}.scda"

        def body(comm: Any, p: Path = p, defer: bool = defer) -> list[int]:
            r = comm.rank
            C = [0, 3, 3, 5]
            with scda.fopen_write(p, comm=comm, defer=defer, checksum=True) as f:
                f.fwrite_inline(b"i" * 32, b"inline")
                f.fwrite_block(b"a block", b"block", encode=True)
                f.fwrite_array(np.arange(C[r] * 4, C[r + 1] * 4, dtype=np.uint8), counts, 4, b"array")
                sz = np.array(sizes[r], np.uint64)
                f.fwrite_varray(np.full(int(sz.sum()), r, np.uint8), counts, sz, [6, 0, 9], b"varray", encode=True)
                return f.settle() if defer else f.section_crcs()

        crcs = run_threads(3, body)
        blob = p.read_bytes()
        assert crcs[0] == [zlib.crc32(blob[rec[0] : rec[1]]) for rec in _record_bounds(p)]
        out[defer] = blob
    assert out[True] == out[False]


def _record_bounds(p: Path) -> list[tuple[int, int]]:
    secs = scda.scan(p).sections
    return [(0, 128)] + [(s.offset, s.end) for s in secs]


def test_deferred_writer_mismatch_is_agreed(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"

    def body(comm: Any) -> None:
        with scda.fopen_write(p, comm=comm, defer=True) as f:
            f.fwrite_inline(b"x" * 32, b"rank %d" % comm.rank)
            f.settle()

    with pytest.raises(ScdaArgumentError, match="differ between ranks"):
        run_threads(2, body)


def test_inline_and_block_roots(tmp_path: Path) -> None:
    p = tmp_path / "f.scda"

    def write(comm: Any) -> None:
        with scda.fopen_write(p, comm=comm) as f:
            f.fwrite_inline(b"r" * 32 if comm.rank == 2 else None, b"i", root=2)
            f.fwrite_block(b"block of rank 1" if comm.rank == 1 else None, b"b", root=1, encode=True)

    def read(comm: Any) -> tuple[Any, Any]:
        with scda.fopen_read(p, comm=comm) as f:
            f.fread_section_header()
            i = f.fread_inline_data(root=1)
            f.fread_section_header(decode=True)
            b = f.fread_block_data(root=2)
            return i, None if b is None else b.tobytes()

    run_threads(3, write)
    assert run_threads(3, read) == [(None, None), (b"r" * 32, None), (None, b"block of rank 1")]


def test_every_error_is_ours(tmp_path: Path) -> None:
    """Damaged copies of a file only ever raise exceptions of amrckpt's tree."""
    p = tmp_path / "f.scda"
    small_file(p)
    blob = p.read_bytes()
    # A cut at a section boundary leaves a valid, shorter scda file (hence the
    # footer of amrckpt checkpoints); any other cut must raise an error of ours.
    boundaries = {128} | {s.end for s in scda.scan(p, decode=False).sections}
    for cut in range(0, len(blob), 7):
        q = tmp_path / "cut.scda"
        q.write_bytes(blob[:cut])
        try:
            with scda.fopen_read(q) as f:
                while (h := f.fread_section_header(decode=True)) is not None:
                    if h.type == "V":
                        s = f.fread_varray_sizes([h.elem_count])
                        f.fread_varray_data([h.elem_count], s, f.proc_sizes())
                    elif h.type == "A":
                        f.fread_array_data([h.elem_count])
            assert cut in boundaries
        except AmrckptError:
            assert cut not in boundaries


@pytest.mark.slow
def test_section_over_2_gib_serial(tmp_path: Path) -> None:
    """More than 2**31 bytes in one section and one call (pwritev/preadv loop over partial transfers)."""
    shm = Path("/dev/shm")
    path = (shm if shm.is_dir() else tmp_path) / f"amrckpt-big-serial-{os.getpid()}.scda"
    n = (2**31 + 4096) // 8
    data = np.arange(n, dtype=np.uint64)
    try:
        with scda.fopen_write(path) as f:
            f.fwrite_array(data, [n], 8, b"big")
        del data
        info = scda.scan(path)
        assert info.sections[0].nbytes == 8 * n
        with scda.fopen_read(path) as f:
            f.fread_section_header()
            back = f.fread_array_data([n]).view(np.uint64)  # type: ignore[union-attr]
        assert back[0] == 0 and back[-1] == n - 1 and bool(np.all(np.diff(back[:: 1 << 20]) == 1 << 20))
    finally:
        path.unlink(missing_ok=True)


def test_overwrite_in_place_gives_the_same_bytes(tmp_path: Path) -> None:
    """truncate=False reuses an existing file and cuts it to size at close."""
    ref, p = tmp_path / "ref.scda", tmp_path / "f.scda"
    small_file(ref)
    p.write_bytes(b"\xff" * 5000)  # longer than the result

    def body(comm: Any) -> None:
        with scda.fopen_write(p, b"api", comm=comm, truncate=False) as f:
            f.fwrite_inline(b"0123456789abcdef" * 2, b"inline")
            f.fwrite_block(b"block data\n" if comm.rank == 0 else None, b"block")
            f.fwrite_array(np.arange(10, dtype="<f8")[5 * comm.rank : 5 * comm.rank + 5], [5, 5], 8, b"array")
            data, sizes = [(b"a", [1]), (b"bcdefghij", [2, 3, 4])][comm.rank]
            f.fwrite_varray(data, [1, 3], sizes, [1, 9], b"varray")
            f.fwrite_block(b"z" * 1000 if comm.rank == 0 else None, b"cblock", encode=True)

    run_threads(2, body)
    assert p.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("backend", ["posix", "mpiio"])
def test_overwrite_in_place_syncs_the_size(tmp_path: Path, backend: str) -> None:
    """sync() of a file overwritten in place cuts it first: the size is made durable with the bytes."""
    comm = None
    if backend == "mpiio":
        comm = pytest.importorskip("mpi4py.MPI").COMM_SELF
    p = tmp_path / "f.scda"
    p.write_bytes(b"\xff" * 5000)
    with scda.fopen_write(p, b"api", comm=comm, truncate=False, backend=backend) as f:
        f.fwrite_block(b"block data\n", b"block")
        f.sync()
        assert p.stat().st_size == f.offset < 5000
    assert p.stat().st_size < 5000


def test_mpiio_hints_from_text_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert scda.hints("striping_factor=16, striping_unit=4194304;cb_nodes=8") == {
        "striping_factor": "16",
        "striping_unit": "4194304",
        "cb_nodes": "8",
    }
    monkeypatch.setenv(scda.HINTS_ENV, "romio_cb_write=enable")
    assert scda.hints() == {"romio_cb_write": "enable"}
    with pytest.raises(ScdaArgumentError, match="expected key=value"):
        scda.hints("striping_factor")
