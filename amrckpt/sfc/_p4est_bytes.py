"""p4est's on-disk connectivity: ``p4est_connectivity_sink`` and ``p4est_connectivity_source`` (p4est_connectivity.c).

Little-endian, ``p4est_topidx_t`` of 4 bytes: the magic ``p4est``/``p8est``
in 8 bytes, the package version in 24 (NUL-padded), ten uint64
(``P4EST_ONDISK_FORMAT``, 4, num_vertices, num_trees, num_edges, num_ett,
num_corners, num_ctt, tree_attr_bytes, 0), then the arrays in p4est's order.
Used by :meth:`Connectivity.to_p4est_bytes` and
:meth:`Connectivity.from_p4est_bytes`.  Not collective.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ConnectivityError, P4estFormatError
from ._tables import _CHILDREN, _EDGES, _FACES, P4EST_ONDISK_FORMAT, ConnectivityTables, ConnT

__all__ = ["connectivity_sink", "connectivity_source"]

_MAGIC = {2: b"p4est", 3: b"p8est"}


def _le(a: np.ndarray | None) -> bytes:
    assert a is not None
    return a.astype("<i4", copy=False).tobytes()


def _format_error(message: str, section: str, offset: int) -> P4estFormatError:
    err = P4estFormatError(f"{message} ({section}, byte {offset})")
    err.section, err.offset = section, offset
    return err


def connectivity_sink(conn: ConnectivityTables, package_version: str = "") -> bytes:
    """Return ``conn`` as ``p4est_connectivity_save`` writes it (see :meth:`Connectivity.to_p4est_bytes`).

    Raises
    ------
    ConnectivityError
        On this rank, if ``package_version`` is longer than 24 bytes.
    """
    ver = package_version.encode("latin-1", "replace")
    if len(ver) > 24:
        raise ConnectivityError(f"package_version {package_version!r} is longer than p4est's 24 bytes")
    head = [
        P4EST_ONDISK_FORMAT[conn.dim],
        4,
        conn.num_vertices,
        conn.num_trees,
        conn.num_edges,
        int(conn.ett_offset[-1]),
        conn.num_corners,
        int(conn.ctt_offset[-1]),
        conn.tree_attr_bytes,
        0,
    ]
    parts = [_MAGIC[conn.dim].ljust(8, b"\0"), ver.ljust(24, b"\0"), struct.pack("<10Q", *head)]
    if conn.num_vertices:
        parts.append(conn.vertices.astype("<f8").tobytes())
    if conn.dim == 3 and conn.num_edges:
        parts.append(_le(conn.tree_to_edge))
    if conn.num_vertices:
        parts.append(_le(conn.tree_to_vertex))
    if conn.num_corners:
        parts.append(_le(conn.tree_to_corner))
    parts += [_le(conn.tree_to_tree), conn.tree_to_face.tobytes()]
    if conn.tree_to_attr is not None:
        parts.append(conn.tree_to_attr.tobytes())
    if conn.dim == 3:
        parts.append(_le(conn.ett_offset))
        if conn.num_edges:
            parts += [_le(conn.edge_to_tree), conn.edge_to_edge.tobytes()]
    parts.append(_le(conn.ctt_offset))
    if conn.num_corners:
        parts += [_le(conn.corner_to_tree), conn.corner_to_corner.tobytes()]
    return b"".join(parts)


def connectivity_source(buf: Any, cls: Callable[..., ConnT], *, offset: int = 0, check: bool = True) -> tuple[ConnT, str, int]:
    """Read a connectivity as ``p4est_connectivity_load`` does (see :meth:`Connectivity.from_p4est_bytes`).

    Raises
    ------
    P4estFormatError
        On this rank, as :meth:`Connectivity.from_p4est_bytes` says.
    """  # noqa: DOC501 - _format_error() builds the P4estFormatError
    mv = memoryview(buf).cast("B")
    end = len(mv)

    def need(at: int, n: int, what: str) -> memoryview:
        if n < 0 or at + n > end:
            raise _format_error(f"the file ends inside the connectivity's {what} (bytes {at}..{at + n} of {end})", what, at)
        return mv[at : at + n]

    magic = bytes(need(offset, 8, "magic"))
    dim = 2 if magic == _MAGIC[2] + b"\0\0\0" else 3 if magic == _MAGIC[3] + b"\0\0\0" else 0
    if not dim:
        raise _format_error(f"no p4est connectivity here: magic {magic!r}, not b'p4est' or b'p8est'", "connectivity header", offset)
    raw_ver = bytes(need(offset + 8, 24, "package version"))
    version = raw_ver.split(b"\0", 1)[0].decode("latin-1")
    head = struct.unpack("<10Q", need(offset + 32, 80, "connectivity header"))
    at = offset + 112
    if head[0] != P4EST_ONDISK_FORMAT[dim]:
        hint = " (a big-endian file?)" if struct.unpack(">Q", struct.pack("<Q", head[0]))[0] == P4EST_ONDISK_FORMAT[dim] else ""
        raise _format_error(
            f"on-disk format {head[0]:#x}, not {P4EST_ONDISK_FORMAT[dim]:#x} (p4est 2.x, {_MAGIC[dim].decode()}){hint}",
            "connectivity header",
            offset + 32,
        )
    if head[1] != 4:
        raise _format_error(f"p4est_topidx_t of {head[1]} bytes, not 4", "connectivity header", offset + 40)
    V, K, E, nett, NC, nctt, attr, zero = head[2:]
    if any(x >= 2**31 for x in (V, K, E, nett, NC, nctt, attr)) or K < 1 or (dim == 2 and (E or nett)):
        raise _format_error(
            f"impossible counts: {V} vertices, {K} trees, {E} edges ({nett} entries), {NC} corners ({nctt} entries), "
            f"{attr} attribute bytes",
            "connectivity header",
            offset + 48,
        )
    if zero != 0:
        raise _format_error(f"the last header word is {zero}, not 0", "connectivity header", offset + 104)
    C, F = _CHILDREN[dim], _FACES[dim]
    total = 24 * V + 4 * C * K * (bool(V) + bool(NC)) + 5 * F * K + attr * K + 4 * (NC + 1) + 5 * nctt * bool(NC)
    if dim == 3:
        total += 4 * _EDGES * K * bool(E) + 4 * (E + 1) + 5 * nett * bool(E)
    need(at, total, "arrays")

    def take(n: int, dtype: str) -> np.ndarray:
        nonlocal at
        nb = n * np.dtype(dtype).itemsize
        a = np.frombuffer(mv[at : at + nb], dtype=dtype).astype(dtype[1:] if dtype[0] == "<" else dtype)
        at += nb
        return a

    verts = take(3 * V, "<f8").reshape(V, 3) if V else np.zeros((0, 3))
    tte = take(_EDGES * K, "<i4").reshape(K, _EDGES) if dim == 3 and E else None
    ttv = take(C * K, "<i4").reshape(K, C) if V else None
    ttc = take(C * K, "<i4").reshape(K, C) if NC else None
    ttt = take(F * K, "<i4").reshape(K, F)
    ttf = take(F * K, "i1").reshape(K, F)
    tta = take(attr * K, "u1").reshape(K, attr) if attr else None
    eoff = ett = ete = None
    if dim == 3:
        eoff = take(E + 1, "<i4")
        if int(eoff[-1]) != nett:
            raise _format_error(f"ett_offset ends at {int(eoff[-1])}, not at num_ett {nett}", "ett_offset", at - 4)
        if E:
            ett, ete = take(nett, "<i4"), take(nett, "i1")
    coff = take(NC + 1, "<i4")
    if int(coff[-1]) != nctt:
        raise _format_error(f"ctt_offset ends at {int(coff[-1])}, not at num_ctt {nctt}", "ctt_offset", at - 4)
    ctt = ctc = None
    if NC:
        ctt, ctc = take(nctt, "<i4"), take(nctt, "i1")
    try:
        conn = cls(dim, verts, ttv, ttt, ttf, tte, eoff, ett, ete, ttc, coff, ctt, ctc, tta)
        if check:
            conn.check()
    except ConnectivityError as exc:
        raise _format_error(f"the connectivity is not valid: {exc}", "connectivity", offset) from exc
    return conn, version, at - offset
