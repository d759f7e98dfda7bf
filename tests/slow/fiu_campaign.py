#!/usr/bin/env python3
"""A libfiu campaign: real MPI jobs at P = 1-4 save and restore under faults of the real syscalls; restarts elsewhere.

Usage::

    python tests/slow/fiu_campaign.py --trials 200 [--seed 1] [--json benchmarks/results/fiu-campaign.json]
    python tests/slow/fiu_campaign.py --seeds 1000017,1000042     # these trials again (each trial's seed is printed)

Needs Debian's fiu-utils (``/usr/lib/fiu/fiu_posix_preload.so``, ``libfiu.so.0``).
Each trial (tests/fiu_trials.py, drawn from its seed: P, MPI-IO or POSIX,
direct, background or cached saves, one to three of libfiu's ``posix/io``
and ``posix/mm`` failure points at one probability, faults in the restore
too or not) saves a few steps of about 250 leaves under faults in an MPI
job of P ranks (tests/fiu_job.py, every rank under the POSIX preload, the
faults on only around amrckpt's calls), then restarts without faults on
Q != P ranks.  Every trial is bounded (a hang is killed after 120 s and
counted); every call must end the same way on every rank (an errno for I/O
errors); the restart must restore the newest step whose save returned, bit
for bit; nothing good may be set aside.  Prints the table and each trial
with a problem (with the command that runs it again); exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/

from fiu_faults import absent
from fiu_trials import campaign, table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1, help="trial i has seed SEED * 10**6 + i")
    ap.add_argument("--seeds", default=None, help="comma-separated trial seeds (instead of --trials/--seed)")
    ap.add_argument("--batch", type=int, default=4, help="trials per MPI job")
    ap.add_argument("--json", default=None, help="write the table's counts and every verdict here")
    ap.add_argument("--keep", default=None, help="run in this directory and keep it (default: a temporary one)")
    a = ap.parse_args()
    reason = absent()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    seeds = [int(s) for s in a.seeds.split(",")] if a.seeds else [a.seed * 10**6 + i for i in range(a.trials)]
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="amrckpt-fiu-") as tmp:
        root = Path(a.keep or tmp)
        verdicts = campaign(root, seeds, batch=a.batch, log=lambda s: print(s, flush=True))
    seconds = time.time() - t0
    print(table(verdicts))
    print(f"{seconds:.0f} s")
    bad = [v for v in verdicts if v.kinds]
    for v in bad:
        print(f"\nTRIAL {v.trial.id} ({v.trial.command()}): {v.trial}")
        for p in v.problems:
            print("   ", p[:3000] if "hang" not in v.kinds else p)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        doc = {"table": table(verdicts).splitlines(), "seconds": round(seconds), "verdicts": [v.as_dict() for v in verdicts]}
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
