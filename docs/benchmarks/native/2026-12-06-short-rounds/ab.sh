#!/bin/bash
# ab.sh CORE TRANSPORT SAMPLES: response header p50 (us) of serial gets, pinned
CORE=$1; T=$2; S=$3; B=/work/main/build/release
R=$(mktemp -d /tmp/p22/ab.XXXX)
export UCX_NET_DEVICES=lo UCX_WARN_UNUSED_ENV_VARS=n UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y
$CORE --prepare $R/tier >/dev/null
UCX_TLS=all taskset -c 0 $CORE --listen-unix $R/core.sock --ssd-dir $R/tier --memory 1G --block 262144 --ram-head 262144 --rdma-listen 127.0.0.1:0 --rdma-max-message 1M --cores 1 --cpus 0 --polling pause > $R/core.log 2>&1 &
CP=$!
for i in $(seq 100); do grep -q 'UCX plane listening' $R/core.log && break; sleep 0.1; done
PORT=$(sed -n 's/.*UCX plane listening on .* (port \([0-9]*\)).*/\1/p' $R/core.log)
if [ $T = ring ]; then TGT=unix:$R/core.sock; else TGT=ucx://127.0.0.1:$PORT; fi
UCX_TLS=sm,tcp taskset -c 1 $B/bench/native_objects_benchmark --target $TGT --objects 256 --object-size 256K --samples $S --connections 1 --seconds 1 --label x --window 1 --pause-spin | sed -n 's/| response header | \([0-9.]*\) | \([0-9.]*\) | \([0-9.]*\) | \([0-9.]*\) |.*/\2 \3 \4/p'
kill $CP; sleep 0.3; kill -9 $CP 2>/dev/null; rm -rf $R
