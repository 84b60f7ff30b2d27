#!/bin/bash
# A/B of goblin builds, large mix at 1024 connections: throughput and the core's and gateway's CPU.
cd /work/main || exit 1
for t in $(seq ${TURNS:-3}); do
  for b in old new; do
    if [ $b = old ]; then BD=/tmp/oldwt/build/release; else BD=/work/main/build/release; fi
    log=/tmp/bench/ab19b-$b-$t.log
    CACHES=goblin MIXES=large CONNS="1024" ROUNDS=2 BUILD_DIR=$BD OUT=/tmp/bench/ab19b-$b-$t bench/run_concurrency_benchmark.sh --no-build > $log 2>&1 &
    runner=$!
    until grep -q prewarmed $log 2>/dev/null; do sleep 0.5; done
    core=$(pgrep -f "$BD/core/goblin-core"); gw=$(pgrep -f "$BD/gateway/goblin-gateway")
    c0=$(awk '{print $14+$15}' /proc/$core/stat); g0=$(awk '{print $14+$15}' /proc/$gw/stat); c1=$c0; g1=$g0
    while kill -0 $core 2>/dev/null && ! grep -q "round 2" $log; do
      c1=$(awk '{print $14+$15}' /proc/$core/stat 2>/dev/null || echo $c1); g1=$(awk '{print $14+$15}' /proc/$gw/stat 2>/dev/null || echo $g1); sleep 0.5; done
    wait $runner
    gbit=$(grep "round 1" $log | sed -E 's/.* in ([0-9.]+) s: ([0-9.]+) Gbit.*/\1 \2/')
    echo "turn $t $b: round1 (s, Gbit/s) $gbit core_ticks $((c1-c0)) gw_ticks $((g1-g0)) | $(grep -E '^\| 1024 \| [0-9]' /tmp/bench/ab19b-$b-$t/results.md)"
  done
done
