"""p4est's connectivity in amrckpt.sfc: built-ins, checks, bytes, placement (the real libp4est: tests/p4est)."""

from __future__ import annotations

import itertools
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amrckpt.errors import ConnectivityError, P4estFormatError
from amrckpt.sfc import Connectivity, shell_map

BUILTINS = {
    "unit2": lambda: Connectivity.unit(2),
    "unit3": lambda: Connectivity.unit(3),
    "periodic2": lambda: Connectivity.periodic(2),
    "periodic3": lambda: Connectivity.periodic(3),
    "star": Connectivity.star,
    "shell": Connectivity.shell,
    "brick42": lambda: Connectivity.brick((4, 2)),
    "brick325p": lambda: Connectivity.brick((3, 2, 5), (True, False, True)),
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtins_are_valid_and_round_trip_through_p4est_bytes(name: str) -> None:
    conn = BUILTINS[name]()
    conn.check()
    assert conn.is_valid()
    blob = conn.to_p4est_bytes("2.2")
    back, version, nbytes = Connectivity.from_p4est_bytes(blob + b"\0" * 7)
    assert back == conn and version == "2.2" and nbytes == len(blob)
    assert back.to_p4est_bytes("2.2") == blob
    assert pickle.loads(pickle.dumps(conn)) == conn
    with pytest.raises(AttributeError):
        conn.dim = 3  # type: ignore[misc]
    assert not conn.tree_to_tree.flags.writeable


def test_brick_numbering_is_p4est_morton() -> None:
    """p4est_connectivity_new_brick(4, 2): tree 2 is at (0, 1), tree 4 at (2, 0)."""
    conn = Connectivity.brick((4, 2))
    lo, _ = conn.bounding_boxes()
    assert lo.tolist()[:5] == [[0, 0], [1, 0], [0, 1], [1, 1], [2, 0]]
    # A 3 x 2 x 2 brick: every lattice cell once, face neighbours one apart.
    conn3 = Connectivity.brick((3, 2, 2))
    lo3, hi3 = conn3.bounding_boxes()
    assert sorted(map(tuple, lo3.astype(int).tolist())) == list(itertools.product(range(3), range(2), range(2)))
    assert np.array_equal(hi3 - lo3, np.ones((12, 3)))
    for face in range(6):
        a, sign = face // 2, 2 * (face % 2) - 1
        nb = conn3.tree_to_tree[:, face]
        inside = (lo3[:, a] + sign >= 0) & (lo3[:, a] + sign < (3, 2, 2)[a])
        assert np.array_equal(lo3[nb[inside], a], lo3[inside, a] + sign)
        assert np.array_equal(nb[~inside], np.flatnonzero(~inside))  # the boundary: the tree itself


@pytest.mark.parametrize("periodic", [(False, False), (True, False), (False, True), (True, True)])
def test_periodic_brick_links_across_the_boundary(periodic: tuple[bool, bool]) -> None:
    conn = Connectivity.brick((3, 1), periodic)
    conn.check()
    right_of_last = int(conn.tree_to_tree[2, 1])
    assert right_of_last == (0 if periodic[0] else 2)
    assert int(conn.tree_to_tree[0, 2]) == 0 and int(conn.tree_to_face[0, 2]) == (3 if periodic[1] else 2)
    assert conn.num_corners == (3 if periodic[0] else 2) * (1 if periodic[1] else 0)  # p4est: mc * nc


@given(st.data())
def test_any_single_change_of_a_valid_connectivity_is_caught_or_still_reciprocal(data: st.DataObject) -> None:
    """Change one face entry: check() passes exactly when every face link is still reciprocal."""
    conn = data.draw(st.sampled_from([BUILTINS[k]() for k in ("star", "brick42", "shell", "periodic3")]))
    K, F = conn.tree_to_tree.shape
    t, f = data.draw(st.integers(0, K - 1)), data.draw(st.integers(0, F - 1))
    ttt, ttf = conn.tree_to_tree.copy(), conn.tree_to_face.copy()
    if data.draw(st.booleans()):
        ttt[t, f] = data.draw(st.integers(0, K - 1))
    else:
        ttf[t, f] = data.draw(st.integers(0, F * (F // 2 if conn.dim == 2 else 4) - 1))
    kw = {n: getattr(conn, n) for n in ("tree_to_edge", "ett_offset", "edge_to_tree", "edge_to_edge")}
    kw |= {n: getattr(conn, n) for n in ("tree_to_corner", "ctt_offset", "corner_to_tree", "corner_to_corner")}
    changed = Connectivity(conn.dim, conn.vertices, conn.tree_to_vertex, ttt, ttf, **kw)
    F_ = F
    ok = True
    for a in range(K):
        for b in range(F_):
            nt, code = int(ttt[a, b]), int(ttf[a, b])
            nf, o = code % F_, code // F_
            if nt == a and nf == b:
                ok &= o == 0
            else:
                ok &= int(ttt[nt, nf]) == a and int(ttf[nt, nf]) == b + F_ * o
    assert changed.is_valid() == ok


def test_check_names_what_is_wrong() -> None:
    star = Connectivity.star()
    ttt = star.tree_to_tree.copy()
    ttt[0, 0] = 9
    with pytest.raises(ConnectivityError, match="tree to tree out of range in tree 0"):
        Connectivity(2, star.vertices, star.tree_to_vertex, ttt, star.tree_to_face, **_corners(star)).check()
    ctc = star.corner_to_corner.copy()
    ctc[1] = 1
    bad = Connectivity(2, star.vertices, star.tree_to_vertex, star.tree_to_tree, star.tree_to_face, **_corners(star, ctc=ctc))
    with pytest.raises(ConnectivityError, match="corner"):
        bad.check()
    shell = Connectivity.shell()
    ete = shell.edge_to_edge.copy()
    ete[0] = (ete[0] + 1) % 12
    kw = {n: getattr(shell, n) for n in ("tree_to_edge", "ett_offset", "edge_to_tree")}
    with pytest.raises(ConnectivityError, match="edge"):
        Connectivity(
            3, shell.vertices, shell.tree_to_vertex, shell.tree_to_tree, shell.tree_to_face, edge_to_edge=ete, **kw
        ).check()
    with pytest.raises(ConnectivityError, match="shape"):
        Connectivity(2, star.vertices, star.tree_to_vertex[:, :3], star.tree_to_tree, star.tree_to_face, **_corners(star))
    with pytest.raises(ConnectivityError, match="tree_to_corner must be given"):
        Connectivity(2, star.vertices, star.tree_to_vertex, star.tree_to_tree, star.tree_to_face, ctt_offset=[0, 0])
    with pytest.raises(ConnectivityError, match="shape"):
        Connectivity.brick((2,))


def _corners(conn: Connectivity, ctc: np.ndarray | None = None) -> dict[str, np.ndarray | None]:
    return {
        "tree_to_corner": conn.tree_to_corner,
        "ctt_offset": conn.ctt_offset,
        "corner_to_tree": conn.corner_to_tree,
        "corner_to_corner": conn.corner_to_corner if ctc is None else ctc,
    }


def test_damaged_p4est_bytes_are_named_and_allocate_nothing_large() -> None:
    blob = Connectivity.shell().to_p4est_bytes("2.2")
    for cut in (0, 7, 31, 40, 111, 112, 500, len(blob) - 1):
        with pytest.raises(P4estFormatError, match=r"ends inside|magic"):
            Connectivity.from_p4est_bytes(blob[:cut])
    huge = bytearray(blob)
    huge[48:56] = struct.pack("<Q", 2**30)  # num_vertices: 24 GiB of vertices that are not there
    with pytest.raises(P4estFormatError, match="ends inside the connectivity's arrays") as info:
        Connectivity.from_p4est_bytes(bytes(huge))
    assert info.value.section == "arrays"
    wrong = bytearray(blob)
    wrong[32:40] = struct.pack("<Q", 0x2000009)  # a p8est magic with p4est's format
    with pytest.raises(P4estFormatError, match="on-disk format"):
        Connectivity.from_p4est_bytes(bytes(wrong))
    flipped = bytearray(blob)
    tail = len(blob) - 72 * 5 - 19 * 4  # inside tree_to_face... of the shell: a reciprocity breaks
    flipped[tail] ^= 0x01
    with pytest.raises(P4estFormatError, match="not valid") as info:
        Connectivity.from_p4est_bytes(bytes(flipped))
    assert info.value.section == "connectivity"


def test_vertex_map_and_shell_map() -> None:
    star = Connectivity.star()
    corners = star.tree_corners()
    c = np.arange(4)
    ref = np.stack([c & 1, c >> 1], axis=1).astype(float)
    for t in range(6):
        assert np.allclose(star.map_points(np.full(4, t), ref), corners[t])
    mid = star.map_points([0], [[0.5, 0.5]])
    assert np.allclose(mid, corners[0].mean(axis=0))
    shell = Connectivity.shell()
    rng = np.random.default_rng(1)
    tree = rng.integers(0, 24, 500)
    pts = shell_map(shell, tree, rng.random((500, 3)), 1.0, 2.0)
    r = np.linalg.norm(pts, axis=1)
    assert r.min() >= 1.0 - 1e-12 and r.max() <= 2.0 + 1e-12
    cap_dirs = [(1, 0, 0), (0, 0, -1), (-1, 0, 0), (0, 0, 1), (0, 1, 0), (0, -1, 0)]
    for cap, d in enumerate(cap_dirs):  # each cap of four trees faces its own direction
        sel = tree // 4 == cap
        assert (pts[sel] @ np.array(d, dtype=float) > 0).all()
    with pytest.raises(ConnectivityError):
        shell_map(star, [0], [[0.5, 0.5, 0.5]], 1.0, 2.0)
