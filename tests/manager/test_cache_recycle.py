"""A cached save writes into the pieces file of the step its retention removes (``NodeCache(recycle=True)``).

On the disk (``pwritev`` into the old file) and on a real tmpfs (root:
through a shared mapping kept from the file's last write): the same bytes
as a new file, never through a planted link, errors instead of SIGBUS on a
full tmpfs, and no mapping outliving its file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state
from small_fs import can_mount, fill, tmpfs

import amrckpt as ac
from amrckpt.comm import SerialComm
from amrckpt.manager import EveryNSteps
from amrckpt.manager.cache._pieces import read_pieces
from amrckpt.manager.cache._pieces_io import Mappings, PiecesBackend, on_tmpfs

G = global_state(seed=7, max_level=5)


def state(step: int, n: int | None = None) -> Advection:
    """The state of ``step``: the first ``n`` leaves of G (all by default), ``rho`` shifted by the step."""
    st = G.local(0, n if n is not None else G.N)
    st.step = step
    st.rho = st.rho + step
    return st


@pytest.fixture(params=["disk", "tmpfs"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """The node cache's parent: the disk (pwritev) or a real tmpfs (a shared mapping)."""
    if request.param == "disk":
        d = tmp_path / "disk"
        d.mkdir()
        if on_tmpfs(d):
            pytest.skip("the temporary directory is on a tmpfs here: no disk to test")
        yield d
        return
    why = can_mount()
    if why:
        pytest.skip(why)
    with tmpfs(tmp_path / "shm", "64m") as d:
        yield d


def pieces(cache: Path, step: int, rank: int = 0) -> Path:
    return cache / "node-0" / f"ckpt-{step:012d}.cache" / f"rank-{rank:06d}.pieces"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manager(root: Path, cache: ac.manager.NodeCache) -> ac.CheckpointManager[Advection]:
    return ac.CheckpointManager(root / "shared", Advection, save_policy=EveryNSteps(1), cache=cache)


def deleted_pieces_mappings() -> list[str]:
    """This process's mappings of pieces files that no longer exist (their pages held by nothing else)."""
    with open("/proc/self/maps") as f:
        return [line for line in f if ".pieces" in line and line.rstrip().endswith("(deleted)")]


def test_the_oldest_step_is_written_again_with_the_bytes_of_a_new_file(where: Path, tmp_path: Path) -> None:
    """keep=2: step s reuses the file of step s - 2; states that shrink and grow give the bytes of new files."""
    sizes = [G.N, G.N, G.N // 3, G.N // 3, G.N, G.N // 2]  # shrink, then grow past the old file: fallocate on a tmpfs
    hashes: dict[bool, list[str]] = {}
    for recycle in (True, False):
        cache_dir = where / f"cache-{recycle}"
        with manager(tmp_path / f"m-{recycle}", ac.manager.NodeCache(cache_dir, keep=2, recycle=recycle)) as mgr:
            level = mgr._level.level  # type: ignore[attr-defined]
            hashes[recycle] = []
            for s, n in enumerate(sizes):
                old = os.stat(pieces(cache_dir, s - 2)).st_ino if s >= 2 else None
                mgr.save(s, state(s, n))
                new = pieces(cache_dir, s)
                assert (os.stat(new).st_ino == old) == (recycle and old is not None), (recycle, s)
                assert os.stat(new).st_nlink == 1 and os.stat(new).st_size == new.stat().st_size
                hashes[recycle].append(sha(new))
                assert len(level.mappings) <= (2 if recycle and level.tmpfs else 0) + 1
                mgr.wait()
                assert not deleted_pieces_mappings()
            assert level.tmpfs == (where.name == "shm")
            mgr.close(flush=False)
        assert len(level.mappings) == 0 and not deleted_pieces_mappings()
    assert hashes[True] == hashes[False]
    with manager(tmp_path / "m-True", ac.manager.NodeCache(where / "cache-True", keep=2)) as mgr:  # read in place: the newest step
        loaded = mgr.restore_latest()
        assert mgr.restored_from == "cache" and loaded.step == len(sizes) - 1
        want = state(len(sizes) - 1, sizes[-1])
        assert_state_equal(loaded.state, want)


def test_keep_one_never_recycles_the_only_step(where: Path, tmp_path: Path) -> None:
    cache_dir = where / "cache"
    with manager(tmp_path, ac.manager.NodeCache(cache_dir, keep=1)) as mgr:
        mgr.save(0, state(0))
        first = os.stat(pieces(cache_dir, 0)).st_ino
        mgr.save(1, state(1))
        assert os.stat(pieces(cache_dir, 1)).st_ino != first
        mgr.close(flush=False)


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "directory"])
def test_a_link_planted_in_the_oldest_step_is_never_written_through(where: Path, tmp_path: Path, kind: str) -> None:
    """The recycled file is renamed, then used only if it is a regular file of ours with one link: else a new file."""
    cache_dir = where / "cache"
    victim = where / "victim"
    victim.write_bytes(b"not yours " * 4096)
    before = sha(victim)
    with manager(tmp_path, ac.manager.NodeCache(cache_dir, keep=2)) as mgr:
        mgr.save(0, state(0))
        mgr.save(1, state(1))
        mgr.wait()
        planted = pieces(cache_dir, 0)
        planted.unlink()
        if kind == "symlink":
            planted.symlink_to(victim)
        elif kind == "hardlink":
            os.link(victim, planted)
        else:
            planted.mkdir()
        mgr.save(2, state(2))
        new = pieces(cache_dir, 2)
        st = os.lstat(new)
        assert new.is_file() and not new.is_symlink() and st.st_nlink == 1 and st.st_ino != os.stat(victim).st_ino
        mgr.close(flush=False)
    assert sha(victim) == before and os.stat(victim).st_nlink == 1
    with manager(tmp_path, ac.manager.NodeCache(cache_dir, keep=2)) as mgr:
        loaded = mgr.restore_latest()
        assert mgr.restored_from == "cache"
        assert_state_equal(loaded.state, state(2))


def test_a_full_tmpfs_fails_a_growing_recycled_file_with_enospc_not_sigbus(tmp_path: Path) -> None:
    """Growing the recycled file needs pages a full tmpfs has not: ENOSPC on the save, the newest step intact."""
    why = can_mount()
    if why:
        pytest.skip(why)
    small, big = G.N // 4, G.N
    with tmpfs(tmp_path / "shm", "64m") as d:
        with manager(tmp_path, ac.manager.NodeCache(d / "cache", keep=2)) as mgr:
            mgr.save(0, state(0, small))
            mgr.save(1, state(1, small))
            mgr.wait()
            filler = fill(d, 4096)
            with pytest.raises(ac.errors.ScdaIOError) as info:
                mgr.save(2, state(2, big))
            assert info.value.errno == errno.ENOSPC
            filler.unlink()
            assert not list((d / "cache" / "node-0").glob(".ckpt-*"))  # the save's temporary directory removed
            mgr.close(flush=False)
        with manager(tmp_path, ac.manager.NodeCache(d / "cache", keep=2)) as mgr:
            loaded = mgr.restore_latest()
            assert mgr.restored_from == "cache" and loaded.step == 1
            assert_state_equal(loaded.state, state(1, small))
            mgr.close(flush=False)


def test_recycle_must_be_a_bool() -> None:
    with pytest.raises(ac.errors.ManagerError, match="recycle"):
        ac.manager.NodeCache("/dev/shm/x", recycle=1)  # type: ignore[arg-type]


def test_a_directory_swapped_in_after_the_check_is_moved_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the check of the recycled path and its rename something else may take its place: never written into."""
    tmp = tmp_path / "step"
    tmp.mkdir()
    src = tmp_path / "old.pieces"
    src.mkdir()  # a directory, which the check (made to fail here, as a race would) takes for a file
    real = os.lstat

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        st = real(path, *args, **kwargs)
        return os.stat_result((stat.S_IFREG | 0o600, *tuple(st)[1:])) if Path(path) == src else st

    monkeypatch.setattr(os, "lstat", lstat)
    backend = PiecesBackend(tmp / "rank-000000.pieces", SerialComm(), recycle=src, maps=Mappings())
    backend.write_gathered([(0, memoryview(b"abc")), (10, memoryview(b"defg"))], 1)
    backend.close()
    monkeypatch.undo()
    assert not backend.recycled and (tmp / ".refused-rank-000000.pieces").is_dir()
    got = read_pieces(tmp / "rank-000000.pieces")
    assert [(o, bytes(b)) for o, b in got.pieces] == [(0, b"abc"), (10, b"defg")]
    got.close()


@pytest.mark.parametrize("cannot", ["mmap", "fallocate"])
def test_a_tmpfs_file_that_cannot_be_mapped_or_allocated_is_written_with_pwritev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cannot: str
) -> None:
    """Without mmap (ENOMEM, a file system without shared mappings) or fallocate: the same bytes, by pwritev."""
    why = can_mount()
    if why:
        pytest.skip(why)
    import amrckpt.manager.cache._pieces_io as cache_module

    if cannot == "mmap":
        monkeypatch.setattr(cache_module, "_map", lambda fd, nbytes: None)
    else:
        monkeypatch.setattr(cache_module, "_allocate", lambda fd, nbytes: False)
    sizes = [G.N // 2, G.N // 2, G.N, G.N // 3]  # grows (no pages for the new part: not mapped), then shrinks
    with tmpfs(tmp_path / "shm", "64m") as d:
        hashes = {}
        for recycle in (True, False):
            cache_dir = d / f"cache-{recycle}"
            with manager(tmp_path / f"m-{recycle}", ac.manager.NodeCache(cache_dir, keep=2, recycle=recycle)) as mgr:
                for s, n in enumerate(sizes):
                    mgr.save(s, state(s, n))
                hashes[recycle] = [sha(pieces(cache_dir, s)) for s in (len(sizes) - 2, len(sizes) - 1)]
                if cannot == "mmap":
                    assert len(mgr._level.level.mappings) == 0  # type: ignore[attr-defined]
                mgr.close(flush=False)
        assert hashes[True] == hashes[False]
