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
    run mpiexec -n $p python -m mpi4py benchmarks/bench_manager.py --steps-between 120 --json "$out/manager-P$p.json"
done
for p in 1 2 3 4; do
    run mpiexec -n $p python -m mpi4py benchmarks/bench_scaling.py --json "$out/scaling-P$p.json"
done
# A second, shorter scda run at P = 1 (A sections, entry and compression kernels with the zlib-only bound).
run mpiexec -n 1 python -m mpi4py benchmarks/bench_scda.py --v-elems 0 --comp-mib 0 --elems 200000 --json "$out/scda-A-rerun-P1.json"
# The largest N at P = 2: 10^8 leaves needs about 12 GB of free memory (state, files in /dev/shm, load); with less
# free, 3 x 10^7 (JSON says which).
avail_gb=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
big=100000000
if [ "$avail_gb" -lt 14 ]; then big=30000000; echo "only $avail_gb GB available: largest N = $big instead of 1e8" >&2; fi
run mpiexec -n 2 python -m mpi4py benchmarks/bench_scaling.py --leaves $big --reps 3 --json "$out/scaling-large-P2.json"
run python benchmarks/plot_performance.py --results "$out"
