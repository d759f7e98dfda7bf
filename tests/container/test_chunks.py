"""Layout chunks on every kind with bulk data: hp counts and values in chunks, one pass of decoding, damage.

The bytes of a file do not depend on the partition that wrote it; a load
under any partition gives the same arrays; a damaged chunk is the library's
error naming the field, on every rank, and nothing is allocated that the
file's compressed bytes cannot hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import Packed, assert_packed_equal, packed_state
from test_container import sha256, uneven

import amrckpt as ac
from _support import REPO
from amrckpt.comm import run_threads
from amrckpt.container import CheckpointReader
from amrckpt.errors import AmrckptError, CheckpointError, ChecksumError, SchemaError
from amrckpt.scda import MAX_INFLATE_RATIO

S = packed_state()

PARTS = [
    [S.N],
    [0, S.N],
    [S.N, 0, 0],
    [3, 3, 3, S.N - 9],  # ranks with fewer leaves than a chunk: a chunk spans three ranks
    [1, 0, 2, 0, S.N - 3],  # empty ranks inside a chunk
    [7, 7, 7, S.N - 21],  # every rank but the last starts a chunk of 7
    [S.N // 3, S.N // 3, S.N - 2 * (S.N // 3)],
]


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("packed") / "packed.scda"
    ac.save(S.local(0, S.N), path)
    return path


@pytest.mark.parametrize("counts", PARTS, ids=lambda c: "-".join(map(str, c)))
def test_hp_chunks_bytes_do_not_depend_on_the_partition(tmp_path: Path, packed: Path, counts: list[int]) -> None:
    """The counts and values of a chunk reach its first rank from neighbour to neighbour; the bytes are one rank's."""
    path = tmp_path / "p.scda"
    run_threads(len(counts), lambda comm: ac.save(S.for_rank(comm, counts), path, comm=comm))
    assert sha256(path) == sha256(packed)


def test_hp_compress_true_is_chunks_and_element_the_per_element_convention(packed: Path) -> None:
    m = ac.read_info(packed).manifest
    got = {f.name: (f.section, f.layout, f.count_dtype, f.chunk, f.compressed) for f in m.fields if f.kind == "hp"}
    assert got == {
        "modes": ("V", "chunks", "u1", 7, False),
        "pairs": ("V", "chunks", "<u2", 5, False),
        "wide": ("V", "chunks", "u1", ac.container.DEFAULT_CHUNK, False),
    }
    names = [e.name for e in ac.read_info(packed).index.sections]
    assert names.count("modes") == names.count("pairs") == 2  # the counts' V section, then the values'
    kinds = {k: v for k, v in Packed.__amrckpt_fields__.items() if k == "wide"}
    assert kinds["wide"].chunks == ac.container.DEFAULT_CHUNK and kinds["wide"].level == 1
    back = ac.load(packed).state  # schemaless: the layout and the chunk come back from the manifest
    assert_packed_equal(back, S.local(0, S.N))
    element = ac.HpCells("<f8", compress="element").metadata[0]
    assert element.compress and element.chunks is None and element.level == 9
    with pytest.raises(SchemaError, match="exclude each other"):
        ac.HpCells("<f8", compress="element", chunks=10)


@pytest.mark.parametrize("Q", [1, 2, 3, 4])
@pytest.mark.parametrize("how", ["uniform", "weighted", "uneven"])
def test_hp_chunks_load_on_any_partition(packed: Path, Q: int, how: str) -> None:
    """Uniform, weighted (by the hp counts decoded from their chunks) and uneven partitions give the same arrays."""
    part: Any = how if how != "uneven" else ac.Partition.from_counts(uneven(S.N, Q))

    def body(comm: Any) -> tuple[int, int]:
        loaded = ac.load(packed, Packed, comm=comm, partition=part)
        lo, hi = loaded.partition.local_range(comm.rank)  # type: ignore[union-attr]
        assert_packed_equal(loaded.state, S.local(lo, hi))
        return lo, hi

    bounds = run_threads(Q, body)
    assert bounds[0][0] == 0 and bounds[-1][1] == S.N


@pytest.mark.parametrize("Q", [1, 3])
def test_leaf_weights_of_hp_chunks_are_their_decoded_counts(packed: Path, Q: int) -> None:
    """The weights of a weighted load: bytes per leaf, the hp ones from the counts decoded from their chunks."""
    want = 13 + 8 + sum(S.hp[k][1] * e for k, e in (("modes", 8), ("pairs", 4), ("wide", 4)))

    def body(comm: Any) -> np.ndarray:
        with CheckpointReader(packed, comm=comm) as r:
            return r.leaf_weights()

    assert np.array_equal(np.concatenate(run_threads(Q, body)), want)


@pytest.mark.parametrize("counts", [[S.N // 3, 0, S.N - S.N // 3], [5, 60, S.N - 65]])
def test_hp_chunks_load_on_the_writing_partition(tmp_path: Path, counts: list[int]) -> None:
    path = tmp_path / "w.scda"
    run_threads(3, lambda comm: ac.save(S.for_rank(comm, counts), path, comm=comm, run_record=True))

    def body(comm: Any) -> tuple[int, int]:
        loaded = ac.load(path, Packed, comm=comm, partition="writer")
        lo, hi = loaded.partition.local_range(comm.rank)  # type: ignore[union-attr]
        assert_packed_equal(loaded.state, S.local(lo, hi))
        return lo, hi

    bounds = np.concatenate([[0], np.cumsum(counts)])
    assert run_threads(3, body) == [(int(bounds[p]), int(bounds[p + 1])) for p in range(3)]


def test_ranges_of_hp_chunks(packed: Path) -> None:
    """read_hp of leaf ranges: the chunks that overlap the range (the first one partly), in any order of ranges."""
    with CheckpointReader(packed) as r:
        for name, (values, counts) in S.hp.items():
            off = np.concatenate([[0], np.cumsum(counts)])
            for lo, n in ((0, S.N), (3, 17), (S.N - 5, 5), (S.N, 0), (6, 1), (36, 9), (0, 1)):
                c, v = r.read_hp(name, lo, n)
                assert np.array_equal(c, counts[lo : lo + n]) and np.array_equal(v, values[off[lo] : off[lo + n]])
        assert {"modes", "pairs", "wide"} <= set(r.check_crcs())
    assert ac.verify(packed).ok


def test_a_load_decodes_every_field_in_one_pass(packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first pass of the threads for the chunks of hp counts; then one for those of the mesh, the cells and the hp values."""
    from amrckpt.container import _sections

    passes: list[int] = []
    real = _sections.map_shared

    def counting(fn: Any, items: Any, threads: int) -> Any:
        passes.append(len(items))
        return real(fn, items, threads)

    monkeypatch.setattr(_sections, "map_shared", counting)
    ac.load(packed, Packed)
    n = -(-S.N // 7)
    assert passes == [n + -(-S.N // 5) + 1, n + n + n + -(-S.N // 5) + 1]


def test_chunks_decode_with_zlib_ng_alone(tmp_path: Path, packed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without libdeflate and ISA-L, zlib-ng writes and reads the chunks (its bytes differ, its values do not)."""
    from amrckpt.container import _chunks

    for mod in ("deflate", "isal", "isal.isal_zlib"):
        monkeypatch.setitem(sys.modules, mod, None)
    _chunks._compressor.cache_clear()
    _chunks._decompressor.cache_clear()
    try:
        assert _chunks.deflate_name() == "zlib-ng"
        for verify in (True, False):
            assert_packed_equal(ac.load(packed, Packed, verify=verify).state, S.local(0, S.N))
        path = tmp_path / "ng.scda"
        ac.save(S.local(0, S.N), path)
        assert_packed_equal(ac.load(path, Packed).state, S.local(0, S.N))
    finally:
        _chunks._compressor.cache_clear()
        _chunks._decompressor.cache_clear()


def test_a_load_imports_no_deflate_library(tmp_path: Path, packed: Path) -> None:
    """Before: the first load of a process imported libdeflate inside the collective call; a failing read of the
    module's file (libfiu's posix/io/rw/read, EBADFD) was a raw OSError on that rank (fiu trial t1000142)."""
    script = f"""
import sys
import amrckpt as ac
from checkpoint_cases import assert_packed_equal, packed_state, Packed

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("deflate", "isal"):
            raise OSError(77, "File descriptor in bad state")

for mod in [m for m in sys.modules if m.split(".")[0] in ("deflate", "isal")]:
    del sys.modules[mod]
sys.meta_path.insert(0, Refuse())
S = packed_state()
assert_packed_equal(ac.load({str(packed)!r}, Packed).state, S.local(0, S.N))
ac.save(S.local(0, S.N), {str(tmp_path / "again.scda")!r})
print("loaded")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert got.returncode == 0 and "loaded" in got.stdout, got.stderr[-2000:]


def _data_offset(path: Path, field: str, part: int) -> int:
    """Where the data of ``field``'s ``part``-th V section begin (after its header and size entries)."""
    with CheckpointReader(path, fields="all") as r:
        return r.sections(field)[part].raw.data_offset


@pytest.mark.parametrize(("field", "part"), [("modes", 0), ("modes", 1), ("pairs", 1), ("rho", 0), ("mesh", 0)])
@pytest.mark.parametrize("Q", [1, 3])
def test_a_damaged_chunk_is_an_error_naming_the_field_on_every_rank(tmp_path: Path, field: str, part: int, Q: int) -> None:
    """A byte flipped in a chunk: ChecksumError with verify, CheckpointError without (the stream does not decode)."""
    path = tmp_path / "d.scda"
    ac.save(S.local(0, S.N), path)
    e = [x for x in ac.read_info(path).index.sections if x.name == field][part]
    start = _data_offset(path, field, part)
    raw = bytearray(path.read_bytes())
    raw[(start + e.end - 32) // 2] ^= 0x5A  # inside the chunks' data (the last 32 bytes may be padding)
    path.write_bytes(bytes(raw))
    for verify, cls in ((True, ChecksumError), (False, CheckpointError)):

        def body(comm: Any, verify: bool = verify, cls: type[Exception] = cls) -> str:
            with pytest.raises(cls) as info:
                ac.load(path, Packed, comm=comm, verify=verify)
            return str(info.value)

        assert all(repr(field) in msg for msg in run_threads(Q, body)), (verify, field)


def test_fuzzed_chunks_raise_library_errors_and_allocate_no_more_than_their_bytes_can_hold(tmp_path: Path) -> None:
    """Random bytes changed in the chunked sections: with verify a ChecksumError, without it an AmrckptError naming
    the field (or the load of bytes no check covers, such as padding), the same on every rank (never another
    exception or a crash); the load's memory peak stays below what deflate can expand the file's bytes to."""
    path = tmp_path / "f.scda"
    ac.save(S.local(0, S.N), path)
    pristine = path.read_bytes()
    size = len(pristine)
    sections = [e for e in ac.read_info(path).index.sections if e.name in ("mesh", "rho", "modes", "pairs", "wide")]
    rng = np.random.default_rng(2026)
    outcomes: dict[str, int] = {}
    tracemalloc.start()
    try:
        for trial in range(120):
            e = sections[trial % len(sections)]
            raw = bytearray(pristine)
            for _ in range(int(rng.integers(1, 4))):
                at = int(rng.integers(e.offset, e.end))
                raw[at] = int(rng.integers(0, 256)) if trial % 2 else raw[at] ^ (1 << int(rng.integers(0, 8)))
            path.write_bytes(bytes(raw))
            for verify in (True, False):
                for Q in (1, 2):
                    tracemalloc.reset_peak()
                    before = tracemalloc.get_traced_memory()[0]

                    def body(comm: Any, verify: bool = verify) -> tuple[str, str]:
                        try:
                            ac.load(path, Packed, comm=comm, verify=verify)
                        except AmrckptError as exc:
                            return type(exc).__name__, str(exc)
                        return "loaded", ""

                    got = run_threads(Q, body)
                    assert len({g[0] for g in got}) == 1, got  # the same outcome on every rank
                    kind, msg = got[0]
                    assert kind == "ChecksumError" if verify else kind in ("CheckpointError", "ScdaFormatError", "loaded"), got
                    assert kind == "loaded" or repr(e.name) in msg, msg
                    outcomes[kind] = outcomes.get(kind, 0) + 1
                    assert tracemalloc.get_traced_memory()[1] - before < MAX_INFLATE_RATIO * size + (16 << 20)
    finally:
        tracemalloc.stop()
    assert outcomes.get("CheckpointError", 0) > 0 and outcomes.get("ScdaFormatError", 0) > 0, outcomes
