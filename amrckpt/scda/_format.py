"""Bytes of the scda format: padding, count entries and section headers.

Pure functions (no I/O, no MPI) that follow the scda paper (Griesbach and
Burstedde, arXiv:2307.06789) section 2 exactly; where the paper leaves a
choice, the choice of libsc's ``sc_scda.c`` (see ``shared/interop``).
"""

from __future__ import annotations

from typing import Literal

from ..errors import ScdaArgumentError, ScdaFormatError

__all__ = [
    "COUNT_ENTRY_NBYTES",
    "FILE_HEADER_NBYTES",
    "INLINE_DATA_NBYTES",
    "MAGIC",
    "MAX_COUNT",
    "MAX_COUNT_DIGITS",
    "MAX_USER_STRING_NBYTES",
    "MAX_VENDOR_NBYTES",
    "SECTION_HEADER_NBYTES",
    "SECTION_TYPES",
    "Style",
    "check_style",
    "count_entry",
    "data_padding",
    "data_padding_nbytes",
    "file_header",
    "pad_string",
    "padding_form",
    "parse_count_entry",
    "parse_file_header",
    "parse_section_header",
    "section_header",
    "to_bytes",
    "unpad_string",
]

Style = Literal["unix", "mime"]

MAGIC = b"scdata0"
"""Format identifier and version (paper Fig. 1: ``sc%02xt%02x`` of 0xda, 0xa0)."""
FILE_HEADER_NBYTES = 128
"""The file header section F (paper Fig. 1)."""
SECTION_HEADER_NBYTES = 64
"""Type letter, space and user string field of every section."""
COUNT_ENTRY_NBYTES = 32
"""A count entry: letter, space, decimal count, padding('-' to 30)."""
INLINE_DATA_NBYTES = 32
"""The data of an inline section (paper Fig. 2)."""
MAX_USER_STRING_NBYTES = 58
MAX_VENDOR_NBYTES = 20
MAX_COUNT_DIGITS = 26
MAX_COUNT = 10**MAX_COUNT_DIGITS - 1
SECTION_TYPES = frozenset(b"IBAV")

_VENDOR_FIELD = 24
_USER_FIELD = 62
_COUNT_FIELD = 30
_DATA_DIVISOR = 32
_LINE_END = {"unix": b"-\n", "mime": b"\r\n"}


def check_style(style: str) -> Style:
    """Return ``style`` if it is ``"unix"`` or ``"mime"``; raise ScdaArgumentError otherwise.

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``style`` is neither ``"unix"`` nor ``"mime"``.
    """
    if style not in _LINE_END:
        raise ScdaArgumentError(f"style must be 'unix' or 'mime', not {style!r}")
    return style  # type: ignore[return-value]


def to_bytes(value: bytes | bytearray | memoryview | str, what: str) -> bytes:
    """Return a user or vendor string as bytes; ``str`` is encoded as UTF-8.

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``value`` is neither bytes nor str.
    """
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise ScdaArgumentError(f"{what} must be bytes or str, not {type(value).__name__}")


def pad_string(s: bytes, d: int, style: Style) -> bytes:
    r"""Pad ``s`` to ``d`` bytes with padding('-' to d) (paper eq. 1).

    The padding is a space, ``p - 3`` dashes and ``"-\\n"`` (Unix) or
    ``"\\r\\n"`` (MIME), with ``p = d - len(s) >= 4``.

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``s`` is longer than ``d - 4`` bytes.
    """
    p = d - len(s)
    if p < 4:
        raise ScdaArgumentError(f"{len(s)} bytes do not fit a {d}-byte field (at most {d - 4})")
    return s + b" " + b"-" * (p - 3) + _LINE_END[style]


def unpad_string(field: bytes, what: str) -> bytes:
    """Invert :func:`pad_string`, parsing from the right (paper 2.1.1).

    Either line-break style is accepted.  Strict as the paper: at least one
    dash and a space (p >= 4).

    Raises
    ------
    ScdaFormatError
        If the padding is malformed.
    """
    d = len(field)
    if field[-2:] not in (b"-\n", b"\r\n"):
        raise ScdaFormatError(f"{what}: padding does not end in '-\\n' or '\\r\\n'")
    j = d - 3
    while j >= 0 and field[j] == 0x2D:
        j -= 1
    if j > d - 4 or j < 0 or field[j] != 0x20:
        raise ScdaFormatError(f"{what}: malformed '-' padding (needs a space and at least one dash)")
    return field[:j]


def data_padding_nbytes(n: int) -> int:
    """Return the number p of '=' padding bytes after ``n`` data bytes: 7 <= p <= 38, 32 | n + p."""
    return 7 + (-(n + 7)) % _DATA_DIVISOR


def data_padding(n: int, last_byte: int | None, style: Style) -> bytes:
    """Return the padding('=' mod 32) after ``n`` data bytes (paper eq. 2, Table 1).

    Parameters
    ----------
    n : int
        The number of data bytes.
    last_byte : int or None
        The last data byte (ignored when ``n == 0``).
    style : {"unix", "mime"}
        The line-break style.
    """
    p = data_padding_nbytes(n)
    ends_in_lf = n > 0 and last_byte == 0x0A
    if style == "unix":
        return (b"==" if ends_in_lf else b"\n=") + b"=" * (p - 4) + b"\n\n"
    return (b"==" if ends_in_lf else b"\r\n") + b"=" * (p - 6) + b"\r\n\r\n"


def padding_form(padding: bytes, n: int, last_byte: int | None) -> str:
    """Classify data padding bytes as ``"unix"``, ``"mime"`` or ``"other"``.

    The paper lets a reader ignore padding bytes; this is for strict reading
    and for ``amrckpt verify``.
    """
    styles: tuple[Style, ...] = ("unix", "mime")
    for style in styles:
        if padding == data_padding(n, last_byte, style):
            return style
    return "other"


def count_entry(letter: bytes, value: int, style: Style) -> bytes:
    """Return a 32-byte count entry: letter, space, decimal ``value``, padding('-' to 30).

    Used for N and E entries (paper Figs. 3-5) and U entries (Figs. 6-7).
    ``value`` is a Python int of at most 26 digits.

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``value`` is not in [0, 10**26 - 1].
    """
    value = int(value)
    if value < 0 or value > MAX_COUNT:
        raise ScdaArgumentError(f"count {value} is not in [0, 10**26 - 1]")
    return letter + b" " + pad_string(b"%d" % value, _COUNT_FIELD, style)


def parse_count_entry(entry: bytes, letter: bytes, what: str) -> int:
    """Parse a 32-byte count entry; return its value as a Python int.

    Raises
    ------
    ScdaFormatError
        If the letter differs, the number has a sign, spaces, leading zeros,
        no digits or more than 26 digits, or the padding is malformed.
    """
    if len(entry) != COUNT_ENTRY_NBYTES:
        raise ScdaFormatError(f"{what}: count entry of {len(entry)} bytes, not 32")
    if entry[:2] != letter + b" ":
        raise ScdaFormatError(f"{what}: expected {letter.decode()!r} count entry, found {entry[:2]!r}")
    digits = unpad_string(entry[2:], what)
    if not digits or not digits.isdigit() or len(digits) > MAX_COUNT_DIGITS:
        raise ScdaFormatError(f"{what}: {digits[:30]!r} is not a decimal count of 1 to 26 digits")
    if len(digits) > 1 and digits[0] == 0x30:
        raise ScdaFormatError(f"{what}: count {digits.decode()} has leading zeros")
    return int(digits)


def file_header(vendor: bytes, user_string: bytes, style: Style) -> bytes:
    """Return the 128-byte file header section F (paper Fig. 1, eq. 3).

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``vendor`` is longer than 20 bytes.
    """
    if len(vendor) > MAX_VENDOR_NBYTES:
        raise ScdaArgumentError(f"vendor string of {len(vendor)} bytes; at most 20")
    check_user_string(user_string)
    return (
        MAGIC
        + b" "
        + pad_string(vendor, _VENDOR_FIELD, style)
        + b"F "
        + pad_string(user_string, _USER_FIELD, style)
        + data_padding(0, None, style)
    )


def parse_file_header(buf: bytes) -> tuple[bytes, bytes]:
    """Parse the 128-byte file header; return ``(vendor, user_string)``.

    The data padding (bytes 96..127) is not interpreted (paper 2.1.2).

    Raises
    ------
    ScdaFormatError
        If the magic, the vendor or user string field, or the type letter is
        wrong.
    """
    if buf[:7] != MAGIC or buf[7:8] != b" ":
        if buf[:5] == b"scdat" and buf[7:8] == b" ":
            raise ScdaFormatError(f"unsupported scda version {buf[:7]!r}; this reader knows scdata0")
        raise ScdaFormatError(f"not an scda file: magic {buf[:8]!r}, expected b'scdata0 '")
    vendor = unpad_string(buf[8:32], "file header vendor string")
    if buf[32:34] != b"F ":
        raise ScdaFormatError(f"file header: expected section type 'F ', found {buf[32:34]!r}")
    user = unpad_string(buf[34:96], "file header user string")
    return vendor, user


def check_user_string(user_string: bytes) -> None:
    """Raise ScdaArgumentError if ``user_string`` is longer than 58 bytes.

    Raises
    ------
    ScdaArgumentError
        On this rank, if ``user_string`` is longer than 58 bytes.
    """
    if len(user_string) > MAX_USER_STRING_NBYTES:
        raise ScdaArgumentError(f"user string of {len(user_string)} bytes; at most 58")


def section_header(section_type: bytes, user_string: bytes, style: Style) -> bytes:
    """Return the 64-byte start of a section: type letter, space, padded user string."""
    check_user_string(user_string)
    return section_type + b" " + pad_string(user_string, _USER_FIELD, style)


def parse_section_header(buf: bytes, offset: int) -> tuple[str, bytes]:
    """Parse the 64-byte start of a section; return ``(type, user_string)``.

    Raises
    ------
    ScdaFormatError
        If the type letter is not one of I, B, A, V or the padding is wrong.
    """
    t = buf[0]
    if buf[1:2] != b" " or t not in SECTION_TYPES:
        if t == 0x46 and buf[1:2] == b" ":
            raise ScdaFormatError(f"byte {offset}: a second file header section 'F'")
        raise ScdaFormatError(f"byte {offset}: {buf[:2]!r} is not a section type (I, B, A or V)")
    user = unpad_string(buf[2:64], f"byte {offset}: user string of section {chr(t)!r}")
    return chr(t), user
