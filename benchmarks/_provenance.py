"""Where and when a benchmark ran: machine, versions, date, load average, commit (no MPI needed)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def git(*args: str) -> str:
    """The output of ``git args`` in the repository ("" without git)."""
    try:
        cwd = Path(__file__).resolve().parent
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        return ""


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo; else :func:`platform.processor`, possibly "")."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def provenance() -> dict[str, Any]:
    """The facts every result records: node, processor, CPUs, versions, date, 1-minute load average, commit, uncommitted changes."""
    return {
        "node": platform.node(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "load_avg_1min": os.getloadavg()[0],
        "git": git("rev-parse", "--short", "HEAD"),
        "amrckpt_uncommitted_changes": bool(git("status", "--porcelain", "--", "amrckpt")),
    }
