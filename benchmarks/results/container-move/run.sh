#!/bin/bash
# old (94ae6dc) and new (main) bench_schema alternately, P=1, same machine, same run
for i in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then src=/work/wt-old; else src=/work/main; fi
    PYTHONPATH=$src /work/main/.venv/bin/python $src/benchmarks/bench_schema.py --leaves 1000000 --reps 3 --json /tmp/bench/$v-$i.json > /tmp/bench/$v-$i.log 2>&1
  done
done
echo done > /tmp/bench/finished
