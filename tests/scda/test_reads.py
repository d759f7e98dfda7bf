"""Reads that continue short reads, and opens that never follow a link or wait on a FIFO (amrckpt/_files.py and its users).

A short ``pread`` is legal POSIX (a signal, NFS, FUSE, Lustre); it was taken
for the end of the file, and a restart then set perfect checkpoints aside.
A FIFO planted under a file's name blocked the open forever, a link to
``/dev/zero`` was read until memory ran out.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _support import run_bounded, short_reads
from amrckpt import _files, scda
from amrckpt.errors import ScdaCountError, ScdaIOError
from amrckpt.scda import MPIIOBackend

DATA = np.random.default_rng(7).integers(0, 256, 70_000, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("reads") / "data.bin"
    p.write_bytes(DATA)
    return p


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 1 << 17), offset=st.integers(0, len(DATA) + 10), nbytes=st.integers(0, 20_000))
def test_pread_exact_and_preadv_exact_continue_short_reads(data_file: Path, k: int, offset: int, nbytes: int) -> None:
    """At most ``k`` bytes a call: the result is the normal read's, fewer bytes only past the end of the file."""
    want = DATA[offset : offset + nbytes]
    fd = os.open(data_file, os.O_RDONLY)
    try:
        with short_reads(k):
            got = _files.pread_exact(fd, nbytes, offset)
            bufs = [bytearray(n) for n in (nbytes // 3, 0, nbytes - nbytes // 3)]
            n = _files.preadv_exact(fd, [memoryview(b) for b in bufs], offset)
    finally:
        os.close(fd)
    assert got == want
    assert n == len(want) and b"".join(bufs)[:n] == want


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from checkpoint_cases import global_state

    import amrckpt as ac

    g = global_state(seed=3, max_level=5)
    path = tmp_path_factory.mktemp("reads") / "c.scda"
    ac.save(g.local(0, g.N), path)
    return path


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 1 << 16))
def test_local_file_exact_reader_scan_and_load_under_short_reads(checkpoint: Path, k: int) -> None:
    """Before: ``LocalFile.read`` and ``exact_reader`` raised ScdaCountError ("file ends at byte ...") at the first short read."""
    import amrckpt as ac

    size = checkpoint.stat().st_size
    raw = checkpoint.read_bytes()
    info = scda.scan(checkpoint)
    want = ac.load(checkpoint)
    with short_reads(k) as calls:
        with scda.LocalFile(checkpoint) as f:
            assert f.read(0, size) == raw
            assert f.read(size - 100, 100) == raw[-100:]
        fd = os.open(checkpoint, os.O_RDONLY)
        try:
            assert scda.exact_reader(fd, str(checkpoint))(1, size - 1) == raw[1:]
        finally:
            os.close(fd)
        assert scda.scan(checkpoint) == info
        got = ac.load(checkpoint)  # the root's metadata (LocalFile) and the data (the POSIX backend's preadv)
    assert calls[0] > 0
    for name in ("rho", "vel"):
        assert np.array_equal(getattr(got.state, name), getattr(want.state, name))


def test_the_end_of_the_file_is_still_the_end(checkpoint: Path) -> None:
    """Only a read of 0 bytes ends a request early: a truncated file is still told apart (ScdaCountError)."""
    size = checkpoint.stat().st_size
    with short_reads(3), scda.LocalFile(checkpoint) as f, pytest.raises(ScdaCountError, match=f"ends at byte {size}"):
        f.read(size - 10, 20)


def test_eintr_is_read_again_a_bounded_number_of_times(checkpoint: Path) -> None:
    """One EINTR: read again.  EINTR on every call: ScdaIOError with errno EINTR, not an endless loop."""
    real = os.pread
    seen = [0]

    def once(fd: int, n: int, off: int) -> bytes:
        seen[0] += 1
        if seen[0] == 1:
            raise InterruptedError(errno.EINTR, "Interrupted system call")
        return real(fd, n, off)

    with scda.LocalFile(checkpoint) as f:
        with mock.patch.object(os, "pread", once):
            assert f.read(0, 128) == checkpoint.read_bytes()[:128]

        def always(fd: int, n: int, off: int) -> bytes:
            raise InterruptedError(errno.EINTR, "Interrupted system call")

        with mock.patch.object(os, "pread", always), pytest.raises(ScdaIOError) as info:
            f.read(0, 128)
    assert info.value.errno == errno.EINTR and str(checkpoint) in str(info.value)


PLANTED = """
    import os, sys
    from amrckpt import scda
    from amrckpt.errors import ScdaIOError
    path, kind = sys.argv[1], sys.argv[2]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "link":
        os.symlink(sys.argv[3], path)
    else:
        os.mkdir(path)
    for what, fn in [
        ("LocalFile", lambda: scda.LocalFile(path)),
        ("scan", lambda: scda.scan(path)),
        ("posix", lambda: scda.fopen_read(path, access=scda.FileAccess(backend="posix"))),
    ]:
        try:
            fn()
        except ScdaIOError as exc:
            print(what, exc.errno, str(exc))
        else:
            print(what, "opened")
"""


@pytest.mark.parametrize("kind", ["fifo", "zero", "link", "dir"])
def test_a_fifo_a_device_a_link_or_a_directory_is_refused_without_blocking(tmp_path: Path, checkpoint: Path, kind: str) -> None:
    """Before: a FIFO blocked the open forever; a link was followed (to /dev/zero: read until memory ran out)."""
    path = tmp_path / "planted.scda"
    out = run_bounded(PLANTED, str(path), kind, str(checkpoint), timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["LocalFile", "scan", "posix"]
    code = {"fifo": errno.EINVAL, "zero": errno.ELOOP, "link": errno.ELOOP, "dir": errno.EISDIR}[kind]
    words = {"fifo": "a FIFO", "zero": "a symbolic link", "link": "a symbolic link", "dir": "a directory"}[kind]
    for line in lines:
        assert line.split()[1] == str(code) and words in line and str(path) in line, line


class _ShortFile:
    """An MPI file handle whose reads move at most ``k`` bytes a call (ROMIO's status then counts them)."""

    def __init__(self, data: bytes, k: int) -> None:
        self.data, self.k = data, k

    def _read(self, offset: int, buf: list, st: object) -> None:  # type: ignore[type-arg]
        from mpi4py import MPI

        mv = memoryview(buf[0]).cast("B")
        got = self.data[offset : offset + min(self.k, mv.nbytes)]
        mv[: len(got)] = got
        st.Set_elements(MPI.BYTE, len(got))  # type: ignore[attr-defined]

    Read_at = _read
    Read_at_all = _read


@pytest.mark.parametrize("k", [1, 7, 1000])
def test_mpiio_reads_go_on_after_a_short_count(k: int) -> None:
    """Before: a short count of ``MPI_File_read_at`` (or of a contiguous ``read_at_all``) raised ScdaCountError at once."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    b: MPIIOBackend = object.__new__(MPIIOBackend)
    b._MPI, b.path, b._independent_ok = MPI, "short.scda", True
    b._fh = _ShortFile(DATA, k)
    pieces = [(5, memoryview(bytearray(3000))), (9000, memoryview(bytearray(10)))]
    bulk = (20_000, memoryview(bytearray(4000)))
    b._move(pieces, bulk, 4000, False)
    assert [bytes(p[1]) for p in pieces] == [DATA[5:3005], DATA[9000:9010]]
    assert bytes(bulk[1]) == DATA[20_000:24_000]
    end = (len(DATA) - 10, memoryview(bytearray(20)))  # past the end of the file: still the end
    with pytest.raises(ScdaCountError, match="ends early"):
        b._move([end], None, 0, False)
