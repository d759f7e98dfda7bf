"""Debian's libp8est (p4est 2.2, 3D) through ctypes, as a Python driver of a p4est code holds it (bench_p4est.py).

Only what the benchmark's round trip needs: load and save p4est's files, read a forest's quadrants straight
from p4est's memory (each local tree's ``sc_array_t quadrants`` of 24-byte ``p8est_quadrant_t``, viewed by
numpy without a copy, and the quadrants' user data gathered through their ``p.user_data`` pointers), and
rebuild a forest with ``p8est_inflate``.  The struct offsets are those of p4est 2.2 on x86-64 (checked against
gcc's ``offsetof``: ``p8est_t`` 128 bytes, ``p8est_tree_t`` 168, ``p8est_quadrant_t`` 24).

The process must run on Open MPI (libp4est is linked to it): mpi4py with ``MPI4PY_MPIABI=openmpi``.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from amrckpt.sfc import quadrant_dtype

_P = ctypes.c_void_p
_GLOIDX_P = ctypes.POINTER(ctypes.c_int64)


class ScArray(ctypes.Structure):
    """libsc's ``sc_array_t``: elem_size, elem_count, byte_alloc (negative for a view), array."""

    _fields_ = [("elem_size", ctypes.c_size_t), ("elem_count", ctypes.c_size_t), ("byte_alloc", ctypes.c_ssize_t), ("array", _P)]

    @classmethod
    def view(cls, a: np.ndarray, elem_size: int) -> ScArray:
        """A view of the C-contiguous ``a`` as ``a.nbytes // elem_size`` elements (``sc_array_new_data``'s)."""
        assert a.flags.c_contiguous and a.nbytes % elem_size == 0
        return cls(elem_size, a.nbytes // elem_size, -(a.nbytes + 1), a.ctypes.data)


class P8est(ctypes.Structure):
    """The head of ``p8est_t`` (p4est 2.2, 64-bit, Open MPI's pointer ``MPI_Comm``)."""

    _fields_ = [
        ("mpicomm", _P),
        ("mpisize", ctypes.c_int),
        ("mpirank", ctypes.c_int),
        ("mpicomm_owned", ctypes.c_int),
        ("data_size", ctypes.c_size_t),
        ("user_pointer", _P),
        ("revision", ctypes.c_long),
        ("first_local_tree", ctypes.c_int32),
        ("last_local_tree", ctypes.c_int32),
        ("local_num_quadrants", ctypes.c_int32),
        ("global_num_quadrants", ctypes.c_int64),
        ("global_first_quadrant", _GLOIDX_P),
        ("global_first_position", _P),
        ("connectivity", _P),
        ("trees", ctypes.POINTER(ScArray)),
        ("user_data_pool", _P),
        ("quadrant_pool", _P),
        ("inspect", _P),
    ]


assert ctypes.sizeof(P8est) == 128 and P8est.trees.offset == 96 and P8est.global_first_quadrant.offset == 72
TREE_NBYTES = 168  # sizeof (p8est_tree_t); its sc_array_t quadrants comes first
QUADRANT = quadrant_dtype(3)


class Lib:
    """libp8est and libsc of the system, initialised on ``comm`` (an mpi4py communicator on Open MPI)."""

    def __init__(self, comm: Any) -> None:
        ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
        self.sc = sc = ctypes.CDLL("libsc.so", mode=ctypes.RTLD_GLOBAL)
        self.p4 = p4 = ctypes.CDLL("libp4est.so", mode=ctypes.RTLD_GLOBAL)
        self.comm = comm
        self.handle = _P(comm.handle)
        pp = ctypes.POINTER(P8est)
        sc.sc_init.argtypes = [_P, ctypes.c_int, ctypes.c_int, _P, ctypes.c_int]
        p4.p4est_init.argtypes = [_P, ctypes.c_int]
        p4.p8est_save_ext.argtypes = [ctypes.c_char_p, pp, ctypes.c_int, ctypes.c_int]
        p4.p8est_load_ext.argtypes = [
            ctypes.c_char_p,
            _P,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            _P,
            ctypes.POINTER(_P),
        ]
        p4.p8est_load_ext.restype = pp
        p4.p8est_inflate.argtypes = [_P, _P, _GLOIDX_P, _GLOIDX_P, ctypes.POINTER(ScArray), ctypes.POINTER(ScArray), _P]
        p4.p8est_inflate.restype = pp
        p4.p8est_connectivity_inflate.argtypes = [ctypes.POINTER(ScArray)]
        p4.p8est_connectivity_inflate.restype = _P
        p4.p8est_comm_count_pertree.argtypes = [pp, _GLOIDX_P]
        p4.p8est_checksum.argtypes = [pp]
        p4.p8est_checksum.restype = ctypes.c_uint
        p4.p8est_is_equal.argtypes = [pp, pp, ctypes.c_int]
        p4.p8est_destroy.argtypes = [pp]
        p4.p8est_connectivity_destroy.argtypes = [_P]
        sc.sc_init(self.handle, 0, 0, None, 9)  # SC_LP_SILENT
        p4.p4est_init(None, 9)

    def load(self, path: str | os.PathLike[str], data_size: int) -> tuple[Any, _P]:
        """``p8est_load_ext`` (data loaded, partition uniform): the forest and its connectivity."""
        conn = _P()
        p = self.p4.p8est_load_ext(os.fsencode(path), self.handle, data_size, 1, 1, 0, None, ctypes.byref(conn))
        return p, conn

    def save(self, path: str | os.PathLike[str], p: Any) -> None:
        """``p8est_save_ext`` with the data, without the partition."""
        self.p4.p8est_save_ext(os.fsencode(path), p, 1, 0)

    def inflate(self, conn: _P, gfq: np.ndarray, pertree: np.ndarray, quadrants: np.ndarray, data: np.ndarray) -> Any:
        """``p8est_inflate`` of ``(n, 4)`` int32 quadrants (``4 n`` qcoords) and ``(n, data_size)`` bytes of data."""
        q = ScArray.view(quadrants, 4)
        d = ScArray.view(data, data.shape[1] if data.ndim == 2 else data.itemsize)
        d.elem_count = quadrants.shape[0]
        i64 = _GLOIDX_P
        return self.p4.p8est_inflate(
            self.handle, conn, gfq.ctypes.data_as(i64), pertree.ctypes.data_as(i64), ctypes.byref(q), ctypes.byref(d), None
        )

    def connectivity_inflate(self, blob: bytes) -> _P:
        """``p8est_connectivity_inflate`` of the bytes ``p8est_connectivity_save`` writes (NULL if invalid)."""
        buf = np.frombuffer(blob, dtype=np.uint8)
        return _P(self.p4.p8est_connectivity_inflate(ctypes.byref(ScArray.view(buf, 1))))

    def destroy(self, p: Any, conn: _P | None = None) -> None:
        self.p4.p8est_destroy(p)
        if conn is not None:
            self.p4.p8est_connectivity_destroy(conn)

    def checksum(self, p: Any) -> int:
        """``p8est_checksum`` (collective; on rank 0, 0 elsewhere): the quadrants, independent of the partition."""
        return int(self.p4.p8est_checksum(p))

    def is_equal(self, a: Any, b: Any) -> bool:
        """``p8est_is_equal`` with the data (this rank's quadrants)."""
        return bool(self.p4.p8est_is_equal(a, b, 1))

    def global_first_quadrant(self, p: Any) -> np.ndarray:
        """A copy of ``p8est->global_first_quadrant`` (P + 1 int64)."""
        h = p.contents
        return np.ctypeslib.as_array(h.global_first_quadrant, shape=(h.mpisize + 1,)).copy()

    def pertree(self, p: Any, num_trees: int) -> np.ndarray:
        """``p8est_comm_count_pertree`` (collective): num_trees + 1 int64."""
        out = np.empty(num_trees + 1, dtype=np.int64)
        self.p4.p8est_comm_count_pertree(p, out.ctypes.data_as(_GLOIDX_P))
        return out


def tree_quadrants(p: Any) -> list[np.ndarray]:
    """Each local tree's ``quadrants`` array of ``p8est_quadrant_t``, viewed by numpy (no copy), trees in order."""
    h = p.contents
    trees = h.trees.contents
    out = []
    for t in range(h.first_local_tree, h.last_local_tree + 1):
        arr = ScArray.from_address(trees.array + t * TREE_NBYTES)
        if arr.elem_count:
            buf = (ctypes.c_char * (arr.elem_count * QUADRANT.itemsize)).from_address(arr.array)
            out.append(np.frombuffer(buf, dtype=QUADRANT))
    return out


def user_data(trees: list[np.ndarray], data_size: int) -> np.ndarray:
    """The quadrants' user data ((n, data_size) uint8, a new array), gathered through their ``p.user_data`` pointers.

    Vectorized, chunk by chunk (64K quadrants: the chunk's pointers stay in the cache between the passes over
    them): the pointers, relative to the chunk's lowest, index the address range they span, viewed as
    ``data_size``-byte items where every pointer is a multiple of ``data_size`` bytes from the lowest (p4est's
    memory pool hands out such slots), else as a byte-strided view; one ``np.take`` (``mode="clip"``: written
    straight into the result, where ``mode="raise"`` buffers it) copies them.  Only the bytes at the pointers
    are read.
    """
    n = sum(len(t) for t in trees)
    out = np.empty((n, data_size), dtype=np.uint8)
    if n == 0 or data_size == 0:
        return out
    item = np.dtype({4: np.uint32, 8: np.uint64, 16: np.complex128}.get(data_size, f"V{data_size}"))
    pow2 = data_size & (data_size - 1) == 0
    flat = out.view(item).reshape(n)
    chunk = 1 << 16
    offsets = np.empty(min(n, chunk), dtype=np.uint64)  # a chunk's pointers, contiguous
    at = 0
    for t in trees:
        pointers = t["p"]
        for s in range(0, len(t), chunk):
            k = min(len(t), s + chunk) - s
            off = offsets[:k]
            off[...] = pointers[s : s + k]
            lo, hi = int(off.min()), int(off.max()) + data_size
            off -= np.uint64(lo)
            span = np.frombuffer((ctypes.c_char * (hi - lo)).from_address(lo), dtype=np.uint8)
            if pow2 and not int(np.bitwise_or.reduce(off)) & (data_size - 1):
                items = span[: (hi - lo) // data_size * data_size].view(item)  # the pool's slots
                np.right_shift(off, np.uint64(data_size.bit_length() - 1), out=off)
            else:
                items = np.ndarray((hi - lo - data_size + 1,), dtype=item, buffer=span, strides=(1,))
            np.take(items, off.view(np.intp), out=flat[at : at + k], mode="clip")
            at += k
    return out
