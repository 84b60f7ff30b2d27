#!/bin/bash
# old/new core in turns: PIN=1 shm+ring serial gets
cd /work/main
for t in $(seq 1 ${TURNS:-6}); do
  for b in old new; do
    if [ $b = old ]; then B=/tmp/old26/build/release; else B=/work/main/build/release; fi
    OUT=/tmp/ab26/$b-t$t PIN=1 TRANSPORTS="shm ring" SAMPLES=200000 CONNECTIONS=1 TURN_SECONDS=1 PERF_ITERS=100000 BUILD_DIR=$B bench/native_objects_benchmark.sh --no-build > /tmp/ab26/$b-t$t.log 2>&1
  done
done
echo ALLDONE
