"""amrckpt's refine, coarsen and 2:1 balance (amrckpt.sfc) against the real libp4est: tests/p4est/p4est_tool.c ``adapt``.

The tool builds the same forest in p4est (``p4est_new_ext`` and ``p4est_refine_ext`` down to the given leaves), gives
each leaf the same mark, runs ``p4est_refine_ext`` / ``p4est_coarsen_ext`` (non-recursive, once per level) or
``p4est_balance`` and writes its leaves; amrckpt's leaves must be the same, leaf for leaf.  2D (p4est) and 3D (p8est),
on bricks (also periodic), the periodic unit square and cube, and connectivities whose trees are rotated against each
other with irregular corners and edges: p4est's star (six trees around a corner, 2D) and shell (24 trees, 3D), the
built-in ones amrckpt has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from forests import random_forest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from p4est import build

from amrckpt import sfc

REASON = build.skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"the real libp4est is not available: {REASON}")

CONNS: dict[str, tuple[int, Any]] = {
    "brick:3,2": (2, lambda: sfc.Connectivity.brick((3, 2))),
    "brick:2,2:11": (2, lambda: sfc.Connectivity.brick((2, 2), periodic=True)),
    "star": (2, sfc.Connectivity.star),
    "periodic-2d": (2, lambda: sfc.Connectivity.periodic(2)),
    "brick:2,1,2": (3, lambda: sfc.Connectivity.brick((2, 1, 2))),
    "brick:2,2,2:111": (3, lambda: sfc.Connectivity.brick((2, 2, 2), periodic=True)),
    "shell": (3, sfc.Connectivity.shell),
    "periodic-3d": (3, lambda: sfc.Connectivity.periodic(3)),
}
TOOL_NAME = {"periodic-2d": "periodic", "periodic-3d": "periodic"}


def _forest(dim: int, conn: sfc.Connectivity, seed: int, rounds: int = 2) -> sfc.Forest:
    lv = random_forest(dim, conn.num_trees, seed, level=1, rounds=rounds, fraction=0.25)
    return sfc.Forest(lv.tree, lv.level, *lv[2:], num_trees=conn.num_trees)


def _records(f: sfc.Forest) -> np.ndarray:
    return np.stack([f.tree, *f.coords(), f.level.astype(np.int32)], axis=1).astype("<i4")


def _p4est(tmp: Path, name: str, f: sfc.Forest, op: str, arg: str, marks: np.ndarray | None) -> sfc.Forest:
    src, out = tmp / "in.bin", tmp / "out.bin"
    src.write_bytes(_records(f).tobytes())
    mk = "-"
    if marks is not None:
        (tmp / "marks.bin").write_bytes(marks.astype(np.uint8).tobytes())
        mk = str(tmp / "marks.bin")
    build.run(f.dim, "adapt", TOOL_NAME.get(name, name), src, out, op, arg, mk)
    rec = np.frombuffer(out.read_bytes(), dtype="<i4").reshape(-1, f.dim + 2)
    return sfc.Forest(rec[:, 0], rec[:, -1], *rec[:, 1:-1].T, num_trees=f.num_trees)


def _same(a: sfc.Forest, b: sfc.Forest) -> None:
    assert len(a) == len(b), (len(a), len(b))
    assert a == b


CASES = list(CONNS)


@pytest.mark.parametrize("name", CASES)
def test_refine_uniform_and_marked_equal_p4est(tmp_path: Path, name: str) -> None:
    dim, make = CONNS[name]
    conn = make()
    f = _forest(dim, conn, 7)
    _same(sfc.refine(f, 1).forest, _p4est(tmp_path, name, f, "refine", "1:-1", None))
    marks = np.random.default_rng(3).random(len(f)) < 0.3
    top = int(f.level.max())
    _same(sfc.refine(f, 2, marks, maxlevel=top).forest, _p4est(tmp_path, name, f, "refine", f"2:{top}", marks))


@pytest.mark.parametrize("name", CASES)
def test_coarsen_uniform_and_marked_equal_p4est(tmp_path: Path, name: str) -> None:
    dim, make = CONNS[name]
    f = _forest(dim, make(), 11, rounds=3)
    _same(sfc.coarsen(f, 1).forest, _p4est(tmp_path, name, f, "coarsen", "1:0", None))
    marks = np.random.default_rng(5).random(len(f)) < 0.8
    _same(sfc.coarsen(f, 3, marks, minlevel=1).forest, _p4est(tmp_path, name, f, "coarsen", "3:1", marks))


@pytest.mark.parametrize("name", CASES)
def test_balance_equals_p4est_for_every_connect_type(tmp_path: Path, name: str) -> None:
    dim, make = CONNS[name]
    conn = make()
    f = _forest(dim, conn, 13, rounds=3)
    f = sfc.refine(f, 3, np.arange(len(f)) % 17 == 0).forest  # deep spots, so that balance ripples across trees
    for connect in sfc.CONNECT_TYPES[dim]:
        got = sfc.balance(f, conn, connect).forest
        _same(got, _p4est(tmp_path, name, f, "balance", connect, None))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), name=st.sampled_from(CASES), deep=st.integers(1, 29))
def test_balance_of_random_forests_equals_p4est(tmp_path: Path, seed: int, name: str, deep: int) -> None:
    dim, make = CONNS[name]
    conn = make()
    f = _forest(dim, conn, seed, rounds=2)
    f = sfc.refine(f, 3 if dim == 2 else 2, np.arange(len(f)) % deep == 0).forest
    connect = sfc.CONNECT_TYPES[dim][seed % len(sfc.CONNECT_TYPES[dim])]
    _same(sfc.balance(f, conn, connect).forest, _p4est(tmp_path, name, f, "balance", connect, None))
