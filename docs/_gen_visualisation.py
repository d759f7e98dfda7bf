"""The pictures of docs/visualisation.md, made from real checkpoints of the examples.

Usage::

    python docs/_gen_visualisation.py              # write docs/img/visualisation-*.png
    python docs/_gen_visualisation.py --out DIR    # write them into DIR instead

Runs ``examples/advection_amr.py`` (2D, a 2x1 brick of quadtrees) for 600
steps with a checkpoint every 200, exports the manager's directory with
``amrckpt export`` (a VTKHDF time series), and renders its last step
off-screen with pyvista (VTK's own vtkHDFReader reads the file); loads the
last checkpoint in yt and saves a slice plot; saves a 3D checkpoint with
``examples/treemesh_checkpoint.py`` and draws a slice with ``amrckpt plot``.
tests/export/test_export.py runs this script into a temporary directory, so the
pictures can always be regenerated.  Needs the ``viz`` and ``examples``
extras.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NAMES = ("visualisation-pyvista.png", "visualisation-yt.png", "visualisation-slice3d.png")


def run(*argv: str, cwd: Path) -> None:
    subprocess.run([sys.executable, *argv], cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def pyvista_picture(series: Path, png: Path) -> None:
    """Render the last step of the series off-screen: q coloured, leaf edges drawn."""
    import pyvista as pv
    import vtk

    reader = vtk.vtkHDFReader()
    reader.SetFileName(str(series))
    reader.UpdateInformation()
    reader.SetStep(reader.GetNumberOfSteps() - 1)
    reader.Update()
    grid = pv.wrap(reader.GetOutput())
    step = int(np.asarray(grid.field_data["step"])[0])
    time = float(np.asarray(grid.field_data["time"])[0])
    plotter = pv.Plotter(off_screen=True, window_size=(1200, 700))
    plotter.add_mesh(
        grid,
        scalars="q",
        cmap="viridis",
        show_edges=True,
        edge_color="#333333",
        line_width=0.3,
        scalar_bar_args={"title": "q", "vertical": True, "position_x": 0.88, "position_y": 0.15},
    )
    plotter.add_text(f"amrckpt export: step {step}, t = {time:.3f} s, {grid.n_cells} leaves", font_size=11)
    plotter.view_xy()
    plotter.camera.zoom(1.25)
    plotter.screenshot(str(png))
    plotter.close()


def yt_picture(checkpoint: Path, png: Path) -> None:
    """Save a yt slice plot of q made from the checkpoint itself (amrckpt.to_yt)."""
    import yt

    import amrckpt as ac

    yt.set_log_level(40)
    ds = ac.to_yt(checkpoint, brick=(2, 1), length_unit="m")
    lo, hi = ds.parameters["bounds"]
    centre = [(a + b) / 2 for a, b in zip(lo, hi, strict=True)] + [0.0]
    width = ((hi[0] - lo[0], "m"), (hi[1] - lo[1], "m"))
    plot = yt.SlicePlot(ds, "z", ("connect1", "q"), center=centre, width=width, origin="native", buff_size=(1200, 600))
    plot.set_log(("connect1", "q"), False)
    plot.set_cmap(("connect1", "q"), "viridis")
    plot.annotate_title(f"amrckpt.to_yt: {checkpoint.name}")
    plot.save(str(png))


def generate(out: Path) -> list[Path]:
    """Write the pictures into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="amrckpt-vis-") as tmp:
        work = Path(tmp)
        run(
            str(REPO / "examples" / "advection_amr.py"),
            "--dir",
            "run",
            "--steps",
            "600",
            "--checkpoint-every",
            "200",
            "--keep",
            "5",
            "--json",
            cwd=work,
        )
        run("-m", "amrckpt.cli", "export", "run", "run.vtkhdf", "--brick", "2,1", "--ranks", "4", cwd=work)
        last = sorted((work / "run").glob("ckpt-*.scda"))[-1]
        pyvista_picture(work / "run.vtkhdf", out / NAMES[0])
        yt_picture(last, out / NAMES[1])
        run(str(REPO / "examples" / "treemesh_checkpoint.py"), "--save", "model3d.scda", "--dim", "3", cwd=work)
        run(
            "-m",
            "amrckpt.cli",
            "plot",
            "model3d.scda",
            "--field",
            "sigma",
            "--slice",
            "y=0.5",
            "-o",
            str(out / NAMES[2]),
            "--dpi",
            "100",
            cwd=work,
        )
    return [out / n for n in NAMES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img", help="directory of the pictures (default docs/img)")
    args = ap.parse_args(argv)
    for p in generate(args.out):
        sys.stdout.write(f"wrote {p}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
