#!/bin/bash
# one short am_lat over shm, prints one-way p50
UCX_TLS=posix,self taskset -c 0 ucx_perftest -t ucp_am_lat -s 16 -n 20000 >/dev/null 2>&1 &
s=$!
sleep 0.4
r=$(UCX_TLS=posix,self taskset -c 1 ucx_perftest localhost -t ucp_am_lat -s 16 -n 20000 2>&1 | awk '/Final/{print $3}')
wait $s
echo "$(date +%T) $r"
