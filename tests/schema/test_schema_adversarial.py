"""Adversarial tests of the schema and restart layers: save, load, read_info, verify, declarations, migrations.

Each test states a promise of the docstrings (or of docs/DESIGN) that a
demanding user relies on.  Tests that document a library bug are marked
``xfail(strict=True)`` with a one-line diagnosis; they start passing (and then
fail as XPASS) once the bug is fixed.
"""

from __future__ import annotations

import datetime
import enum
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from checkpoint_cases import Advection, global_state
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

import amrckpt as ac
from _support import random_forest
from amrckpt import sfc
from amrckpt.comm import run_threads
from amrckpt.errors import AmrckptError, ChecksumError, IncompleteCheckpointError, SchemaError

# -- schemas and global states ------------------------------------------------


class Inner(BaseModel):
    name: str = "inner"
    weights: list[float] = [0.5, 0.25]
    pair: tuple[int, int] = (1, 2)


class Outer(BaseModel):
    cfl: float = 0.4
    inner: Inner = Inner()
    many: list[Inner] = [Inner(name="a"), Inner(name="b")]
    table: dict[str, int] = {"x": 1}
    opt: int | None = None


class Rich2(ac.CheckpointSchema, name="rich", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    done: bool = ac.Inline()
    label: str = ac.Inline()
    params: Outer = ac.Block(compress=True)
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f4", shape=(2,), compress=True)
    flag: ac.CellData = ac.Cells("?")
    tensor: ac.CellData = ac.Cells(">i2", shape=(2, 3))
    modes: ac.HpData = ac.HpCells("<f8", compress=True)
    pairs: ac.HpData = ac.HpCells(">i4", shape=(2,))


class Rich3(ac.CheckpointSchema, name="rich3", version=1):
    step: int = ac.Inline()
    time: float = ac.Inline(units="s")
    done: bool = ac.Inline()
    label: str = ac.Inline()
    params: Outer = ac.Block(compress=True)
    mesh: ac.Forest = ac.Mesh(dim=3)
    rho: ac.CellData = ac.Cells("<f8", units="kg m^-3")
    vel: ac.CellData = ac.Cells("<f4", shape=(3,), compress=True)
    flag: ac.CellData = ac.Cells("?")
    tensor: ac.CellData = ac.Cells(">i2", shape=(2, 3))
    modes: ac.HpData = ac.HpCells("<f8", compress=True)
    pairs: ac.HpData = ac.HpCells(">i4", shape=(2,))


RICH = {2: Rich2, 3: Rich3}
LAST_FIELD = "pairs"


@dataclass
class RichGlobal:
    """All leaves and data of a Rich checkpoint in global order."""

    dim: int
    num_trees: int
    tree: np.ndarray
    level: np.ndarray
    coords: list[np.ndarray]
    rho: np.ndarray
    vel: np.ndarray
    flag: np.ndarray
    tensor: np.ndarray
    counts: np.ndarray
    modes: np.ndarray
    pcounts: np.ndarray
    pairs: np.ndarray

    @property
    def N(self) -> int:
        return int(self.tree.shape[0])

    def forest(self, lo: int, hi: int) -> ac.Forest:
        c = [x[lo:hi] for x in self.coords]
        return ac.Forest(self.tree[lo:hi], self.level[lo:hi], *c, num_trees=self.num_trees)

    def local(self, lo: int, hi: int) -> Any:
        off = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        poff = np.concatenate([[0], np.cumsum(self.pcounts)]).astype(np.int64)
        return RICH[self.dim](
            step=17,
            time=0.1 + 0.2,
            done=False,
            label='a "quoted" label',
            params=Outer(opt=3),
            mesh=self.forest(lo, hi),
            rho=self.rho[lo:hi],
            vel=self.vel[lo:hi],
            flag=self.flag[lo:hi],
            tensor=self.tensor[lo:hi],
            modes=ac.HpData(self.modes[off[lo] : off[hi]], self.counts[lo:hi]),
            pairs=ac.HpData(self.pairs[poff[lo] : poff[hi]], self.pcounts[lo:hi]),
        )


def rich_global(seed: int, dim: int, num_trees: int = 2, max_level: int = 3) -> RichGlobal:
    lv = random_forest(seed, num_trees=num_trees, dim=dim, max_level=max_level)
    coords = [lv.x, lv.y] + ([lv.z] if dim == 3 else [])
    N = lv.num_leaves
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 3, N) ** 2  # zero-size payloads included
    pcounts = rng.integers(0, 3, N)
    return RichGlobal(
        dim,
        num_trees,
        lv.tree,
        lv.level,
        coords,
        rng.random(N),
        rng.standard_normal((N, dim)).astype("<f4"),
        rng.random(N) < 0.5,
        rng.integers(-(2**15), 2**15, (N, 2, 3)).astype(">i2"),
        counts,
        rng.standard_normal(int(counts.sum())),
        pcounts,
        rng.integers(-(2**31), 2**31, (int(pcounts.sum()), 2)).astype(">i4"),
    )


def assert_rich_equal(got: Any, want: Any) -> None:
    for name in ("step", "time", "done", "label", "params"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.mesh == want.mesh
    for name in ("rho", "vel", "flag", "tensor"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), name
    assert got.modes == want.modes
    assert got.pairs == want.pairs


def bounds(counts: list[int], r: int) -> tuple[int, int]:
    return sum(counts[:r]), sum(counts[: r + 1])


def square_forest(level: int = 1, num_trees: int = 1, dim: int = 2, curve: str = "morton") -> ac.Forest:
    lv = sfc.uniform_leaves(level, num_trees, dim, curve=curve)  # type: ignore[arg-type]
    return ac.Forest(lv.tree, lv.level, lv.x, lv.y, lv.z, num_trees=num_trees, curve=curve)


def agreed_errors(Q: int, fn: Any, *args: Any, timeout: float = 3.0) -> list[BaseException | None]:
    """Run fn on Q thread-ranks; return each rank's exception (None if it returned)."""

    def body(comm: Any) -> BaseException | None:
        try:
            fn(comm, *args)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            return exc
        return None

    return run_threads(Q, body, timeout=timeout)


G2 = rich_global(11, 2)
G3 = rich_global(12, 3, num_trees=3, max_level=3)
GS = {2: G2, 3: G3}


# -- save on P, load on Q ------------------------------------------------------


WRITE_PARTITIONS: dict[int, list[list[int | None]]] = {
    1: [[None]],
    3: [[0, None, 0], [None, 0, 5]],
    4: [[5, 0, None, 0]],
}


def write_counts(N: int, pattern: list[int | None]) -> list[int]:
    fixed = sum(c for c in pattern if c is not None)
    return [N - fixed if c is None else c for c in pattern]


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("P,pattern", [(P, pat) for P, pats in WRITE_PARTITIONS.items() for pat in pats])
def test_rich_round_trip_any_P_Q_every_partition(tmp_path: Path, dim: int, P: int, pattern: list[int | None]) -> None:
    """Empty writers, compressed fields, zero-size hp payloads, per-leaf shapes, big-endian, bool: exact on any Q."""
    g = GS[dim]
    schema = RICH[dim]
    counts = write_counts(g.N, pattern)
    path = tmp_path / "rich.scda"
    run_threads(P, lambda comm: ac.save(g.local(*bounds(counts, comm.rank)), path, comm=comm, check_mesh=True, run_record=True))
    info = ac.read_info(path)
    assert info.writer_partition.elem_counts.tolist() == counts
    assert info.manifest.num_leaves == g.N and info.manifest.values["label"] == 'a "quoted" label'

    def read(comm: Any, how: Any) -> tuple[int, int]:
        loaded = ac.load(path, schema, comm=comm, partition=how)
        lo, hi = loaded.partition.local_range(comm.rank)
        assert_rich_equal(loaded.state, g.local(lo, hi))
        return lo, hi

    for Q in (1, 2, 5):
        ranges = run_threads(Q, read, "uniform")
        assert ranges == [(g.N * q // Q, g.N * (q + 1) // Q) for q in range(Q)]
        ranges = run_threads(Q, read, "weighted")
        assert ranges[0][0] == 0 and ranges[-1][1] == g.N
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    explicit = ac.Partition.from_counts([0, g.N - 3, 0, 3])
    assert run_threads(4, read, explicit) == [(0, 0), (0, g.N - 3), (g.N - 3, g.N - 3), (g.N - 3, g.N)]


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    dim=st.sampled_from([2, 3]),
    P=st.integers(1, 4),
    Q=st.integers(1, 4),
    data=st.data(),
)
def test_property_round_trip_random_partitions(tmp_path_factory: Any, seed: int, dim: int, P: int, Q: int, data: Any) -> None:
    g = rich_global(seed, dim, num_trees=1 + seed % 3, max_level=2 + seed % 2)
    cuts = sorted(data.draw(st.lists(st.integers(0, g.N), min_size=P - 1, max_size=P - 1)))
    wcounts = np.diff([0, *cuts, g.N]).tolist()
    rcuts = sorted(data.draw(st.lists(st.integers(0, g.N), min_size=Q - 1, max_size=Q - 1)))
    rcounts = np.diff([0, *rcuts, g.N]).tolist()
    path = tmp_path_factory.mktemp("prop") / "c.scda"
    run_threads(P, lambda comm: ac.save(g.local(*bounds(wcounts, comm.rank)), path, comm=comm))

    def read(comm: Any) -> None:
        loaded = ac.load(path, RICH[dim], comm=comm, partition=ac.Partition.from_counts(rcounts))
        assert_rich_equal(loaded.state, g.local(*bounds(rcounts, comm.rank)))

    run_threads(Q, read)


@pytest.mark.parametrize("dim", [2, 3])
def test_file_bytes_up_to_last_field_do_not_depend_on_P(tmp_path: Path, dim: int) -> None:
    g = GS[dim]
    blobs = []
    patterns: list[tuple[int, list[int | None]]] = [
        (1, [None]),
        (2, [None, 0]),
        (3, [0, None, 0]),
        (4, [1, 2, None, 3]),
        (5, [0, 0, 0, 0, None]),
    ]
    for P, pattern in patterns:
        counts = write_counts(g.N, pattern)
        path = tmp_path / f"p{P}.scda"
        run_threads(P, lambda comm, c=counts, p=path: ac.save(g.local(*bounds(c, comm.rank)), p, comm=comm))
        end = ac.read_info(path).index.entry(LAST_FIELD).end
        blobs.append(path.read_bytes()[:end])
    assert len(set(blobs)) == 1


class NoMesh(ac.CheckpointSchema, name="nomesh", version=1):
    step: int = ac.Inline()
    big: int = ac.Inline()
    neg: float = ac.Inline()
    nothing: int | None = ac.Inline()
    mode: Literal["fast", "slow"] = ac.Inline()
    params: Outer = ac.Block()


def test_schema_without_mesh_on_any_Q_and_partition(tmp_path: Path) -> None:
    path = tmp_path / "nomesh.scda"
    state = NoMesh(step=-3, big=2**62, neg=-0.0, nothing=None, mode="slow", params=Outer(opt=None))
    run_threads(3, lambda comm: ac.save(state, path, comm=comm))
    for how in ("uniform", "weighted", ac.Partition.from_counts([0, 0])):
        got = run_threads(2, lambda comm, h=how: ac.load(path, NoMesh, comm=comm, partition=h).state)
        assert got == [state, state]
        assert str(got[0].neg) == "-0.0"
    info = ac.read_info(path)
    assert info.manifest.mesh is None and info.manifest.num_leaves == 0
    assert info.writer_partition is None  # no mesh: no partition of leaves


def test_zero_leaves_everywhere(tmp_path: Path) -> None:
    """N = 0: every field is empty; loads on any Q with every partition."""
    empty = RichGlobal(
        2,
        1,
        np.zeros(0, np.int32),
        np.zeros(0, np.int8),
        [np.zeros(0, np.int32)] * 2,
        np.zeros(0),
        np.zeros((0, 2), "<f4"),
        np.zeros(0, bool),
        np.zeros((0, 2, 3), ">i2"),
        np.zeros(0, np.int64),
        np.zeros(0),
        np.zeros(0, np.int64),
        np.zeros((0, 2), ">i4"),
    )
    path = tmp_path / "empty.scda"
    run_threads(3, lambda comm: ac.save(empty.local(0, 0), path, comm=comm))
    for how in ("uniform", "weighted"):
        got = run_threads(2, lambda comm, h=how: ac.load(path, Rich2, comm=comm, partition=h).state)
        for s in got:
            assert_rich_equal(s, empty.local(0, 0))
    assert ac.verify(path).ok


# -- dtypes and byte order -------------------------------------------------------

DTYPES = ["<c16", ">c8", "i1", "u1", "?", ">u2", "<f2", "u8", ">i8", "<M8[s]", "S3", "<U2", "float64"]


def _values(dt: np.dtype[Any], shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    if dt.kind in "fc":  # no NaN payloads: array_equal would reject them
        return (rng.standard_normal(shape) * 100).astype(dt)
    if dt.kind == "U":
        return rng.choice(np.array(["ab", "é", "", "ZZ"]), shape).astype(dt)
    return raw.view(dt).reshape(shape)


@pytest.mark.parametrize("spec", DTYPES)
def test_unusual_dtypes_round_trip(tmp_path: Path, spec: str) -> None:
    fields = {
        "__annotations__": {"mesh": ac.Forest, "c": ac.CellData, "h": ac.HpData},
        "mesh": ac.Mesh(dim=2),
        "c": ac.Cells(spec, shape=(2,)),
        "h": ac.HpCells(spec, compress=True),
    }
    schema = type("Dt", (ac.CheckpointSchema,), fields, name="dtypes", version=1)
    mesh = square_forest(2)
    N = len(mesh)
    dt = np.dtype(spec)
    c = _values(dt, (N, 2), 1)
    counts = np.arange(N) % 3
    h = _values(dt, (int(counts.sum()),), 2)
    path = tmp_path / "dt.scda"

    def write(comm: Any) -> None:
        lo, hi = N * comm.rank // comm.size, N * (comm.rank + 1) // comm.size
        o = np.concatenate([[0], np.cumsum(counts)])
        m = ac.Forest(mesh.tree[lo:hi], mesh.level[lo:hi], mesh.x[lo:hi], mesh.y[lo:hi], num_trees=1)
        ac.save(schema(mesh=m, c=c[lo:hi], h=ac.HpData(h[o[lo] : o[hi]], counts[lo:hi])), path, comm=comm)

    run_threads(2, write)
    st_: Any = ac.load(path, schema).state
    want = dt.newbyteorder("=") if spec[:1] not in "<>" else dt
    assert st_.c.dtype == want and np.array_equal(st_.c, c)
    assert st_.h.values.dtype == want and np.array_equal(st_.h.values, h) and st_.h.counts.tolist() == counts.tolist()


class Struct(ac.CheckpointSchema, name="struct", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    rec: ac.CellData = ac.Cells("<f8,<i4")


def test_structured_dtype_round_trip(tmp_path: Path) -> None:
    mesh = square_forest(1)
    rec = np.zeros(4, dtype="<f8,<i4")
    rec["f0"], rec["f1"] = [1.5, 2.5, 3.5, 4.5], [5, 6, 7, 8]
    path = tmp_path / "struct.scda"
    ac.save(Struct(mesh=mesh, rec=rec), path)
    got = ac.load(path, Struct).state.rec
    assert got.dtype == rec.dtype and np.array_equal(got, rec)


class ExplicitBE(ac.CheckpointSchema, name="explicit-be", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    v: ac.CellData = ac.Cells(np.dtype(">f8"))


def test_explicit_big_endian_numpy_dtype_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "be.scda"
    ac.save(ExplicitBE(mesh=square_forest(1), v=np.arange(4, dtype=">f8")), path)
    assert ac.read_info(path).manifest.field("v").dtype == ">f8"
    assert ac.load(path, ExplicitBE).state.v.dtype.str == ">f8"


class BigOrder(ac.CheckpointSchema, name="order", version=1):
    mesh: ac.Forest = ac.Mesh(dim=3)
    a: ac.CellData = ac.Cells(">i4", shape=(3,), compress=True)
    b: ac.CellData = ac.Cells(">c16")
    h: ac.HpData = ac.HpCells(">f4", shape=(2,), compress=True)


class NativeOrder(ac.CheckpointSchema, name="order", version=1):
    mesh: ac.Forest = ac.Mesh(dim=3)
    a: ac.CellData = ac.Cells("i4", shape=(3,), compress=True)
    b: ac.CellData = ac.Cells("c16")
    h: ac.HpData = ac.HpCells("f4", shape=(2,), compress=True)


def test_native_declared_fields_convert_from_the_other_byte_order(tmp_path: Path) -> None:
    mesh = square_forest(1, num_trees=2, dim=3)
    N = len(mesh)
    rng = np.random.default_rng(5)
    a = rng.integers(-1000, 1000, (N, 3)).astype("=i4")
    b = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype("=c16")
    counts = rng.integers(0, 4, N)
    h = rng.standard_normal((int(counts.sum()), 2)).astype("=f4")
    path = tmp_path / "be.scda"
    ac.save(BigOrder(mesh=mesh, a=a, b=b, h=ac.HpData(h, counts)), path)  # swapped on the way out
    m = ac.read_info(path).manifest
    assert [m.field(n).dtype for n in "abh"] == [">i4", ">c16", ">f4"]

    def read(comm: Any) -> None:
        loaded = ac.load(path, NativeOrder, comm=comm)
        lo, hi = loaded.partition.local_range(comm.rank)
        s = loaded.state
        assert s.a.dtype == np.dtype("=i4") and np.array_equal(s.a, a[lo:hi])
        assert s.b.dtype == np.dtype("=c16") and np.array_equal(s.b, b[lo:hi])
        o = np.concatenate([[0], np.cumsum(counts)])
        assert s.h.values.dtype == np.dtype("=f4") and np.array_equal(s.h.values, h[o[lo] : o[hi]])

    run_threads(3, read)


# -- inline and block values ---------------------------------------------------


class Inl(ac.CheckpointSchema, name="inline", version=1):
    s: str = ac.Inline()
    b: bool = ac.Inline()
    f: float = ac.Inline()


@pytest.mark.parametrize(
    "s,b,f",
    [
        ("", True, 1e-300),
        ("x" * 29, False, -1.5e300),  # 31 bytes of JSON: the limit
        ("é", True, 0.1 + 0.2),
        ('q"\\', False, 5e-324),
        ("\n\t", True, -0.0),
    ],
)
def test_inline_values_round_trip(tmp_path: Path, s: str, b: bool, f: float) -> None:
    path = tmp_path / "inl.scda"
    ac.save(Inl(s=s, b=b, f=f), path)
    got = ac.load(path, Inl).state
    assert (got.s, got.b, repr(got.f)) == (s, b, repr(f))
    assert ac.read_info(path).manifest.values == {"s": s, "b": b, "f": f}


def test_inline_too_long_is_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "inl.scda"
    with pytest.raises(SchemaError, match="'s'"):
        ac.save(Inl(s="x" * 30, b=True, f=1.0), path)
    with pytest.raises(SchemaError, match="'s'"):
        ac.save(Inl(s="é" * 5, b=True, f=1.0), path)  # 5 characters, 32 bytes of escaped JSON
    assert not path.exists()


def test_inline_non_finite_values_in_manifest(tmp_path: Path) -> None:
    path = tmp_path / "inf.scda"
    ac.save(Inl(s="", b=True, f=float("inf")), path)
    assert ac.load(path, Inl).state.f == float("inf")
    assert ac.read_info(path).manifest.values["f"] == float("inf")


class WithParams(ac.CheckpointSchema, name="with-params", version=1):
    params: Outer = ac.Block()


def test_block_with_non_finite_float_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "nan.scda"
    state = WithParams(params=Outer(cfl=float("inf")))
    ac.save(state, path)
    assert ac.load(path, WithParams).state.params.cfl == float("inf")


class Color(enum.Enum):
    red = "r"
    blue = "b"


class Fancy(BaseModel):
    when: datetime.datetime
    day: datetime.date
    color: Color
    tags: set[str]
    by_id: dict[int, float]
    nested: list[tuple[int, Inner]]
    blob: bytes


class FancySchema(ac.CheckpointSchema, name="fancy", version=1):
    fancy: Fancy = ac.Block(compress=True, level=1)
    day: datetime.date = ac.Inline()
    color: Color = ac.Inline()
    pair: tuple[int, int] = ac.Inline()


def test_nested_pydantic_models_in_blocks(tmp_path: Path) -> None:
    fancy = Fancy(
        when=datetime.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=datetime.timezone.utc),
        day=datetime.date(2000, 1, 1),
        color=Color.blue,
        tags={"a", "b"},
        by_id={3: 1.5, -1: 2.0},
        nested=[(1, Inner(name="n1")), (2, Inner(weights=[]))],
        blob=b"raw bytes",
    )
    state = FancySchema(fancy=fancy, day=datetime.date(1999, 12, 31), color=Color.red, pair=(-1, 2))
    path = tmp_path / "fancy.scda"
    run_threads(2, lambda comm: ac.save(state, path, comm=comm))
    assert run_threads(3, lambda comm: ac.load(path, FancySchema, comm=comm).state) == [state] * 3


class StrictInner(BaseModel):
    model_config = ConfigDict(strict=True)
    pair: tuple[float, float]
    when: datetime.date


class StrictSchema(ac.CheckpointSchema, name="strict", version=1):
    inner: StrictInner = ac.Block()


def test_strict_models_in_blocks_round_trip(tmp_path: Path) -> None:
    state = StrictSchema(inner=StrictInner(pair=(1.0, 2.0), when=datetime.date(2020, 1, 1)))
    path = tmp_path / "strict.scda"
    ac.save(state, path)
    assert ac.load(path, StrictSchema).state == state


class DictBlock(ac.CheckpointSchema, name="dict-block", version=1):
    table: dict[str, int] = ac.Block()


def test_equal_dicts_in_another_order_are_the_same_value(tmp_path: Path) -> None:
    def write(comm: Any) -> None:
        table = {"a": 1, "b": 2} if comm.rank == 0 else {"b": 2, "a": 1}
        assert table == {"a": 1, "b": 2}
        ac.save(DictBlock(table=table), tmp_path / "d.scda", comm=comm)

    run_threads(2, write)


class AnyBlock(ac.CheckpointSchema, name="any-block", version=1):
    extra: dict[str, Any] = ac.Block()


def test_unserializable_block_is_a_schema_error_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "x.scda"
    errs = agreed_errors(2, lambda comm: ac.save(AnyBlock(extra={"arr": np.arange(3)}), path, comm=comm))
    assert all(isinstance(e, SchemaError) and "'extra'" in str(e) for e in errs), errs
    assert not path.exists()


# -- declarations ------------------------------------------------------------------


def _any(x: Any) -> Any:
    return x


def _declare_units_int() -> Any:
    return ac.Cells("<f8", units=5)  # type: ignore[arg-type]


def _bad_migration_version() -> Any:
    return Rich2.migration("1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: ac.Cells("<f8", shape=(-1,)), id="negative-shape"),
        pytest.param(lambda: ac.Cells("<f8", shape=_any(3)), id="int-shape"),
        pytest.param(lambda: ac.HpCells("V0"), id="zero-itemsize"),
        pytest.param(lambda: ac.Cells("<f8", compress=True, level=10), id="level-10"),
        pytest.param(lambda: ac.Mesh(dim=4), id="dim-4"),
        pytest.param(lambda: ac.Mesh(curve="peano"), id="curve"),
        pytest.param(lambda: Rich2.migration(1), id="migration-not-below-version"),
        pytest.param(
            lambda: ac.Cells("<f8", shape=_any(("a",))),
            id="str-shape",
        ),
        pytest.param(
            lambda: ac.Cells([("a", "<f8"), ("a", "<i4")]),
            id="duplicate-field-dtype",
        ),
        pytest.param(
            lambda: ac.Cells("<f8", compress=True, level=_any("9")),
            id="str-level",
        ),
        pytest.param(
            _bad_migration_version,
            id="str-migration-version",
        ),
        pytest.param(
            _declare_units_int,
            id="int-units",
        ),
    ],
)
def test_bad_declarations_raise_schema_error(make: Any) -> None:
    with pytest.raises(SchemaError):
        make()


def test_bad_units_fail_at_declaration() -> None:
    """units are type-checked when the schema is declared, before any save can trip on them."""
    with pytest.raises(SchemaError, match="units must be a str"):

        class UnitsInt(ac.CheckpointSchema, name="units-int", version=1):
            mesh: ac.Forest = ac.Mesh(dim=2)
            v: ac.CellData = ac.Cells("<f8", units=5)  # type: ignore[arg-type]


# -- invalid states: every rank, nothing written -------------------------------------


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda s: setattr(s, "tensor", s.tensor.astype("<i2")), None),  # byte order only: converted, not an error
        (lambda s: setattr(s, "tensor", s.tensor.astype(">i4")), "'tensor'"),
        (lambda s: setattr(s, "tensor", s.tensor[:, :, :2].copy()), "'tensor'"),
        (lambda s: setattr(s, "flag", s.flag.astype("u1")), "'flag'"),
        (lambda s: setattr(s, "pairs", ac.HpData(s.pairs.values[:, :1], s.pairs.counts)), "'pairs'"),
        (lambda s: setattr(s, "modes", ac.HpData(s.modes.values.reshape(-1, 1), s.modes.counts)), "'modes'"),
        (lambda s: setattr(s, "label", "other"), "'label' differs"),
        (lambda s: setattr(s, "params", Outer(table={"x": 2})), "'params' differs"),
        (lambda s: setattr(s, "mesh", ac.Forest(s.mesh.tree, s.mesh.level + 1, s.mesh.x + 1, s.mesh.y, num_trees=2)), "'mesh'"),
        (lambda s: setattr(s, "mesh", ac.Forest(s.mesh.tree, s.mesh.level, s.mesh.x, s.mesh.y, num_trees=1)), "disagree|'mesh'"),
        (lambda s: setattr(s, "mesh", square_forest(1, 2, dim=3)), "'mesh'"),
    ],
)
def test_invalid_state_on_one_rank_fails_everywhere_and_keeps_the_old_file(tmp_path: Path, mutate: Any, match: str | None) -> None:
    g = G2
    path = tmp_path / "c.scda"
    run_threads(3, lambda comm: ac.save(g.local(*bounds(write_counts(g.N, [None, 0, 0]), comm.rank)), path, comm=comm))
    before = path.read_bytes()

    def body(comm: Any) -> None:
        s = g.local(g.N * comm.rank // 3, g.N * (comm.rank + 1) // 3)
        if comm.rank == 1:
            mutate(s)
        ac.save(s, path, comm=comm)

    errs = agreed_errors(3, body)
    if match is None:
        assert errs == [None] * 3
        assert_rich_equal(ac.load(path, Rich2).state, g.local(0, g.N))
        return
    assert all(isinstance(e, SchemaError) for e in errs), errs
    assert all(re.search(match, str(e)) for e in errs), errs
    assert path.read_bytes() == before


def test_leaves_out_of_order_or_repeated_across_ranks(tmp_path: Path) -> None:
    path = tmp_path / "c.scda"
    for dim in (2, 3):
        g = GS[dim]
        h = g.N // 2
        for ranges in ([(h, g.N), (0, h)], [(0, h + 1), (h, g.N)], [(0, h), (0, 0), (h - 1, h)]):
            errs = agreed_errors(len(ranges), lambda comm, r=ranges, gg=g: ac.save(gg.local(*r[comm.rank]), path, comm=comm))
            assert all(isinstance(e, SchemaError) and "curve order" in str(e) for e in errs), (dim, ranges, errs)
    assert not path.exists()


class Hil3(ac.CheckpointSchema, name="hilbert3", version=1):
    mesh: ac.Forest = ac.Mesh(dim=3, curve="hilbert", compress=True)
    v: ac.CellData = ac.Cells("<u8")


def test_hilbert_3d_forest_any_P_Q(tmp_path: Path) -> None:
    lv = random_forest(9, num_trees=2, dim=3, max_level=3)
    o = sfc.sfc_order(lv.tree, lv.level, lv.x, lv.y, lv.z, curve="hilbert")
    t, le, x, y, z = lv.tree[o], lv.level[o], lv.x[o], lv.y[o], lv.z[o]
    N = len(t)
    v = np.arange(N, dtype="<u8")
    path = tmp_path / "h.scda"

    def local(lo: int, hi: int) -> Hil3:
        f = ac.Forest(t[lo:hi], le[lo:hi], x[lo:hi], y[lo:hi], z[lo:hi], num_trees=2, curve="hilbert")
        return Hil3(mesh=f, v=v[lo:hi])

    run_threads(4, lambda comm: ac.save(local(N * comm.rank // 4, N * (comm.rank + 1) // 4), path, comm=comm, check_mesh=True))

    def read(comm: Any) -> None:
        loaded = ac.load(path, Hil3, comm=comm, partition="weighted")
        lo, hi = loaded.partition.local_range(comm.rank)
        want = local(lo, hi)
        assert loaded.state.mesh == want.mesh and np.array_equal(loaded.state.v, want.v)

    run_threads(3, read)


class Trees(ac.CheckpointSchema, name="trees", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)


def test_empty_rank_zero_does_not_dictate_num_trees(tmp_path: Path) -> None:
    """The number of trees is the mesh's, not a rank's: an empty rank 0 that says 1 against rank 1's 2 is refused
    on every rank (neither rank's value wins silently), and nothing is written."""
    path = tmp_path / "t.scda"
    two = square_forest(1, num_trees=2)

    def write(comm: Any) -> str:
        mesh = ac.Forest([], [], [], [], num_trees=1) if comm.rank == 0 else two
        with pytest.raises(SchemaError) as info:
            ac.save(Trees(mesh=mesh), path, comm=comm)
        return str(info.value)

    assert run_threads(2, write) == ["the ranks' meshes disagree on dimension, number of trees or curve"] * 2
    assert not path.exists()


def test_forest_values_out_of_int32_range_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SchemaError):
        f = ac.Forest(np.array([0]), np.array([0]), np.array([2**32]), np.array([0]), num_trees=1)
        ac.save(Trees(mesh=f), tmp_path / "w.scda")


# -- what load checks --------------------------------------------------------------------


class TwoInts(ac.CheckpointSchema, name="two-ints", version=1):
    step: int = ac.Inline()
    extra: int = ac.Inline()


class OneInt(ac.CheckpointSchema, name="two-ints", version=1):
    step: int = ac.Inline()


def test_load_refuses_file_fields_the_schema_lacks(tmp_path: Path) -> None:
    path = tmp_path / "x.scda"
    ac.save(TwoInts(step=1, extra=2), path)
    with pytest.raises(SchemaError, match="extra"):
        ac.load(path, OneInt)


class Flat2(ac.CheckpointSchema, name="shapes", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    v: ac.CellData = ac.Cells("<f8")


class Vec3D(ac.CheckpointSchema, name="shapes", version=1):
    mesh: ac.Forest = ac.Mesh(dim=3)
    v: ac.CellData = ac.Cells("<f8", shape=(1,))


def test_load_checks_cell_shape_and_mesh_dimension(tmp_path: Path) -> None:
    path = tmp_path / "x.scda"
    ac.save(Flat2(mesh=square_forest(1), v=np.arange(4.0)), path)
    with pytest.raises(SchemaError):
        ac.load(path, Vec3D)


def test_hp_values_of_no_bytes_are_refused_at_declaration() -> None:
    """Zero-size hp values could not carry their per-leaf counts in a V section: refused when declared."""
    with pytest.raises(SchemaError, match="no bytes"):

        class HpEmptyValues(ac.CheckpointSchema, name="hp-empty", version=1):
            mesh: ac.Forest = ac.Mesh(dim=2)
            h: ac.HpData = ac.HpCells("<f8", shape=(0,))


def test_load_into_a_class_that_is_not_a_schema(tmp_path: Path) -> None:
    path = tmp_path / "x.scda"
    ac.save(OneInt(step=1), path)
    with pytest.raises(SchemaError):
        ac.load(path, Outer)  # type: ignore[type-var]


def test_load_partition_arguments(tmp_path: Path) -> None:
    path = tmp_path / "x.scda"
    ac.save(G2.local(0, G2.N), path)
    for bad in ("Uniform", [G2.N], ac.Partition.from_counts([G2.N, 0])):
        with pytest.raises(SchemaError):
            ac.load(path, Rich2, partition=bad)  # type: ignore[arg-type]
    errs = agreed_errors(2, lambda comm: ac.load(path, Rich2, comm=comm, partition=ac.Partition.uniform(G2.N + 1, 2)))
    assert all(isinstance(e, SchemaError) for e in errs)


def test_fields_subset_with_weighted_partition_on_three_ranks(tmp_path: Path) -> None:
    path = tmp_path / "x.scda"
    run_threads(2, lambda comm: ac.save(G3.local(G3.N * comm.rank // 2, G3.N * (comm.rank + 1) // 2), path, comm=comm))

    def read(comm: Any) -> None:
        loaded = ac.load(path, Rich3, comm=comm, fields=["mesh", "pairs", "label"], partition="weighted")
        lo, hi = loaded.partition.local_range(comm.rank)
        want = G3.local(lo, hi)
        s = loaded.state
        assert s.mesh == want.mesh and s.pairs == want.pairs and s.label == want.label
        assert "rho" not in s.__dict__ and "modes" not in s.__dict__
        assert {"mesh", "pairs", "label"} <= set(loaded.verified) and "rho" not in loaded.verified

    run_threads(3, read)


# -- migrations --------------------------------------------------------------------------


class EvoV1(ac.CheckpointSchema, name="evo", version=1):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    density: ac.CellData = ac.Cells("<f4")


class EvoV4(ac.CheckpointSchema, name="evo", version=4):
    step: int = ac.Inline()
    nu: float = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")
    trail: list[int] = ac.Block()


class EvoV3Gap(ac.CheckpointSchema, name="evo", version=3):
    step: int = ac.Inline()


@EvoV3Gap.migration(from_version=1)
def _gap_1(fields: dict[str, Any]) -> dict[str, Any]:
    return fields


# registered out of order on purpose
@EvoV4.migration(from_version=3)
def _evo_3(fields: dict[str, Any]) -> dict[str, Any]:
    fields["trail"] = [*fields["trail"], 3]
    fields["rho"] = fields["rho"] * 2
    return fields


@EvoV4.migration(from_version=1)
def _evo_1(fields: dict[str, Any]) -> dict[str, Any]:
    assert "trail" not in fields and isinstance(fields["step"], int) and isinstance(fields["mesh"], ac.Forest)
    fields["trail"] = [1]
    fields["rho"] = fields.pop("density").astype("<f8")
    return fields


@EvoV4.migration(from_version=2)
def _evo_2(fields: dict[str, Any]) -> dict[str, Any]:
    fields["trail"] = [*fields["trail"], 2]
    fields["nu"] = 0.5
    return fields


def _evo_v1_file(path: Path, P: int = 2) -> np.ndarray:
    g = G2
    dens = g.rho.astype("<f4")

    def write(comm: Any) -> None:
        lo, hi = g.N * comm.rank // comm.size, g.N * (comm.rank + 1) // comm.size
        ac.save(EvoV1(step=9, mesh=g.forest(lo, hi), density=dens[lo:hi]), path, comm=comm)

    run_threads(P, write)
    return dens


def test_migrations_run_in_order_on_every_rank(tmp_path: Path) -> None:
    path = tmp_path / "v1.scda"
    dens = _evo_v1_file(path)

    def read(comm: Any) -> None:
        loaded = ac.load(path, EvoV4, comm=comm)
        lo, hi = loaded.partition.local_range(comm.rank)
        s = loaded.state
        assert s.trail == [1, 2, 3] and s.nu == 0.5 and s.step == 9
        assert s.rho.dtype == np.dtype("<f8") and np.array_equal(s.rho, dens[lo:hi].astype("<f8") * 2)
        assert s.mesh == G2.forest(lo, hi)

    run_threads(4, read)


def test_missing_migration_names_both_versions_on_every_rank(tmp_path: Path) -> None:
    path = tmp_path / "v1.scda"
    _evo_v1_file(path)
    errs = agreed_errors(2, lambda comm: ac.load(path, EvoV3Gap, comm=comm))
    for e in errs:
        assert isinstance(e, SchemaError), e
        msg = str(e)
        assert "version 1" in msg and "version 3" in msg and "from version 2 to 3" in msg, msg


class EvoV2Fragile(ac.CheckpointSchema, name="evo", version=2):
    step: int = ac.Inline()
    mesh: ac.Forest = ac.Mesh(dim=2)
    density: ac.CellData = ac.Cells("<f4")
    peak: float = ac.Inline()


@EvoV2Fragile.migration(from_version=1)
def _peak(fields: dict[str, Any]) -> dict[str, Any]:
    fields["peak"] = float(fields["density"].max())  # ValueError on a rank with no leaves
    return fields


def test_a_migration_failing_on_one_rank_fails_every_rank(tmp_path: Path) -> None:
    path = tmp_path / "v1.scda"
    _evo_v1_file(path)
    Q = 3
    part = ac.Partition.from_counts([0, G2.N - 1, 1])  # rank 0 reads no leaves
    errs = agreed_errors(Q, lambda comm: ac.load(path, EvoV2Fragile, comm=comm, partition=part), timeout=2.0)
    assert all(isinstance(e, AmrckptError) for e in errs), [type(e).__name__ for e in errs]


class EvoV2Broken(ac.CheckpointSchema, name="evo", version=2):
    step: int = ac.Inline()


@EvoV2Broken.migration(from_version=1)
def _broken(fields: dict[str, Any]) -> dict[str, Any]:
    return {"step": fields["no such field"]}


def test_a_failing_migration_raises_an_amrckpt_error(tmp_path: Path) -> None:
    path = tmp_path / "v1.scda"
    _evo_v1_file(path, P=1)
    with pytest.raises(AmrckptError):
        ac.load(path, EvoV2Broken)


# -- damaged and truncated files ---------------------------------------------------------


@pytest.fixture(scope="module")
def good_file(tmp_path_factory: Any) -> tuple[Path, bytes]:
    g = global_state(seed=3, max_level=2)
    path = tmp_path_factory.mktemp("good") / "good.scda"
    run_threads(2, lambda comm: ac.save(g.for_rank(comm), path, comm=comm))
    return path, path.read_bytes()


def _damaged(tmp_path: Path, good: bytes, pos: int, new: bytes) -> Path:
    bad = bytearray(good)
    bad[pos : pos + len(new)] = new
    path = tmp_path / "bad.scda"
    path.write_bytes(bytes(bad))
    return path


@pytest.mark.parametrize("name", ["step", "time", "params"])
def test_damaged_inline_or_block_json_is_a_checksum_error(tmp_path: Path, good_file: Any, name: str) -> None:
    path0, good = good_file
    e = ac.read_info(path0).index.entry(name)
    data = e.offset + 64 if name != "params" else e.offset + 96  # first data byte (I: 64-byte header; B: + E entry)
    path = _damaged(tmp_path, good, data, b"#")
    with pytest.raises(ChecksumError, match=repr(name)):
        ac.load(path, Advection)
    report = ac.verify(path)
    assert not report.ok and any(repr(name) in p.message for p in report.problems)


def test_damaged_manifest_without_verification_is_an_amrckpt_error(tmp_path: Path, good_file: Any) -> None:
    _, good = good_file
    pos = good.index(b'"<i4"')
    path = _damaged(tmp_path, good, pos, b'"<h4"')
    with pytest.raises(ChecksumError, match="manifest"):
        ac.load(path, Advection)  # verified: caught
    with pytest.raises(AmrckptError):
        ac.load(path, Advection, verify=False)


def test_bit_flips_in_data_sections_are_caught_and_named(tmp_path: Path, good_file: Any) -> None:
    """Every sampled flip in an A/V field or an amrckpt section: load raises AmrckptError, verify names it."""
    path0, good = good_file
    index = ac.read_info(path0).index
    targets = [e for e in index.sections if e.type in "AV" or e.name.startswith("amrckpt")]
    rng = np.random.default_rng(7)
    path = tmp_path / "bad.scda"
    for e in targets:
        for _ in range(6):
            pos = int(rng.integers(e.offset, e.end))
            bad = bytearray(good)
            bad[pos] ^= 1 << int(rng.integers(0, 8))
            if bytes(bad[pos - 1 : pos + 2]).endswith(b"\r\n"):
                continue  # '-' -> '\r' before a line feed: a MIME line break, valid scda
            path.write_bytes(bytes(bad))
            with pytest.raises(AmrckptError):
                ac.load(path, Advection)
            errs = agreed_errors(2, lambda comm: ac.load(path, Advection, comm=comm, partition="weighted"))
            assert all(isinstance(x, AmrckptError) for x in errs), (e.name, pos, errs)
            report = ac.verify(path)
            assert not report.ok and any(repr(e.name) in p.message for p in report.problems), (e.name, pos, report.problems)


def test_verify_names_a_damaged_file_header(tmp_path: Path, good_file: Any) -> None:
    _, good = good_file
    path = _damaged(tmp_path, good, 0, b"r")
    report = ac.verify(path)
    assert not report.ok and any("'file header'" in p.message for p in report.problems), report.problems


def test_verify_names_a_damaged_footer(tmp_path: Path, good_file: Any) -> None:
    _, good = good_file
    path = _damaged(tmp_path, good, len(good) - 32, b"1")  # first hex digit of the index offset
    report = ac.verify(path)
    assert not report.ok and any("footer" in p.message for p in report.problems), report.problems


def test_truncated_anywhere_is_an_error_and_verify_never_raises(tmp_path: Path, good_file: Any) -> None:
    _, good = good_file
    path = tmp_path / "cut.scda"
    rng = np.random.default_rng(3)
    cuts = sorted({*range(0, len(good), 320), *rng.integers(1, len(good), 25).tolist(), len(good) - 1, len(good) - 96})
    for cut in cuts:
        path.write_bytes(good[:cut])
        with pytest.raises(AmrckptError):
            ac.load(path, Advection)
        with pytest.raises(AmrckptError):
            ac.read_info(path)
        report = ac.verify(path)
        assert not report.ok and report.problems, cut
    path.write_bytes(good + b"\0" * 32)  # trailing junk: no footer at the end any more
    with pytest.raises(IncompleteCheckpointError):
        ac.load(path, Advection)


def test_verify_and_read_info_on_many_ranks(tmp_path: Path, good_file: Any) -> None:
    path0, good = good_file
    reports = run_threads(3, lambda comm: ac.verify(path0, comm=comm))
    assert all(r.ok and r.info is not None and r.info.provenance is None for r in reports)
    e = ac.read_info(path0).index.entry("rho")
    path = _damaged(tmp_path, good, e.end - 40, b"\xff")
    reports = run_threads(3, lambda comm: ac.verify(path, comm=comm))
    assert all(not r.ok and any("'rho'" in p.message for p in r.problems) for r in reports)
    infos = run_threads(3, lambda comm: ac.read_info(path0, comm=comm))
    assert all(i.writer_partition == infos[0].writer_partition for i in infos)


# -- writing errors ------------------------------------------------------------------------


def test_unwritable_path_fails_on_every_rank(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "dir" / "c.scda"
    errs = agreed_errors(3, lambda comm: ac.save(G2.local(G2.N * comm.rank // 3, G2.N * (comm.rank + 1) // 3), path, comm=comm))
    assert all(isinstance(e, ac.errors.ScdaIOError) for e in errs), errs


def test_bad_style_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.scda"
    with pytest.raises(AmrckptError):
        ac.save(G2.local(0, G2.N), path, access=ac.FileAccess(style="dos"))  # type: ignore[arg-type]
    assert not path.exists()
    ac.save(G2.local(0, G2.N), path, access=ac.FileAccess(style="mime"))
    assert_rich_equal(ac.load(path, Rich2).state, G2.local(0, G2.N))
    assert ac.verify(path).ok


def test_save_result_describes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.scda"
    res = run_threads(3, lambda comm: ac.save(G2.local(G2.N * comm.rank // 3, G2.N * (comm.rank + 1) // 3), path, comm=comm))
    info = ac.read_info(path)
    for r in res:
        assert r.nbytes == path.stat().st_size and r.num_leaves == G2.N
        assert r.manifest == info.manifest and r.index == info.index


def test_more_readers_than_leaves_weighted(tmp_path: Path) -> None:
    g = rich_global(4, 2, num_trees=1, max_level=1)  # 4 leaves
    path = tmp_path / "tiny.scda"
    run_threads(2, lambda comm: ac.save(g.local(*bounds([0, g.N], comm.rank)), path, comm=comm))

    def read(comm: Any) -> tuple[int, int]:
        loaded = ac.load(path, Rich2, comm=comm, partition="weighted")
        lo, hi = loaded.partition.local_range(comm.rank)
        assert_rich_equal(loaded.state, g.local(lo, hi))
        return lo, hi

    ranges = run_threads(7, read)
    assert ranges[0][0] == 0 and ranges[-1][1] == g.N and sum(hi - lo for lo, hi in ranges) == g.N


def test_check_mesh_failing_on_one_rank_fails_everywhere(tmp_path: Path) -> None:
    g = G2
    path = tmp_path / "c.scda"

    def body(comm: Any) -> None:
        s = g.local(g.N * comm.rank // 3, g.N * (comm.rank + 1) // 3)
        if comm.rank == 2:  # swap two leaves: aligned, in range, out of curve order
            m = s.mesh
            i = [1, 0, *list(range(2, len(m)))]
            s.mesh = ac.Forest(m.tree[i], m.level[i], m.x[i], m.y[i], num_trees=m.num_trees)
        ac.save(s, path, comm=comm, check_mesh=True)

    errs = agreed_errors(3, body)
    assert all(isinstance(e, SchemaError) and "[rank 2]" in str(e) for e in errs), errs
    assert not path.exists()


class SameNameAB(ac.CheckpointSchema, name="same-name", version=1):
    a: int = ac.Inline()
    b: int = ac.Inline()


class SameNameA(ac.CheckpointSchema, name="same-name", version=1):
    a: int = ac.Inline()


def test_ranks_passing_different_schemas_fail_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "ab.scda"
    errs = agreed_errors(2, lambda comm: ac.save(SameNameAB(a=1, b=2) if comm.rank == 0 else SameNameA(a=1), path, comm=comm))
    assert all(isinstance(e, SchemaError) for e in errs), [type(e).__name__ for e in errs]
