"""libfiu's failure points, switched on and off from Python around amrckpt's calls (Debian's ``fiu-utils``).

A process started with ``LD_PRELOAD=/usr/lib/fiu/fiu_posix_preload.so``
has every libc call of the POSIX list (``open``, ``pread``, ``fsync``,
``rename``, ``mmap``...) wrapped by a check of libfiu's table of enabled
failure points, which is empty until :func:`active` enables some: imports,
MPI start-up and the campaign's own bookkeeping run without faults.  While a
point is on, each call fails with its probability (``errno`` drawn by the
wrapper from the errors that function may return; ``.../reduce`` points
shorten the byte count instead).  The draws come from libfiu's PRNG and
libc's ``random()``, both seeded by :func:`active`, so a trial's faults are
reproducible up to the interleaving of threads.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

PRELOAD = Path("/usr/lib/fiu/fiu_posix_preload.so")
LIBFIU = "libfiu.so.0"

# The points a trial draws from: the file and memory calls of the POSIX preload (not posix/io/net: MPI's sockets).
POINTS = (
    "posix/io/oc/open",
    "posix/io/oc/close",
    "posix/io/rw/read",
    "posix/io/rw/pread",
    "posix/io/rw/pread/reduce",
    "posix/io/rw/write",
    "posix/io/rw/pwrite",
    "posix/io/rw/pwrite/reduce",
    "posix/io/rw/writev",
    "posix/io/rw/ftruncate",
    "posix/io/sync/fsync",
    "posix/io/sync/fdatasync",
    "posix/io/dir/rename",
    "posix/io/dir/unlink",
    "posix/io/dir/opendir",
    "posix/mm/mmap",
    "posix/mm/munmap",
    "posix/mm/msync",
)

ABSENT = "libfiu is absent (Debian's fiu-utils: /usr/lib/fiu/fiu_posix_preload.so and libfiu.so.0); apt-get install fiu-utils"


def absent() -> str | None:
    """Why a libfiu campaign cannot run here (None if it can)."""
    if not PRELOAD.is_file():
        return ABSENT
    try:
        ctypes.CDLL(LIBFIU)
    except OSError:
        return ABSENT
    if shutil.which("env") is None:
        return "no env(1) to start the ranks with LD_PRELOAD"
    return None


def preloaded() -> bool:
    """Whether this process runs under the POSIX preload (its wrappers are what fail)."""
    return str(PRELOAD) in os.environ.get("LD_PRELOAD", "")


class _Lib:
    def __init__(self) -> None:
        lib = ctypes.CDLL(LIBFIU)
        lib.fiu_init.argtypes = [ctypes.c_uint]
        lib.fiu_set_prng_seed.argtypes = [ctypes.c_uint]
        lib.fiu_set_prng_seed.restype = None
        lib.fiu_enable_random.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_float]
        lib.fiu_disable.argtypes = [ctypes.c_char_p]
        if lib.fiu_init(0) != 0:
            raise OSError("fiu_init failed")
        self.lib = lib
        self.libc = ctypes.CDLL(None)
        self.libc.srandom.argtypes = [ctypes.c_uint]
        self.libc.srandom.restype = None


_LIB: _Lib | None = None


def _lib() -> _Lib:
    global _LIB
    if _LIB is None:
        _LIB = _Lib()
    return _LIB


@contextmanager
def active(points: Mapping[str, float], seed: int) -> Iterator[None]:
    """Enable each failure point of ``points`` with its probability while the block runs; seeded by ``seed``.

    Parameters
    ----------
    points : mapping of str to float
        libfiu point names (:data:`POINTS`) and the probability that a call fails.
    seed : int
        Seeds libfiu's PRNG (which calls fail) and libc's ``random()`` (which
        errno, how short): the same seed gives the same faults in the same
        sequence of calls.
    """
    if not points:
        yield
        return
    lib = _lib()
    lib.lib.fiu_set_prng_seed(seed & 0xFFFFFFFF)
    lib.libc.srandom((seed * 2654435761) & 0xFFFFFFFF)
    enabled = []
    try:
        for name, p in points.items():
            if lib.lib.fiu_enable_random(name.encode(), 1, None, 0, float(p)) != 0:
                raise OSError(f"fiu_enable_random({name!r}) failed")
            enabled.append(name)
        yield
    finally:
        for name in enabled:
            lib.lib.fiu_disable(name.encode())
