"""docs/p4est.md's example runs: its C p4est code and its Python driver (ctypes), restarted bit for bit.

libp4est is a release build (its ``P4EST_ASSERT``s are off), so the test checks what ``p4est_inflate`` asserts in a
debug build itself: heat.c is compiled behind a shim that checks the arrays it is handed against p4est_io.h's
contract before calling the real ``p4est_inflate``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from p4est import build

from _support import REPO

REASON = build.skip_reason()

INFLATE_CONTRACT = r"""/* p4est_inflate's contract (p4est_io.h; P4EST_ASSERTs of p4est_io.c in a debug build), checked */
#include <p4est_io.h>
#include <stdio.h>
#include <stdlib.h>

static p4est_t     *
checked_inflate (sc_MPI_Comm mpicomm, p4est_connectivity_t * connectivity, const p4est_gloidx_t * gfq,
                 const p4est_gloidx_t * pertree, sc_array_t * quadrants, sc_array_t * data, void *user_pointer)
{
  int                 rank;
  size_t              n;

  sc_MPI_Comm_rank (mpicomm, &rank);
  n = (size_t) (gfq[rank + 1] - gfq[rank]);
  if (quadrants->elem_size != sizeof (p4est_qcoord_t) || quadrants->elem_count != (P4EST_DIM + 1) * n
      || (data != NULL && data->elem_count != n)) {
    fprintf (stderr, "p4est_inflate contract broken: quadrants of %zu elements of %zu bytes, data of %zu elements, "
             "for %zu quadrants\n", quadrants->elem_count, quadrants->elem_size, data == NULL ? 0 : data->elem_count, n);
    abort ();
  }
  return p4est_inflate (mpicomm, connectivity, gfq, pertree, quadrants, data, user_pointer);
}

#define p4est_inflate checked_inflate
/* docs/p4est.md's heat.c follows */
"""


def example(name: str) -> str:
    text = (REPO / "docs" / "p4est.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- example: " + re.escape(name) + r" -->\s*```\w+\n(.*?)```", text, re.S)
    assert m, f"docs/p4est.md has no example block {name}"
    return m.group(1)


@pytest.mark.skipif(REASON is not None, reason=f"the real libp4est is not available: {REASON}")
def test_the_c_p4est_code_of_the_docs_restarts_bit_for_bit(tmp_path: Path) -> None:
    (tmp_path / "heat.c").write_text(example("heat.c"), encoding="utf-8")
    (tmp_path / "heat_checked.c").write_text(INFLATE_CONTRACT + example("heat.c"), encoding="utf-8")
    (tmp_path / "heat.py").write_text(example("heat.py"), encoding="utf-8")
    env = build.tool_env()  # Open MPI of the system in this process, not the venv's MPICH (the driver is serial)
    res = subprocess.run(
        [sys.executable, "heat.py", "heat_checked.c"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "bit-identical at step 80" in res.stdout
    assert (tmp_path / "heat-40.scda").exists() and (tmp_path / "heat-80.scda").exists()


def test_the_example_blocks_are_there() -> None:
    """The blocks the test above runs exist on the page (checked even without libp4est)."""
    assert "p4est_inflate" in example("heat.c") and "Forest.from_p4est" in example("heat.py")
