"""Test support for amrckpt and for code built on it: wrappers, fault injection, conformance suites.

Used by amrckpt's own tests, and meant for those of libraries that plug in
a communicator or use amrckpt under MPI:

- :class:`CountingComm` counts the collectives a call makes (what the
  tests of collective counts per save and per load use);
- :class:`FaultyComm`, :class:`FaultyBackend`, :class:`FaultyFileSystem`
  and :func:`inject_faults` make seeded collectives, I/O calls and file
  system operations fail (libsc's ``fuzzy_everyn``), to check that every
  rank raises the same error and that nothing is lost (the communicator and
  the backend are wrapped, as zarr's ``WrapperStore``:
  ``comm=FaultyComm(comm)``, ``backend=FaultyBackend``);
- :class:`CommTests` is the conformance suite of communicators (serial,
  threads, MPI, wrappers): MPI's semantics for every collective;
- :func:`failing_steps` makes a chosen step of every collective call fail
  on chosen ranks: the agreement test of every public entry point;
- :class:`BackendTests` is the conformance suite of byte backends (zarr's
  ``StoreTests``): one body of tests of the backend's calls and of the
  read plans, subclassed for each backend and communicator;
  :class:`SinkSourceTests`, its part for a sink and the source that reads
  back what it wrote (a node cache's pieces and its cached steps included).

Nothing here is imported by ``import amrckpt``; :mod:`amrckpt.testing.strategies`
(hypothesis strategies for scda sections and partitions) needs hypothesis.
"""

from __future__ import annotations

from ._backends import CountingBackend, CountingLocalFile, FaultyBackend, WrapperBackend
from ._comm_tests import CommTests
from ._conformance import BackendTests, SinkSourceTests
from ._faults import KINDS, Fault, FaultPlan, FaultSpec, inject_faults
from ._files import FaultyFileSystem
from ._steps import InjectedStepError, StepFaults, failing_steps
from ._wrappers import COLLECTIVES, CountingComm, FaultyComm, WrapperComm

__all__ = [
    "BackendTests",
    "CountingBackend",
    "CountingLocalFile",
    "COLLECTIVES",
    "CommTests",
    "KINDS",
    "CountingComm",
    "Fault",
    "FaultyBackend",
    "FaultPlan",
    "FaultSpec",
    "FaultyComm",
    "FaultyFileSystem",
    "InjectedStepError",
    "SinkSourceTests",
    "StepFaults",
    "WrapperBackend",
    "WrapperComm",
    "failing_steps",
    "inject_faults",
]
