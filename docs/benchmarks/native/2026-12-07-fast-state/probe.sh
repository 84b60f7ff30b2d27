#!/bin/bash
# every ~10 s: ucx_perftest am_lat shm RT; when fast (< 0.6 us RT), the SMT probe
end=$(( $(date +%s) + ${1:-900} ))
while [ $(date +%s) -lt $end ]; do
  (UCX_TLS=sm taskset -c 0 ucx_perftest -p 13338 >/dev/null 2>&1 &); sleep 0.3
  ow=$(UCX_TLS=sm taskset -c 1 ucx_perftest -p 13338 -t ucp_am_lat -s 16 -n 50000 127.0.0.1 2>&1 | awk '/Final/ {print $4}')
  solo=$(taskset -c 1 /tmp/smt2 | awk '{print $1}')
  (taskset -c 0 /tmp/smt2 600 &); sleep 0.05
  busy=$(taskset -c 1 /tmp/smt2 | awk '{print $1}')
  sleep 0.6
  echo "$(date +%T) oneway $ow solo_ms $solo with_other_busy_ms $busy"
  sleep 8
done
