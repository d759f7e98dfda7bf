"""Fuzzing of every reader path, the modest campaign of the test suite.

Damaged copies of real files (seed scda files with every section type and
its compressed form in both styles, checkpoints with every field kind, the
libsc and reference files of ``shared/interop``) go to every reader: the scda
reader (decode on and off, strict with checksums, two ranks), ``scan``,
``read_info``, ``load`` (one and two ranks), ``verify``, and the ``inspect``
and ``verify`` commands in-process; damaged compressed elements go to the
decoder.  The only acceptable outcomes are a correct read or an error of
amrckpt's tree (for the CLI: exit status 0 or 1 and only ``amrckpt ...``
lines on stderr), within a deadline and within ``MEMORY_FACTOR`` times the
file's size plus ``MEMORY_SLACK`` of Python and numpy allocations.

The mutations and readers are those of ``tests/fuzz/harness.py``; the long
campaign is ``python tests/fuzz/campaign.py --inputs 100000 --seed 1``.
More examples here::

    AMRCKPT_FUZZ_EXAMPLES=2000 python -m pytest tests/property/test_fuzz_readers.py
"""

from __future__ import annotations

import os
import random
import tempfile
import tracemalloc
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from fuzz.harness import READERS, SCHEMAS, Seed, build_seeds, deadline, decoder_case, decoder_target, mutate, run_target
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support import interop_dir
from amrckpt import restart

EXAMPLES = int(os.environ.get("AMRCKPT_FUZZ_EXAMPLES", "50"))
DEADLINE = 30.0  # seconds one reader may take on one small damaged file

GROUPS = {
    "scda": [k for k in READERS if k.startswith("scda.")],
    "restart": [k for k in READERS if k.startswith("restart.")],
    "cli": [k for k in READERS if k.startswith("cli ")],
}


@pytest.fixture(autouse=True)
def _tracing() -> Iterator[None]:
    """tracemalloc on for a whole test, not per input (see harness.run_target)."""
    tracemalloc.start()
    yield
    tracemalloc.stop()


@cache
def seeds() -> tuple[Seed, ...]:
    """The seed files (written once per session; the interop files read in place)."""
    with tempfile.TemporaryDirectory(prefix="amrckpt-fuzz-seeds-") as d:  # the seeds keep their bytes
        return tuple(build_seeds(Path(d), interop_dir()))


def _check(group: str, seed_index: int, rng: random.Random, tmp: Path) -> None:
    seed = seeds()[seed_index % len(seeds())]
    data, edits = mutate(seed, rng)
    path = tmp / "damaged.bin"
    path.write_bytes(data)
    for name in GROUPS[group]:
        with deadline(DEADLINE):
            crash = run_target(name, READERS[name], path, len(data))
        assert crash is None, f"{seed.name} {edits}: {crash}"


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_damaged_files_give_our_errors_only(group: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(0, 1000), st.randoms(use_true_random=False))
    def run(seed_index: int, rng: random.Random) -> None:
        _check(group, seed_index, rng, tmp)

    run()


@settings(max_examples=4 * EXAMPLES, deadline=None)
@given(st.randoms(use_true_random=False))
def test_damaged_compressed_elements_give_decode_errors_only(rng: random.Random) -> None:
    case = decoder_case(rng)
    with deadline(DEADLINE):
        crash = run_target("scda.decode_elements", decoder_target(), case, int(case[0].size))
    assert crash is None, crash


def test_the_seeds_read_without_error(tmp_path: Path) -> None:
    """The unmutated seeds that are valid files read cleanly (the fuzzing starts from real files)."""
    valid = [s for s in seeds() if not s.name.startswith("reference/neg_") and "quirk" not in s.name]
    for s in valid:
        p = tmp_path / "seed.bin"
        p.write_bytes(s.data)
        for name, target in READERS.items():
            if s.kind == "scda" and not name.startswith(("scda.", "cli inspect")):
                continue  # the checkpoint readers refuse a plain scda file, as they should
            target(p)
        if s.kind == "checkpoint":
            schema = SCHEMAS[s.name.split("-")[0].removesuffix(".ckpt")]
            assert restart.verify(p).ok
            restart.load(p, schema)
