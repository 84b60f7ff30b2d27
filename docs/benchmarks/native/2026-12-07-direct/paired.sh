#!/bin/bash
# paired slices: am_lat RTT, then serial gets + pings, then RTT. B=build dir, K slices.
set -u
B=${B:-/work/main/build/release}; K=${K:-6}; N=${N:-10000}
RUN=$(mktemp -d /tmp/paired.XXXX)
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y
$B/core/goblin-core --prepare $RUN/tier >/dev/null
env ${CORE_ENV:-X=1} UCX_TLS=${CORE_TLS:-all} taskset -c 0 $B/core/goblin-core --listen-unix $RUN/core.sock --ssd-dir $RUN/tier --memory 1G --block 262144 --ram-head 262144 --rdma-listen 127.0.0.1:0 --rdma-max-message 1M --cores 1 --cpus 0 --polling pause ${CORE_ARGS:-} > $RUN/core.log 2>&1 &
CORE=$!
for _ in $(seq 100); do grep -q 'UCX plane listening' $RUN/core.log && break; sleep 0.1; done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' $RUN/core.log)
C="taskset -c 1 /work/main/build/release/bench/native_objects_benchmark --target ucx://127.0.0.1:$PORT --objects 256 --object-size ${SIZE:-256K} --pause-spin"
[ -n "${CLIENT_B:-}" ] && C="taskset -c 1 $CLIENT_B/bench/native_objects_benchmark --target ucx://127.0.0.1:$PORT --objects 256 --object-size ${SIZE:-256K} --pause-spin"
UCX_TLS=sm,tcp $C --samples 1 --connections "" --keep > /dev/null || echo "store failed"
rt() {
  local port=$((14337 + RANDOM % 1000))
  UCX_TLS=posix,self taskset -c 0 ucx_perftest -p $port >/dev/null 2>&1 & local s=$!
  sleep 0.3
  UCX_TLS=posix,self taskset -c 1 ucx_perftest 127.0.0.1 -p $port -t ucp_am_lat -s 16 -n 20000 2>&1 | awk '/Final/{printf "%.3f", 2*$3}'
  wait $s
}
before=$(rt)
for k in $(seq $K); do
  out=$(UCX_TLS=${CLIENT_TLS:-sm,tcp} $C --samples $N $([ "${PINGS:-$N}" != 0 ] && echo --pings ${PINGS:-$N}) --connections "" --no-store --keep ${CLIENT_ARGS:-})
  hdr=$(awk -F'|' '/^\| response header/ {gsub(/ /,"",$4); print $4}' <<< "$out")
  rdy=$(awk -F"|" "/^\| payload ready/ {gsub(/ /,\"\",\$4); print \$4}" <<< "$out")
  png=$(awk -F'|' '/^\| ping/ {gsub(/ /,"",$4); print $4}' <<< "$out")
  after=$(rt)
  echo "$k rt $before hdr $hdr ready $rdy ping $png rt $after"
  before=$after
done
kill $CORE; wait $CORE 2>/dev/null; rm -rf $RUN
