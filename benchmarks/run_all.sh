#!/usr/bin/env bash
# The measurements of docs/performance.md, one after another (about 30 minutes on 2 cores),
# then the figures and tables.  Usage: benchmarks/run_all.sh [results-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results}
mkdir -p "$out"
run() { echo "+ $*" >&2; "$@"; }
for p in 1 2; do
    run mpiexec -n $p python -m mpi4py benchmarks/bench_scda.py --json "$out/scda-P$p.json"
    run mpiexec -n $p python -m mpi4py benchmarks/bench_peers.py --json "$out/peers-P$p.json"
    run mpiexec -n $p python -m mpi4py benchmarks/bench_schema.py --json "$out/schema-P$p.json"
    run mpiexec -n $p python -m mpi4py benchmarks/bench_manager.py --json "$out/manager-P$p.json"
done
for p in 1 2 3 4; do
    run mpiexec -n $p python -m mpi4py benchmarks/bench_scaling.py --json "$out/scaling-P$p.json"
done
run mpiexec -n 2 python -m mpi4py benchmarks/bench_scaling.py --leaves 100000000 --reps 3 --json "$out/scaling-1e8-P2.json"
run python benchmarks/plot_performance.py --results "$out"
