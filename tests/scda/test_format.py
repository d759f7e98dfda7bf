"""The byte rules of scda paper section 2 (padding, counts, headers)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amrckpt.errors import ScdaArgumentError, ScdaFormatError
from amrckpt.scda import _format as fmt


def test_string_padding_unix_and_mime() -> None:
    # Paper eq. (1): ' ', (p-3) dashes, then "-\n" (Unix) or "\r\n" (MIME).
    assert fmt.pad_string(b"abc", 8, "unix") == b"abc ---\n"
    assert fmt.pad_string(b"abc", 8, "mime") == b"abc --\r\n"
    assert fmt.pad_string(b"", 24, "unix") == b" " + b"-" * 22 + b"\n"
    # libsc: a 58-byte user string gets space, dash, dash, LF.
    assert fmt.pad_string(b"x" * 58, 62, "unix") == b"x" * 58 + b" --\n"
    assert fmt.pad_string(b"x" * 58, 62, "mime") == b"x" * 58 + b" -\r\n"
    with pytest.raises(ScdaArgumentError):
        fmt.pad_string(b"x" * 59, 62, "unix")


@given(st.binary(max_size=58), st.sampled_from(["unix", "mime"]))
def test_string_padding_roundtrip(s: bytes, style: str) -> None:
    field = fmt.pad_string(s, 62, style)  # type: ignore[arg-type]
    assert len(field) == 62
    assert fmt.unpad_string(field, "x") == s


@pytest.mark.parametrize(
    "field",
    [
        b"abc" + b"-" * 57 + b"\n\n",  # no space
        b"abcdefg" + b" " * 53 + b"-\r",  # wrong end
        b"x" * 59 + b" -\n",  # p = 3
        b"x" * 60 + b"-\n",  # p = 2
        b"x" * 58 + b"  \n" + b"\n",
    ],
)
def test_string_padding_rejects_malformed(field: bytes) -> None:
    with pytest.raises(ScdaFormatError):
        fmt.unpad_string(field[:62].ljust(62, b"-"), "user string")


@pytest.mark.parametrize("n", range(0, 70))
def test_data_padding_length_and_form(n: int) -> None:
    p = fmt.data_padding_nbytes(n)
    assert 7 <= p <= 38 and (n + p) % 32 == 0
    for last in (None, 0x0A, 0x41):
        for style in ("unix", "mime"):
            pad = fmt.data_padding(n, last, style)  # type: ignore[arg-type]
            assert len(pad) == p
            lf = n > 0 and last == 0x0A
            if style == "unix":
                assert pad.startswith(b"==" if lf else b"\n=") and pad.endswith(b"\n\n")
                assert pad[2:-2] == b"=" * (p - 4)
            else:
                assert pad.startswith(b"==" if lf else b"\r\n") and pad.endswith(b"\r\n\r\n")
                assert pad[2:-4] == b"=" * (p - 6)
            assert fmt.padding_form(pad, n, last) == style


def test_data_padding_examples_from_libsc() -> None:
    # Empty data (e.g. the file header): LF, 29 '=', LF, LF.
    assert fmt.data_padding(0, None, "unix") == b"\n" + b"=" * 29 + b"\n\n"
    assert fmt.data_padding_nbytes(25) == 7 and fmt.data_padding_nbytes(26) == 38


@given(st.integers(0, 10**26 - 1), st.sampled_from(["unix", "mime"]), st.sampled_from([b"N", b"E", b"U"]))
def test_count_entry_roundtrip_26_digits(v: int, style: str, letter: bytes) -> None:
    e = fmt.count_entry(letter, v, style)  # type: ignore[arg-type]
    assert len(e) == 32 and e[:2] == letter + b" "
    assert fmt.parse_count_entry(e, letter, "t") == v


def test_count_entry_limits() -> None:
    big = 10**26 - 1
    assert fmt.count_entry(b"N", big, "unix") == b"N " + b"9" * 26 + b" --\n"
    assert fmt.count_entry(b"N", big, "mime") == b"N " + b"9" * 26 + b" -\r\n"
    with pytest.raises(ScdaArgumentError):
        fmt.count_entry(b"N", 10**26, "unix")
    with pytest.raises(ScdaArgumentError):
        fmt.count_entry(b"N", -1, "unix")


@pytest.mark.parametrize(
    "entry",
    [
        b"N 007 " + b"-" * 24 + b"-\n",  # leading zeros
        b"N +7 " + b"-" * 25 + b"-\n",  # sign
        b"N -7 " + b"-" * 25 + b"-\n",
        b"N  7 " + b"-" * 25 + b"-\n",  # leading space
        b"N 20x " + b"-" * 24 + b"-\n",  # trailing junk
        b"N  " + b"-" * 27 + b"-\n",  # no digits
        b"N " + b"9" * 27 + b" -\n",  # 27 digits, padding too short
        b"E 7 " + b"-" * 26 + b"-\n",  # wrong letter
    ],
)
def test_count_entry_rejects_what_libsc_accepts(entry: bytes) -> None:
    assert len(entry) == 32
    with pytest.raises(ScdaFormatError):
        fmt.parse_count_entry(entry, b"N", "N entry")


def test_file_header_bytes() -> None:
    h = fmt.file_header(b"libsc", b"", "unix")
    assert len(h) == 128
    assert h[:8] == b"scdata0 " and h[8:32] == b"libsc " + b"-" * 17 + b"\n"
    assert h[32:34] == b"F " and h[96:] == b"\n" + b"=" * 29 + b"\n\n"
    assert fmt.parse_file_header(h) == (b"libsc", b"")
    with pytest.raises(ScdaArgumentError):
        fmt.file_header(b"v" * 21, b"", "unix")
    with pytest.raises(ScdaFormatError, match="version"):
        fmt.parse_file_header(b"scdata1" + h[7:])
    with pytest.raises(ScdaFormatError, match="not an scda file"):
        fmt.parse_file_header(b"PK\x03\x04" + h[4:])


def test_section_header_rejects_second_f_and_unknown_type() -> None:
    hdr = fmt.section_header(b"I", b"u", "unix")
    assert fmt.parse_section_header(hdr, 128) == ("I", b"u")
    with pytest.raises(ScdaFormatError, match="second file header"):
        fmt.parse_section_header(b"F" + hdr[1:], 128)
    with pytest.raises(ScdaFormatError, match="not a section type"):
        fmt.parse_section_header(b"X" + hdr[1:], 128)


def test_style_and_strings() -> None:
    with pytest.raises(ScdaArgumentError):
        fmt.check_style("dos")
    assert fmt.to_bytes("é", "u") == "é".encode()
    with pytest.raises(ScdaArgumentError):
        fmt.to_bytes(3, "u")  # type: ignore[arg-type]
