#!/usr/bin/env python3
"""A kill campaign of two-level jobs: P = 4 on two simulated nodes, SIGKILLed at random moments, caches lost at random.

Usage::

    python tests/slow/cache_kill_campaign.py --trials 40 [--seed 1] [--json bench-results/cache-kill-campaign.json]

Each trial starts ``tests/cache_job.py`` (flushes never, every 2 or every 4
steps), kills it after a random number of cached saves, deletes no cache,
one node's, or every node's, and restarts (P = 4; P = 3 when every cache is
gone): the restart must take at least the last step reported cached (the
newest flushed one when every cache is gone), bit for bit, and every file of
the shared directory must verify and equal a direct save of its state.
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

from cache_killing import campaign


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        trials = campaign(Path(d), a.trials, a.seed)
    bad = [t for t in trials if not t.recovered]
    from_cache = sum(t.source == "cache" for t in trials)
    print(f"{len(trials)} kills, {len(trials) - len(bad)} recovered ({from_cache} from the caches), {time.time() - t0:.0f} s")
    for t in bad:
        print(f"  NOT RECOVERED: {t}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps([asdict(t) for t in trials], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
