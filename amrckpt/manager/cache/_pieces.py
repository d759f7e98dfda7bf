"""The pieces format: one rank's exact pieces of a checkpoint file, as it would write them into the shared file.

A pieces file is a header (magic, rank, the save's number of collective
rounds, number of pieces, data bytes, CRC32 of the table and the data, CRC32
of the header), the table of ``(offset, nbytes)`` pairs (little-endian
uint64), and the pieces' bytes one after the other.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..._crc import crc32
from ..._files import open_regular
from ...errors import ManagerError, ManagerIOError

__all__ = ["MAGIC", "Pieces", "parse_pieces", "pieces_head", "pieces_name", "pieces_table", "read_pieces"]


MAGIC = b"amrckpt pieces 1"
_HEAD = struct.Struct("<16sQQQQII")  # magic, rank, nrounds, npieces, data nbytes, crc32(table + data), crc32(head)


def pieces_table(pieces: Sequence[tuple[int, memoryview]]) -> bytes:
    """Return the table of a pieces file: ``(offset, nbytes)`` of each piece, little-endian uint64."""
    return np.array([(off, memoryview(b).nbytes) for off, b in pieces], dtype="<u8").reshape(-1, 2).tobytes()


def pieces_head(rank: int, nrounds: int, table: bytes, crc: int) -> bytes:
    """Return the header of a pieces file (its last 4 bytes: the CRC32 of the rest)."""
    t = np.frombuffer(table, dtype="<u8").reshape(-1, 2)
    body = _HEAD.pack(MAGIC, rank, nrounds, len(t), int(t[:, 1].sum()), crc, 0)[:-4]
    return body + struct.pack("<I", crc32(body))


def _crc_of(table: bytes, pieces: Sequence[tuple[int, memoryview]]) -> int:
    crc = crc32(table)
    for _, b in pieces:
        crc = crc32(b, crc)
    return crc


@dataclass
class Pieces:
    """One rank's pieces of a checkpoint file, read back from a pieces file (or received from a partner).

    Attributes
    ----------
    rank : int
        The rank that wrote them.
    nrounds : int
        The collective rounds of the save's write (the same on every rank).
    pieces : list of (int, memoryview)
        ``(file offset, bytes)``.
    """

    rank: int
    nrounds: int
    pieces: list[tuple[int, memoryview]]
    raw: Any = None  # what the views point into (an mmap or bytes), kept alive with them

    @property
    def end(self) -> int:
        """The end of the last piece in the file (0 if none)."""
        return max((off + b.nbytes for off, b in self.pieces), default=0)

    def close(self) -> None:
        """Release the mapping (the views must be gone)."""
        self.pieces = []
        if isinstance(self.raw, mmap.mmap):
            with contextlib.suppress(BufferError):
                self.raw.close()
        self.raw = None


def parse_pieces(raw: Any, what: str, verify: bool = True) -> Pieces:
    """Parse a pieces file's bytes (``raw``: bytes or an mmap); check its CRC32s. Not collective.

    The header's CRC32 is always checked, and that the table describes the
    data (pieces that do not overlap in the file, adding up to it).  ``verify=False``
    skips the CRC32 of the table and the data (one pass over every byte):
    for a reader that checks every byte it uses by other CRC32s, as a load
    in place does by the file's own (the sections' CRC32s in its index).

    Raises
    ------
    ManagerError
        If it is not a pieces file, is cut short, its table is damaged, or
        (``verify``) the CRC32 of its table and data differs.
    """
    view = memoryview(raw)
    if view.nbytes < _HEAD.size:
        raise ManagerError(f"{what}: cut short ({view.nbytes} bytes)")
    magic, rank, nrounds, n, nbytes, crc, hcrc = _HEAD.unpack_from(view)
    if magic != MAGIC or crc32(view[: _HEAD.size - 4]) != hcrc:
        raise ManagerError(f"{what}: not a pieces file, or its header is damaged")
    tend = _HEAD.size + 16 * n
    if view.nbytes != tend + nbytes:
        raise ManagerError(f"{what}: {view.nbytes} bytes, not the {tend + nbytes} its header says")
    table = np.frombuffer(view[_HEAD.size : tend], dtype="<u8").reshape(-1, 2)
    if verify and crc32(view[_HEAD.size :]) != crc:
        raise ManagerError(f"{what}: the CRC32 of its pieces differs: damaged")
    # Unverified, the table must still describe the data (pieces not overlapping in the file, adding up
    # to the data): what is read through it is then checked by the load's CRC32s of the sections.
    by_offset = table[np.argsort(table[:, 0], kind="stable")].astype(np.int64) if n and int(table.max()) < 1 << 62 else None
    if (
        int(table[:, 1].sum(dtype=np.uint64)) != nbytes
        or (n and by_offset is None)
        or (by_offset is not None and bool(np.any(by_offset[1:, 0] < by_offset[:-1, 0] + by_offset[:-1, 1])))
    ):
        raise ManagerError(f"{what}: its table of pieces is damaged")
    ends = tend + np.cumsum(table[:, 1], dtype=np.int64)
    starts = ends - table[:, 1].astype(np.int64)
    pieces = [(int(o), view[int(s) : int(e)]) for o, s, e in zip(table[:, 0].tolist(), starts.tolist(), ends.tolist(), strict=True)]
    return Pieces(int(rank), int(nrounds), pieces, raw)


def read_pieces(path: Path, verify: bool = True) -> Pieces:
    """Map a pieces file and parse it (:func:`parse_pieces`; ``verify``: CRC32 its table and data). Not collective.

    Raises
    ------
    ManagerError
        If it is empty, cut short or damaged.
    ManagerIOError
        On this rank, if it is missing, not a regular file (a link), or cannot be opened, mapped or closed (with the
        errno).
    """  # noqa: DOC501 (ManagerIOError.of() returns the ManagerIOError)
    try:
        fd = open_regular(path)  # never a link followed, never a FIFO waited on
    except OSError as exc:
        raise ManagerIOError.of(path.name, exc) from exc
    raw = None
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            raise ManagerError(f"{path.name}: not a pieces file")
        raw = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ManagerIOError.of(path.name, exc) from exc
    finally:
        try:
            os.close(fd)
        except OSError as exc:  # an I/O error like any other: never a raw OSError out of one rank's step
            if raw is not None:
                raw.close()
            raise ManagerIOError.of(f"{path.name}: cannot close", exc) from exc
    return parse_pieces(raw, path.name, verify)


def pieces_name(rank: int) -> str:
    """Return the name of rank ``rank``'s pieces file in a cached step."""
    return f"rank-{rank:06d}.pieces"
