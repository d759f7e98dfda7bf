"""Tests of amrckpt.sfc: Morton and Hilbert keys, forest order, linear forests."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from amrckpt import sfc
from amrckpt.errors import AmrckptError, PartitionError

DIMS = (2, 3)
CURVES = ("morton", "hilbert")


# --------------------------------------------------------------------------- plain references


def ref_morton(coords: tuple[int, ...], dim: int) -> int:
    """Bit by bit, as p4est_quadrant_linear_id interleaves at maximum level."""
    key = 0
    for i in range(sfc.MAXLEVEL[dim]):
        for j, c in enumerate(coords):
            key |= ((c >> i) & 1) << (dim * i + j)
    return key


def ref_linear_id(coords: tuple[int, ...], level: int, dim: int) -> int:
    """p4est_quadrant_linear_id(q, level), transcribed."""
    L = sfc.MAXLEVEL[dim]
    cs = [c >> (L - level) for c in coords]
    idx = 0
    for i in range(level + 2):
        for j, c in enumerate(cs):
            idx |= (c & (1 << i)) << ((dim - 1) * i + j)
    return idx


def ref_hilbert(coords: tuple[int, ...], dim: int, level: int | None = None) -> int:
    """Hamilton's HilbertIndex (TR CS-2006-07, algorithm 2), one bit level at a time.

    With ``level``: the index of the leaf's first max-level cell.
    """
    n, L = dim, sfc.MAXLEVEL[dim]
    full = (1 << n) - 1

    def rotr(b: int, r: int) -> int:
        r %= n
        return ((b >> r) | (b << (n - r))) & full

    def rotl(b: int, r: int) -> int:
        r %= n
        return ((b << r) | (b >> (n - r))) & full

    def gcinv(g: int) -> int:
        i = 0
        while g:
            i ^= g
            g >>= 1
        return i

    def tsb(i: int) -> int:
        c = 0
        while i & 1:
            i >>= 1
            c += 1
        return c

    def e_of(w: int) -> int:
        if w == 0:
            return 0
        g = 2 * ((w - 1) // 2)
        return g ^ (g >> 1)

    def d_of(w: int) -> int:
        if w == 0:
            return 0
        return (tsb(w - 1) if w % 2 == 0 else tsb(w)) % n

    lev = L if level is None else level
    h, e, d = 0, 0, 0
    for i in range(L - 1, L - 1 - lev, -1):
        bits = sum(((c >> i) & 1) << j for j, c in enumerate(coords))
        w = gcinv(rotr(bits ^ e, d + 1))
        e ^= rotl(e_of(w), d + 1)
        d = (d + d_of(w) + 1) % n
        h = (h << n) | w
    return h << (dim * (L - lev))


def p4est_compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """p4est_quadrant_compare (p4est_bits.c) for (level, x, y[, z]), non-negative coordinates."""
    la, *ca = a
    lb, *cb = b
    exclorx, exclory = ca[0] ^ cb[0], ca[1] ^ cb[1]
    exclor = exclorxy = exclorx | exclory
    if len(ca) == 3:
        exclorz = ca[2] ^ cb[2]
        exclor = exclorxy | exclorz
    if not exclor:
        return la - lb
    if len(ca) == 3 and exclorz > (exclor ^ exclorz):
        p1, p2 = ca[2], cb[2]
    elif exclory > (exclorxy ^ exclory):
        p1, p2 = ca[1], cb[1]
    else:
        p1, p2 = ca[0], cb[0]
    return 1 if p1 > p2 else -1


# --------------------------------------------------------------------------- generators


def random_leaves(rng: np.random.Generator, n: int, dim: int, num_trees: int = 1, maxlevel: int | None = None):
    """Random (overlapping, unsorted) valid leaves."""
    L = sfc.MAXLEVEL[dim]
    top = sfc.QMAXLEVEL[dim] if maxlevel is None else maxlevel
    level = rng.integers(0, top + 1, n).astype(np.int8)
    shift = (L - level).astype(np.int64)
    coords = [((rng.integers(0, sfc.ROOT_LEN[dim], n) >> shift) << shift).astype(np.int32) for _ in range(dim)]
    tree = rng.integers(0, num_trees, n).astype(np.int32)
    return tree, level, coords


def refined_forest(rng: np.random.Generator, dim: int, num_trees: int, rounds: int, p: float = 0.3, maxlevel: int = 8):
    """A complete forest built by random refinement, in random order."""
    L = sfc.MAXLEVEL[dim]
    tree = np.arange(num_trees, dtype=np.int32)
    level = np.zeros(num_trees, dtype=np.int8)
    coords = [np.zeros(num_trees, dtype=np.int32) for _ in range(dim)]
    for _ in range(rounds):
        refine = (rng.random(tree.shape[0]) < p) & (level < maxlevel)
        if not refine.any():
            continue
        keep = ~refine
        half = (1 << (L - level[refine].astype(np.int64) - 1)).astype(np.int32)
        new_tree, new_level, new_coords = [tree[keep]], [level[keep]], [[c[keep]] for c in coords]
        for child in range(1 << dim):
            new_tree.append(tree[refine])
            new_level.append(level[refine] + 1)
            for j in range(dim):
                new_coords[j].append(coords[j][refine] + ((child >> j) & 1) * half)
        tree = np.concatenate(new_tree)
        level = np.concatenate(new_level).astype(np.int8)
        coords = [np.concatenate(c) for c in new_coords]
    perm = rng.permutation(tree.shape[0])
    return tree[perm], level[perm], [c[perm] for c in coords]


def sorted_forest(rng, dim, num_trees, rounds, curve, **kw):
    tree, level, coords = refined_forest(rng, dim, num_trees, rounds, **kw)
    order = sfc.sfc_order(tree, level, *coords, curve=curve)
    return tree[order], level[order], [c[order] for c in coords]


def zarg(coords):
    """(x, y, z-or-None) from a list of coordinate arrays."""
    return (coords[0], coords[1], coords[2] if len(coords) == 3 else None)


@st.composite
def leaf_sets(draw, dim: int | None = None, min_size: int = 0, max_size: int = 40):
    dim = draw(st.sampled_from(DIMS)) if dim is None else dim
    L = sfc.MAXLEVEL[dim]
    n = draw(st.integers(min_size, max_size))
    levels = draw(st.lists(st.integers(0, sfc.QMAXLEVEL[dim]), min_size=n, max_size=n))
    coords = [draw(st.lists(st.integers(0, sfc.ROOT_LEN[dim] - 1), min_size=n, max_size=n)) for _ in range(dim)]
    coords = [[(c >> (L - lv)) << (L - lv) for c, lv in zip(cs, levels, strict=True)] for cs in coords]
    trees = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return (
        dim,
        np.array(trees, dtype=np.int32),
        np.array(levels, dtype=np.int8),
        [np.array(c, dtype=np.int32) for c in coords],
    )


# --------------------------------------------------------------------------- constants


def test_constants_are_p4est():
    assert sfc.MAXLEVEL == {2: 30, 3: 19}
    assert sfc.QMAXLEVEL == {2: 29, 3: 18}
    assert sfc.ROOT_LEN == {2: 2**30, 3: 2**19}
    assert sfc.CURVES == ("morton", "hilbert")


# --------------------------------------------------------------------------- Morton


@pytest.mark.parametrize("dim", DIMS)
def test_morton_matches_bitwise_reference(dim):
    rng = np.random.default_rng(1)
    n = 300
    coords = [rng.integers(0, sfc.ROOT_LEN[dim], n, dtype=np.int32) for _ in range(dim)]
    coords[0][:3] = [0, sfc.ROOT_LEN[dim] - 1, 0]
    coords[1][:3] = [0, sfc.ROOT_LEN[dim] - 1, sfc.ROOT_LEN[dim] - 1]
    keys = sfc.morton_keys(*zarg(coords))
    assert keys.dtype == np.uint64 and keys.shape == (n,)
    ref = [ref_morton(tuple(int(c[i]) for c in coords), dim) for i in range(n)]
    assert keys.tolist() == ref
    if dim == 2:
        assert int(keys[1]) == 2**60 - 1
    assert int(keys.max()) < 2 ** (dim * sfc.MAXLEVEL[dim])


@given(data=leaf_sets(min_size=1))
def test_morton_shifted_is_p4est_linear_id(data):
    dim, _, level, coords = data
    L = sfc.MAXLEVEL[dim]
    keys = sfc.morton_keys(*zarg(coords), level=level)
    for i in range(level.shape[0]):
        lv = int(level[i])
        ref = ref_linear_id(tuple(int(c[i]) for c in coords), lv, dim)
        assert int(keys[i]) >> (dim * (L - lv)) == ref


@pytest.mark.parametrize("dim", DIMS)
def test_morton_across_blocks(dim):
    # More than one internal block: compare with a bit-loop reference vectorized over leaves.
    rng = np.random.default_rng(2)
    n = 3 * 65536 + 17
    coords = [rng.integers(0, sfc.ROOT_LEN[dim], n, dtype=np.int32) for _ in range(dim)]
    ref = np.zeros(n, dtype=np.uint64)
    for i in range(sfc.MAXLEVEL[dim]):
        for j, c in enumerate(coords):
            ref |= ((c.astype(np.uint64) >> np.uint64(i)) & np.uint64(1)) << np.uint64(dim * i + j)
    np.testing.assert_array_equal(sfc.morton_keys(*zarg(coords)), ref)
    back = sfc.morton_decode(ref, dim)
    for a, b in zip(back, coords, strict=True):
        np.testing.assert_array_equal(a, b)


@given(data=leaf_sets())
def test_morton_decode_roundtrip(data):
    dim, _, _, coords = data
    keys = sfc.morton_keys(*zarg(coords))
    back = sfc.morton_decode(keys, dim)
    assert len(back) == dim
    for a, b in zip(back, coords, strict=True):
        assert a.dtype == np.int32
        np.testing.assert_array_equal(a, b)
    # Signed keys are accepted as well.
    for a, b in zip(sfc.morton_decode(keys.astype(np.int64), dim), coords, strict=True):
        np.testing.assert_array_equal(a, b)


def test_morton_decode_rejects():
    with pytest.raises(PartitionError, match="dim"):
        sfc.morton_decode([0], 4)
    with pytest.raises(PartitionError, match="not below"):
        sfc.morton_decode(np.array([2**60], dtype=np.uint64), 2)
    with pytest.raises(PartitionError, match="negative"):
        sfc.morton_decode(np.array([-1]), 3)
    with pytest.raises(PartitionError, match="integer"):
        sfc.morton_decode(np.array([1.0]), 2)
    assert [a.shape for a in sfc.morton_decode([], 2)] == [(0,), (0,)]


# --------------------------------------------------------------------------- Hilbert


@pytest.mark.parametrize("dim", DIMS)
def test_hilbert_matches_reference(dim):
    rng = np.random.default_rng(3)
    n = 300
    coords = [rng.integers(0, sfc.ROOT_LEN[dim], n, dtype=np.int32) for _ in range(dim)]
    keys = sfc.hilbert_keys(*zarg(coords))
    assert keys.dtype == np.uint64
    assert keys.tolist() == [ref_hilbert(tuple(int(c[i]) for c in coords), dim) for i in range(n)]
    _, level, coords = random_leaves(rng, n, dim)
    keys = sfc.hilbert_keys(*zarg(coords), level=level)
    ref = [ref_hilbert(tuple(int(c[i]) for c in coords), dim, int(level[i])) for i in range(n)]
    assert keys.tolist() == ref


@pytest.mark.parametrize(("dim", "maxlevel"), [(2, 5), (3, 3)])
def test_hilbert_uniform_grids_visit_face_neighbors(dim, maxlevel):
    L = sfc.MAXLEVEL[dim]
    for level in range(maxlevel + 1):
        leaves = sfc.uniform_leaves(level, 1, dim)
        coords = [leaves.x, leaves.y] + ([leaves.z] if dim == 3 else [])
        keys = sfc.hilbert_keys(*zarg(coords), level=leaves.level)
        h = 1 << (L - level)
        # A bijection onto the level's indices ...
        np.testing.assert_array_equal(np.sort(keys >> np.uint64(dim * (L - level))), np.arange(1 << (dim * level)))
        order = np.argsort(keys)
        path = np.stack([c[order] for c in coords]) // h
        # ... whose consecutive cells share a face: exactly one coordinate moves by one.
        steps = np.abs(np.diff(path.astype(np.int64), axis=1))
        assert (steps.sum(axis=0) == 1).all()
        # Entry at the origin, exit at the corner (1, 0[, 0]).
        assert path[:, 0].tolist() == [0] * dim
        assert path[:, -1].tolist() == [(1 << level) - 1] + [0] * (dim - 1)
        # The Morton curve does not have the property (from level 2 on).
        if level >= 2:
            mpath = np.stack(coords) // h
            assert not (np.abs(np.diff(mpath.astype(np.int64), axis=1)).sum(axis=0) == 1).all()


@given(data=leaf_sets(min_size=1), curve=st.sampled_from(CURVES))
def test_children_ranges_tile_their_parent(data, curve):
    dim, _, level, coords = data
    L = sfc.MAXLEVEL[dim]
    ok = level < sfc.QMAXLEVEL[dim]
    level = level[ok]
    coords = [c[ok] for c in coords]
    first, stop = sfc.leaf_ranges(*zarg(coords), level=level, curve=curve)
    for i in range(level.shape[0]):
        half = 1 << (L - int(level[i]) - 1)
        kids = [[int(coords[j][i]) + ((child >> j) & 1) * half for j in range(dim)] for child in range(1 << dim)]
        kc = [np.array(col, dtype=np.int32) for col in zip(*kids, strict=True)]
        kf, ks = sfc.leaf_ranges(*zarg(kc), level=np.full(1 << dim, level[i] + 1, dtype=np.int8), curve=curve)
        o = np.argsort(kf)
        kf, ks = kf[o], ks[o]
        assert int(kf[0]) == int(first[i]) and int(ks[-1]) == int(stop[i])
        np.testing.assert_array_equal(kf[1:], ks[:-1])


@pytest.mark.parametrize("dim", DIMS)
def test_hilbert_refined_mesh_is_contiguous_and_face_connected(dim):
    rng = np.random.default_rng(4)
    L = sfc.MAXLEVEL[dim]
    tree, level, coords = sorted_forest(rng, dim, 3, rounds=6 if dim == 2 else 4, curve="hilbert", maxlevel=7)
    assert np.unique(level).size > 2
    first, stop = sfc.leaf_ranges(*zarg(coords), level=level, curve="hilbert")
    for t in range(3):
        sel = tree == t
        f, s = first[sel], stop[sel]
        assert int(f[0]) == 0 and int(s[-1]) == 2 ** (dim * L)
        np.testing.assert_array_equal(f[1:], s[:-1])  # disjoint and contiguous
        lo = np.stack([c[sel] for c in coords]).astype(np.int64)
        hi = lo + (1 << (L - level[sel].astype(np.int64)))
        a_lo, a_hi, b_lo, b_hi = lo[:, :-1], hi[:, :-1], lo[:, 1:], hi[:, 1:]
        touch = (a_hi == b_lo) | (b_hi == a_lo)
        overlap = (np.minimum(a_hi, b_hi) - np.maximum(a_lo, b_lo)) > 0
        # Consecutive leaves share part of a face: touch along one axis, overlap along the others.
        assert ((touch.sum(axis=0) == 1) & (overlap.sum(axis=0) == dim - 1)).all()
    sfc.check_linear_forest(tree, level, *zarg(coords), curve="hilbert", num_trees=3, complete=True)
    assert not sfc.is_linear_forest(tree, level, *zarg(coords), curve="morton")


# --------------------------------------------------------------------------- order


@given(data=leaf_sets(), curve=st.sampled_from(CURVES))
def test_sfc_order_is_tree_key_level(data, curve):
    dim, tree, level, coords = data
    order = sfc.sfc_order(tree, level, *zarg(coords), curve=curve)
    assert sorted(order.tolist()) == list(range(tree.shape[0]))
    ref_key = ref_morton if curve == "morton" else (lambda c, d, lv: ref_hilbert(c, d, lv))
    keyed = []
    for i in range(tree.shape[0]):
        c = tuple(int(a[i]) for a in coords)
        k = ref_key(c, dim) if curve == "morton" else ref_key(c, dim, int(level[i]))
        keyed.append((int(tree[i]), k, int(level[i]), i))
    assert order.tolist() == [k[3] for k in sorted(keyed)]  # sorted() is stable: ties keep the input order


@given(data=leaf_sets())
def test_morton_order_is_p4est_quadrant_compare(data):
    _, _, level, coords = data
    tree = np.zeros_like(level, dtype=np.int32)
    order = sfc.sfc_order(tree, level, *zarg(coords))
    quads = [(int(level[i]), *(int(c[i]) for c in coords)) for i in range(level.shape[0])]
    ref = sorted(range(len(quads)), key=functools.cmp_to_key(lambda a, b: p4est_compare(quads[a], quads[b])))
    assert [quads[i] for i in order.tolist()] == [quads[i] for i in ref]


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("dim", DIMS)
def test_ancestor_comes_before_descendants(dim, curve):
    L = sfc.MAXLEVEL[dim]
    anc = [1 << (L - 1)] + [0] * (dim - 1)  # a level-1 leaf
    # Its first descendant along the curve at each deeper level, plus the ancestor, shuffled.
    f, _ = sfc.leaf_ranges(*zarg([np.array([a]) for a in anc]), level=np.array([1]), curve=curve)
    levels, coords = [1], [list(anc)]
    for lv in range(2, 6):
        kids = [np.array(c, dtype=np.int32) for c in itertools.product(*[range(a, a + (1 << (L - 1)), 1 << (L - lv)) for a in anc])]
        kc = [np.array(col) for col in zip(*kids, strict=True)]
        kf = sfc.sfc_keys(*zarg(kc), level=np.full(len(kids), lv), curve=curve)
        j = int(np.argmin(kf))
        assert int(kf[j]) == int(f[0])
        levels.append(lv)
        coords.append([int(c[j]) for c in kc])
    perm = np.array([3, 0, 4, 2, 1])
    lv = np.array(levels, dtype=np.int8)[perm]
    cs = [np.array([c[j] for c in coords], dtype=np.int32)[perm] for j in range(dim)]
    order = sfc.sfc_order(np.zeros(5, np.int32), lv, *zarg(cs), curve=curve)
    assert lv[order].tolist() == [1, 2, 3, 4, 5]


def test_sfc_order_is_tree_major_and_stable():
    rng = np.random.default_rng(5)
    leaves = sfc.uniform_leaves(2, num_trees=3, dim=2)
    perm = rng.permutation(leaves.num_leaves)
    shuffled = [a[perm] for a in leaves[:4]]
    order = sfc.sfc_order(*shuffled)
    for a, b in zip(leaves[:4], shuffled, strict=True):
        np.testing.assert_array_equal(a, b[order])
    # Duplicates keep their input order.
    tree = np.array([1, 0, 1, 0, 1], dtype=np.int32)
    z = np.zeros(5, dtype=np.int32)
    order = sfc.sfc_order(tree, np.zeros(5, np.int8), z, z)
    assert order.tolist() == [1, 3, 0, 2, 4]
    # Tree indices wider than one 16-bit radix digit, int32 and int64.
    big = np.array([70000, 5, 2**31 - 2, 65536, 5, 70000, 65535], dtype=np.int32)
    x = np.array([0, 1 << 29, 0, 0, 0, 0, 0], dtype=np.int32)
    lv = np.array([1, 1, 0, 0, 1, 0, 0], dtype=np.int8)
    order = sfc.sfc_order(big, lv, x, np.zeros(7, np.int32))
    assert order.tolist() == [4, 1, 6, 3, 5, 0, 2]
    assert sfc.sfc_order(big.astype(np.int64) + 2**40, lv, x, np.zeros(7, np.int32)).tolist() == order.tolist()


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize("dim", DIMS)
def test_sfc_order_of_shuffled_refined_forest_is_complete(dim, curve):
    rng = np.random.default_rng(6)
    tree, level, coords = sorted_forest(rng, dim, 4, rounds=5 if dim == 2 else 3, curve=curve)
    sfc.check_linear_forest(tree, level, *zarg(coords), curve=curve, num_trees=4, complete=True)
    assert sfc.is_linear_forest(tree, level, *zarg(coords), curve=curve, num_trees=4, complete=True)
    # Volumes add up to the roots (integer arithmetic).
    vol = np.left_shift(1, dim * (sfc.MAXLEVEL[dim] - level.astype(np.int64)))
    assert np.bincount(tree, minlength=4).min() > 0
    for t in range(4):
        assert int(vol[tree == t].sum()) == 2 ** (dim * sfc.MAXLEVEL[dim])


# --------------------------------------------------------------------------- linear forests


def forest_2d():
    """Tree 0 at level 1 with its last quadrant refined; tree 1 at level 1."""
    L = 30
    h, q = 1 << (L - 1), 1 << (L - 2)
    x = [0, h, 0, h, h + q, h, h + q, 0, h, 0, h]
    y = [0, 0, h, h, h, h + q, h + q, 0, 0, h, h]
    level = [1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1]
    tree = [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    return (np.array(tree, np.int32), np.array(level, np.int8), np.array(x, np.int32), np.array(y, np.int32))


def mutated(leaves, i, **cols):
    out = [a.copy() for a in leaves]
    names = ("tree", "level", "x", "y")
    for k, v in cols.items():
        out[names.index(k)][i] = v
    return out


def test_linear_forest_accepts_valid():
    leaves = forest_2d()
    sfc.check_linear_forest(*leaves, num_trees=2, complete=True)
    assert sfc.is_linear_forest(*leaves, num_trees=2, complete=True)
    assert sfc.is_linear_forest(*leaves, complete=True)  # num_trees inferred
    assert not sfc.is_linear_forest(*leaves, num_trees=3, complete=True)  # tree 2 is missing
    assert sfc.is_linear_forest(*leaves, num_trees=3)
    empty = np.zeros(0, np.int32)
    assert sfc.is_linear_forest(empty, empty.astype(np.int8), empty, empty, complete=True, num_trees=0)
    assert not sfc.is_linear_forest(empty, empty.astype(np.int8), empty, empty, complete=True, num_trees=1)
    assert sfc.is_linear_forest(*sfc.uniform_leaves(0, 5, 3), complete=True)
    assert sfc.is_linear_forest(*sfc.uniform_leaves(3, 2, 3, curve="hilbert"), curve="hilbert", complete=True)


def test_linear_forest_rejects_unsorted_with_index():
    leaves = forest_2d()
    swapped = [np.concatenate([a[:4], a[[5, 4]], a[6:]]) for a in leaves]
    with pytest.raises(PartitionError, match=r"leaf 5 .* comes before leaf 4 in morton order"):
        sfc.check_linear_forest(*swapped)
    assert not sfc.is_linear_forest(*swapped)


def test_linear_forest_rejects_overlap_with_index():
    leaves = forest_2d()
    # Replace leaf 3 (level 2) by its parent: leaves 4.. lie inside it.
    bad = mutated(leaves, 3, level=1)
    with pytest.raises(PartitionError, match=r"leaf 4 .* lies inside leaf 3"):
        sfc.check_linear_forest(*bad)
    dup = [np.insert(a, 2, a[2]) for a in leaves]
    with pytest.raises(PartitionError, match=r"leaf 3 .* duplicates leaf 2"):
        sfc.check_linear_forest(*dup)
    # An ancestor after its descendant is out of order.
    anc = [np.insert(a, 4, v) for a, v in zip(leaves, (0, 1, 1 << 29, 1 << 29), strict=True)]
    with pytest.raises(PartitionError, match=r"leaf 4 .* comes before leaf 3"):
        sfc.check_linear_forest(*anc)


def test_linear_forest_rejects_trees_out_of_order():
    leaves = forest_2d()
    bad = mutated(leaves, 8, tree=0)
    with pytest.raises(PartitionError, match=r"leaf 8 .* tree 0 is below tree 1 of leaf 7"):
        sfc.check_linear_forest(*bad)
    with pytest.raises(PartitionError, match=r"leaf 7: tree 1 is not below num_trees = 1"):
        sfc.check_linear_forest(*leaves, num_trees=1)
    with pytest.raises(PartitionError, match=r"leaf 0: tree -1 is negative"):
        sfc.check_linear_forest(*mutated(leaves, 0, tree=-1))


def test_complete_forest_rejects_gaps():
    leaves = forest_2d()
    missing_first = [a[1:] for a in leaves]
    sfc.check_linear_forest(*missing_first)
    with pytest.raises(PartitionError, match=r"gap before leaf 0 .* start of its tree"):
        sfc.check_linear_forest(*missing_first, complete=True)
    missing_mid = [np.delete(a, 4) for a in leaves]
    with pytest.raises(PartitionError, match=r"gap before leaf 4 .* end of leaf 3"):
        sfc.check_linear_forest(*missing_mid, complete=True)
    missing_last = [np.delete(a, 6) for a in leaves]
    with pytest.raises(PartitionError, match=r"gap after leaf 5, the last of tree 0"):
        sfc.check_linear_forest(*missing_last, complete=True)
    missing_tree = [a[:7] for a in leaves]
    with pytest.raises(PartitionError, match=r"tree 1 of 2 has no leaves"):
        sfc.check_linear_forest(*missing_tree, num_trees=2, complete=True)
    sfc.check_linear_forest(*missing_tree, complete=True)


def test_invalid_leaves_are_rejected():
    leaves = forest_2d()
    with pytest.raises(
        PartitionError, match=r"leaf 3: coordinates \(536870912, 536870912\) are not multiples of 2\*\*30, as a leaf of level 0"
    ):
        sfc.check_linear_forest(*mutated(leaves, 3, level=0))
    with pytest.raises(PartitionError, match=r"leaf 2: level 30 is outside \[0, 29\]"):
        sfc.check_linear_forest(*mutated(leaves, 2, level=30))
    with pytest.raises(PartitionError, match=r"leaf 1: x = -1 is outside the tree"):
        sfc.morton_keys(np.array([0, -1]), np.array([0, 0]))
    with pytest.raises(PartitionError, match=r"leaf 0: z = 524288 is outside the tree"):
        sfc.hilbert_keys([0], [0], [2**19])
    with pytest.raises(PartitionError, match="y has 1 entries but x has 2"):
        sfc.morton_keys([0, 0], [0])
    with pytest.raises(PartitionError, match="level has 1 entries"):
        sfc.morton_keys([0, 0], [0, 0], level=[0])
    with pytest.raises(PartitionError, match="tree has 1 entries"):
        sfc.sfc_order([0], [0, 0], [0, 0], [0, 0])
    with pytest.raises(PartitionError, match="integer dtype"):
        sfc.morton_keys(np.array([0.5]), np.array([0.0]))
    with pytest.raises(PartitionError, match="1-D"):
        sfc.morton_keys(np.zeros((2, 2), np.int32), np.zeros((2, 2), np.int32))
    with pytest.raises(PartitionError, match="curve"):
        sfc.sfc_order([0], [0], [0], [0], curve="peano")
    with pytest.raises(PartitionError, match="leaf_ranges needs the leaf levels"):
        sfc.leaf_ranges([0], [0], level=None)
    with pytest.raises(PartitionError, match="num_trees"):
        sfc.check_linear_forest(*leaves, num_trees=-1)
    assert isinstance(PartitionError("x"), AmrckptError)
    assert not sfc.is_linear_forest(*mutated(leaves, 3, level=0))


def test_check_false_skips_validation():
    # Documented: with check=False nothing is validated (and the keys are garbage).
    keys = sfc.morton_keys(np.array([3]), np.array([0]), level=np.array([0]), check=False)
    assert keys.tolist() == [5]


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize("curve", CURVES)
@given(data=leaf_sets())
def test_leaf_ranges(curve, data):
    dim, _, level, coords = data
    first, stop = sfc.leaf_ranges(*zarg(coords), level=level, curve=curve)
    assert first.dtype == stop.dtype == np.uint64
    np.testing.assert_array_equal(first, sfc.sfc_keys(*zarg(coords), level=level, curve=curve))
    L = sfc.MAXLEVEL[dim]
    assert [int(s - f) for f, s in zip(first, stop, strict=True)] == [2 ** (dim * (L - int(lv))) for lv in level]
    assert all(int(s) <= 2 ** (dim * L) for s in stop)
    if curve == "morton":
        np.testing.assert_array_equal(first, sfc.morton_keys(*zarg(coords)))


@pytest.mark.parametrize("dim", DIMS)
def test_uniform_leaves(dim):
    leaves = sfc.uniform_leaves(2, num_trees=3, dim=dim)
    tree, level, x, y, z = leaves
    assert leaves.dim == dim and (z is None) == (dim == 2)
    n = 3 * (1 << (dim * 2))
    assert leaves.num_leaves == n
    assert tree.dtype == np.int32 and level.dtype == np.int8 and x.dtype == y.dtype == np.int32
    assert np.bincount(tree).tolist() == [n // 3] * 3
    assert (level == 2).all()
    assert sfc.is_linear_forest(*leaves, num_trees=3, complete=True)
    keys = sfc.morton_keys(x, y, z)
    assert (np.diff(keys[tree == 1].astype(np.int64)) > 0).all()
    np.testing.assert_array_equal(sfc.sfc_order(*leaves), np.arange(n))
    h = sfc.uniform_leaves(2, num_trees=2, dim=dim, curve="hilbert")
    assert sfc.is_linear_forest(*h, curve="hilbert", complete=True)
    assert not sfc.is_linear_forest(*h, curve="morton")
    assert sfc.uniform_leaves(0, 0, dim).num_leaves == 0
    with pytest.raises(PartitionError):
        sfc.uniform_leaves(sfc.QMAXLEVEL[dim] + 1, 1, dim)
    with pytest.raises(PartitionError):
        sfc.uniform_leaves(1, -1, dim)
    with pytest.raises(PartitionError):
        sfc.uniform_leaves(1, 1, 4)


def test_empty_inputs():
    e = np.zeros(0, dtype=np.int32)
    assert sfc.morton_keys(e, e).shape == (0,)
    assert sfc.hilbert_keys(e, e, e, level=e.astype(np.int8)).shape == (0,)
    assert sfc.sfc_order(e, e, e, e).shape == (0,)
    assert sfc.sfc_order([], [], [], []).shape == (0,)
    f, s = sfc.leaf_ranges(e, e, level=e)
    assert f.shape == s.shape == (0,)


@pytest.mark.parametrize("dim", DIMS)
def test_hilbert_across_blocks_and_dtypes(dim):
    rng = np.random.default_rng(7)
    n = 2 * 65536 + 5
    _, level, coords = random_leaves(rng, n, dim)
    keys = sfc.hilbert_keys(*zarg(coords), level=level)
    sample = rng.choice(n, 64, replace=False)
    for i in sample:
        c = tuple(int(a[i]) for a in coords)
        assert int(keys[i]) == ref_hilbert(c, dim, int(level[i]))
    keys64 = sfc.hilbert_keys(*zarg([c.astype(np.int64) for c in coords]), level=level.astype(np.int64))
    np.testing.assert_array_equal(keys, keys64)
    keys_u = sfc.hilbert_keys(*zarg([c.astype(np.uint32) for c in coords]), level=level.astype(np.uint8))
    np.testing.assert_array_equal(keys, keys_u)


def _exact_linear(*leaves) -> bool:
    """check_linear_forest's exact check (curve keys), without its fast path."""
    from amrckpt.sfc import _linear

    saved = _linear._morton_linear
    _linear._morton_linear = lambda *a: False
    try:
        return sfc.is_linear_forest(*leaves)
    finally:
        _linear._morton_linear = saved


@pytest.mark.parametrize("dim", DIMS)
def test_morton_fast_path_agrees_with_the_keys(dim, monkeypatch):
    """The keyless Morton check (chunks, strided views) says linear exactly when the curve keys do."""
    from forests import random_forest

    from amrckpt.sfc import _linear

    monkeypatch.setattr(_linear, "_CHUNK", 7)  # pairs across chunk boundaries
    rng = np.random.default_rng(dim)
    L = sfc.MAXLEVEL[dim]
    verdicts = {True: 0, False: 0}
    for seed in range(60):
        lv = random_forest(dim, 1 + seed % 3, seed, level=1, rounds=3)
        cols = [a for a in lv if a is not None]  # tree, level, x, y[, z]
        n = cols[0].shape[0]
        for kind in ("none", "swap", "dup", "drop", "parent", "child", "shift", "coarser", "tree", "outside"):
            t, lev, *c = (a.copy() for a in cols)
            i = int(rng.integers(0, n - 1))
            if kind == "swap":
                for a in (t, lev, *c):
                    a[[i, i + 1]] = a[[i + 1, i]]
            elif kind in ("dup", "parent"):
                up = kind == "parent" and lev[i] > 0
                h = 1 << (L - int(lev[i]) + 1)
                t, lev = np.insert(t, i + 1, t[i]), np.insert(lev, i + 1, lev[i] - up)
                c = [np.insert(a, i + 1, a[i] // h * h if up else a[i]) for a in c]
            elif kind == "child" and lev[i] < 5:  # leaf i's last child after it: inside it, anchor larger
                h = 1 << (L - int(lev[i]) - 1)
                t, lev, c = np.insert(t, i + 1, t[i]), np.insert(lev, i + 1, lev[i] + 1), [np.insert(a, i + 1, a[i] + h) for a in c]
            elif kind == "drop":
                t, lev, c = np.delete(t, i), np.delete(lev, i), [np.delete(a, i) for a in c]
            elif kind == "shift":
                c[int(rng.integers(0, dim))][i] += 1 << (L - int(lev[i]))
            elif kind == "coarser":
                lev[i] = max(0, int(lev[i]) - 1)
            elif kind == "tree":
                t[i] += 1
            elif kind == "outside":
                c[0][i] = -c[0][i] - (1 << (L - int(lev[i])))
            # The same leaves as the strided fields of packed records (Forest.from_p4est's storage).
            rec = np.empty(t.shape[0], sfc.mesh_record_dtype(dim))
            for name, a in zip(rec.dtype.names, (t, *c, lev), strict=True):
                rec[name] = a
            views = [rec[name] for name in ("tree", "level", "x", "y", "z")[: dim + 2]]
            want = _exact_linear(t, lev, *c)
            for leaves in ((t, lev, *c), views):
                fast = _linear._morton_linear(*leaves, *([None] if dim == 2 else []))
                assert fast == want, (kind, seed)
                assert sfc.is_linear_forest(*leaves) == want
            verdicts[want] += 1
    assert verdicts[True] > 60 and verdicts[False] > 60
