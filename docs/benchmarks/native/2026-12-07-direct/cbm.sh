#!/bin/bash
B=/work/main/build/release; RUN=$(mktemp -d /tmp/cbm.XXXX)
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y
$B/core/goblin-core --prepare $RUN/tier >/dev/null
UCX_TLS=all taskset -c 0 $B/core/goblin-core --listen-unix $RUN/core.sock --ssd-dir $RUN/tier --memory 1G --block 262144 --ram-head 262144 --rdma-listen 127.0.0.1:0 --rdma-max-message 1M --cores 1 --cpus 0 --polling pause > $RUN/core.log 2>&1 &
CORE=$!
for _ in $(seq 100); do grep -q 'UCX plane listening' $RUN/core.log && break; sleep 0.1; done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' $RUN/core.log)
C="taskset -c 1 $B/bench/native_objects_benchmark --target ucx://127.0.0.1:$PORT --objects 256 --object-size 256K --pause-spin"
UCX_TLS=sm,tcp $C --samples 1 --connections "" --keep > /dev/null
for _ in 1 2 3; do UCX_TLS=sm,tcp $C --samples 200000 --connections "" --no-store --keep | grep -E "^\| (response|payload)"; done; grep STAMP $RUN/core.log | tail -3
kill $CORE; wait; rm -rf $RUN
