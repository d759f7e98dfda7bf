"""Serial equivalence: a file's bytes do not depend on the process count or partition.

Hypothesis draws section sequences (all types, compressed or not, user
strings that look like the compression magic) and partitions with empty
ranks; ranks are threads, so hundreds of cases run in seconds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from amrckpt.comm import run_threads
from amrckpt.testing.strategies import Spec, partitions, read_specs, section_specs, write_specs


@st.composite
def cases(draw: Any) -> tuple[list[Spec], int, list[list[int]], int, list[list[int]], str]:
    specs = draw(st.lists(section_specs(), min_size=1, max_size=6))
    P = draw(st.integers(1, 5))
    Q = draw(st.integers(1, 5))
    wparts = [draw(partitions(len(s.sizes), P)) for s in specs]
    rparts = [draw(partitions(len(s.sizes), Q)) for s in specs]
    return specs, P, wparts, Q, rparts, draw(st.sampled_from(["unix", "mime"]))


def _expected(specs: list[Spec]) -> list[tuple[str, bytes, bytes]]:
    return [(s.type, s.user_string, s.data) for s in specs]


@settings(max_examples=80)
@given(cases())
def test_bytes_do_not_depend_on_partition(tmp_path_factory: Any, case: Any) -> None:
    specs, P, wparts, Q, rparts, style = case
    d: Path = tmp_path_factory.mktemp("eq")
    serial, parallel = d / "serial.scda", d / "parallel.scda"
    run_threads(1, write_specs, serial, specs, [[len(s.sizes)] for s in specs], style)
    run_threads(P, write_specs, parallel, specs, wparts, style)
    h1 = hashlib.sha256(serial.read_bytes()).hexdigest()
    h2 = hashlib.sha256(parallel.read_bytes()).hexdigest()
    assert h1 == h2
    # ... and it reads back on another number of ranks with another partition.
    got = run_threads(Q, read_specs, parallel, rparts)
    assert all(g == got[0] for g in got)
    assert got[0] == _expected(specs)
