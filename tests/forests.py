"""Random complete forests (every tree covered, Morton order) for the p4est tests, vectorized."""

from __future__ import annotations

import numpy as np

from amrckpt import sfc


def random_forest(dim: int, num_trees: int, seed: int, *, level: int = 1, rounds: int = 3, fraction: float = 0.3) -> sfc.Leaves:
    """Return a complete forest: a uniform one of ``level``, whose leaves are refined at random ``rounds`` times."""
    rng = np.random.default_rng(seed)
    lv = sfc.uniform_leaves(level, num_trees=num_trees, dim=dim)
    tree, lev = lv.tree.astype(np.int32), lv.level.astype(np.int8)
    coords = [c.astype(np.int32) for c in lv[2 : 2 + dim]]
    L = sfc.MAXLEVEL[dim]
    C = 1 << dim
    for _ in range(rounds):
        split = (rng.random(tree.shape[0]) < fraction) & (lev < sfc.QMAXLEVEL[dim])
        keep = ~split
        h = np.left_shift(1, L - lev[split].astype(np.int32) - 1).astype(np.int32)
        c = np.arange(C)
        kids = [np.repeat(coords[a][split], C) + np.tile((c >> a) & 1, int(split.sum())) * np.repeat(h, C) for a in range(dim)]
        tree = np.concatenate([tree[keep], np.repeat(tree[split], C)])
        lev = np.concatenate([lev[keep], np.repeat(lev[split] + 1, C)]).astype(np.int8)
        coords = [np.concatenate([coords[a][keep], kids[a]]).astype(np.int32) for a in range(dim)]
    order = sfc.sfc_order(tree, lev, *coords)
    z = coords[2][order] if dim == 3 else None
    return sfc.Leaves(tree[order], lev[order], coords[0][order], coords[1][order], z)


def families(lv: sfc.Leaves) -> np.ndarray:
    """The first leaf of every family of the forest (a serial reference, one family at a time)."""
    dim = lv.dim
    F, L = 1 << dim, sfc.MAXLEVEL[dim]
    coords = [lv.x, lv.y] + ([lv.z] if lv.z is not None else [])
    out = []
    i = 0
    N = lv.num_leaves
    while i + F <= N:
        lev = int(lv.level[i])
        side = 1 << (L - lev + 1)
        same = lev >= 1 and all(int(lv.level[i + k]) == lev and int(lv.tree[i + k]) == int(lv.tree[i]) for k in range(F))
        same = same and all(int(c[i]) % side == 0 for c in coords)
        same = same and all(int(c[i + k]) // side == int(c[i]) // side for c in coords for k in range(F))
        if same:
            out.append(i)
            i += F
        else:
            i += 1
    return np.array(out, dtype=np.int64)
