"""Build and run tests/p4est/p4est_tool.c against the system's libp4est (Debian's libp4est-dev) and its Open MPI.

The tool is compiled twice (``p4est_tool``, and ``p8est_tool`` with ``-DP4_TO_P8``) by Open MPI's compiler wrapper
(``mpicc.openmpi``, or the system ``cc`` with Open MPI's include and library directories), into a cache directory
keyed by the source's hash.  It runs as its own process, with an environment from which the test venv's MPI
(the mpich wheel) is removed, so that it takes the system's Open MPI.  :func:`why_not` says why it cannot be
built (the tests skip with that reason).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "p4est_tool.c"
CACHE = Path(os.environ.get("AMRCKPT_P4EST_TOOL_DIR", HERE / ".build"))
INSTALL = "apt-get install libp4est-dev libopenmpi-dev (Debian, Ubuntu)"


def _multiarch() -> str:
    try:
        return subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{platform.machine()}-linux-gnu"


def _compiler() -> list[str] | None:
    wrapper = shutil.which("mpicc.openmpi", path="/usr/bin:/usr/local/bin")
    if wrapper:
        return [wrapper]
    cc = shutil.which("cc", path="/usr/bin:/usr/local/bin") or shutil.which("gcc", path="/usr/bin:/usr/local/bin")
    if cc is None:
        return None
    ompi = Path("/usr/lib") / _multiarch() / "openmpi"
    return [cc, f"-I{ompi}/include", f"-I{ompi}/include/openmpi", f"-L{ompi}/lib", "-lmpi"]


def tool_env() -> dict[str, str]:
    """The environment of the tool: without the venv's MPI (PATH, library path), Open MPI allowed to run as root."""
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "MPICH_INTERFACE_HOSTNAME", "PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT"):
        env.pop(k, None)
    for k in [k for k in env if k.startswith(("PMIX_", "OMPI_", "HYDRA_", "MPIR_", "MPI_"))]:
        env.pop(k)
    env |= {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    env |= {"OMPI_MCA_btl": "self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    return env


@functools.cache
def _build() -> tuple[dict[int, Path], str | None]:
    if not (Path("/usr/include/p4est.h").exists() and Path("/usr/include/p8est.h").exists()):
        return {}, f"libp4est-dev is not installed (no /usr/include/p4est.h): {INSTALL}"
    cc = _compiler()
    if cc is None:
        return {}, "no C compiler (cc or mpicc.openmpi) in /usr/bin"
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(cc).encode()).hexdigest()[:12]
    out = CACHE / digest
    out.mkdir(parents=True, exist_ok=True)
    tools: dict[int, Path] = {}
    for dim, name, flags in ((2, "p4est_tool", []), (3, "p8est_tool", ["-DP4_TO_P8"])):
        exe = out / name
        if not exe.exists():
            tmp = out / f".{name}.{os.getpid()}"
            cmd = [*cc[:1], "-O1", *flags, str(SOURCE), "-o", str(tmp), *cc[1:], "-lp4est", "-lsc", "-lz", "-lm"]
            res = subprocess.run(cmd, capture_output=True, text=True, env=tool_env(), check=False)
            if res.returncode != 0:
                return {}, f"building {name} against libp4est failed ({' '.join(cmd)}):\n{res.stderr[-2000:]}"
            os.replace(tmp, exe)
        tools[dim] = exe
    return tools, None


REQUIRED = os.environ.get("AMRCKPT_REQUIRE_P4EST", "") not in ("", "0")
"""Set by .ci/run after it installed libp4est-dev: the tests then fail instead of skipping if the tool cannot run."""


def skip_reason() -> str | None:
    """Return why the p4est tests skip here (None: they run; also None when REQUIRED, so that they fail instead)."""
    return None if REQUIRED else why_not()


def why_not() -> str | None:
    """Return why the tool cannot be built and run here, or None."""
    tools, reason = _build()
    if reason is None:
        res = subprocess.run([str(tools[2]), "nothing"], capture_output=True, text=True, env=tool_env(), check=False, timeout=120)
        if res.returncode != 2 or "usage" not in res.stderr:
            return f"p4est_tool does not run: exit {res.returncode}: {res.stderr[-1000:]}"
    return reason


def tool(dim: int) -> Path:
    """Return the built tool of dimension ``dim`` (2: p4est, 3: p8est)."""
    tools, reason = _build()
    if reason is not None:
        raise RuntimeError(reason)
    return tools[dim]


def mpirun() -> str | None:
    """Return Open MPI's launcher (``mpirun.openmpi``), or None."""
    return shutil.which("mpirun.openmpi", path="/usr/bin:/usr/local/bin")


def run(dim: int, *args: str | os.PathLike[str], np: int = 1, check: bool = True, timeout: float = 600) -> str:
    """Run the tool of dimension ``dim`` (under Open MPI's mpirun on ``np`` > 1 processes); return its output."""
    cmd = [str(tool(dim)), *map(os.fspath, args)]
    if np > 1:
        launcher = mpirun()
        if launcher is None:
            raise RuntimeError("Open MPI's mpirun.openmpi is not installed")
        cmd = [launcher, "-np", str(np), *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, env=tool_env(), check=False, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed with exit {res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return res.stdout
