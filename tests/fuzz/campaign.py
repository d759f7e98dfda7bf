#!/usr/bin/env python3
"""Long fuzzing campaign over every reader of amrckpt (see ``harness.py`` for what is fuzzed).

Usage::

    python tests/fuzz/campaign.py --inputs 100000 --seed 1            # all readers, 2 workers
    python tests/fuzz/campaign.py --inputs 2000 --readers "cli verify"  # one reader
    python tests/fuzz/campaign.py --replay fuzz-out/crash-....bin       # rerun a reproducer, with tracebacks

Input ``i`` of seed ``S`` is a damaged copy of one seed file, drawn from
``random.Random(f"{S}:{i}")``: the same command finds the same inputs.  Each
input is given to every reader (and one damaged set of compressed elements to
the decoder).  Workers are subprocesses: a reader that runs longer than
``--timeout`` seconds is killed by ``faulthandler`` (the input is then saved
as a hang), and an address-space limit turns a runaway allocation into a
MemoryError.  Unacceptable outcomes are written to ``--out`` as reproducers
(``.bin`` input and ``.json`` with the reader, the error and the edits), at
most three per distinct failure.  The summary counts inputs per reader and
crashes by type.
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import json
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

from fuzz.harness import (  # noqa: E402
    READERS,
    build_seeds,
    decoder_case,
    decoder_target,
    json_sweep,
    mutate,
    run_target,
)

from _support import interop_dir  # noqa: E402
from amrckpt.errors import AmrckptError  # noqa: E402

DECODER = "scda.decode_elements"


def _emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def worker(args: argparse.Namespace) -> int:
    """Run inputs [start, stop); report crashes and counts as JSON lines on stdout."""
    warnings.simplefilter("error")  # as the test suite: a warning is a failure
    if args.memory_limit:
        lim = int(args.memory_limit * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    work = Path(args.workdir)
    seeds = build_seeds(work / "seeds", interop_dir())
    if not args.no_memory:
        tracemalloc.start()  # once: see run_target
    readers = {k: v for k, v in READERS.items() if not args.readers or k in args.readers}
    counts: collections.Counter[str] = collections.Counter()
    path = work / "input.bin"
    state = work / "current.json"
    measure = not args.no_memory
    for i in range(args.start, args.stop):
        rng = random.Random(f"{args.seed}:{i}")
        seed = rng.choice(seeds)
        state.write_text(json.dumps({"i": i, "reader": "harness (mutate)", "seed_file": seed.name, "edits": []}))
        data, edits = mutate(seed, rng)
        path.write_bytes(data)
        for name, target in readers.items():
            state.write_text(json.dumps({"i": i, "reader": name, "seed_file": seed.name, "edits": edits}))
            faulthandler.dump_traceback_later(args.timeout, exit=True)
            crash = run_target(name, target, path, len(data), measure=measure)
            faulthandler.cancel_dump_traceback_later()
            counts[name] += 1
            if crash is not None:
                _emit(
                    {
                        "type": "crash",
                        "i": i,
                        "reader": name,
                        "kind": crash.kind,
                        "message": crash.message,
                        "seed_file": seed.name,
                        "edits": edits,
                        "data": data.hex(),
                    }
                )
        if not args.readers or DECODER in args.readers:
            state.write_text(json.dumps({"i": i, "reader": "harness (decoder case)", "seed_file": "", "edits": []}))
            case = decoder_case(rng)
            state.write_text(json.dumps({"i": i, "reader": DECODER, "seed_file": "", "edits": []}))
            faulthandler.dump_traceback_later(args.timeout, exit=True)
            crash = run_target(DECODER, decoder_target(), case, int(case[0].size), measure=measure)
            faulthandler.cancel_dump_traceback_later()
            counts[DECODER] += 1
            if crash is not None:
                blob = json.dumps({"enc": case[0].tobytes().hex(), "enc_sizes": case[1].tolist(), "usizes": case[2].tolist()})
                _emit(
                    {
                        "type": "crash",
                        "i": i,
                        "reader": DECODER,
                        "kind": crash.kind,
                        "message": crash.message,
                        "seed_file": "",
                        "edits": [],
                        "data": blob.encode().hex(),
                    }
                )
        if i % 50 == 0:
            _emit({"type": "progress", "i": i, "counts": dict(counts)})
            counts.clear()
    _emit({"type": "done", "counts": dict(counts)})
    return 0


def _signature(reader: str, kind: str, message: str) -> str:
    return f"{reader}|{kind}|{re.sub(r'[0-9]+', '#', message)[:120]}"


class Campaign:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.tried: collections.Counter[str] = collections.Counter()
        self.crashes: collections.Counter[str] = collections.Counter()  # by reader|kind
        self.saved: collections.Counter[str] = collections.Counter()  # by signature
        self.signatures: dict[str, dict[str, Any]] = {}

    def record(self, doc: dict[str, Any]) -> None:
        key = f"{doc['reader']} | {doc['kind']}"
        self.crashes[key] += 1
        sig = _signature(doc["reader"], doc["kind"], doc["message"])
        self.signatures.setdefault(sig, {k: doc[k] for k in ("reader", "kind", "message", "i")} | {"count": 0})
        self.signatures[sig]["count"] += 1
        if self.saved[sig] >= 3:
            return
        self.saved[sig] += 1
        slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{doc['reader']}-{doc['kind']}").strip("_")
        stem = self.out / f"crash-{slug}-s{self.args.seed}-i{doc['i']}"
        data = bytes.fromhex(doc.pop("data")) if "data" in doc else b""
        stem.with_suffix(".bin").write_bytes(data)
        stem.with_suffix(".json").write_text(json.dumps(doc | {"seed": self.args.seed}, indent=1) + "\n")
        print(f"!! {doc['reader']}: {doc['kind']}: {doc['message'][:160]} (input {doc['i']}) -> {stem}.bin", flush=True)

    def run_range(self, start: int, stop: int, wid: int) -> subprocess.Popen[str]:
        work = Path(tempfile.mkdtemp(prefix=f"amrckpt-fuzz-w{wid}-"))
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "--seed",
            str(self.args.seed),
            "--start",
            str(start),
            "--stop",
            str(stop),
            "--workdir",
            str(work),
            "--timeout",
            str(self.args.timeout),
            "--memory-limit",
            str(self.args.memory_limit),
        ]
        if self.args.no_memory:
            cmd.append("--no-memory")
        for r in self.args.readers or []:
            cmd += ["--readers", r]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.workdir = work  # type: ignore[attr-defined]
        proc.range = (start, stop)  # type: ignore[attr-defined]
        return proc

    def main(self) -> int:
        a = self.args
        t0 = time.monotonic()
        todo = collections.deque()
        chunk = max(1, min(500, a.inputs // max(a.workers, 1) // 4 or 1))
        for s in range(0, a.inputs, chunk):
            todo.append((s, min(s + chunk, a.inputs)))
        running: list[subprocess.Popen[str]] = []
        import selectors

        sel = selectors.DefaultSelector()
        done_inputs = 0
        last = 0.0
        while todo or running:
            while todo and len(running) < a.workers:
                s, e = todo.popleft()
                p = self.run_range(s, e, len(running))
                running.append(p)
                sel.register(p.stdout, selectors.EVENT_READ, p)  # type: ignore[arg-type]
            for key, _ in sel.select(timeout=5):
                p = key.data
                line = p.stdout.readline()
                if line:
                    doc = json.loads(line)
                    if doc["type"] == "crash":
                        self.record(doc)
                    elif doc["type"] in ("progress", "done"):
                        self.tried.update(doc["counts"])
                        if doc["type"] == "progress":
                            done_inputs = max(done_inputs, doc["i"])
                    continue
                sel.unregister(p.stdout)
                rc = p.wait()
                running.remove(p)
                if rc != 0:
                    self.died(p, rc, todo)
                shutil.rmtree(p.workdir, ignore_errors=True)  # type: ignore[attr-defined]
            if time.monotonic() - last > 30:
                last = time.monotonic()
                n = sum(self.crashes.values())
                print(f".. {time.monotonic() - t0:.0f} s, {sum(self.tried.values())} reader runs, {n} crashes", flush=True)
        self.summary(time.monotonic() - t0)
        return 1 if self.crashes else 0

    def died(self, p: subprocess.Popen[str], rc: int, todo: collections.deque[tuple[int, int]]) -> None:
        """A worker died (a hang killed by faulthandler, or a crash of the interpreter): save and go on."""
        work = p.workdir  # type: ignore[attr-defined]
        stderr = p.stderr.read() if p.stderr else ""
        try:
            cur = json.loads((work / "current.json").read_text())
        except (OSError, ValueError):
            print(f"!! worker {p.range} exited with {rc} before its first input: {stderr[-2000:]}", flush=True)  # type: ignore[attr-defined]
            return
        kind = "hang" if "Timeout" in stderr else f"died (exit {rc})"
        data = (work / "input.bin").read_bytes() if cur["reader"] != "scda.decode_elements" else b""
        self.tried[cur["reader"]] += 1
        self.record(
            {
                "i": cur["i"],
                "reader": cur["reader"],
                "kind": kind,
                "message": stderr[-1500:],
                "seed_file": cur["seed_file"],
                "edits": cur["edits"],
                "data": data.hex(),
            }
        )
        stop = p.range[1]  # type: ignore[attr-defined]
        if cur["i"] + 1 < stop:
            todo.appendleft((cur["i"] + 1, stop))

    def summary(self, seconds: float) -> None:
        a = self.args
        doc = {
            "seed": a.seed,
            "inputs": a.inputs,
            "seconds": round(seconds, 1),
            "runs_per_reader": dict(sorted(self.tried.items())),
            "crashes_by_reader_and_type": dict(sorted(self.crashes.items())),
            "distinct_failures": list(self.signatures.values()),
        }
        (self.out / f"summary-s{a.seed}.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(f"== {a.inputs} inputs (seed {a.seed}) in {seconds:.0f} s")
        for r, n in sorted(self.tried.items()):
            print(f"   {n:8d}  {r}")
        print(f"== crashes: {sum(self.crashes.values())} ({len(self.signatures)} distinct)")
        for k, n in sorted(self.crashes.items()):
            print(f"   {n:8d}  {k}")


def sweep(args: argparse.Namespace) -> int:
    """Every JSON value of every checkpoint seed set to every value of the list, on the checkpoint readers."""
    warnings.simplefilter("error")
    work = Path(tempfile.mkdtemp(prefix="amrckpt-sweep-"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    readers = {k: v for k, v in READERS.items() if k.startswith(("restart.", "cli "))}
    tried: collections.Counter[str] = collections.Counter()
    found: dict[str, int] = {}
    path = work / "input.bin"
    t0 = time.monotonic()
    if not args.no_memory:
        tracemalloc.start()  # once: see run_target
    try:
        for seed in build_seeds(work / "seeds", None):
            if seed.kind != "checkpoint" or (args.sweep_seed and seed.name not in args.sweep_seed):
                continue
            for k, (name, where, value, blob) in enumerate(json_sweep(seed.data)):
                path.write_bytes(blob)
                for rname, target in readers.items():
                    faulthandler.dump_traceback_later(args.timeout, exit=True)
                    crash = run_target(rname, target, path, len(blob), measure=not args.no_memory)
                    faulthandler.cancel_dump_traceback_later()
                    tried[rname] += 1
                    if crash is None:
                        continue
                    sig = _signature(rname, crash.kind, crash.message)
                    found[sig] = found.get(sig, 0) + 1
                    if found[sig] == 1:
                        stem = out / f"sweep-{seed.name}-{k}"
                        stem.with_suffix(".bin").write_bytes(blob)
                        meta = {
                            "reader": rname,
                            "kind": crash.kind,
                            "message": crash.message,
                            "block": name,
                            "path": list(where),
                            "value": repr(value),
                        }
                        stem.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
                        print(
                            f"!! {rname}: {crash.kind}: {crash.message[:160]} ({name} {where} = {value!r:.40}) -> {stem}.bin",
                            flush=True,
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"== JSON sweep in {time.monotonic() - t0:.0f} s")
    for r, n in sorted(tried.items()):
        print(f"   {n:8d}  {r}")
    print(f"== crashes: {sum(found.values())} ({len(found)} distinct)")
    return 1 if found else 0


def replay(path: Path) -> int:
    """Rerun a reproducer on its reader (or every reader) and print the outcome with its traceback."""
    meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    if meta.get("reader") == DECODER:
        import numpy as np

        from amrckpt import scda

        d = json.loads(path.read_bytes())
        case = (
            np.frombuffer(bytes.fromhex(d["enc"]), np.uint8).copy(),
            np.array(d["enc_sizes"], np.uint64),
            np.array(d["usizes"], np.uint64),
        )
        targets = {DECODER: lambda _: scda.decode_elements(*case)}
    else:
        targets = {k: v for k, v in READERS.items() if not meta or k == meta["reader"]}
    for name, target in targets.items():
        try:
            target(path)
            print(f"{name}: read without error")
        except AmrckptError as exc:
            print(f"{name}: acceptable, {type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - shown to the user
            print(f"{name}:")
            traceback.print_exc(file=sys.stdout)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=10000, help="damaged files to try (each on every reader)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--out", default="fuzz-out", help="directory for reproducers and the summary")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds one reader may take on one input")
    ap.add_argument("--memory-limit", type=float, default=4.0, help="address-space limit of a worker, GiB")
    ap.add_argument("--no-memory", action="store_true", help="do not measure allocations (faster)")
    ap.add_argument("--readers", action="append", help=f"only these readers ({', '.join([*READERS, DECODER])})")
    ap.add_argument("--sweep", action="store_true", help="the deterministic JSON sweep of the checkpoint seeds instead")
    ap.add_argument("--sweep-seed", action="append", help="sweep only these seeds (fuzzy-unix.ckpt, fuzzy-mime.ckpt, fuzzy3.ckpt)")
    ap.add_argument("--replay", type=Path, help="rerun a reproducer (.bin) and print tracebacks")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.replay:
        return replay(args.replay)
    if args.worker:
        return worker(args)
    if args.sweep:
        return sweep(args)
    return Campaign(args).main()


if __name__ == "__main__":
    sys.exit(main())
