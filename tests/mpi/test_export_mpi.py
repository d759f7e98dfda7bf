"""Export under MPI: a checkpoint and a manager's directory written on the world, exported collectively.

``mpiexec -n 3 python -m mpi4py -m pytest --with-mpi -m mpi tests/mpi/test_export_mpi.py``.
Where h5py is built with MPI every rank writes its leaves; otherwise rank 0
writes the file in chunks while the others wait.  Either way the file is
read back by VTK's vtkHDFReader on rank 0 and compared with a serial export,
dataset by dataset; the verdict is agreed on by all ranks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from checkpoint_cases import global_state, heat3d

import amrckpt as ac
from _support import all_true, world
from amrckpt.comm import SerialComm

pytestmark = pytest.mark.mpi

G = global_state(seed=7, max_level=6)


def _same_datasets(a: Path, b: Path) -> bool:
    import h5py

    with h5py.File(a) as fa, h5py.File(b) as fb:
        names: list[str] = []
        fa["VTKHDF"].visit(lambda n: names.append(n) if isinstance(fa["VTKHDF"][n], h5py.Dataset) else None)
        return all(np.array_equal(fa["VTKHDF"][n][()], fb["VTKHDF"][n][()], equal_nan=True) for n in names)


def test_export_checkpoint_and_series_written_on_the_world(mpi_tmp: Path) -> None:
    pytest.importorskip("h5py", reason="h5py is not installed (pip install 'amrckpt[viz]')")
    vtk = pytest.importorskip("vtk", reason="vtk is not installed (pip install 'amrckpt[viz]')")
    w = world()
    path = mpi_tmp / "adv.scda"
    ac.save(G.for_rank(w), path, comm=w)
    with ac.CheckpointManager(mpi_tmp / "run", type(G.local(0, 1)), comm=w, save_policy=ac.EveryNSteps(1)) as manager:
        for step in (1, 2):
            state = G.for_rank(w)
            state.step = step
            manager.save(step, state)
    res = ac.export.to_vtkhdf(path, mpi_tmp / "adv.vtkhdf", comm=w, ranks=w.size, chunk_leaves=100)
    series = ac.export.to_vtkhdf(mpi_tmp / "run", mpi_tmp / "run.vtkhdf", comm=w, chunk_leaves=100)
    if w.rank == 0:  # complex and record fields: their plans travel from rank 0 to the others
        ac.save(heat3d(2, step=1)[0], mpi_tmp / "cube.scda", comm=SerialComm())
    w.Barrier()
    cube = ac.export.to_vtkhdf(mpi_tmp / "cube.scda", mpi_tmp / "cube.vtkhdf", comm=w, hp="mean")
    ok = res.num_cells == (G.N,) and series.steps == (1, 2)
    if w.rank == 0:
        try:
            serial = ac.export.to_vtkhdf(path, mpi_tmp / "serial.vtkhdf", ranks=w.size, comm=SerialComm())
            ok = ok and _same_datasets(res.path, serial.path)
            reader = vtk.vtkHDFReader()
            reader.SetFileName(str(res.path))
            reader.Update()
            grid = reader.GetOutput()
            from vtkmodules.util.numpy_support import vtk_to_numpy

            ok = ok and grid.GetNumberOfCells() == G.N
            ok = ok and np.array_equal(vtk_to_numpy(grid.GetCellData().GetArray("rho")), G.rho)
            rank = vtk_to_numpy(grid.GetCellData().GetArray("rank"))
            ok = ok and np.array_equal(rank, ac.Partition.uniform(G.N, w.size).owner(np.arange(G.N)))
            reader.SetFileName(str(series.path))
            reader.UpdateInformation()
            ok = ok and reader.GetNumberOfSteps() == 2
            c1 = ac.export.to_vtkhdf(mpi_tmp / "cube.scda", mpi_tmp / "c1.vtkhdf", hp="mean", comm=SerialComm())
            ok = ok and _same_datasets(cube.path, c1.path)
        except (AssertionError, KeyError, OSError, ValueError):  # a failure on rank 0 fails every rank below, never hangs
            ok = False
    assert all_true(ok)


def test_htg_export_on_the_world_is_the_serial_one(mpi_tmp: Path) -> None:
    """A HyperTreeGrid export is written by rank 0 under MPI; the result reaches every rank, the file equals a serial one's."""
    pytest.importorskip("h5py", reason="h5py is not installed (pip install 'amrckpt[export]')")
    w = world()
    path = mpi_tmp / "adv-htg.scda"
    ac.save(G.for_rank(w), path, comm=w)
    res = ac.export.to_vtkhdf(path, mpi_tmp / "adv.htg.vtkhdf", comm=w, format="htg", chunk_leaves=100)
    ok = res.format == "htg" and res.num_cells == (G.N,) and res.num_nodes[0] > G.N
    if w.rank == 0:
        try:
            serial = ac.export.to_vtkhdf(path, mpi_tmp / "serial.htg.vtkhdf", format="htg", comm=SerialComm())
            ok = ok and _same_datasets(res.path, serial.path)
        except (AssertionError, KeyError, OSError, ValueError):
            ok = False
    assert all_true(ok)
