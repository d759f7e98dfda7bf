#!/usr/bin/env python3
"""The MPI job of the OS-call sweep (tests/test_os_sweep.py): a failure at every OS call site amrckpt reaches.

Run under MPI::

    mpiexec -n P python -m mpi4py tests/os_sweep_job.py MODE FAILING DIR OUT.json

Every file-system and thread primitive that amrckpt calls (the ``os``
module's file calls, ``open``, ``mmap.mmap``, and the thread start of
:mod:`amrckpt._threads`) is wrapped in this process.  A call counts when
the nearest frame outside the standard library that makes it is amrckpt's
(a ``Path.read_bytes`` of amrckpt's counts as its ``open``).  A first run
of the operation MODE counts the calls of the failing rank(s) (FAILING:
``0``, ``last`` or ``all``); then for each k the operation runs again with
the k-th call of those ranks raising (``OSError(EIO)``, or the
``RuntimeError`` of a thread that cannot start).  What every rank ends
with is recorded (``ok``, or the class and errno); at the end, a restart
without faults records the step it restores, whether it equals the saved
state bit for bit, and the names set aside.

MODE: ``direct`` (POSIX backend), ``mpiio``, ``background``, ``cached``
(node cache, partner copies, a flush every save), ``restore``
(``restore_latest`` of a good checkpoint).
"""

from __future__ import annotations

import builtins
import io
import json
import mmap
import os
import sys
import sysconfig
import threading
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from checkpoint_cases import Advection, assert_state_equal
from kill_job import state_at

import amrckpt as ac
import amrckpt._threads

PACKAGE = str(Path(ac.__file__).resolve().parent) + os.sep
STDLIB = tuple({sysconfig.get_paths()["stdlib"] + os.sep, sysconfig.get_paths()["platstdlib"] + os.sep})
OS_CALLS = (
    "open close read pread preadv write pwrite pwritev fsync fdatasync rename replace unlink link symlink mkdir "
    "rmdir listdir scandir stat lstat fstat ftruncate truncate"
).split()


class Sweep:
    """Counts the OS calls amrckpt makes on this rank; makes the ``fail_at``-th raise."""

    def __init__(self) -> None:
        self.count = 0
        self.fail_at = -1
        self.on = False
        self.sites: list[str] = []
        self.failed = ""
        self.lock = threading.Lock()

    def hit(self, name: str) -> BaseException | None:
        """Count a call if amrckpt makes it; return the exception it must raise, if it is the one."""
        if not self.on:
            return None
        f = sys._getframe(2)
        while f is not None and f.f_code.co_filename.startswith(STDLIB):
            f = f.f_back
        if f is None or not f.f_code.co_filename.startswith(PACKAGE):
            return None
        with self.lock:
            k = self.count
            self.count += 1
            if self.fail_at < 0:
                self.sites.append(f"{name} at {Path(f.f_code.co_filename).name}:{f.f_lineno}")
        if k != self.fail_at:
            return None
        self.failed = f"{name} at {Path(f.f_code.co_filename).name}:{f.f_lineno}"
        stack = "".join(traceback.format_stack(f, limit=6))
        print(f"os-sweep: call {k} ({name}) fails here:\n{stack}", file=sys.stderr, flush=True)
        if name == "start thread":
            return RuntimeError("can't start new thread (injected by the OS-call sweep)")
        return OSError(5, f"Input/output error (injected by the OS-call sweep into {name})")


SWEEP = Sweep()


def _wrap(module: Any, name: str) -> None:
    real = getattr(module, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        exc = SWEEP.hit(name)
        if exc is not None:
            raise exc
        return real(*args, **kwargs)

    setattr(module, name, call)


def install() -> None:
    """Wrap the primitives, once per process."""
    for name in OS_CALLS:
        if hasattr(os, name):
            _wrap(os, name)
    _wrap(builtins, "open")
    _wrap(io, "open")
    real_mmap = mmap.mmap

    class Mmap(real_mmap):  # type: ignore[misc,valid-type]  # a subclass: isinstance(x, mmap.mmap) holds
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            exc = SWEEP.hit("mmap")
            if exc is not None:
                raise OSError(12, "Cannot allocate memory (injected by the OS-call sweep into mmap)")
            return real_mmap.__new__(cls, *args, **kwargs)

    mmap.mmap = Mmap  # type: ignore[misc]
    real_start = amrckpt._threads._start_new_thread

    def start(fn: Any, args: Any) -> Any:
        exc = SWEEP.hit("start thread")
        if exc is not None:
            raise exc
        return real_start(fn, args)

    amrckpt._threads._start_new_thread = start


def outcome(exc: BaseException | None) -> list[Any]:
    if exc is None:
        return ["ok", None, ""]
    name = type(exc).__name__ if isinstance(exc, ac.errors.AmrckptError) else f"foreign {type(exc).__name__}"
    return [name, getattr(exc, "errno", None), str(exc)[:300]]


def main() -> int:
    from mpi4py import MPI

    mode, failing, root, out = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    world = MPI.COMM_WORLD
    rank, P = world.rank, world.size
    mine = failing == "all" or (failing == "last" and rank == P - 1) or (failing == "0" and rank == 0)
    directory, cache = root / "ckpt", root / "cache"

    def manager(comm: Any) -> ac.CheckpointManager[Advection]:
        kw: dict[str, Any] = {"keep_policy": ac.manager.KeepLast(3), "save_policy": ac.EveryNSteps(10**9)}
        kw["access"] = ac.scda.FileAccess(backend="mpiio" if mode == "mpiio" else "posix")
        if mode == "background":
            kw["background"] = True
        elif mode == "cached":
            kw["cache"] = ac.manager.NodeCache(str(cache / "{node}"), partners=1, keep=2, node_size=1)
            kw["flush_policy"] = ac.EveryNSteps(1)
        return ac.CheckpointManager(directory, Advection, comm=comm, **kw)

    install()
    comm = world.Dup()
    mgr = manager(comm)
    mgr.save(0, state_at(0, comm, 1, 5), force=True)
    mgr.wait()
    if mode == "restore":
        mgr.close()
    returned = 0
    results: list[list[Any]] = []
    step = 0

    def op(step: int) -> None:
        if mode == "restore":
            with manager(comm) as m:
                got = m.restore_latest()
                assert got is not None and m.restored_step == returned, (m.restored_step, returned)
                assert_state_equal(got.state, state_at(returned, comm, 1, 5))
            return
        mgr.save(step, state_at(step, comm, 1, 5), force=True)
        mgr.wait()

    k = -1
    n = None
    while n is None or k < n:
        step += 1
        SWEEP.count, SWEEP.fail_at, SWEEP.on = 0, (k if mine else -1), True
        exc: BaseException | None = None
        try:
            op(step)
        except Exception as e:  # noqa: BLE001 - recorded: a foreign exception is a finding
            exc = e
        finally:
            SWEEP.on = False
        if exc is None and mode != "restore":
            returned = step
        if k < 0:  # the counting run: no fault
            if exc is not None:
                raise exc
            n = int(world.allreduce(SWEEP.count if mine else 0, op=MPI.MAX))
            sites = list(SWEEP.sites) if mine else []
        else:
            results.append([k, *outcome(exc), SWEEP.failed])
            SWEEP.failed = ""
        if isinstance(exc, ac.errors.CollectiveTimeoutError):
            break
        k += 1
    try:
        if mode != "restore":
            mgr.close()
    except Exception as e:  # noqa: BLE001 - the last save's flush may have failed: recorded, the restart judges
        results.append([n, *outcome(e)])
    every = world.gather(results, root=0)
    sites = [ln for got in world.gather(sites, root=0) or [] for ln in got]
    with ac.CheckpointManager(directory, Advection, comm=world.Dup(), keep_policy=ac.manager.KeepAll()) as m:
        got = m.restore_latest()
        restored = m.restored_step
        equal = got is not None and restored is not None
        if equal:
            try:
                assert_state_equal(got.state, state_at(restored, comm, 1, 5))
            except AssertionError:
                equal = False
    equal = bool(world.allreduce(equal, op=MPI.LAND))
    if rank == 0:
        aside = sorted(p.name for p in directory.iterdir() if ".damaged-" in p.name or ".unreadable-" in p.name)
        doc = {"calls": n, "sites": sites, "ranks": every, "returned": returned, "restored": restored, "equal": equal}
        out.write_text(json.dumps(doc | {"aside": aside}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
