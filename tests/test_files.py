"""What a bounded, non-following read calls evidence about a file, and what it calls an I/O error.

A reader sets a file aside, or takes it for missing, only on evidence that
the file system confirms: an ``ELOOP`` or ``ENOENT`` that a failing ``open``
returns (libfiu injects both) says nothing about the file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from amrckpt._files import FileKindError, is_evidence, read_regular


def _fail_open(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    real = os.open

    def failing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path).name == "f":
            raise OSError(code, os.strerror(code), str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing)


def test_a_link_a_fifo_and_a_large_file_are_evidence(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(tmp_path / "big")
    os.mkfifo(tmp_path / "fifo")
    for name, code in (("link", errno.ELOOP), ("fifo", errno.EINVAL), ("big", errno.EFBIG)):
        with pytest.raises(FileKindError) as got:
            read_regular(tmp_path / name, 10)
        assert got.value.errno == code and is_evidence(got.value, tmp_path / name), name
    with pytest.raises(FileNotFoundError) as missing:
        read_regular(tmp_path / "none", 10)
    assert is_evidence(missing.value, tmp_path / "none")


@pytest.mark.parametrize("code", [errno.ELOOP, errno.ENOENT, errno.EINVAL, errno.EISDIR, errno.EIO])
def test_the_same_errno_from_a_failing_open_of_a_regular_file_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    (tmp_path / "f").write_bytes(b"{}")
    _fail_open(monkeypatch, code)
    with pytest.raises(OSError) as got:
        read_regular(tmp_path / "f", 10)
    assert got.value.errno == code and not isinstance(got.value, FileKindError)
    assert not is_evidence(got.value, tmp_path / "f")
