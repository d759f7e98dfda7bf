"""The in-memory copy of a background save: independent of the state, into reused buffers, by several threads."""

from __future__ import annotations

import numpy as np
import pytest
from checkpoint_cases import Advection, assert_state_equal, global_state

import amrckpt as ac
from amrckpt.comm import SerialComm
from amrckpt.manager import _snapshot
from amrckpt.manager._snapshot import Snapshots, cores_per_rank

G = global_state(0, max_level=7)  # 467 leaves


def _state(n: int = 200) -> Advection:
    """The first ``n`` leaves of a test state, in arrays of their own."""
    st = G.local(0, n)
    # The simulation's own arrays (not views of the global case's).
    st.rho, st.vel = st.rho.copy(), st.vel.copy()
    st.modes = ac.HpData(st.modes.values.copy(), st.modes.counts.copy())
    m = st.mesh
    st.mesh = ac.Forest(m.tree.copy(), m.level.copy(), m.x.copy(), m.y.copy(), num_trees=m.num_trees)
    return st


def _arrays(st: Advection) -> list[np.ndarray]:
    m = st.mesh
    return [st.rho, st.vel, st.modes.values, st.modes.counts, m.tree, m.level, m.x, m.y]


@pytest.mark.parametrize("threads", [1, 3])
def test_a_copy_shares_nothing_and_is_equal(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_snapshot, "CHUNK_NBYTES", 64)  # many chunks per array
    st = _state()
    snap = Snapshots(threads)
    cp = snap.take(st)
    assert_state_equal(cp, st)
    assert cp.params == st.params and cp.params is not st.params
    for a, b in zip(_arrays(cp), _arrays(st), strict=True):
        assert not np.shares_memory(a, b) and a.dtype == b.dtype and a.shape == b.shape
    before = _state()
    st.rho[:] = -1.0  # the simulation goes on
    st.modes.values[:] = 7.0
    st.mesh.x[:] = 0
    st.params.cfl = 0.0
    assert_state_equal(cp, before)
    snap.clear()


def test_buffers_are_reused_and_grow() -> None:
    snap = Snapshots(2)
    a = snap.take(_state(200))
    addr = a.rho.__array_interface__["data"][0]
    b = snap.take(_state(180))  # smaller: the same buffer
    assert b.rho.__array_interface__["data"][0] == addr
    assert_state_equal(b, _state(180))
    c = snap.take(_state(400))  # larger: a new buffer, with room to spare
    assert_state_equal(c, _state(400))
    assert snap._buffers[("rho", "")].nbytes == 400 * 8 * 5 // 4
    snap.clear()
    assert not snap._buffers


def test_odd_arrays() -> None:
    st = _state(50)
    st.vel = np.asfortranarray(st.vel)  # not C-contiguous: copied by numpy as a whole
    cp = Snapshots(2).take(st)
    assert np.array_equal(cp.vel, st.vel) and not np.shares_memory(cp.vel, st.vel)
    empty = _state(50)
    empty.modes = ac.HpData(np.zeros(0), np.zeros(50, dtype=np.int64))
    cp = Snapshots(2).take(empty)
    assert cp.modes.values.shape == (0,) and np.array_equal(cp.modes.counts, empty.modes.counts)


def test_cores_per_rank_serial() -> None:
    assert cores_per_rank(SerialComm()) >= 1


def test_a_read_only_array_that_owns_its_memory_is_shared_not_copied() -> None:
    """An array nothing can write (read-only down to its memory) is shared; any other is copied."""
    st = _state()
    st.rho.flags.writeable = False  # owns its memory: frozen
    writable = st.vel.copy()
    st.vel = writable[:]  # a view of a writable array, then made read-only: the base can still change
    st.vel.flags.writeable = False
    cp = Snapshots(1).take(st)
    assert cp.rho is st.rho
    assert not np.shares_memory(cp.vel, writable)
    writable += 1.0  # the simulation writes through its own name: the copy keeps the old values
    assert not np.array_equal(cp.vel, writable)


def test_frozen_follows_the_chain_of_bases_to_memory_nothing_else_writes() -> None:
    """Read-only views of read-only arrays, and of bytes, are frozen; of a bytearray or a writable array, not."""
    owner = np.arange(8.0)
    owner.flags.writeable = False
    view = owner[2:]
    assert _snapshot.frozen(owner) and _snapshot.frozen(view) and _snapshot.frozen(view[::2])
    assert _snapshot.frozen(np.frombuffer(bytes(16), dtype=np.float64))
    ro = np.frombuffer(bytearray(16), dtype=np.float64)
    ro.flags.writeable = False
    assert not _snapshot.frozen(ro)
    assert not _snapshot.frozen(np.arange(3.0))
