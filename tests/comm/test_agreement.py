"""Every public collective entry point, every non-empty proper subset of failing ranks, on thread ranks (tests/agreement.py).

The same body runs under real MPI in tests/mpi/test_agreement_mpi.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agreement import CASES, run_all

from amrckpt.comm import SerialComm, run_threads


@pytest.mark.parametrize("P", [2, 3, 4])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_subset_of_failing_ranks_raises_one_error_on_every_rank(tmp_path: Path, P: int, case: object) -> None:
    got = run_threads(P, run_all, tmp_path, [case], timeout=60)
    bad, hits = got[0]
    assert not bad, "\n".join(bad)
    assert hits


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_one_rank_raises_its_own_error(tmp_path: Path, case: object) -> None:
    bad, _ = run_all(SerialComm(), tmp_path, [case])
    assert not bad, "\n".join(bad)
