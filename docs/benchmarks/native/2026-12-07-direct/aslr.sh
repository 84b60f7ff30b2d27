#!/bin/bash
# same build: client with ASLR (default) vs without (setarch -R), in turns
set -u
B=/work/main/build/release; K=${K:-6}; N=${N:-10000}
RUN=$(mktemp -d /tmp/asl.XXXX)
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y
$B/core/goblin-core --prepare $RUN/tier >/dev/null
UCX_TLS=all taskset -c 0 $B/core/goblin-core --listen-unix $RUN/core.sock --ssd-dir $RUN/tier --memory 1G --block 262144 --ram-head 262144 --rdma-listen 127.0.0.1:0 --rdma-max-message 1M --cores 1 --cpus 0 --polling pause > $RUN/core.log 2>&1 &
CORE=$!
for i in $(seq 100); do grep -q 'UCX plane listening' $RUN/core.log && break; sleep 0.1; done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' $RUN/core.log)
C="$B/bench/native_objects_benchmark --target ucx://127.0.0.1:$PORT --objects 256 --object-size 256K --pause-spin"
UCX_TLS=sm,tcp taskset -c 1 $C --samples 1 --connections "" --keep > /dev/null || echo "store failed"
rt() {
  local port=$((14337 + RANDOM % 1000))
  UCX_TLS=posix,self taskset -c 0 ucx_perftest -p $port >/dev/null 2>&1 & local s=$!
  sleep 0.3
  UCX_TLS=posix,self taskset -c 1 ucx_perftest 127.0.0.1 -p $port -t ucp_am_lat -s 16 -n 20000 2>&1 | awk '/Final/{printf "%.3f", 2*$3}'
  wait $s
}
row() { awk -F'|' -v r="$1" '$2 ~ r {gsub(/ /,"",$4); printf "%s ", $4}'; }
before=$(rt)
for k in $(seq $K); do
  line="$k rt $before"
  for m in aslr noaslr aslr noaslr; do
    pre="taskset -c 1"; [ $m = noaslr ] && pre="setarch -R taskset -c 1"
    out=$(UCX_TLS=sm,tcp $pre $C --samples $N --connections "" --no-store --keep)
    line="$line | $m $(row 'payload ready' <<< "$out")"
  done
  after=$(rt)
  echo "$line| rt $after"
  before=$after
done
kill $CORE; wait $CORE 2>/dev/null; rm -rf $RUN
