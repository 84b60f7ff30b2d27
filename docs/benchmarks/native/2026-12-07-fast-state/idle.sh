#!/bin/bash
rt() { (UCX_TLS=sm taskset -c 0 ucx_perftest -p 13339 >/dev/null 2>&1 &); sleep 0.2; UCX_TLS=sm taskset -c 1 ucx_perftest -p 13339 -t ucp_am_lat -s 16 -n 20000 127.0.0.1 2>&1 | awk '/Final/ {printf "%s ", $4}'; }
for idle in 20 1 20 1 30 1 1 1; do sleep $idle; echo "after idle ${idle}s: $(rt) $(rt) $(rt) $(rt)"; done
