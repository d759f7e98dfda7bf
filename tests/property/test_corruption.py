"""Damaged files: a correct read or an exception of amrckpt's tree, never more memory than the file could hold.

Mutations of real files (written from drawn section sequences, and the
interop files): bit flips, truncation, inserted and deleted bytes, digits
overwritten (counts with leading zeros, 27 digits, huge N), padding damage,
CR/LF swaps.  Every reader path is exercised: the collective reader with
decode on and off, and the non-collective scan.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from _support import interop_dir, read_every_section
from amrckpt import scda
from amrckpt.comm import run_threads
from amrckpt.errors import AmrckptError
from amrckpt.testing.strategies import section_specs, write_specs

_LIMIT = 64 << 20  # bytes of Python/numpy memory a small damaged file may cost at most
# The test suite runs a modest campaign; a long one is a matter of this variable:
#   AMRCKPT_FUZZ_EXAMPLES=20000 python -m pytest tests/property/test_corruption.py
EXAMPLES = int(os.environ.get("AMRCKPT_FUZZ_EXAMPLES", "150"))


def check_damaged(path: Path) -> None:
    for run in (
        lambda: read_every_section(path, decode=True),
        lambda: read_every_section(path, decode=False),
        lambda: scda.scan(path, check_padding=True),
    ):
        tracemalloc.start()
        try:
            run()
        except AmrckptError:
            pass
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak < _LIMIT, f"{peak} bytes allocated for a {path.stat().st_size}-byte file"


@st.composite
def mutations(draw: Any, size: int) -> list[tuple[str, int, bytes]]:
    kinds = st.sampled_from(["flip", "truncate", "insert", "delete", "digits", "byte", "crlf"])
    out = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(kinds)
        pos = draw(st.integers(0, max(size - 1, 0)))
        payload = b""
        if kind == "insert":
            payload = draw(st.binary(min_size=1, max_size=40))
        elif kind == "digits":
            payload = draw(st.sampled_from([b"0", b"00", b"9" * 27, b"9" * 26, b"18446744073709551616", b"+", b"-", b" "]))
        elif kind == "byte":
            payload = draw(st.sampled_from([b"-", b"=", b"\n", b"\r", b" ", b"U", b"E", b"N", b"V", b"A", b"z", b"\0", b"\xff"]))
        out.append((kind, pos, payload))
    return out


def mutate(blob: bytes, muts: list[tuple[str, int, bytes]], bit: int = 0) -> bytes:
    b = bytearray(blob)
    for kind, pos, payload in muts:
        pos = min(pos, max(len(b) - 1, 0))
        if not b:
            break
        if kind == "flip":
            b[pos] ^= 1 << (pos % 8)
        elif kind == "truncate":
            del b[pos:]
        elif kind == "insert":
            b[pos:pos] = payload
        elif kind == "delete":
            del b[pos : pos + 1 + pos % 7]
        elif kind in ("digits", "byte"):
            b[pos : pos + len(payload)] = payload
        elif kind == "crlf":
            b[pos : pos + 1] = b"\r\n" if b[pos] == 0x0A else b"\n"
    return bytes(b)


@settings(max_examples=EXAMPLES)
@given(st.lists(section_specs(), min_size=1, max_size=5), st.sampled_from(["unix", "mime"]), st.data())
def test_damaged_written_files(tmp_path_factory: Any, specs: Any, style: str, data: Any) -> None:
    d = tmp_path_factory.mktemp("dmg")
    good = d / "good.scda"
    run_threads(1, write_specs, good, specs, [[len(s.sizes)] for s in specs], style)
    blob = good.read_bytes()
    bad = d / "bad.scda"
    bad.write_bytes(mutate(blob, data.draw(mutations(len(blob)))))
    check_damaged(bad)


def _interop_files() -> list[Path]:
    base = interop_dir()
    if base is None:
        return []
    return sorted(p for p in base.rglob("*.scda") if p.stat().st_size < 300_000)


@settings(max_examples=EXAMPLES)
@given(st.sampled_from(_interop_files() or [Path("/nonexistent")]), st.data())
def test_damaged_interop_files(tmp_path_factory: Any, src: Path, data: Any) -> None:
    if not src.exists():
        return  # no interop folder: the written-file test above covers the readers
    blob = src.read_bytes()
    bad = tmp_path_factory.mktemp("dmg") / "bad.scda"
    bad.write_bytes(mutate(blob, data.draw(mutations(len(blob)))))
    check_damaged(bad)
