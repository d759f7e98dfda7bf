"""amrckpt._kernels, the compiled loops of adapting while loading: numpy's results bit for bit, and buffers checked.

Each case runs the caller twice, with the compiled loop and with the numpy
code that runs where the extension is not built (``_kernels`` set to None),
on 1 and 3 threads (the loops split their work into ranges).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from forests import random_forest
from hypothesis import given, settings
from hypothesis import strategies as st

from amrckpt import sfc
from amrckpt.adapt import _transfer
from amrckpt.sfc import _adapt

try:
    from amrckpt import _kernels as kernels
except ImportError:  # an install without a C compiler: numpy's loops run (tests/test_packaging.py checks that)
    if os.environ.get("AMRCKPT_REQUIRE_KERNELS") == "1":  # .ci/run, which installs gcc first
        raise
    pytest.skip("amrckpt._kernels was not built (no C compiler at install)", allow_module_level=True)

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1.5e308, 1.5e308, 1 / 3])


def _both(module: Any, fn: Any, threads: int) -> tuple[Any, Any]:
    """``fn()`` with the compiled loop, then with numpy's (``module._kernels = None``), on ``threads`` threads."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("AMRCKPT_THREADS", str(threads))
        compiled = fn()
        m.setattr(module, "_kernels", None)
        plain = fn()
    return compiled, plain


def _same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """The same bits; a NaN only the same NaN (where two NaNs meet, which one an add returns is the instruction's choice)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind in "fc":
        nan = np.isnan(a)
        assert np.array_equal(nan, np.isnan(b))
        a, b = np.where(nan, 0, a), np.where(nan, 0, b)
    assert a.tobytes() == b.tobytes()


def _values(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    v = rng.standard_normal((n, *shape)) * 10.0 ** rng.integers(-300, 300, size=(n, *shape))
    special = rng.random((n, *shape)) < 0.1
    v[special] = rng.choice(SPECIALS, size=int(special.sum()))
    with np.errstate(over="ignore"):
        out = v.astype(dtype)
    if out.dtype.kind == "c":
        out.imag = np.roll(v, 1).astype(out.real.dtype)
    return out


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dim=st.sampled_from([2, 3]),
    families=st.integers(0, 300),
    shape=st.sampled_from([(), (2,), (3, 2), (0,)]),
    dtype=st.sampled_from([np.float64, np.float32, np.complex128]),
    tiled=st.booleans(),
    threads=st.sampled_from([1, 3]),
)
def test_family_means_are_numpy_s_bit_for_bit(
    seed: int, dim: int, families: int, shape: tuple[int, ...], dtype: Any, tiled: bool, threads: int
) -> None:
    rng = np.random.default_rng(seed)
    F = 1 << dim
    pc = rng.integers(0, 9, size=families)
    if tiled:
        counts, first = np.repeat(pc, F), np.arange(families) * F
    else:  # families among single leaves
        gaps = rng.integers(0, 3, size=families + 1)
        first = np.cumsum(gaps[:-1]) + np.arange(families) * F
        counts = rng.integers(0, 9, size=int(first[-1] + F + gaps[-1]) if families else int(gaps[-1]))
        for c in range(F):
            counts[first + c] = pc
    offsets = _transfer._offsets(counts)
    values = _values(rng, int(offsets[-1]), shape, dtype)
    fo = offsets[first]

    def run() -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return _transfer._average_runs(values, counts, first, fo, pc, F, tiled=tiled)

    _same_bits(*_both(_transfer, run, threads))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dim=st.sampled_from([2, 3]),
    n=st.integers(0, 400),
    shape=st.sampled_from([(), (3,), (0,)]),
    dtype=st.sampled_from([np.float64, np.int16, np.complex64, np.dtype("V3")]),
    every=st.booleans(),
    threads=st.sampled_from([1, 3]),
)
def test_injected_runs_are_numpy_s_bit_for_bit(
    seed: int, dim: int, n: int, shape: tuple[int, ...], dtype: Any, every: bool, threads: int
) -> None:
    rng = np.random.default_rng(seed)
    F = 1 << dim
    counts = rng.integers(0, 7, size=n)
    offsets = _transfer._offsets(counts)
    values = rng.integers(0, 256, size=(int(offsets[-1]), *shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    values = values.view(dtype).reshape(int(offsets[-1]), *shape)
    mask = np.ones(n, dtype=bool) if every else (rng.random(2 * n) < 0.5)[::2]  # strided, as a view may be
    counts = counts if every else np.repeat(counts, 2)[::2]
    compiled, plain = _both(_transfer, lambda: _transfer._inject_runs(values, offsets, counts, mask, F), threads)
    _same_bits(compiled, plain)


def _tiled_forest(dim: int, seed: int) -> sfc.Forest:
    """A random complete forest refined once everywhere: leaves ``F i .. F i + F - 1`` are a family for every ``i``."""
    lv = random_forest(dim, 2, seed, rounds=2)
    base = sfc.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=2)
    return sfc.refine(base, 1).forest


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dim=st.sampled_from([2, 3]),
    field=st.sampled_from(["none", "tree", "level", "x", "y", "z", "x+h", "root"]),
    views=st.booleans(),
    threads=st.sampled_from([1, 3]),
)
def test_tiled_families_are_numpy_s(seed: int, dim: int, field: str, views: bool, threads: int) -> None:
    rng = np.random.default_rng(seed)
    f = _tiled_forest(dim, seed)
    rec = f.to_records().copy()
    i = int(rng.integers(len(f)))
    side = 1 << (sfc.MAXLEVEL[dim] - int(rec["level"][i]))
    if field == "root":  # every leaf the whole tree: level 0 has no parent
        rec = rec[: 1 << dim].copy()
        rec["level"], rec["x"], rec["y"] = 0, 0, 0
        rec["tree"] = 0
        if dim == 3:
            rec["z"] = 0
    elif field == "x+h":
        rec["x"][i] ^= side
    elif field == "level":
        rec["level"][i] += 1
    elif field != "none" and (field != "z" or dim == 3):
        rec[field][i] += 1
    g = sfc.Forest.from_records(rec, num_trees=f.num_trees, copy=not views)
    compiled, plain = _both(_adapt, lambda: _adapt._tiled(g), threads)
    assert compiled == plain
    assert compiled == (field in ("none", "z") and not (field == "z" and dim == 3))


def test_the_loops_refuse_buffers_out_of_range() -> None:
    v = np.zeros(10)
    with pytest.raises(ValueError, match="out of the 10 values"):
        kernels.family_means(v, np.array([8], dtype=np.int64), np.array([1], dtype=np.int64), np.zeros(1), 4, 0.25)
    with pytest.raises(ValueError, match="hold 2 values, out 1"):
        kernels.family_means(v, np.array([0], dtype=np.int64), np.array([2], dtype=np.int64), np.zeros(1), 4, 0.25)
    with pytest.raises(TypeError, match="float64 or float32"):
        kernels.family_means(v.astype(np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), 4, 0.25)
    with pytest.raises(ValueError, match="out of the 10 values"):
        kernels.repeat_runs(v, np.array([-1], dtype=np.int64), np.array([1], dtype=np.int64), None, np.zeros(4), 4, 8)
    with pytest.raises(ValueError, match="hold 4 values, out 3"):
        kernels.repeat_runs(v, np.array([0], dtype=np.int64), np.array([1], dtype=np.int64), None, np.zeros(3), 4, 8)
    with pytest.raises(ValueError, match="read-only"):
        out = np.zeros(4)
        out.flags.writeable = False
        kernels.repeat_runs(v, np.array([0], dtype=np.int64), np.array([1], dtype=np.int64), None, out, 4, 8)
    with pytest.raises(ValueError, match="multiple of 2"):
        t = np.zeros(3, np.int32)
        kernels.tiled_families(t, np.zeros(3, np.int8), (t, t), 30)
