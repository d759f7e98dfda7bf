"""The vectorized E and U entries agree with the scalar rules of the paper."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from amrckpt.errors import ScdaFormatError
from amrckpt.scda import _entries, _format

values = hnp.arrays(
    np.uint64,
    st.integers(0, 300),
    elements=st.one_of(st.integers(0, 400), st.integers(0, 10**8 + 5), st.integers(0, 2**64 - 1)),
)


@given(values, st.sampled_from(["unix", "mime"]), st.sampled_from([b"E", b"U"]))
def test_format_matches_scalar(v: np.ndarray, style: str, letter: bytes) -> None:
    out = _entries.format_entries(letter, v, style)  # type: ignore[arg-type]
    assert out.shape == (v.size, 32)
    ref = b"".join(_format.count_entry(letter, int(x), style) for x in v.tolist())  # type: ignore[arg-type]
    assert out.tobytes() == ref


@given(values, st.sampled_from(["unix", "mime"]))
def test_parse_roundtrip(v: np.ndarray, style: str) -> None:
    raw = _entries.format_entries(b"E", v, style)  # type: ignore[arg-type]
    assert np.array_equal(_entries.parse_entries(b"E", raw), v)


def test_chunk_boundaries() -> None:
    v = np.arange(3 * _entries._CHUNK + 7, dtype=np.uint64) * 37
    v[_entries._CHUNK - 1] = 10**12  # a 13-digit value at a chunk edge
    raw = _entries.format_entries(b"E", v, "unix")
    assert np.array_equal(_entries.parse_entries(b"E", raw), v)


def _entry(body: bytes) -> np.ndarray:
    assert len(body) == 32
    return np.frombuffer(b"E 5 " + b"-" * 26 + b"-\n" + body, dtype=np.uint8)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"E 05 " + b"-" * 25 + b"-\n", "leading zeros"),
        (b"E +5 " + b"-" * 25 + b"-\n", "sign"),
        (b"U 5 " + b"-" * 26 + b"-\n", "letter"),
        (b"E 5 " + b"-" * 25 + b"x-\n", "padding"),
        (b"E 5 " + b"-" * 26 + b"\n\n", "line end"),
        (b"E 5\xb0" + b"-" * 26 + b"-\n", "high byte"),
        (b"E " + b"1" * 21 + b" " + b"-" * 6 + b"-\n", "beyond 64 bits"),
        (b"E  " + b"-" * 27 + b"-\n", "no digits"),
    ],
)
def test_parse_names_first_bad_entry(body: bytes, why: str) -> None:
    with pytest.raises(ScdaFormatError, match=r"entry 8 at byte 1256"):
        _entries.parse_entries(b"E", _entry(body), first_index=7, offset=1224)


def test_nine_or_more_digits_take_the_slow_path_correctly() -> None:
    v = np.array([0, 99_999_999, 100_000_000, 123_456_789_012, 2**64 - 1], dtype=np.uint64)
    raw = _entries.format_entries(b"U", v, "mime")
    assert raw[2].tobytes() == _format.count_entry(b"U", 100_000_000, "mime")
    assert np.array_equal(_entries.parse_entries(b"U", raw), v)
