#!/usr/bin/env python3
"""A long kill campaign: many jobs SIGKILLed at random moments, each restarted on another process count.

Usage::

    python tests/slow/kill_campaign.py --trials 200 [--seed 1] [--json bench-results/kill-campaign.json]

Each trial starts ``tests/kill_job.py`` on P ranks (1 to 4) with blocking or
background saves, kills the whole job with SIGKILL after a random delay
(often in the middle of a save), checks that every file under a final name
verifies, and restores in a new job on Q != P ranks (1 to 4): the restored step must be at
least the last one reported committed, and the state equal to the known
state of that step, bit for bit.  Prints how many kills were tried and
recovered.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/

from killing import campaign


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="amrckpt-kill-") as d:
        trials = campaign(Path(d), a.trials, a.seed)
    ok = sum(t.recovered for t in trials)
    committed = sum(t.committed is not None for t in trials)
    mid = sum(t.mid_save for t in trials)
    print(
        f"kills tried: {len(trials)}; recovered: {ok}; with at least one commit before the kill: {committed}; "
        f"in the middle of a save: {mid}; {time.time() - t0:.0f} s"
    )
    for t in trials:
        if not t.recovered:
            print("NOT RECOVERED:", t)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(
            json.dumps({"tried": len(trials), "recovered": ok, "mid_save": mid, "trials": [asdict(t) for t in trials]}, indent=1)
        )
    return 0 if ok == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())
