"""A conformance suite for byte backends (zarr's ``StoreTests``): one body of tests, run for every backend and communicator.

A test module subclasses :class:`BackendTests`, says which backend (a name
or a :class:`~amrckpt.scda.BackendOpener`) and how its ranks run
(:meth:`BackendTests.run`: serially, on thread ranks, or under ``mpiexec``),
and provides a ``backend_dir`` fixture (a directory every rank sees)::

    class TestPosixOnThreads(BackendTests):
        backend = "posix"

        def run(self, fn, *args):
            return run_threads(3, fn, *args)

        @pytest.fixture
        def backend_dir(self, tmp_path):
            return tmp_path

Every test writes and reads through the backend and through the public
read plans of :mod:`amrckpt.scda` (:class:`~amrckpt.scda.ReadPlan`, its
collective and one-rank executors), on whatever number of ranks the
subclass runs; a subclass of a faulty wrapper sets ``faulty = True`` and
the injected faults are checked to be agreed on by every rank.
"""

from __future__ import annotations

import errno
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..comm import Comm, collective
from ..errors import AmrckptError, ChecksumError, ScdaCountError, ScdaFileNotFoundError, ScdaIOError
from ..scda import (
    BackendOpener,
    FileAccess,
    GatheredExecutor,
    LocalExecutor,
    LocalFile,
    ReadPlan,
    open_backend,
    open_sink,
    open_source,
)
from ._faults import inject_faults

__all__ = ["BackendTests", "SinkSourceTests"]

Body = Callable[..., Any]


def _block(rank: int, k: int, n: int) -> bytes:
    """``n`` bytes that rank ``rank`` writes as its piece ``k`` (different for every rank and piece)."""
    return bytes((rank * 31 + k * 7 + i) % 251 for i in range(n))


def _sizes(P: int) -> list[int]:
    """Return the element sizes of every rank p (p + 1 elements of 3 p + j + 1 bytes): variable over ranks and elements."""
    return [3 * p + j + 1 for p in range(P) for j in range(p + 1)]


def _sections_bytes(P: int) -> tuple[bytes, tuple[int, int, int, int]]:
    """Return the bytes of a file of 32-byte size entries and variable-size elements (a V section) of P ranks, and its layout."""
    sizes = _sizes(P)
    entries = b"".join(f"E {s:<26d}\n".encode()[:31].ljust(31) + b"\n" for s in sizes)
    data = b"".join(_block(i, 1, s) for i, s in enumerate(sizes))
    raw = b"H" * 64 + entries + data
    return raw, (64, 64 + len(entries), len(raw), zlib.crc32(raw))


class SinkSourceTests:
    """Conformance tests of a byte sink and of the source that reads back what it wrote.

    (:class:`~amrckpt.scda.ByteSink`, :class:`~amrckpt.scda.ByteSource`.)

    Subclass, implement :meth:`run`, provide a ``backend_dir`` fixture, and
    say how files are written and read: :meth:`sink_access` and
    :meth:`source_access` (by default both :attr:`access`, a full backend's).
    A sink that is not a shared file (a node cache's pieces, one file per
    rank) gives a source built from what its sinks wrote.  Every test writes
    through :func:`~amrckpt.scda.open_sink` (``write_gathered``) and reads
    through :func:`~amrckpt.scda.open_source` and the read plans of
    :mod:`amrckpt.scda`.

    Attributes
    ----------
    backend : None, str or BackendOpener
        The backend of :attr:`access` (``FileAccess.backend``).
    """

    backend: ClassVar[str | BackendOpener | None] = None

    def run(self, fn: Body, *args: Any) -> list[Any]:
        """Run ``fn(comm, *args)`` on every rank; return what it returned on the ranks this process sees (at least its own)."""
        raise NotImplementedError

    @property
    def access(self) -> FileAccess:
        """The file access of every file the tests open."""
        return FileAccess(backend=self.backend)

    def sink_access(self, path: str, comm: Comm) -> FileAccess:
        """Return the access through which ``path`` is written (:func:`~amrckpt.scda.open_sink`). Not collective."""
        return self.access

    def source_access(self, path: str, comm: Comm) -> FileAccess:
        """Return the access through which ``path`` is read back after its sinks closed. Collective, inside a collective call."""
        return self.access

    def test_a_sink_takes_every_rank_s_pieces_and_its_source_gives_any_rank_s(self, backend_dir: Path) -> None:
        """Every rank writes three pieces interleaved with the others' in one gathered write; each reads its neighbour's."""
        path = os.fspath(backend_dir / "sink.bin")

        def body(comm: Comm) -> bool:
            r, P, n = comm.rank, comm.size, 5
            with collective(comm, "conformance: sink and source") as call:
                f = open_sink(path, comm, access=self.sink_access(path, comm))
                mine = [(n * (k * P + r), memoryview(_block(r, k, n))) for k in range(3)]
                call.run(f.write_gathered, mine, 1, always=True)
                f.close()
                call.agree()
                g = open_source(path, comm, access=self.source_access(path, comm))
                q = (r + 1) % P
                bufs = [bytearray(n) for _ in range(3)]
                call.run(g.read_gathered, [(n * (k * P + q), memoryview(b)) for k, b in enumerate(bufs)], 2, always=True)
                size = g.file_size()
                g.close()
                call.agree()
            return size == 3 * n * P and all(bytes(b) == _block(q, k, n) for k, b in enumerate(bufs))

        assert all(self.run(body))

    def _plan(self, comm: Comm, layout: tuple[int, int, int, int], verify: bool) -> tuple[ReadPlan, dict[str, Any]]:
        """Plan rank p's elements of the file of :meth:`_write_sections`: its entries first, its data after the exscan."""
        entries_at, data_at, end, crc = layout
        r = comm.rank
        first, count = r * (r + 1) // 2, r + 1  # rank p holds p + 1 elements
        plan = ReadPlan("conformance", verify=verify)
        plan.cover("elements", 0, end, crc, [(0, entries_at, zlib.crc32(b"H" * entries_at))] if r == 0 else [])
        ents = np.empty(32 * count, dtype=np.uint8)
        plan.read(0, entries_at + 32 * first, ents)
        got: dict[str, Any] = {}

        def local() -> int:
            got["sizes"] = [int(bytes(ents[32 * i + 2 : 32 * i + 31]).decode().strip()) for i in range(count)]
            return sum(got["sizes"])

        def then(before: int) -> None:
            got["before"] = before
            got["data"] = buf = bytearray(sum(got["sizes"]))
            plan.read(0, data_at + before, buf)

        def prefix(read: Any) -> int:
            raw = read(entries_at, 32 * first)
            return sum(int(raw[32 * i + 2 : 32 * i + 31].decode().strip()) for i in range(first))

        plan.scan(local, then, prefix)
        return plan, got

    def _through(self, comm: Comm, path: str, damage: bool) -> tuple[ReadPlan, dict[str, Any]]:
        """Write the file of sections through the sink on the root (one byte changed with ``damage``); read every rank's part."""
        raw, layout = _sections_bytes(comm.size)
        if damage:
            raw = raw[:-1] + bytes([raw[-1] ^ 0x20])
        with collective(comm, "conformance: plan through a sink") as call:
            f = open_sink(path, comm, access=self.sink_access(path, comm))
            call.run(f.write_gathered, [(0, memoryview(raw))] if comm.rank == 0 else [], 1, always=True)
            f.close()
            call.agree()
            plan, got = self._plan(comm, layout, True)
            ex = GatheredExecutor(path, comm, self.source_access(path, comm))
            ex.run(plan)
            ex.close()
            call.agree()
        return plan, got

    def test_a_read_plan_reads_what_a_sink_wrote(self, backend_dir: Path) -> None:
        """A two-phase plan (sizes, then data after one exscan) reads each rank's elements of a file written through the sink."""
        path = os.fspath(backend_dir / "through.bin")

        def body(comm: Comm) -> bool:
            plan, got = self._through(comm, path, damage=False)
            return plan.error is None and plan.checked == ["elements"] and bytes(got["data"]) == _elements_of(comm.rank, comm.size)

        assert all(self.run(body))

    def test_a_read_plan_finds_damage_in_what_a_sink_wrote_on_every_rank(self, backend_dir: Path) -> None:
        """One byte of the last rank's data changed before it was written: every rank's plan holds the same ChecksumError."""
        path = os.fspath(backend_dir / "through-damaged.bin")

        def body(comm: Comm) -> str:
            plan, _ = self._through(comm, path, damage=True)
            return type(plan.error).__name__

        assert set(self.run(body)) == {ChecksumError.__name__}


class BackendTests(SinkSourceTests):
    """Conformance tests of a byte backend: subclass, set :attr:`backend`, implement :meth:`run`, provide ``backend_dir``.

    Attributes
    ----------
    backend : None, str or BackendOpener
        The backend under test (``FileAccess.backend``).
    faulty : bool
        The backend injects faults (:class:`amrckpt.testing.FaultyBackend`):
        the fault tests run.
    """

    faulty: ClassVar[bool] = False

    # -- the backend's calls -----------------------------------------------------------------------------

    def test_pieces_of_every_rank_written_gathered_read_gathered(self, backend_dir: Path) -> None:
        """Every rank writes three pieces interleaved with the others' in one gathered write; each reads its neighbour's."""
        path = os.fspath(backend_dir / "pieces.bin")
        access = self.access

        def body(comm: Comm) -> bool:
            r, P, n = comm.rank, comm.size, 5
            with collective(comm, "conformance: pieces") as call:
                f = open_backend(path, "w", comm, access=access)
                mine = [(n * (k * P + r), memoryview(_block(r, k, n))) for k in range(3)]
                call.run(f.write_gathered, mine, 1, always=True)
                f.close()
                call.agree()
                g = open_backend(path, "r", comm, access=access)
                q = (r + 1) % P
                bufs = [bytearray(n) for _ in range(3)]
                call.run(g.read_gathered, [(n * (k * P + q), memoryview(b)) for k, b in enumerate(bufs)], 2, always=True)
                size = g.file_size()
                g.close()
            return size == 3 * n * P and all(bytes(b) == _block(q, k, n) for k, b in enumerate(bufs))

        assert all(self.run(body))

    def test_bulk_and_pieces(self, backend_dir: Path) -> None:
        """``write``/``read`` of small pieces and one bulk run per rank (the largest rank's size given to every rank)."""
        path = os.fspath(backend_dir / "bulk.bin")
        access = self.access

        def body(comm: Comm) -> bool:
            r, P = comm.rank, comm.size
            sizes = [1000 * (p + 1) for p in range(P)]
            start = 16 * P + sum(sizes[:r])
            with collective(comm, "conformance: bulk") as call:
                f = open_backend(path, "w", comm, access=access)
                bulk = (start, memoryview(_block(r, 9, sizes[r])))
                call.run(f.write, [(16 * r, memoryview(_block(r, 0, 16)))], bulk, max(sizes), always=True)
                f.close()
                call.agree()
                g = open_backend(path, "r", comm, access=access)
                head, body_ = bytearray(16), bytearray(sizes[r])
                call.run(g.read, [(16 * r, memoryview(head))], (start, memoryview(body_)), max(sizes), always=True)
                g.close()
            return bytes(head) == _block(r, 0, 16) and bytes(body_) == _block(r, 9, sizes[r])

        assert all(self.run(body))

    def test_opening_to_write_empties_an_existing_file_and_creates_a_new_one(self, backend_dir: Path) -> None:
        """``truncate=True``: an existing longer file is emptied first; a new file is created empty."""
        old, new = backend_dir / "old.bin", backend_dir / "new.bin"
        access = self.access.replace(truncate=True)

        def body(comm: Comm) -> bool:
            if comm.rank == 0:
                old.write_bytes(b"x" * 1000)
                new.unlink(missing_ok=True)
            sizes = []
            with collective(comm, "conformance: truncate") as call:
                call.agree()  # the old file is there, the new one is not, before anyone opens them
                for path in (old, new):
                    f = open_backend(os.fspath(path), "w", comm, access=access)
                    call.run(f.write_gathered, [(10 * comm.rank, memoryview(b"y" * 10))], 1, always=True)
                    f.close()
                    call.agree()
                    sizes.append(path.stat().st_size)
            return sizes == [10 * comm.size] * 2 and old.read_bytes() == b"y" * (10 * comm.size)

        assert all(self.run(body))

    def test_file_size_is_the_same_on_every_rank_and_close_sets_it(self, backend_dir: Path) -> None:
        """``close(size=)`` cuts a file overwritten in place (``truncate=False``); ``file_size`` agrees."""
        path = backend_dir / "size.bin"
        access = self.access.replace(truncate=False)

        def body(comm: Comm) -> bool:
            if comm.rank == 0:
                path.write_bytes(b"x" * 1000)
            with collective(comm, "conformance: size") as call:
                call.agree()  # the old file is there before anyone opens it
                f = open_backend(os.fspath(path), "w", comm, access=access)
                call.run(f.write_gathered, [(10 * comm.rank, memoryview(b"y" * 10))], 1, always=True)
                f.close(size=10 * comm.size)
                call.agree()
                g = open_backend(os.fspath(path), "r", comm, access=access)
                size = g.file_size()
                g.close()
            return size == 10 * comm.size == path.stat().st_size

        assert all(self.run(body))

    def test_missing_file_is_not_found_on_every_rank(self, backend_dir: Path) -> None:
        """Opening a file that does not exist raises ScdaFileNotFoundError (ENOENT) on every rank."""
        path = os.fspath(backend_dir / "missing" / "nothing.bin")
        access = self.access

        def body(comm: Comm) -> tuple[str, int | None]:
            try:
                with collective(comm, "conformance: missing"):
                    open_backend(path, "r", comm, access=access)
            except ScdaFileNotFoundError as exc:
                return type(exc).__name__, exc.errno
            return "opened", None

        assert set(self.run(body)) == {("ScdaFileNotFoundError", errno.ENOENT)}

    def test_a_read_past_the_end_on_one_rank_is_its_count_error_on_every_rank(self, backend_dir: Path) -> None:
        """The last rank's plan reads past the end of the file: its ScdaCountError on every rank.

        The plan knows the file's size (MPI-IO through a file view does not
        report a short read); the rank still joins every collective read, and
        the agreement raises its error everywhere.
        """
        path = backend_dir / "short.bin"
        access = self.access

        def body(comm: Comm) -> str:
            if comm.rank == 0:
                path.write_bytes(b"z" * 64)
            try:
                with collective(comm, "conformance: short") as call:
                    call.agree()
                    plan = ReadPlan(os.fspath(path), verify=True, file_size=64)
                    plan.cover("all", 0, 64, zlib.crc32(b"z" * 64), [(0, 64, zlib.crc32(b"z" * 64))] if comm.rank == 0 else [])
                    at = 100 if comm.rank == comm.size - 1 else 0
                    plan.read(0, at, bytearray(8), crc=False)
                    _run_and_agree(plan, GatheredExecutor(os.fspath(path), comm, access), call)
            except AmrckptError as exc:
                return type(exc).__name__
            return "read"

        assert set(self.run(body)) == {"ScdaCountError"}
        assert issubclass(ScdaCountError, OSError)

    # -- read plans ----------------------------------------------------------------------------------------

    def _write_sections(self, path: Path, P: int) -> tuple[int, int, int, int]:
        """Write a file of 32-byte size entries and variable-size elements (as a V section); return its layout."""
        raw, layout = _sections_bytes(P)
        path.write_bytes(raw)
        return layout

    def _read_planned(self, comm: Comm, path: Path, access: FileAccess, damage: bool) -> tuple[ReadPlan, dict[str, Any]]:
        """Write the file on the root (its last byte changed with ``damage``), plan every rank's part, read it collectively."""
        layout = None
        if comm.rank == 0:
            layout = self._write_sections(path, comm.size)
            if damage:
                raw = bytearray(path.read_bytes())
                raw[-1] ^= 0x20
                path.write_bytes(bytes(raw))
        with collective(comm, "conformance: plan") as call:
            layout = call.on_root(lambda: layout)
            assert layout is not None
            plan, got = self._plan(comm, layout, True)
            ex = GatheredExecutor(os.fspath(path), comm, access)
            ex.run(plan)
            ex.close()
            call.agree()
        return plan, got

    def test_read_plan_on_every_rank(self, backend_dir: Path) -> None:
        """A two-phase plan (sizes, then data after one exscan) reads each rank's elements.

        The CRC32 of the file, combined over the ranks, matches.
        """
        path = backend_dir / "plan.bin"
        access = self.access

        def body(comm: Comm) -> bool:
            plan, got = self._read_planned(comm, path, access, damage=False)
            return plan.error is None and plan.checked == ["elements"] and bytes(got["data"]) == _elements_of(comm.rank, comm.size)

        assert all(self.run(body))

    def test_read_plan_finds_damage_on_every_rank(self, backend_dir: Path) -> None:
        """One byte of the last rank's data changed: every rank's plan holds the same ChecksumError."""
        path = backend_dir / "damaged.bin"
        access = self.access

        def body(comm: Comm) -> str:
            plan, _ = self._read_planned(comm, path, access, damage=True)
            return type(plan.error).__name__

        assert set(self.run(body)) == {ChecksumError.__name__}

    def test_the_same_plan_on_one_rank(self, backend_dir: Path) -> None:
        """Rank p's plan run on this rank alone (LocalExecutor: its prefix read instead of the exscan) reads the same."""
        path = backend_dir / "local.bin"

        def body(comm: Comm) -> bool:
            with collective(comm, "conformance: local") as call:
                layout = call.on_root(lambda: self._write_sections(path, comm.size))
            ok, P = True, comm.size
            with LocalFile(path) as f:
                for r in range(P):  # every rank's part, planned as rank r would, read here
                    fake = _Rank(r, P)
                    plan, got = self._plan(fake, layout, False)  # type: ignore[arg-type]
                    LocalExecutor(f).run(plan)
                    ok &= plan.error is None and bytes(got["data"]) == _elements_of(r, P)
            return ok

        assert all(self.run(body))

    # -- faults ----------------------------------------------------------------------------------------------

    def test_an_injected_read_fault_on_one_rank_is_its_error_on_every_rank(self, backend_dir: Path) -> None:
        """A faulty backend: EIO on the last rank's first read; every rank raises ScdaIOError with that errno, none waits."""
        if not self.faulty:
            return
        path = backend_dir / "faulty.bin"
        access = self.access

        def body(comm: Comm) -> tuple[str, int | None]:
            layout = self._write_sections(path, comm.size) if comm.rank == 0 else None
            try:
                with collective(comm, "conformance: fault") as call:
                    layout = call.on_root(lambda: layout)
                    assert layout is not None
                    plan, _ = self._plan(comm, layout, True)
                    with inject_faults(1, ranks=[comm.size - 1], kinds={"read"}, errno=errno.EIO, limit=1):
                        _run_and_agree(plan, GatheredExecutor(os.fspath(path), comm, access), call)
            except ScdaIOError as exc:
                return type(exc).__name__, exc.errno
            return "read", None

        assert set(self.run(body)) == {("ScdaIOError", errno.EIO)}


def _run_and_agree(plan: ReadPlan, ex: GatheredExecutor, call: Any) -> None:
    """Run ``plan`` on every rank, close the file, and agree on every rank's error (raised on every rank). Collective."""
    ex.run(plan)
    ex.close()
    if plan.error is not None:
        call.fail(plan.error)
    call.agree()


def _elements_of(r: int, P: int) -> bytes:
    """Return the bytes of rank r's elements in the file of :meth:`BackendTests._write_sections` (rank p holds p + 1)."""
    return b"".join(_block(i, 1, s) for i, s in enumerate(_sizes(P)) if r * (r + 1) // 2 <= i < (r + 1) * (r + 2) // 2)


class _Rank:
    """What a plan asks of a communicator: a rank and a size (to plan another rank's part on this one)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
