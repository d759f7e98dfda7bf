"""amrckpt.load(path) without a schema, and CheckpointSchema.from_manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_cases import global_state

import amrckpt as ac
from amrckpt.comm import run_threads
from amrckpt.container import FieldSpec, Manifest, MeshSpec
from amrckpt.errors import SchemaError


class Everything(ac.CheckpointSchema, name="every kind", version=3):
    step: int = ac.Inline()
    label: str = ac.Inline(description="a short string")
    params: dict[str, Any] = ac.Block(compress=True)
    mesh: ac.Forest = ac.Mesh(dim=2, brick=(2, 1), periodic=True, units="m")
    rho: ac.CellData = ac.Cells("f8", units="kg m^-3")  # native byte order
    vel: ac.CellData = ac.Cells(">f4", shape=(2,), chunks=5)
    modes: ac.HpData = ac.HpCells("<f8", compress=True)
    parts: np.ndarray = ac.Array([("id", "<i8"), ("x", "<f8", (3,))], units="m")
    table: np.ndarray = ac.NDArray(">i2", shape=(2, 3))


def everything(comm: Any) -> Everything:
    g = global_state(seed=2, max_level=4)
    N, P, r = g.N, comm.size, comm.rank
    a, b = N * r // P, N * (r + 1) // P
    st = g.local(a, b)
    parts = np.zeros(7 if r == 0 else 0, dtype=[("id", "<i8"), ("x", "<f8", (3,))])
    parts["id"] = np.arange(parts.shape[0])
    return Everything(
        step=3,
        label="x",
        params={"cfl": 0.5, "names": ["a", "b"]},
        mesh=st.mesh,
        rho=st.rho,
        vel=st.vel.astype(">f4"),
        modes=st.modes,
        parts=parts,
        table=np.arange(6, dtype=">i2").reshape(2, 3),
    )


@pytest.mark.parametrize("Q", [1, 2, 3])
def test_load_without_a_schema_gives_every_field_as_declared(tmp_path: Path, Q: int) -> None:
    path = tmp_path / "every.scda"
    run_threads(2, lambda comm: ac.save(everything(comm), path, comm=comm))
    m = ac.read_info(path).manifest
    S = ac.CheckpointSchema.from_manifest(m)
    assert (S.__amrckpt_name__, S.__amrckpt_version__) == ("every kind", 3)
    assert list(S.__amrckpt_fields__) == [fs.name for fs in m.fields]
    want = Everything.__amrckpt_fields__
    for name, kind in S.__amrckpt_fields__.items():
        assert type(kind) is type(want[name]), name
        for attr in ("dtype", "native", "shape", "units", "compress", "chunks", "mesh"):
            if hasattr(want[name], attr):
                assert getattr(kind, attr) == getattr(want[name], attr), (name, attr)

    def read(comm: Any) -> bool:
        loaded = ac.load(path, comm=comm)
        st = loaded.state
        ref = Everything.__amrckpt_fields__
        assert type(st).__name__ == "Every_kind_v3" and st.step == 3 and st.label == "x"
        assert st.params == {"cfl": 0.5, "names": ["a", "b"]}
        assert st.vel.dtype == np.dtype(">f4") and st.vel.shape[1:] == (2,) and st.rho.dtype == np.dtype("=f8")
        assert st.modes.values.dtype == np.dtype("<f8") and st.parts.dtype == ref["parts"].dtype  # type: ignore[attr-defined]
        assert st.table.dtype == np.dtype(">i2") and st.table.shape == (2, 3)
        assert isinstance(st.mesh, ac.Forest) and len(st.mesh) == loaded.partition.elem_counts[comm.rank]  # type: ignore[union-attr]
        typed = ac.load(path, Everything, comm=comm).state
        for name in ("rho", "vel", "parts", "table"):
            assert np.array_equal(getattr(st, name), getattr(typed, name))
        assert st.mesh == typed.mesh and np.array_equal(st.modes.values, typed.modes.values)
        return True

    assert all(run_threads(Q, read))
    # The state read without a schema saves as the same file, on any number of ranks.
    again = tmp_path / "again.scda"
    run_threads(Q, lambda comm: ac.save(ac.load(path, comm=comm).state, again, comm=comm))
    assert again.read_bytes() == path.read_bytes()
    only = ac.load(path, fields=["rho"]).state
    assert only.rho.shape[0] == m.num_leaves and only.step == 3


def test_from_manifest_refuses_a_name_python_cannot_hold() -> None:
    bad = Manifest(
        amrckpt_version="0",
        schema_name="ok",
        schema_version=1,
        meshes=[MeshSpec(field="class", dim=2, num_trees=1, curve="morton", maxlevel=30, record=[])],
        fields=[FieldSpec(name="class", kind="mesh", section="A")],
    )
    with pytest.raises(SchemaError, match="not a Python identifier"):
        ac.CheckpointSchema.from_manifest(bad)
