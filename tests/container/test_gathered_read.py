"""The gathered read of a load (issue 17): the same values as field by field, a fixed number of collectives.

:meth:`CheckpointReader.read_fields` reads every wanted field with two
collective reads around one exscan and checks the CRC32s with one allreduce;
:meth:`CheckpointReader.read_field` reads one field section by section
through the scda API.  Both are run here on the same files, on thread ranks
Q = 1..4 under uniform and uneven partitions, and must return equal values;
the collectives of a whole load are counted on each rank.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_container import Layouts, _layouts_rank, rich_rank

import amrckpt as ac
from amrckpt import sfc
from amrckpt.comm import run_threads
from amrckpt.container import CheckpointReader
from amrckpt.errors import ChecksumError
from amrckpt.partition import Partition
from amrckpt.testing import CountingBackend, CountingComm

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return bool(a == b)


def uneven(N: int, Q: int) -> Partition:
    """All but one leaf on the last rank, one on the first (empty ranks between)."""
    if Q == 1 or N == 0:
        return Partition.uniform(N, Q)
    return Partition.from_counts([1, *([0] * (Q - 2)), N - 1])


def both_ways(path: Path, Q: int, how: str, verify: bool = True) -> list[bool]:
    """Read every field of ``path`` gathered and field by field on Q thread ranks; whether they agree on each rank."""

    def body(comm: Any) -> bool:
        with CheckpointReader(path, comm=comm, verify=verify, fields="all") as r:
            m = r.manifest
            parts: dict[str, Partition] = {}
            for ms in m.meshes:
                parts[ms.field] = Partition.uniform(ms.num_leaves, Q) if how == "uniform" else uneven(ms.num_leaves, Q)
            for fs in m.fields:
                if fs.kind == "array":
                    parts[fs.name] = Partition.uniform(fs.count or 0, Q)
            gathered = r.read_fields(list(m.fields), parts)  # called alone: any rank's error raised on every rank
            checked = r.check_crcs()
            r.close()
        with CheckpointReader(path, comm=comm, verify=verify) as r:
            one = {}
            for fs in r.manifest.fields:
                part = r._part(fs, parts)
                one[fs.name] = r.read_field(fs.name, part.elem_counts.tolist() if part is not None else None)
            checked_one = r.check_crcs()
        assert set(gathered) == set(one)
        assert set(checked) == set(checked_one), (checked, checked_one)
        return all(same(gathered[k], one[k]) for k in one)

    return run_threads(Q, body)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gathered")
    out = {"rich": d / "rich.scda", "layouts": d / "layouts.scda"}
    run_threads(3, lambda comm: ac.save(rich_rank(comm), out["rich"], comm=comm))
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), out["layouts"], comm=comm))
    for g in sorted(GOLDEN.glob("*.scda")):
        out[g.stem] = g
    return out


@pytest.mark.parametrize("Q", [1, 2, 3, 4])
@pytest.mark.parametrize("how", ["uniform", "uneven"])
def test_gathered_equals_field_by_field(files: dict[str, Path], Q: int, how: str) -> None:
    """Meshes, cells, arrays, replicated arrays, hp (counts and V layouts), chunked and compressed fields; golden files too."""
    for name, path in files.items():
        assert all(both_ways(path, Q, how)), name
    assert all(both_ways(files["layouts"], Q, how, verify=False))


def test_collectives_per_load_do_not_depend_on_the_fields_or_P(tmp_path: Path) -> None:
    """A load of 1 or 5 cells fields plus an hp field, on 1..4 ranks: the metadata from the root with the call tag, one
    agreement to open, one exscan, one CRC32 allreduce, one agreement when closing (without hp, no exscan; without
    verify, no CRC allreduce).  Chunked and compressed fields take nothing more: they are in the same plan."""

    def schema(k: int, hp: bool, packed: bool = False) -> type[ac.CheckpointSchema]:
        ns: dict[str, Any] = {"__annotations__": {"step": int, "mesh": ac.Forest}, "step": ac.Inline(), "mesh": ac.Mesh(dim=2)}
        for j in range(k):
            ns["__annotations__"][f"c{j}"] = ac.CellData
            ns[f"c{j}"] = ac.Cells("<f8", chunks=5) if packed and j == 0 else ac.Cells("<f8", compress=packed and j == 1)
        if hp:
            ns["__annotations__"]["modes"] = ac.HpData
            ns["modes"] = ac.HpCells("<f8", compress=packed)
        return type(f"S{k}{hp}{packed}", (ac.CheckpointSchema,), ns, name=f"s{k}{hp}{packed}", version=1)

    def state(S: type[ac.CheckpointSchema], comm: Any) -> Any:
        mesh = ac.sfc.uniform_leaves(3, num_trees=1, dim=2)
        N, P, r = mesh.num_leaves, comm.size, comm.rank
        lo, hi = N * r // P, N * (r + 1) // P
        local = ac.Forest(mesh.tree[lo:hi], mesh.level[lo:hi], mesh.x[lo:hi], mesh.y[lo:hi], num_trees=1)
        values: dict[str, Any] = {"step": 1, "mesh": local}
        for name in S.__amrckpt_fields__:
            if name.startswith("c"):
                values[name] = np.arange(lo, hi, dtype="<f8")
        if "modes" in S.__amrckpt_fields__:
            counts = np.arange(lo, hi) % 3
            values["modes"] = ac.HpData(np.ones(int(counts.sum())), counts)
        return S(**values)

    # packed: chunked, per-element compressed cells and a compressed hp field, read by the same one plan
    for k, hp, packed in ((1, False, False), (5, False, False), (1, True, False), (5, True, False), (5, True, True)):
        S = schema(k, hp, packed)
        path = tmp_path / f"s{k}{hp}{packed}.scda"
        run_threads(2, lambda comm, S=S, path=path: ac.save(state(S, comm), path, comm=comm))
        for Q in (1, 2, 4):
            for verify in (True, False):

                def load(comm: Any, S: type[ac.CheckpointSchema] = S, path: Path = path, verify: bool = verify) -> Counter[str]:
                    cc = CountingComm(comm)
                    ac.load(path, S, comm=cc, verify=verify)
                    return cc.counts

                got = run_threads(Q, load)
                assert all(g == got[0] for g in got)
                want = Counter({"allreduce_columns": 3, **({"meet": 1} if Q > 1 else {})})  # the call's meeting
                if hp or packed:  # sizes to sum over the ranks below
                    want["exscan_columns"] = 1
                if verify:
                    want["allreduce_array"] = 1
                assert got[0] == want, (k, hp, packed, Q, verify, got[0])


def test_a_damaged_hp_count_is_a_checksum_error_not_a_hang(tmp_path: Path) -> None:
    """Counts that add up to more values than the file holds, on one rank of three: ChecksumError on every rank."""
    path = tmp_path / "l.scda"
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    e = next(x for x in ac.read_info(path).index.sections if x.name == "wide")
    raw = bytearray(path.read_bytes())
    raw[e.end - 40 : e.end - 38] = b"\xff\xff"  # a leaf near the end: 65535 values
    path.write_bytes(bytes(raw))

    def body(comm: Any) -> str:
        with pytest.raises(ChecksumError) as info:
            ac.load(path, Layouts, comm=comm)
        return str(info.value)

    assert all("'wide'" in msg for msg in run_threads(3, body))
    with pytest.raises(ac.errors.CheckpointError, match="'wide'"):
        ac.load(path, Layouts, verify=False)


@pytest.mark.parametrize("Q", [1, 2, 3, 4])
def test_leaf_weights_by_one_collective_read_equal_field_by_field(files: dict[str, Path], Q: int) -> None:
    """partition='weighted': the leaf sizes read by one collective read (hp counts and V entries) equal the old reads."""

    def body(comm: Any) -> bool:
        ok = True
        for path in files.values():
            with CheckpointReader(path, comm=comm, fields="all") as r:
                meshes = [ms.field for ms in r.manifest.meshes]
                gathered = [r.leaf_weights(name) for name in meshes]
            with CheckpointReader(path, comm=comm) as r:
                one = [r.leaf_weights(name) for name in meshes]
            ok &= all(np.array_equal(a, b) for a, b in zip(gathered, one, strict=True))
        return ok

    assert all(run_threads(Q, body))


def test_a_failed_read_on_one_rank_is_its_io_error_on_every_rank(tmp_path: Path) -> None:
    """EIO in the gathered read of one rank of three: every rank raises ScdaIOError (not a ChecksumError), none hangs."""
    import errno

    from amrckpt.testing import FaultyBackend, inject_faults

    path = tmp_path / "l.scda"
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))

    def body(comm: Any) -> tuple[str, int | None]:
        with inject_faults(1, ranks=[1], kinds={"read"}, errno=errno.EIO, limit=1):
            try:
                ac.load(path, Layouts, comm=comm, access=ac.FileAccess(backend=FaultyBackend))
            except ac.errors.AmrckptError as exc:
                return type(exc).__name__, getattr(exc, "errno", None)
        return "loaded", None

    assert run_threads(3, body, timeout=30) == [("ScdaIOError", errno.EIO)] * 3


def test_a_damaged_section_header_is_a_checksum_error_on_every_rank(tmp_path: Path) -> None:
    """A digit of a field's N entry changed: the section no longer fits the manifest before any byte of it is read.
    The root CRCs the section (on that error path only) and every rank raises its ChecksumError, not the misfit."""
    path = tmp_path / "l.scda"
    run_threads(2, lambda comm: ac.save(_layouts_rank(comm), path, comm=comm))
    e = next(x for x in ac.read_info(path).index.sections if x.name == "modes")
    raw = bytearray(path.read_bytes())
    n_entry = e.offset + 64  # the section header, then the N count entry ("N" and 26 digits)
    digit = next(i for i in range(n_entry + 2, n_entry + 28) if raw[i : i + 1].isdigit())
    raw[digit] = ord("9") if raw[digit] != ord("9") else ord("8")
    path.write_bytes(bytes(raw))

    def body(comm: Any) -> str:
        with pytest.raises(ChecksumError) as info:
            ac.load(path, Layouts, comm=comm)
        return str(info.value)

    assert all("section 'modes'" in msg for msg in run_threads(3, body, timeout=30))
    with pytest.raises(ac.errors.CheckpointError, match="'modes'"):
        ac.load(path, Layouts, verify=False)


@pytest.mark.parametrize("P", [1, 2, 3])
def test_file_operations_per_save_and_per_load(tmp_path: Path, P: int) -> None:
    """A save opens the file once, writes every byte of the rank in one gathered call and closes it; a load opens once,
    reads in one gathered call per phase (two with an hp field: its values follow a prefix sum of its counts), closes
    once.  The same on every rank and for every P."""
    from checkpoint_cases import Advection, global_state

    G = global_state()
    path = tmp_path / "ops.scda"

    def body(comm: Any) -> tuple[Counter[str], Counter[str]]:
        saved: Counter[str] = Counter()
        ac.save(G.for_rank(comm), path, comm=comm, access=ac.FileAccess(backend=CountingBackend.over(saved)))
        loaded: Counter[str] = Counter()
        ac.load(path, Advection, comm=comm, access=ac.FileAccess(backend=CountingBackend.over(loaded)))
        return saved, loaded

    for saved, loaded in run_threads(P, body):
        assert saved == Counter({"open": 1, "write_gathered": 1, "close": 1})
        assert loaded == Counter({"open": 1, "read_gathered": 2, "close": 1})


class _Big(ac.CheckpointSchema, name="big-pieces", version=1):
    mesh: ac.Forest = ac.Mesh(dim=2)
    rho: ac.CellData = ac.Cells("<f8")


@pytest.mark.parametrize("P", [1, 2])
def test_a_load_reads_its_large_pieces_by_contiguous_calls(tmp_path: Path, P: int) -> None:
    """A plan that holds pieces of CONTIGUOUS_NBYTES or more reads them by contiguous calls (one agreement), whatever
    its total size: through a file view ROMIO took several times as long (1e6 leaves, 21 MB: 36 ms against 10 ms at
    P = 1).  A small state stays one call through the view, with no agreement."""
    from amrckpt.scda import _backend

    level = 10  # 2**20 leaves: every rank's share of rho (8 MiB in all) and of the records is a large piece
    assert 2 ** (2 * level) * 8 // 2 >= _backend.CONTIGUOUS_NBYTES
    lv = sfc.uniform_leaves(level, 1, 2)
    mesh = ac.Forest(lv.tree, lv.level, lv.x, lv.y, num_trees=1)
    rho = np.arange(len(mesh), dtype="<f8")
    path = tmp_path / "big.scda"
    ac.save(_Big(mesh=mesh, rho=rho), path)

    def body(comm: Any) -> Counter[str]:
        got: Counter[str] = Counter()
        loaded = ac.load(path, _Big, comm=comm, access=ac.FileAccess(backend=CountingBackend.over(got)))
        lo, hi = loaded.partition.local_range(comm.rank)
        np.testing.assert_array_equal(loaded.state.rho, rho[lo:hi])
        return got

    for got in run_threads(P, body):
        assert got["contiguous"] >= 2, got


def test_a_loaded_state_is_freed_when_dropped_without_the_cyclic_collector(tmp_path: Path) -> None:
    """The read plan's prefix-sum steps are released after the run: no reference cycle keeps the arrays read alive."""
    import gc
    import weakref

    from checkpoint_cases import Advection, global_state

    path = tmp_path / "free.scda"
    G = global_state()
    ac.save(G.local(0, G.N), path)
    gc.collect()
    gc.disable()
    try:
        st = ac.load(path, Advection).state
        refs = [weakref.ref(st.rho), weakref.ref(st.modes.values), weakref.ref(st.mesh.x)]
        del st
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
