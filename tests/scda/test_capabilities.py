"""A byte backend declares what it does beyond the Backend protocol; nothing probes for attribute names."""

from __future__ import annotations

import pytest

from amrckpt.errors import ScdaUsageError
from amrckpt.manager.cache._pieces_io import PiecesBackend
from amrckpt.manager.cache._read import CachedBackend
from amrckpt.scda import Capabilities, PosixBackend, capabilities_of
from amrckpt.testing import FaultyBackend


def test_the_library_s_backends_declare_what_they_do() -> None:
    assert capabilities_of(PosixBackend) == Capabilities()  # collective calls, nothing more
    assert capabilities_of(CachedBackend) == Capabilities(collective_io=False, reports_filled=True)
    assert capabilities_of(PiecesBackend) == Capabilities(takes_piece_crcs=True)
    assert capabilities_of(FaultyBackend) == Capabilities()  # a wrapper declares nothing it does not forward


def test_a_backend_that_declares_something_else_is_refused() -> None:
    class Odd:
        capabilities = ("collective_io", False)

    with pytest.raises(ScdaUsageError, match=r"Odd.capabilities must be an amrckpt.scda.Capabilities"):
        capabilities_of(Odd())
